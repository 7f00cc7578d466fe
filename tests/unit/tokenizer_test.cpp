// Tokenizer behaviour on a tiny hand-made tokenizer.json (no download needed): merge order, both merge forms,
// ignore_merges, added tokens and their HF numbering, decode, streaming, config, and refused features.
// Expected ids were taken from HF tokenizers 0.23.3 on the same JSON.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

using nlohmann::json;
using Ids = std::vector<int32_t>;

const char* kQwen3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json added(int id, const char* content, bool special) {
  return {{"id", id},        {"content", content}, {"special", special}, {"single_word", false},
          {"lstrip", false}, {"rstrip", false},    {"normalized", false}};
}

// Bytes 0..255 are ids 0..255; merges add 256.. in order; "abcd" is in the vocabulary but no merge makes it.
json tiny(bool pair_merges = false, bool ignore_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::from_bytes(std::string(1, static_cast<char>(b)))] = b;
  std::vector<std::pair<std::string, std::string>> merges = {{"a", "b"},
                                                             {"b", "c"},
                                                             {"ab", "c"},
                                                             {"c", "d"},
                                                             {"\xc4\xa0", "a"},
                                                             {"\xc4\xa0"
                                                              "a",
                                                              "bc"},
                                                             {"x", "x"},
                                                             {"xx", "xx"},
                                                             {"bc", "d"}};
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    if (!vocab.contains(a + b)) vocab[a + b] = vocab.size();
    merge_list.push_back(pair_merges ? json::array({a, b}) : json(a + " " + b));
  }
  vocab["abcd"] = vocab.size();
  json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  return {
      {"version", "1.0"},
      {"added_tokens", json::array({added(1000, "<|s|>", true), added(1001, "<t>", false)})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array({{{"type", "Split"},
                                        {"pattern", {{"Regex", kQwen3Pattern}}},
                                        {"behavior", "Isolated"},
                                        {"invert", false}},
                                       byte_level})}}},
      {"post_processor", nullptr},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", ignore_merges},
        {"vocab", vocab},
        {"merges", merge_list}}},
  };
}

Tokenizer load(const json& j, const std::string& config = {}) {
  return Tokenizer::from_json(j.dump(), config);
}

TEST(Tokenizer, MergesByRankLikeHf) {
  Tokenizer t = load(tiny());
  EXPECT_EQ(t.encode("abcd"), (Ids{258, 100}));
  EXPECT_EQ(t.encode("abc"), (Ids{258}));
  EXPECT_EQ(t.encode("bcd"), (Ids{264}));
  EXPECT_EQ(t.encode(" abc"), (Ids{32, 258}));
  EXPECT_EQ(t.encode("abcbc"), (Ids{258, 257}));
  EXPECT_EQ(t.encode("xxxxx"), (Ids{263, 120}));
  EXPECT_EQ(t.encode("xxxxxxxx"), (Ids{263, 263}));
  EXPECT_EQ(t.encode(""), (Ids{}));
  // A word past the small-word path goes through the heap and must agree with it.
  Ids want;
  for (int i = 0; i < 50; ++i) want.push_back(263);
  EXPECT_EQ(t.encode(std::string(200, 'x')), want);
  EXPECT_EQ(t.encode("Hello world's  \n\n 123"), (Ids{72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100,
                                                      39, 115, 32,  32,  10,  10, 32,  49,  50,  51}));
}

TEST(Tokenizer, BothMergeFormsAndIgnoreMerges) {
  EXPECT_EQ(load(tiny(true)).encode(" abcbcd xxxxx"), (Ids{32, 258, 264, 32, 263, 120}));
  EXPECT_EQ(load(tiny(false)).encode(" abcbcd xxxxx"), (Ids{32, 258, 264, 32, 263, 120}));
  Tokenizer t = load(tiny(false, true));
  EXPECT_EQ(t.encode("abcd"), (Ids{265}));  // the whole word is in the vocabulary
  EXPECT_EQ(t.encode("abcdd"), (Ids{258, 100, 100}));
}

