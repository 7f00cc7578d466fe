// C++ tokenizer == HF tokenizers on the >= 2 MB corpus, for each real vocabulary and two derived variants.
// The data comes from scripts/setup-test-data.sh (not committed); without it the tests skip, unless
// DELTASERVE_REQUIRE_TEST_DATA=1 (scripts/test.sh sets it) turns that into a failure.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace ds {
namespace {

namespace fs = std::filesystem;

fs::path data_dir() {
  if (const char* env = std::getenv("DELTASERVE_TOKENIZER_DATA")) return env;
  return fs::path(DELTASERVE_SOURCE_DIR) / ".cache" / "tokenizer";
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A little-endian reader over a file's bytes after its JSON header line.
struct Reader {
  std::string data;
  size_t pos = 0;
  std::string header;
  explicit Reader(const fs::path& path) : data(read_all(path)) {
    pos = data.find('\n') + 1;
    header = data.substr(0, pos - 1);
  }
  bool done() const { return pos >= data.size(); }
  uint32_t u32() {
    uint32_t v;
    std::memcpy(&v, data.data() + pos, 4);
    pos += 4;
    return v;
  }
  uint8_t u8() { return static_cast<uint8_t>(data[pos++]); }
  std::string bytes() {
    uint32_t n = u32();
    std::string s = data.substr(pos, n);
    pos += n;
    return s;
  }
  std::vector<int32_t> ids() {
    uint32_t n = u32();
    std::vector<int32_t> v(n);
    if (n > 0) std::memcpy(v.data(), data.data() + pos, n * 4);
    pos += n * 4;
    return v;
  }
};

std::string show(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 80))
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, c) : fmt::format("\\x{:02x}", c);
  return out;
}

class TokenizerParity : public testing::TestWithParam<const char*> {};

TEST_P(TokenizerParity, MatchesHfOnCorpus) {
  fs::path dir = data_dir();
  fs::path json = dir / GetParam() / "tokenizer.json";
  fs::path expected_path = dir / (std::string(GetParam()) + ".expected");
  if (!fs::exists(json) || !fs::exists(expected_path) || !fs::exists(dir / "corpus.bin")) {
    const char* require = std::getenv("DELTASERVE_REQUIRE_TEST_DATA");
    if (require && std::string(require) == "1") FAIL() << "no tokenizer test data in " << dir;
    GTEST_SKIP() << "no tokenizer test data in " << dir << "; run scripts/setup-test-data.sh";
  }
  Tokenizer tok = Tokenizer::load(json);
  Reader corpus(dir / "corpus.bin"), expected(expected_path);
  ASSERT_NE(expected.header.find(corpus.header), std::string::npos) << "expected file is for another corpus";

  size_t chunks = 0, bytes = 0, tokens = 0, id_ok = 0, decode_ok = 0, skip_ok = 0, plain_ok = 0,
         stream_ok = 0, round_trip = 0, round_trip_ok = 0, reported = 0;
  // How often the corpus reaches the paths that plain text does not: evidence that they were compared.
  size_t invalid_chunks = 0, normalized_chunks = 0, special_chunks = 0, plain_differs = 0;
  while (!corpus.done()) {
    std::string text = corpus.bytes();
    std::vector<int32_t> want = expected.ids();
    std::string want_decode = expected.u8() ? expected.bytes() : utf8::to_valid(text);
    std::string want_skip = expected.u8() ? expected.bytes() : want_decode;
    std::vector<int32_t> want_plain = expected.u8() ? expected.ids() : want;
    invalid_chunks += !utf8::is_valid(text);
    normalized_chunks += utf8::is_valid(text) && want_decode != text;
    special_chunks += want_skip != want_decode;
    plain_differs += want_plain != want;
    ++chunks;
    bytes += text.size();
    tokens += want.size();

    std::vector<int32_t> got = tok.encode(text);
    if (got == want) {
      ++id_ok;
    } else if (reported++ < 5) {
      ADD_FAILURE() << GetParam() << " chunk " << chunks - 1 << " ids differ (" << got.size() << " vs HF "
                    << want.size() << "): " << show(text);
    }
    decode_ok += tok.decode(want) == want_decode;
    skip_ok += tok.decode(want, true) == want_skip;
    plain_ok += tok.encode(text, false) == want_plain;
    // decode(encode(x)) == x wherever HF round-trips too (valid UTF-8 that NFC leaves alone).
    if (utf8::is_valid(text) && want_decode == text) {
      ++round_trip;
      round_trip_ok += tok.decode(got) == text;
    }
    IncrementalDecoder stream(tok);
    std::string streamed;
    for (int32_t id : want) streamed += stream.push(id);
    streamed += stream.flush();
    stream_ok += streamed == want_decode;
  }
  std::string summary = fmt::format(
      "{}: {} chunks, {} bytes, {} HF tokens; ids equal {}/{}; decode equal {}/{}; skip_special decode equal "
      "{}/{}; encode_special_tokens ids equal {}/{}; decode(encode(x)) == x {}/{}; streamed == decode {}/{} "
      "(chunks with invalid UTF-8 {}, changed by NFC {}, with special tokens {}, split differently without "
      "specials {})",
      GetParam(), chunks, bytes, tokens, id_ok, chunks, decode_ok, chunks, skip_ok, chunks, plain_ok, chunks,
      round_trip_ok, round_trip, stream_ok, chunks, invalid_chunks, normalized_chunks, special_chunks,
      plain_differs);
  std::printf("%s\n", summary.c_str());
  RecordProperty("summary", summary);
  EXPECT_EQ(id_ok, chunks);
  EXPECT_EQ(decode_ok, chunks);
  EXPECT_EQ(skip_ok, chunks);
  EXPECT_EQ(plain_ok, chunks);
  EXPECT_EQ(round_trip_ok, round_trip);
  EXPECT_EQ(stream_ok, chunks);
  EXPECT_GE(bytes, 2'000'000u);
}

INSTANTIATE_TEST_SUITE_P(Vocabularies, TokenizerParity,
                         testing::Values("qwen3", "qwen3_5", "qwen3_flags", "qwen3_5_ignore_merges"));

}  // namespace
}  // namespace ds
