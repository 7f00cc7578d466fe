// The two merge loops of BpeModel (quadratic scan for short words, heap for long ones) must agree: both are
// HF's "lowest rank first, leftmost on ties", checked here on random merge tables and words.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "tokenizer/bpe.h"

namespace ds {
namespace {

BpeSpec random_spec(std::mt19937& rng, size_t merges) {
  BpeSpec spec;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    spec.vocab.emplace_back(std::string(1, static_cast<char>(b)), b);
    if (b >= 'a' && b <= 'd') tokens.emplace_back(1, static_cast<char>(b));
  }
  std::set<std::string> known(tokens.begin(), tokens.end());
  std::set<std::pair<std::string, std::string>> used;
  while (spec.merges.size() < merges) {
    std::string l = tokens[rng() % tokens.size()];
    std::string r = tokens[rng() % tokens.size()];
    if (l.size() + r.size() > 12 || !used.insert({l, r}).second) continue;
    std::string joined = l + r;
    // Several merges may make one token, as in real vocabularies.
    if (known.insert(joined).second) {
      spec.vocab.emplace_back(joined, static_cast<int32_t>(spec.vocab.size()));
      tokens.push_back(joined);
    }
    spec.merges.emplace_back(l, r);
  }
  return spec;
}

TEST(Bpe, ScanAndHeapAgree) {
  std::mt19937 rng(11);
  for (int table = 0; table < 5; ++table) {
    BpeSpec spec = random_spec(rng, 400);
    BpeModel scan(spec, 1'000'000), heap(spec, 0);
    for (int w = 0; w < 2000; ++w) {
      std::string word;
      size_t n = 2 + rng() % 150;
      for (size_t i = 0; i < n; ++i) word.push_back(static_cast<char>('a' + rng() % 4));
      std::vector<int32_t> a, b;
      scan.encode_word(word, a);
      heap.encode_word(word, b);
      ASSERT_EQ(a, b) << "table " << table << " word " << word;
    }
  }
}

TEST(Bpe, LowestRankFirstLeftmostOnTies) {
  BpeSpec spec;
  for (int b = 0; b < 256; ++b) spec.vocab.emplace_back(std::string(1, static_cast<char>(b)), b);
  spec.vocab.emplace_back("aa", 256);
  spec.vocab.emplace_back("ab", 257);
  spec.merges = {{"a", "b"}, {"a", "a"}};
  for (size_t small : {size_t{0}, size_t{100}}) {
    BpeModel m(spec, small);
    std::vector<int32_t> out;
    m.encode_word("aaab", out);  // "ab" (rank 0) first, then the leftmost "aa"
    EXPECT_EQ(out, (std::vector<int32_t>{256, 257}));
    out.clear();
    m.encode_word("aaa", out);  // ties go to the left
    EXPECT_EQ(out, (std::vector<int32_t>{256, 'a'}));
  }
}

}  // namespace
}  // namespace ds