TEST(Tokenizer, AddedTokensAreNumberedAndMatchedAsHfDoes) {
  Tokenizer t = load(tiny());
  // HF ignores the ids written in the file (1000, 1001): new tokens follow the model vocabulary.
  EXPECT_EQ(t.token_id("<|s|>"), 266);
  EXPECT_EQ(t.token_id("<t>"), 267);
  EXPECT_EQ(t.vocab_size(), 268u);
  EXPECT_TRUE(t.is_special(266));
  EXPECT_FALSE(t.is_special(267));
  EXPECT_EQ(t.encode("a<|s|>b<t>c"), (Ids{97, 266, 98, 267, 99}));
  EXPECT_EQ(t.encode("<|s|<|s|>>"), (Ids{60, 124, 115, 124, 266, 62}));
  // allow_special=false is HF's encode_special_tokens: special tokens become text, <t> still matches.
  EXPECT_EQ(t.encode("a<|s|>b<t>c", false), (Ids{97, 60, 124, 115, 124, 62, 98, 267, 99}));
  EXPECT_EQ(t.token_id("\xc4\xa0"
                       "a"),
            260);
  EXPECT_EQ(t.token_id("nope"), -1);
}

TEST(Tokenizer, DecodesAndSkipsLikeHf) {
  Tokenizer t = load(tiny());
  EXPECT_EQ(t.decode(Ids{1000, 97, 0xe2, 0x82, 267, 0xac}), "a\xef\xbf\xbd<t>\xef\xbf\xbd");
  EXPECT_EQ(t.decode(Ids{266, 97, 267}, true), "a<t>");
  EXPECT_EQ(t.decode(Ids{266, 97, 267}), "<|s|>a<t>");
  EXPECT_EQ(t.decode(Ids{97, -5, 5000, 98}), "ab");  // unknown ids are skipped
  EXPECT_EQ(t.decode(Ids{0xe2, 0x82, 0xac}), "\xe2\x82\xac");
  EXPECT_EQ(t.token_bytes(260), " a");
}

TEST(Tokenizer, InvalidUtf8IsReplacedBeforeEncoding) {
  Tokenizer t = load(tiny());
  std::string bad =
      "ab\xff"
      "c\xe2\x82";
  EXPECT_EQ(t.encode(bad), t.encode("ab\xef\xbf\xbd"
                                    "c\xef\xbf\xbd"));
  EXPECT_EQ(t.decode(t.encode(bad)),
            "ab\xef\xbf\xbd"
            "c\xef\xbf\xbd");
}

TEST(IncrementalDecoder, NeverEmitsHalfACharacter) {
  Tokenizer t = load(tiny());
  std::string text = "h\xc3\xa9llo \xf0\x9f\x91\x8d \xe6\x9d\xb1!";
  IncrementalDecoder stream(t);
  std::string joined;
  for (unsigned char b : text) {
    std::string piece = stream.push(static_cast<int32_t>(b));  // byte ids are the bytes themselves
    EXPECT_TRUE(utf8::is_valid(piece));
    joined += piece;
  }
  joined += stream.flush();
  EXPECT_EQ(joined, text);

  IncrementalDecoder cut(t);
  EXPECT_EQ(cut.push(Ids{'o', 'k', 0xf0, 0x9f}), "ok");
  EXPECT_EQ(cut.push(0x91), "");
  EXPECT_EQ(cut.flush(), "\xef\xbf\xbd");     // an unfinished character ends as one U+FFFD
  EXPECT_EQ(cut.push(0xff), "\xef\xbf\xbd");  // a byte that can never start a character is replaced at once
}

