#pragma once
// UTF-8 helpers with the replacement policy of Python's bytes.decode("utf-8", "replace") and Rust's
// String::from_utf8_lossy: each maximal subpart of an ill-formed sequence becomes one U+FFFD.
#include <cstddef>
#include <string>
#include <string_view>

namespace ds::utf8 {

// Length of the well-formed sequence starting at s[i], or 0 if s[i] starts an ill-formed one.
size_t sequence_length(std::string_view s, size_t i);

// Length of the maximal subpart at s[i] (>= 1): the bytes that one U+FFFD replaces when s[i] is ill-formed.
size_t maximal_subpart(std::string_view s, size_t i);

bool is_valid(std::string_view s);

// s with every ill-formed subpart replaced by U+FFFD (EF BF BD); valid input comes back unchanged.
std::string to_valid(std::string_view s);
void append_valid(std::string& out, std::string_view s);

// Bytes at the end of s that start a well-formed sequence but stop before its end (0..3): a stream must wait
// for more bytes before deciding them.
size_t incomplete_tail(std::string_view s);

// Decodes the code point at s[i] of valid UTF-8 and advances i.
inline char32_t next(std::string_view s, size_t& i) {
  auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    ++i;
    return b;
  }
  int extra = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : 1;
  char32_t cp = b & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += extra + 1;
  return cp;
}

// Decodes the code point that ends just before s[end] in valid UTF-8 and moves end back over it.
inline char32_t prev(std::string_view s, size_t& end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  char32_t cp = next(s, i);
  end = start;
  return cp;
}

void append(std::string& out, char32_t cp);

}  // namespace ds::utf8
