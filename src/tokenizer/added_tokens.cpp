#include "tokenizer/added_tokens.h"

#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

using unicode::CodepointClass;

bool ends_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t end = s.size();
  return unicode::contains(CodepointClass::word, utf8::prev(s, end));
}

bool starts_with_word(std::string_view s) {
  if (s.empty()) return false;
  size_t i = 0;
  return unicode::contains(CodepointClass::word, utf8::next(s, i));
}

// Where the run of white space that ends s begins.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t before = end;
    if (!unicode::contains(CodepointClass::strip_space, utf8::prev(s, end))) return before;
  }
  return 0;
}

// The length of the run of white space that starts s.
size_t leading_space_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t before = i;
    if (!unicode::contains(CodepointClass::strip_space, utf8::next(s, i))) return before;
  }
  return s.size();
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)) {
  trie_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& pattern = patterns[t];
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (char c : pattern) {
      auto byte = static_cast<uint8_t>(c);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(trie_.size());
        trie_[node].next.emplace_back(byte, next);
        trie_.emplace_back();
      }
      node = next;
    }
    // Two tokens with one pattern: the later one wins, as HF's map from pattern to id keeps the last insert.
    trie_[node].token = static_cast<int32_t>(t);
    first_byte_[static_cast<uint8_t>(pattern[0])] = true;
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, n] : trie_[node].next) {
    if (b == byte) return n;
  }
  return -1;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& length) const {
  int32_t node = 0, best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<uint8_t>(text[i]));
    if (node < 0) break;
    if (trie_[node].token >= 0) {
      best = trie_[node].token;
      length = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, bool skip_special, std::vector<TextPiece>& out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t length = 0;
    int32_t t = longest_at(text, pos, length);
    if (t < 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + length;
    pos = stop;  // matching resumes after the raw match, whatever the strips below do
    const AddedToken& token = tokens_[t];
    if (skip_special && token.special) continue;
    if (token.single_word) {
      bool start_space = start == 0 || !ends_with_word(text.substr(0, start));
      bool stop_space = stop == text.size() || !starts_with_word(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (start_offset < start) out.push_back({-1, start_offset, start});
    out.push_back({token.id, start, stop});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({-1, start_offset, text.size()});
}

}  // namespace ds
