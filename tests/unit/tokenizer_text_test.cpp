// The text layers under the tokenizer: UTF-8 repair and streaming tails, the byte-level alphabet, NFC, and
// the translated pre-tokenizer regex. Expected values were taken from Python / HF tokenizers 0.23.3.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/hf_regex.h"
#include "tokenizer/nfc.h"
#include "tokenizer/unicode_classes.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

TEST(Utf8, ReplacesLikePythonDecodeReplace) {
  // bytes.decode("utf-8", "replace"): one U+FFFD per maximal ill-formed subpart.
  EXPECT_EQ(utf8::to_valid("\xff"), kFffd);
  EXPECT_EQ(utf8::to_valid("\xc0\x80"), repeat(kFffd, 2));
  EXPECT_EQ(utf8::to_valid("\xed\xa0\x80"), repeat(kFffd, 3));  // a surrogate
  EXPECT_EQ(utf8::to_valid("\xf4\x90\x80\x80"), repeat(kFffd, 4));
  EXPECT_EQ(utf8::to_valid("\xe2\x82"), kFffd);
  EXPECT_EQ(utf8::to_valid("\xe2\x82"
                           "A"),
            kFffd + "A");
  EXPECT_EQ(utf8::to_valid("\xf0\x9f\x98"), kFffd);
  EXPECT_EQ(utf8::to_valid("\xe1\x80\xe1\x80\x80"), kFffd + "\xe1\x80\x80");
  EXPECT_EQ(utf8::to_valid("\xf8\x88\x80\x80\x80"), repeat(kFffd, 5));
  EXPECT_EQ(utf8::to_valid("a\x80\x80"
                           "b"),
            "a" + repeat(kFffd, 2) + "b");
  EXPECT_EQ(utf8::to_valid("\xe0\x80\xaf"), repeat(kFffd, 3));  // overlong
  std::string valid = "plain, caf\xc3\xa9, \xe6\x9d\xb1, \xf0\x9f\x91\x8d";
  EXPECT_TRUE(utf8::is_valid(valid));
  EXPECT_EQ(utf8::to_valid(valid), valid);
  EXPECT_FALSE(utf8::is_valid("ok\xff"));
}