TEST(IncrementalDecoder, JoinedPiecesEqualDecodeOnRandomBytes) {
  Tokenizer t = load(tiny());
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    Ids ids;
    int n = static_cast<int>(rng() % 40);
    // Mostly high bytes, so that broken and complete sequences both occur; some special and merged ids too.
    for (int i = 0; i < n; ++i)
      ids.push_back(rng() % 4 == 0 ? static_cast<int32_t>(256 + rng() % 12)
                                   : static_cast<int32_t>(0x80 + rng() % 0x80));
    for (bool skip : {false, true}) {
      IncrementalDecoder stream(t, skip);
      std::string joined;
      for (int32_t id : ids) joined += stream.push(id);
      joined += stream.flush();
      EXPECT_EQ(joined, t.decode(ids, skip));
    }
  }
}

TEST(Tokenizer, EncodesConcurrently) {
  Tokenizer t = load(tiny());
  std::vector<std::string> texts = {"abcbc xxxxx", " abcd<t>", std::string(300, 'x'),
                                    "q\xc3\xa9 \xe6\x9d\xb1"};
  std::vector<Ids> want;
  for (const auto& s : texts) want.push_back(t.encode(s));
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if (t.encode(texts[i % texts.size()]) != want[i % texts.size()]) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Tokenizer, ReadsConfigSpecialsAndChatTemplate) {
  json config = {{"bos_token", nullptr},
                 {"eos_token", {{"content", "<|s|>"}, {"lstrip", false}}},
                 {"pad_token", "<t>"},
                 {"chat_template", "{{ messages }}"}};
  Tokenizer t = load(tiny(), config.dump());
  EXPECT_FALSE(t.bos_id().has_value());
  EXPECT_EQ(t.eos_id(), 266);
  EXPECT_EQ(t.pad_id(), 267);
  EXPECT_EQ(t.chat_template(), "{{ messages }}");
  json named = {{"chat_template", json::array({{{"name", "tool_use"}, {"template", "T"}},
                                               {{"name", "default"}, {"template", "D"}}})}};
  EXPECT_EQ(load(tiny(), named.dump()).chat_template(), "D");
  EXPECT_FALSE(load(tiny()).chat_template().has_value());
}

TEST(Tokenizer, LoadsADirectoryWithItsTemplateFile) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / fmt::format("ds_tokenizer_test_{}", ::getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tiny().dump();
  std::ofstream(dir / "tokenizer_config.json") << json({{"eos_token", "<t>"}}).dump();
  std::ofstream(dir / "chat_template.jinja") << "{% for m in messages %}{{ m }}{% endfor %}";
  Tokenizer t = Tokenizer::load(dir);
  EXPECT_EQ(t.eos_id(), 267);
  EXPECT_EQ(t.chat_template(), "{% for m in messages %}{{ m }}{% endfor %}");
  EXPECT_EQ(Tokenizer::load(dir / "tokenizer.json").eos_id(), 267);
  fs::remove_all(dir);
  EXPECT_THROW(Tokenizer::load(dir), Error);
}

void expect_refused(json j, const std::string& words) {
  try {
    load(j);
    ADD_FAILURE() << "accepted; expected an error naming: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, RefusesWhatItDoesNotImplement) {
  json j = tiny();
  j["normalizer"] = {{"type", "Lowercase"}};
  expect_refused(j, "normalizer 'Lowercase'");
  j = tiny();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  expect_refused(j, "pre_tokenizer 'Whitespace'");
  j = tiny();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_refused(j, "decoder 'WordPiece'");
  j = tiny();
  j["post_processor"] = {{"type", "TemplateProcessing"}};
  expect_refused(j, "post_processor 'TemplateProcessing'");
  j = tiny();
  j["model"]["type"] = "WordPiece";
  expect_refused(j, "model type 'WordPiece'");
  j = tiny();
  j["model"]["merges"].push_back("q zz");
  expect_refused(j, "not in the vocabulary");
  j = tiny();
  j["model"]["merges"].push_back("a b c");
  expect_refused(j, "not two tokens");
  j = tiny();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  expect_refused(j, "behavior 'Removed'");
  expect_refused(json::object({{"model", 1}}), "pre_tokenizer has no ByteLevel");
  EXPECT_THROW(Tokenizer::from_json("{not json"), Error);
}

}  // namespace
}  // namespace ds
