#pragma once
// Added tokens (special or not) are cut out of the text before the pre-tokenizer runs, as HF's
// AddedVocabulary does: leftmost-longest matching, then single_word / lstrip / rstrip.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// One piece of a text: an added token's id and the bytes it covers, or plain text (id -1).
struct TextPiece {
  int32_t id;
  size_t start, end;
};

class AddedTokenMatcher {
 public:
  // patterns[i] is what token i is matched as (its content, or its normalized content).
  AddedTokenMatcher() = default;
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }

  // Splits valid UTF-8 `text` into pieces that cover it in order (HF's find_matches). With skip_special the
  // special tokens are not cut out (HF's encode_special_tokens), though they still win the leftmost-longest
  // race against overlapping tokens, as in HF.
  void split(std::string_view text, bool skip_special, std::vector<TextPiece>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // byte -> child node
    int32_t token = -1;                             // index into tokens_ when a pattern ends here
  };
  int32_t child(int32_t node, uint8_t byte) const;
  // Longest pattern starting at text[pos]: its token index and length, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> trie_;
  bool first_byte_[256] = {};
};

}  // namespace ds
