#pragma once
// The code point classes HF tokenizers matches with, generated from the installed `tokenizers` by
// tools/gen_unicode_classes.py, so neither PCRE2's nor the system's Unicode version decides a split.
#include <algorithm>
#include <span>

namespace ds::unicode {

struct CodepointRange {
  char32_t first, last;
};

enum class CodepointClass {
  letter,       // Oniguruma \p{L}
  number,       // Oniguruma \p{N}
  mark,         // Oniguruma \p{M}
  space,        // Oniguruma \s
  word,         // Rust regex \w (added tokens' single_word)
  strip_space,  // Rust regex \s (added tokens' lstrip/rstrip)
  nfc_inert     // left alone by HF's NFC (older Unicode tables) though utf8proc would change them
};

// Sorted, disjoint ranges.
std::span<const CodepointRange> ranges(CodepointClass c);

inline bool contains(CodepointClass c, char32_t cp) {
  auto rs = ranges(c);
  auto it = std::upper_bound(rs.begin(), rs.end(), cp,
                             [](char32_t v, const CodepointRange& r) { return v < r.first; });
  return it != rs.begin() && cp <= (it - 1)->last;
}

}  // namespace ds::unicode
