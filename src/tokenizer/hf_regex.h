#pragma once
// The pre-tokenizer's Split regex on PCRE2 JIT. HF runs it on Oniguruma; the pattern is translated so that
// \p{L}, \p{N}, \p{M} and \s use the exact classes HF uses (unicode_classes), not PCRE2's own tables.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace ds {

// An HF (Oniguruma-syntax) pattern rewritten for PCRE2; throws ds::Error on constructs it cannot carry over.
std::string translate_hf_pattern(std::string_view pattern);

class HfRegex {
 public:
  // pattern: the "Regex" of an HF Split; literal: its "String" form.
  static HfRegex from_pattern(std::string_view pattern);
  static HfRegex from_literal(std::string_view literal);

  // Finds the first non-empty match at or after `from` in valid UTF-8 `text`; false when none.
  bool find(std::string_view text, size_t from, size_t& start, size_t& end) const;

  const std::string& source() const { return source_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string source_;
};

}  // namespace ds
