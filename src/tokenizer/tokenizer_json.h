#pragma once
// Reads HF's tokenizer.json and tokenizer_config.json into a plain description, refusing (with the field
// named) every feature this tokenizer does not implement rather than encoding differently from HF.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"

namespace ds {

struct SplitSpec {
  std::string pattern;  // Oniguruma-syntax regex, or a literal when `literal`
  bool literal = false;
};

struct TokenizerSpec {
  BpeSpec bpe;
  // Vocabulary entries with chars outside the byte-level alphabet: BPE can never produce them, but they can
  // still be named and decoded.
  std::vector<std::pair<std::string, int32_t>> odd_vocab;
  std::vector<AddedToken> added;
  bool nfc = false;
  std::vector<SplitSpec> splits;  // applied in order, each cutting every piece of the one before (Isolated)
};

struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::optional<std::string> chat_template;
};

// `source` names the file in error messages.
TokenizerSpec parse_tokenizer_json(std::string_view text, std::string_view source);
TokenizerConfig parse_tokenizer_config(std::string_view text, std::string_view source);

}  // namespace ds
