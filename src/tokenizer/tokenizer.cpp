#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/nfc.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

constexpr uint8_t kKnown = 1, kSpecial = 2;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read tokenizer file {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path dir = fs::is_directory(path) ? path : path.parent_path();
  fs::path json_path = fs::is_directory(path) ? path / "tokenizer.json" : path;
  if (!fs::exists(json_path)) fail("no tokenizer.json at {}", json_path.string());
  std::string config_text;
  if (fs::exists(dir / "tokenizer_config.json")) config_text = read_file(dir / "tokenizer_config.json");
  Tokenizer t = from_json(read_file(json_path), config_text, json_path.string());
  // Newer HF checkouts keep the template in its own file.
  if (!t.config_.chat_template && fs::exists(dir / "chat_template.jinja")) {
    t.config_.chat_template = read_file(dir / "chat_template.jinja");
  }
  return t;
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json,
                               std::string_view source) {
  Tokenizer t;
  t.build(parse_tokenizer_json(tokenizer_json, source));
  if (!config_json.empty()) t.config_ = parse_tokenizer_config(config_json, "tokenizer_config.json");
  return t;
}

void Tokenizer::build(TokenizerSpec spec) {
  bpe_ = BpeModel(spec.bpe);
  for (const auto& [text, id] : spec.odd_vocab) odd_ids_[text] = id;

  // HF ignores the ids written in added_tokens: a token already known (added earlier or in the model
  // vocabulary) keeps that id, and a new one takes the next id after the model's vocabulary.
  auto next_id = static_cast<int32_t>(spec.bpe.vocab.size() + spec.odd_vocab.size());
  std::map<int32_t, AddedToken> by_id;
  std::unordered_set<std::string> special_contents;
  for (AddedToken token : spec.added) {
    if (token.content.empty()) continue;
    int32_t id = token_id(token.content);
    token.id = id >= 0 ? id : next_id++;
    if (token.special) special_contents.insert(token.content);
    added_ids_[token.content] = token.id;
    by_id[token.id] = std::move(token);
  }

  int32_t max_id = by_id.empty() ? -1 : by_id.rbegin()->first;
  for (const auto& [bytes, id] : spec.bpe.vocab) max_id = std::max(max_id, id);
  for (const auto& [text, id] : spec.odd_vocab) max_id = std::max(max_id, id);
  id_bytes_.assign(static_cast<size_t>(max_id + 1), std::string());
  id_flags_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [bytes, id] : spec.bpe.vocab) {
    id_bytes_[id] = bytes;
    id_flags_[id] = kKnown;
  }
  for (const auto& [text, id] : spec.odd_vocab) {
    id_bytes_[id] = byte_level::decoder_bytes(text);
    id_flags_[id] = kKnown;
  }

  nfc_ = spec.nfc;
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (auto& [id, token] : by_id) {
    token.special = special_contents.count(token.content) > 0;
    // HF decodes a normalized added token as its normalized form, through the ByteLevel decoder.
    std::string shown = token.normalized && nfc_ ? nfc(utf8::to_valid(token.content)) : token.content;
    id_bytes_[id] = byte_level::decoder_bytes(shown);
    // HF tells special tokens by content: every token spelled like a special token is special.
    id_flags_[id] = kKnown | (token.special ? kSpecial : 0);
    if (token.normalized) {
      normalized.push_back(token);
      normalized_patterns.push_back(shown);
    } else {
      raw.push_back(token);
      raw_patterns.push_back(token.content);
    }
    added_.push_back(token);
  }
  raw_matcher_ = AddedTokenMatcher(std::move(raw), std::move(raw_patterns));
  normalized_matcher_ = AddedTokenMatcher(std::move(normalized), std::move(normalized_patterns));

  for (const auto& split : spec.splits) {
    splits_.push_back(split.literal ? HfRegex::from_literal(split.pattern)
                                    : HfRegex::from_pattern(split.pattern));
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::string repaired;
  if (!utf8::is_valid(text)) {
    repaired = utf8::to_valid(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (raw_matcher_.empty()) {
    encode_plain(text, allow_special, ids);
    return ids;
  }
  std::vector<TextPiece> pieces;
  raw_matcher_.split(text, !allow_special, pieces);
  for (const TextPiece& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
    } else {
      encode_plain(text.substr(p.start, p.end - p.start), allow_special, ids);
    }
  }
  return ids;
}

void Tokenizer::encode_plain(std::string_view text, bool allow_special, std::vector<int32_t>& ids) const {
  std::string normalized;
  if (nfc_ && !nfc_quick_check(text)) {
    normalized = nfc(text);
    text = normalized;
  }
  if (normalized_matcher_.empty()) {
    encode_split(text, 0, ids);
    return;
  }
  std::vector<TextPiece> pieces;
  normalized_matcher_.split(text, !allow_special, pieces);
  for (const TextPiece& p : pieces) {
    if (p.id >= 0) {
      ids.push_back(p.id);
    } else {
      encode_split(text.substr(p.start, p.end - p.start), 0, ids);
    }
  }
}

void Tokenizer::encode_split(std::string_view text, size_t level, std::vector<int32_t>& ids) const {
  if (level == splits_.size()) {
    bpe_.encode_word(text, ids);
    return;
  }
  // Isolated: the matches and the gaps between them are all pieces.
  const HfRegex& regex = splits_[level];
  size_t pos = 0, start = 0, end = 0;
  while (pos < text.size() && regex.find(text, pos, start, end)) {
    if (start > pos) encode_split(text.substr(pos, start - pos), level + 1, ids);
    encode_split(text.substr(start, end - start), level + 1, ids);
    pos = end;
  }
  if (pos < text.size()) encode_split(text.substr(pos), level + 1, ids);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (!(skip_special && is_special(id))) bytes += token_bytes(id);
  }
  return utf8::to_valid(bytes);
}

int32_t Tokenizer::token_id(std::string_view token) const {
  std::string key(token);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto bytes = byte_level::to_bytes(token)) {
    if (int32_t id = bpe_.id_of(*bytes); id >= 0) return id;
  }
  auto it = odd_ids_.find(key);
  return it == odd_ids_.end() ? -1 : it->second;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size()) return {};
  return id_bytes_[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < id_flags_.size() && (id_flags_[id] & kSpecial);
}

std::optional<int32_t> Tokenizer::id_of(const std::optional<std::string>& token) const {
  if (!token) return std::nullopt;
  int32_t id = token_id(*token);
  return id < 0 ? std::nullopt : std::optional<int32_t>(id);
}

std::string IncrementalDecoder::push(int32_t id) {
  if (!(skip_special_ && tokenizer_->is_special(id))) pending_ += tokenizer_->token_bytes(id);
  return take_complete();
}

std::string IncrementalDecoder::push(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (!(skip_special_ && tokenizer_->is_special(id))) pending_ += tokenizer_->token_bytes(id);
  }
  return take_complete();
}

std::string IncrementalDecoder::take_complete() {
  size_t ready = pending_.size() - utf8::incomplete_tail(pending_);
  std::string out = utf8::to_valid(std::string_view(pending_).substr(0, ready));
  pending_.erase(0, ready);
  return out;
}

std::string IncrementalDecoder::flush() {
  std::string out = utf8::to_valid(pending_);
  pending_.clear();
  return out;
}

}  // namespace ds
