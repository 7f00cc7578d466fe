#include "tokenizer/tokenizer_json.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace ds {
namespace {

using nlohmann::json;

// HF ByteLevel's own split, used when its use_regex is on.
constexpr const char* kByteLevelRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const json& j) {
  return j.is_object() ? j.value("type", std::string()) : std::string();
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? fallback : it->get<bool>();
}

void parse_normalizer(const json& n, std::string_view source, TokenizerSpec& spec) {
  if (n.is_null()) return;
  std::string type = type_of(n);
  if (type == "NFC") {
    spec.nfc = true;
  } else if (type == "Sequence") {
    for (const json& inner : n.at("normalizers")) parse_normalizer(inner, source, spec);
  } else {
    fail("{}: normalizer '{}' is not supported (only NFC)", source, type);
  }
}

// Collects the Split steps and checks that a ByteLevel step ends the pre-tokenizer.
void parse_pre_tokenizer(const json& p, std::string_view source, TokenizerSpec& spec, bool& byte_level) {
  std::string type = type_of(p);
  if (type == "Sequence") {
    for (const json& inner : p.at("pretokenizers")) parse_pre_tokenizer(inner, source, spec, byte_level);
    return;
  }
  if (byte_level) fail("{}: pre_tokenizer '{}' after ByteLevel is not supported", source, type);
  if (type == "Split") {
    std::string behavior = p.value("behavior", std::string());
    if (behavior != "Isolated")
      fail("{}: Split behavior '{}' is not supported (only Isolated)", source, behavior);
    if (flag(p, "invert", false)) fail("{}: Split with invert=true is not supported", source);
    const json& pattern = p.at("pattern");
    if (pattern.contains("Regex")) {
      spec.splits.push_back({pattern.at("Regex").get<std::string>(), false});
    } else if (pattern.contains("String")) {
      spec.splits.push_back({pattern.at("String").get<std::string>(), true});
    } else {
      fail("{}: Split pattern must be Regex or String", source);
    }
  } else if (type == "ByteLevel") {
    if (flag(p, "add_prefix_space", false))
      fail("{}: ByteLevel add_prefix_space=true is not supported", source);
    if (flag(p, "use_regex", true)) spec.splits.push_back({kByteLevelRegex, false});
    byte_level = true;
  } else {
    fail("{}: pre_tokenizer '{}' is not supported (Split and ByteLevel only)", source, type);
  }
}

void check_decoder(const json& d, std::string_view source) {
  std::string type = type_of(d);
  if (type == "Sequence") {
    const json& inner = d.at("decoders");
    if (inner.size() != 1) fail("{}: a decoder Sequence other than [ByteLevel] is not supported", source);
    check_decoder(inner[0], source);
  } else if (type != "ByteLevel") {
    fail("{}: decoder '{}' is not supported (only ByteLevel)", source, type.empty() ? "null" : type);
  }
}

void check_post_processor(const json& p, std::string_view source) {
  if (p.is_null()) return;
  std::string type = type_of(p);
  if (type == "Sequence") {
    for (const json& inner : p.at("processors")) check_post_processor(inner, source);
  } else if (type != "ByteLevel") {
    fail("{}: post_processor '{}' is not supported (it would add tokens; only ByteLevel)", source, type);
  }
}

void parse_model(const json& m, std::string_view source, TokenizerSpec& spec) {
  std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE") fail("{}: model type '{}' is not supported (only BPE)", source, type);
  if (m.contains("dropout") && !m["dropout"].is_null() && m["dropout"].get<double>() != 0.0) {
    fail("{}: BPE dropout is not supported", source);
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && !m[key].is_null() && !m[key].get<std::string>().empty()) {
      fail("{}: BPE {} is not supported", source, key);
    }
  }
  spec.bpe.ignore_merges = flag(m, "ignore_merges", false);
  const json& vocab = m.at("vocab");
  spec.bpe.vocab.reserve(vocab.size());
  std::vector<std::string> bytes_of_id;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    int32_t id = it.value().get<int32_t>();
    if (id < 0) fail("{}: vocabulary entry '{}' has negative id {}", source, it.key(), id);
    if (auto bytes = byte_level::to_bytes(it.key())) {
      spec.bpe.vocab.emplace_back(std::move(*bytes), id);
    } else {
      spec.odd_vocab.emplace_back(it.key(), id);
    }
  }
  const json& merges = m.at("merges");
  spec.bpe.merges.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& merge = merges[rank];
    std::string left, right;
    if (merge.is_string()) {
      // The "a b" form: exactly one space, as HF requires.
      const std::string& line = merge.get_ref<const std::string&>();
      size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail("{}: merge {} ('{}') is not two tokens separated by one space", source, rank, line);
      }
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      fail("{}: merge {} is neither \"a b\" nor [a, b]", source, rank);
    }
    auto l = byte_level::to_bytes(left), r = byte_level::to_bytes(right);
    if (!l || !r)
      fail("{}: merge {} ('{}' '{}') uses chars outside the byte-level alphabet", source, rank, left, right);
    spec.bpe.merges.emplace_back(std::move(*l), std::move(*r));
  }
}

std::optional<std::string> token_text(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return std::nullopt;
}

json parse(std::string_view text, std::string_view source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
}

}  // namespace

TokenizerSpec parse_tokenizer_json(std::string_view text, std::string_view source) {
  json root = parse(text, source);
  TokenizerSpec spec;
  try {
    parse_normalizer(root.value("normalizer", json()), source, spec);
    bool byte_level = false;
    if (root.contains("pre_tokenizer") && !root["pre_tokenizer"].is_null()) {
      parse_pre_tokenizer(root["pre_tokenizer"], source, spec, byte_level);
    }
    if (!byte_level)
      fail("{}: the pre_tokenizer has no ByteLevel step; only byte-level BPE is supported", source);
    check_decoder(root.value("decoder", json()), source);
    check_post_processor(root.value("post_processor", json()), source);
    parse_model(root.at("model"), source, spec);
    if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
      for (const json& t : root["added_tokens"]) {
        AddedToken token;
        token.id = t.at("id").get<int32_t>();
        token.content = t.at("content").get<std::string>();
        token.special = flag(t, "special", false);
        token.single_word = flag(t, "single_word", false);
        token.lstrip = flag(t, "lstrip", false);
        token.rstrip = flag(t, "rstrip", false);
        token.normalized = flag(t, "normalized", !token.special);
        spec.added.push_back(std::move(token));
      }
    }
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", source, e.what());
  }
  return spec;
}

TokenizerConfig parse_tokenizer_config(std::string_view text, std::string_view source) {
  json root = parse(text, source);
  TokenizerConfig config;
  try {
    config.bos_token = token_text(root, "bos_token");
    config.eos_token = token_text(root, "eos_token");
    config.pad_token = token_text(root, "pad_token");
    config.unk_token = token_text(root, "unk_token");
    if (auto it = root.find("chat_template"); it != root.end()) {
      if (it->is_string()) {
        config.chat_template = it->get<std::string>();
      } else if (it->is_array()) {
        // Named templates: the one called "default" is what HF applies without a name.
        for (const json& named : *it) {
          if (named.value("name", std::string()) == "default")
            config.chat_template = named.at("template").get<std::string>();
        }
      }
    }
  } catch (const json::exception& e) {
    fail("{}: unexpected structure: {}", source, e.what());
  }
  return config;
}

}  // namespace ds