TEST(Utf8, IncompleteTailIsOnlyWhatCanStillComplete) {
  EXPECT_EQ(utf8::incomplete_tail("abc\xe2\x82"), 2u);
  EXPECT_EQ(utf8::incomplete_tail("abc\xf0\x9f\x98"), 3u);
  EXPECT_EQ(utf8::incomplete_tail("a\xc3"), 1u);
  EXPECT_EQ(utf8::incomplete_tail("abc\xe2\x82\xac"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("abc\xff"), 0u);
  EXPECT_EQ(utf8::incomplete_tail("\xed\xa0"), 0u);  // ED A0 can never become valid
  EXPECT_EQ(utf8::incomplete_tail(""), 0u);
}

TEST(Utf8, NextAndPrevWalkCodePoints) {
  std::string s = "a\xc3\xa9\xe6\x9d\xb1\xf0\x9f\x91\x8d";
  size_t i = 0;
  EXPECT_EQ(utf8::next(s, i), U'a');
  EXPECT_EQ(utf8::next(s, i), U'\u00e9');
  EXPECT_EQ(utf8::next(s, i), U'\u6771');
  EXPECT_EQ(utf8::next(s, i), U'\U0001F44D');
  EXPECT_EQ(i, s.size());
  size_t end = s.size();
  EXPECT_EQ(utf8::prev(s, end), U'\U0001F44D');
  EXPECT_EQ(utf8::prev(s, end), U'\u6771');
  std::string built;
  for (char32_t cp : {U'a', U'\u00e9', U'\u6771', U'\U0001F44D'}) utf8::append(built, cp);
  EXPECT_EQ(built, s);
}

TEST(ByteLevel, MapsEveryByteAndBack) {
  EXPECT_EQ(byte_level::char_of(' '), U'\u0120');   // Ġ
  EXPECT_EQ(byte_level::char_of('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(byte_level::char_of('a'), U'a');
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(byte_level::to_bytes(byte_level::from_bytes(all)), all);
  EXPECT_EQ(byte_level::to_bytes("\xc4\xa0the"), " the");
  EXPECT_FALSE(byte_level::to_bytes("a b").has_value());  // a plain space is not in the alphabet
  EXPECT_EQ(byte_level::decoder_bytes("a b"), "a b");     // HF keeps such a token as it is
  EXPECT_EQ(byte_level::decoder_bytes("<think>"), "<think>");
}

TEST(Nfc, ComposesLikeHf) {
  EXPECT_EQ(nfc("e\xcc\x81"), "\xc3\xa9");
  EXPECT_EQ(nfc("\xe2\x84\xab"), "\xc3\x85");                              // U+212B ANGSTROM SIGN -> U+00C5
  EXPECT_EQ(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"), "\xea\xb0\x81");  // conjoining jamo -> U+AC01
  EXPECT_EQ(nfc("A\xcc\x8a\xcc\xa3"), "\xe1\xba\xa0\xcc\x8a");  // reordered, then composed: U+1EA0 U+030A
  EXPECT_EQ(nfc("\xcd\x84"), "\xcc\x88\xcc\x81");               // U+0344 decomposes for good
  EXPECT_EQ(nfc("\xef\xac\x81"), "\xef\xac\x81");               // U+FB01 is only a compatibility mapping
  EXPECT_EQ(nfc("\xef\xa4\x80"), "\xe8\xb1\x88");               // U+F900 -> U+8C48
  // Marks and composites newer than HF's tables stay as they are, and cut the text around them.
  EXPECT_EQ(nfc("a\xe0\xa2\x99\xcc\xb4"), "a\xe0\xa2\x99\xcc\xb4");  // U+0899 then a ccc-1 mark: no reorder
  EXPECT_EQ(nfc("\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0"), "\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0");  // no U+11938
  EXPECT_EQ(nfc("e\xcc\x81\xe0\xa2\x99"
                "e\xcc\x81"),
            "\xc3\xa9\xe0\xa2\x99\xc3\xa9");
  EXPECT_TRUE(nfc_quick_check("plain ASCII, caf\xc3\xa9, \xe6\x9d\xb1\xe4\xba\xac"));
  EXPECT_FALSE(nfc_quick_check("e\xcc\x81"));
}

TEST(UnicodeClasses, MatchOniguruma) {
  using unicode::CodepointClass;
  EXPECT_TRUE(unicode::contains(CodepointClass::letter, U'\U00031350'));   // CJK Ext H (Unicode 15)
  EXPECT_TRUE(unicode::contains(CodepointClass::letter, U'\U00010D50'));   // Garay (Unicode 16)
  EXPECT_FALSE(unicode::contains(CodepointClass::letter, U'\U00010940'));  // unassigned in Unicode 16
  EXPECT_TRUE(unicode::contains(CodepointClass::space, U'\u0085'));
  EXPECT_FALSE(unicode::contains(CodepointClass::space, U'\u200b'));
  EXPECT_TRUE(unicode::contains(CodepointClass::mark, U'\u0301'));
  EXPECT_TRUE(unicode::contains(CodepointClass::word, U'_'));
  EXPECT_FALSE(unicode::contains(CodepointClass::word, U'-'));
}

std::vector<std::string> pieces(const HfRegex& re, std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0, start = 0, end = 0;
  while (pos < text.size() && re.find(text, pos, start, end)) {
    if (start > pos) out.emplace_back(text.substr(pos, start - pos));
    out.emplace_back(text.substr(start, end - start));
    pos = end;
  }
  if (pos < text.size()) out.emplace_back(text.substr(pos));
  return out;
}

const char* kQwen3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen35 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

using Pieces = std::vector<std::string>;

TEST(HfRegex, SplitsLikeHfPreTokenizer) {
  for (const char* pattern : {kQwen3, kQwen35}) {
    HfRegex re = HfRegex::from_pattern(pattern);
    EXPECT_EQ(pieces(re, "Hello world's  \n\n 123"),
              (Pieces{"Hello", " world", "'s", "  \n\n", " ", "1", "2", "3"}));
    EXPECT_EQ(pieces(re, "I'M '\xc5\xbf x\xc2\x85 y"),
              (Pieces{"I", "'M", " '", "\xc5\xbf", " x", "\xc2\x85", " y"}));
    EXPECT_EQ(pieces(re,
                     "a\xc2\xa0\xc2\xa0"
                     "b"),
              (Pieces{"a", "\xc2\xa0",
                      "\xc2\xa0"
                      "b"}));
    EXPECT_EQ(pieces(re, "x  \ty"), (Pieces{"x", "  ", "\ty"}));
  }
  // Devanagari vowel signs are marks: Qwen3 cuts words at them, Qwen3.5's [\p{L}\p{M}] keeps words whole.
  std::string namaste = "\xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87";
  EXPECT_EQ(pieces(HfRegex::from_pattern(kQwen3), namaste).size(), 3u);
  EXPECT_EQ(pieces(HfRegex::from_pattern(kQwen35), namaste), (Pieces{namaste}));
}

TEST(HfRegex, TranslatesClassesAndRefusesWhatItCannotCarry) {
  std::string t = translate_hf_pattern(R"([^\s\p{N}]+|\p{L}|\S|\p{Greek})");
  EXPECT_EQ(t.rfind("[^\\x{9}-\\x{D}", 0), 0u);
  EXPECT_NE(t.find("|[\\x{41}-\\x{5A}"), std::string::npos);
  EXPECT_NE(t.find("\\p{Greek}"), std::string::npos);  // other properties stay PCRE2's
  EXPECT_THROW(translate_hf_pattern(R"([\S])"), Error);
  EXPECT_THROW(translate_hf_pattern(R"([a&&b])"), Error);
  EXPECT_THROW(translate_hf_pattern(R"([[a]])"), Error);
  EXPECT_THROW(translate_hf_pattern(R"([abc)"), Error);
  EXPECT_THROW(HfRegex::from_pattern("(unclosed"), Error);
  EXPECT_EQ(pieces(HfRegex::from_literal("a.b"), "xa.bya+b"), (Pieces{"x", "a.b", "ya+b"}));
  EXPECT_EQ(pieces(HfRegex::from_pattern("[]a]"), "x]y"), (Pieces{"x", "]", "y"}));
}

}  // namespace
}  // namespace ds
