#pragma once
// Text in, token ids out, and back: a byte-level BPE tokenizer loaded from HF's tokenizer.json that gives the
// ids HF `tokenizers` gives. Thread-safe for concurrent encode/decode after load.
//
// Invalid UTF-8 given to encode is first replaced, each maximal ill-formed subpart by one U+FFFD, exactly as
// Python's bytes.decode("utf-8", "replace") does; the ids are those HF gives for that Python str.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/tokenizer_json.h"

namespace ds {

class Tokenizer {
 public:
  // A model directory holding tokenizer.json (and optionally tokenizer_config.json, chat_template.jinja), or
  // the path of a tokenizer.json itself.
  static Tokenizer load(const std::filesystem::path& path);
  // From the files' text; config_json may be empty.
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {},
                             std::string_view source = "tokenizer.json");

  // With allow_special=false, special added tokens in the text are encoded as plain text (HF's
  // encode_special_tokens / split_special_tokens); non-special added tokens (e.g. <think>) still match.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // Ids outside the vocabulary are skipped, as HF does; bytes that are not valid UTF-8 become U+FFFD.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The id of a token given as HF spells it (byte-level text such as "Ġthe", or an added token's content);
  // -1 if absent.
  int32_t token_id(std::string_view token) const;
  // The raw bytes one id decodes to (empty for an unknown id).
  std::string_view token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  // Highest id + 1; ids below it that name no token are skipped by decode.
  size_t vocab_size() const { return id_bytes_.size(); }
  // The added tokens by id, numbered as HF numbers them when loading (not from the ids in the file).
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  const TokenizerConfig& config() const { return config_; }
  const std::optional<std::string>& chat_template() const { return config_.chat_template; }
  std::optional<int32_t> bos_id() const { return id_of(config_.bos_token); }
  std::optional<int32_t> eos_id() const { return id_of(config_.eos_token); }
  std::optional<int32_t> pad_id() const { return id_of(config_.pad_token); }

 private:
  Tokenizer() = default;
  void build(TokenizerSpec spec);
  std::optional<int32_t> id_of(const std::optional<std::string>& token) const;
  // Plain text between added tokens: normalize, cut normalized added tokens, pre-tokenize, BPE.
  void encode_plain(std::string_view text, bool allow_special, std::vector<int32_t>& ids) const;
  void encode_split(std::string_view text, size_t level, std::vector<int32_t>& ids) const;

  BpeModel bpe_;
  std::vector<HfRegex> splits_;
  bool nfc_ = false;
  std::vector<AddedToken> added_;
  AddedTokenMatcher raw_matcher_, normalized_matcher_;
  std::unordered_map<std::string, int32_t> added_ids_, odd_ids_;
  std::vector<std::string> id_bytes_;
  std::vector<uint8_t> id_flags_;  // kKnown | kSpecial
  TokenizerConfig config_;
};

// Streams text while ids arrive: never emits part of a UTF-8 character. Bytes that can still complete a
// character are held back; bytes that never can are emitted as U+FFFD at once. The pieces joined, plus
// flush(), equal Tokenizer::decode of all the ids.
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(&tokenizer), skip_special_(skip_special) {}

  // The text that the new id completes (often empty).
  std::string push(int32_t id);
  std::string push(std::span<const int32_t> ids);
  // Ends the stream: held-back bytes become U+FFFD, as HF's decode renders an unfinished character.
  std::string flush();

 private:
  std::string take_complete();

  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace ds
