#include "runtime/keyed_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <thread>

#include "core/error.h"
#include "reference_sampler.h"
#include "runtime/keyed_noise.h"
#include "runtime/sampling_filters.h"

namespace ds {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

TokenCounts counts_of(const reference::History& h) {
  TokenCounts c;
  c.add_prompt(h.prompt);
  for (int32_t t : h.generated) c.add_generated(t);
  return c;
}

int32_t draw(const std::vector<float>& logits, const SamplingParams& p, int64_t position,
             const reference::History& h = {}, const std::vector<uint64_t>& mask = {}) {
  return sample_token(logits, p, position, counts_of(h), mask);
}

// Logits with many exact ties: values from a small set, some -inf, NaN and +inf.
std::vector<float> tied_logits(std::mt19937_64& rng, int vocab) {
  std::vector<float> z(static_cast<size_t>(vocab));
  const int levels = 1 + static_cast<int>(rng() % 12);
  for (float& v : z) {
    const uint64_t r = rng() % 100;
    v = r < 3 ? -kInf : r < 4 ? NAN : static_cast<float>(static_cast<int>(rng() % levels)) * 0.75f - 3.0f;
  }
  if (rng() % 5 == 0) z[rng() % z.size()] = kInf;
  return z;
}

std::vector<float> normal_logits(std::mt19937_64& rng, int vocab, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> z(static_cast<size_t>(vocab));
  for (float& v : z) v = normal(rng);
  for (int i = 0; i < 20; ++i) z[rng() % z.size()] += 4.0f * scale;  // a few strong tokens, like a real head
  return z;
}

std::vector<uint64_t> random_mask(std::mt19937_64& rng, int vocab, int allow_percent) {
  std::vector<uint64_t> mask(static_cast<size_t>((vocab + 63) / 64), 0);
  for (int i = 0; i < vocab; ++i)
    if (static_cast<int>(rng() % 100) < allow_percent)
      mask[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
  return mask;
}

SamplingParams random_params(std::mt19937_64& rng, int vocab) {
  SamplingParams p;
  const float temps[] = {0.0f, 0.25f, 0.7f, 1.0f, 1.9f};
  const int ks[] = {0, 0, 1, 3, 40, vocab + 5};
  const float ps[] = {1.0f, 1.0f, 0.95f, 0.5f, 0.05f, 0.9999f};
  const float min_ps[] = {0.0f, 0.0f, 0.02f, 0.3f, 1.0f};
  p.temperature = temps[rng() % 5];
  p.top_k = ks[rng() % 6];
  p.top_p = ps[rng() % 6];
  p.min_p = min_ps[rng() % 5];
  if (rng() % 2) {
    p.presence_penalty = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.5f;
    p.frequency_penalty = static_cast<float>(static_cast<int>(rng() % 9) - 4) * 0.25f;
    p.repetition_penalty = rng() % 2 ? 1.0f : 0.5f + static_cast<float>(rng() % 4) * 0.5f;
  }
  p.seed = rng();
  return p;
}

reference::History random_history(std::mt19937_64& rng, int vocab) {
  reference::History h;
  for (int i = static_cast<int>(rng() % 40); i > 0; --i)
    h.prompt.push_back(static_cast<int32_t>(rng() % vocab));
  for (int i = static_cast<int>(rng() % 40); i > 0; --i)
    h.generated.push_back(static_cast<int32_t>(rng() % std::min(vocab, 50)));  // repeats, so counts exceed 1
  return h;
}

TEST(KeyedSampler, SameInputsGiveTheSameTokenAndPositionsChangeTheNoise) {
  std::mt19937_64 rng(1);
  const std::vector<float> z(1000, 0.0f);  // uniform: the draw is decided by noise alone
  SamplingParams p;
  p.seed = 42;
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < 200; ++pos) {
    const int32_t t = draw(z, p, pos);
    EXPECT_EQ(t, draw(z, p, pos));
    seen.insert(t);
  }
  EXPECT_GT(seen.size(), 150u);
  p.seed = 43;
  int same = 0;
  for (int64_t pos = 0; pos < 200; ++pos) same += draw(z, p, pos) == draw(z, SamplingParams{.seed = 42}, pos);
  EXPECT_LT(same, 5);
  EXPECT_NE(token_bits(draw_key(42, 7), 3), token_bits(draw_key(42, 8), 3));
  EXPECT_NE(token_bits(draw_key(42, 7), 3), token_bits(draw_key(43, 7), 3));
  EXPECT_NE(token_bits(draw_key(42, 7), 3), token_bits(draw_key(42, 7), 4));
}

TEST(KeyedSampler, ResultDoesNotDependOnScratchOrThreads) {
  std::mt19937_64 rng(2);
  std::vector<std::vector<float>> rows;
  std::vector<SamplingParams> params;
  for (int i = 0; i < 24; ++i) {
    rows.push_back(normal_logits(rng, 248320, 2.5f));
    params.push_back(random_params(rng, 248320));
  }
  std::vector<int32_t> alone(rows.size());
  for (size_t i = 0; i < rows.size(); ++i)
    alone[i] = sample_token(rows[i], params[i], 1000 + i, TokenCounts{});
  std::vector<int32_t> shared(rows.size());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      KeyedSampler sampler;  // reused across rows in reverse order, so scratch holds other rows' data
      for (size_t i = rows.size(); i-- > 0;)
        if (i % 4 == static_cast<size_t>(t))
          shared[i] = sampler.sample(rows[i], params[i], 1000 + i, TokenCounts{});
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(alone, shared);
}

TEST(KeyedSampler, GreedyIsArgmaxWithTiesToTheLowerId) {
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(draw({1, 3, 2, 3, 3}, p, 0), 1);
  EXPECT_EQ(draw({-kInf, NAN, -5, kInf, -5}, p, 0), 2);
  std::vector<float> z(300, 1.0f);
  z[299] = 2;
  z[200] = 2;
  EXPECT_EQ(draw(z, p, 5), 200);
  const std::vector<uint64_t> mask = {~0ull, ~0ull, ~0ull, ~0ull & ~(1ull << (200 - 192)), ~0ull};
  EXPECT_EQ(draw(z, p, 5, {}, mask), 299);
  p.seed = 99;  // greedy ignores the seed and the position
  EXPECT_EQ(draw(z, p, 77), 200);
}

TEST(KeyedSampler, TopPKeepsTheLowerIdsAmongExactTiesAtTheBoundary) {
  const std::vector<float> z = {-1, 0, -5, 0, 0, 0, -9};  // four tokens tie at 0; total weight 4.37
  SamplingParams p;
  p.top_p = 0.45f;  // two of the tied tokens hold 2 / 4.37 = 0.457
  const std::vector<int32_t> two = {1, 3};
  EXPECT_EQ(reference::kept_tokens(reference::prepared_logits(z, p, {}, {}), p), two);
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < 400; ++pos) seen.insert(draw(z, p, pos));
  EXPECT_EQ(seen, std::set<int32_t>(two.begin(), two.end()));
  // Four exactly equal weights: 0.5 of the (tied) mass is exactly two of them; a hair more needs a third.
  const std::vector<float> flat = {0, 0, 0, 0};
  p.top_p = 0.5f;
  EXPECT_EQ(reference::kept_tokens(flat, p), (std::vector<int32_t>{0, 1}));
  p.top_p = 0.5000001f;
  EXPECT_EQ(reference::kept_tokens(flat, p), (std::vector<int32_t>{0, 1, 2}));
  seen.clear();
  for (int64_t pos = 0; pos < 400; ++pos) seen.insert(draw(flat, p, pos));
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2}));
}

TEST(KeyedSampler, TopKKeepsExactlyKWithTiesToTheLowerId) {
  const std::vector<float> z = {0, 2, 1, 2, 2, 2, 1};
  SamplingParams p;
  p.top_k = 2;
  std::set<int32_t> seen;
  for (int64_t pos = 0; pos < 400; ++pos) seen.insert(draw(z, p, pos));
  EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

TEST(KeyedSampler, MaskIsRespected) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const int vocab = 64 + static_cast<int>(rng() % 2000);
    std::vector<float> z = normal_logits(rng, vocab, 3.0f);
    const std::vector<uint64_t> mask = random_mask(rng, vocab, 5);
    int best = 0;
    for (int i = 1; i < vocab; ++i)
      best = z[static_cast<size_t>(i)] > z[static_cast<size_t>(best)] ? i : best;
    z[static_cast<size_t>(best)] = 1000;  // the best token is usually masked out: it must never be drawn then
    SamplingParams p = random_params(rng, vocab);
    bool any = false;
    for (uint64_t w : mask) any |= w != 0;
    if (!any) continue;
    for (int64_t pos = 0; pos < 50; ++pos) {
      const int32_t t = draw(z, p, pos, {}, mask);
      EXPECT_TRUE((mask[static_cast<size_t>(t / 64)] >> (t % 64)) & 1) << t;
    }
  }
  const std::vector<float> z(100, 0.0f);
  EXPECT_THROW(draw(z, SamplingParams{}, 0, {}, {~0ull}), Error);  // too short for 100 tokens
  try {
    draw(z, SamplingParams{}, 0, {}, {0, 0});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no token can be drawn"), std::string::npos);
  }
}

// Chi-square critical value at tail probability ~1e-6 (Wilson-Hilferty), so a correct sampler essentially
// never fails.
double chi_square_critical(int df) {
  const double z = 4.75, a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

// Draws at positions 0..n-1 and checks the frequencies against `expected` (zeros must never appear).
void expect_distribution(const std::vector<float>& z, const SamplingParams& p,
                         const std::vector<double>& expected) {
  constexpr int kDraws = 200000;
  KeyedSampler sampler;
  std::vector<int> counts(z.size(), 0);
  for (int64_t pos = 0; pos < kDraws; ++pos)
    ++counts[static_cast<size_t>(sampler.sample(z, p, pos, TokenCounts{}))];
  double chi2 = 0;
  int df = -1;
  for (size_t i = 0; i < z.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is filtered out";
      continue;
    }
    const double e = kDraws * expected[i];
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  if (df > 0) {
    EXPECT_LT(chi2, chi_square_critical(df)) << "df " << df;
  }
}

// softmax(z / T) restricted to `keep` and renormalised, in plain double arithmetic.
std::vector<double> softmax_over(const std::vector<float>& z, float t, const std::vector<int>& keep) {
  std::vector<double> out(z.size(), 0.0);
  double sum = 0;
  for (int i : keep) sum += out[static_cast<size_t>(i)] = std::exp(z[static_cast<size_t>(i)] / t);
  for (double& v : out) v /= sum;
  return out;
}

TEST(KeyedSampler, FrequenciesMatchSoftmaxOverTemperature) {
  const std::vector<float> z = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  const std::vector<int> all = {0, 1, 2, 3, 4, 5};
  for (float t : {1.0f, 0.6f, 1.7f}) {
    SamplingParams p;
    p.temperature = t;
    p.seed = 7;
    expect_distribution(z, p, softmax_over(z, t, all));
  }
}

TEST(KeyedSampler, FrequenciesMatchTheFilteredRenormalisedDistribution) {
  const std::vector<float> z = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f};
  SamplingParams p;
  p.seed = 11;
  p.temperature = 1.3f;
  p.top_k = 3;  // the three largest: 2.0, 1.5, 1.0
  expect_distribution(z, p, softmax_over(z, 1.3f, {1, 4, 0}));
  p = SamplingParams{};
  p.top_p = 0.8f;  // T=1 probabilities .420 .255 .154 .094 ...: cumulative .420 .674 .829 -> three tokens
  expect_distribution(z, p, softmax_over(z, 1.0f, {1, 4, 0}));
  p.top_p = 0.9f;  // cumulative .829 .922 -> four tokens
  expect_distribution(z, p, softmax_over(z, 1.0f, {1, 4, 0, 2}));
  p = SamplingParams{};
  p.min_p = 0.3f;  // keeps z >= 2 + log 0.3 = 0.796
  expect_distribution(z, p, softmax_over(z, 1.0f, {1, 4, 0}));
  p = SamplingParams{};
  p.temperature = 0.8f;
  p.min_p = 0.1f;   // z >= 2 + 0.8 log 0.1 = 0.158: drops -1 and 0
  p.top_k = 3;      // then 2.0, 1.5, 1.0 (0.5 dropped)
  p.top_p = 0.75f;  // T=.8 renormalised over those three: .549 .294 .157 -> two tokens
  expect_distribution(z, p, softmax_over(z, 0.8f, {1, 4}));
}

TEST(KeyedSampler, EqualsTheFullSortReferenceOnRandomRows) {
  std::mt19937_64 rng(4);
  KeyedSampler sampler;
  int sampled = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % (trial % 10 == 0 ? 5000 : 300));
    const std::vector<float> z = trial % 3 ? tied_logits(rng, vocab) : normal_logits(rng, vocab, 2.0f);
    const SamplingParams p = random_params(rng, vocab);
    const reference::History h = random_history(rng, vocab);
    const std::vector<uint64_t> mask = rng() % 3 == 0 ? random_mask(rng, vocab, 60) : std::vector<uint64_t>{};
    const int64_t pos = static_cast<int64_t>(rng() % 100000);
    bool drawable = false;
    for (float v : reference::prepared_logits(z, p, h, mask)) drawable |= v != -kInf;
    if (!drawable) {
      EXPECT_THROW(sampler.sample(z, p, pos, counts_of(h), mask), Error);
      continue;
    }
    ASSERT_EQ(sampler.sample(z, p, pos, counts_of(h), mask), reference::sample(z, p, pos, h, mask))
        << "trial " << trial << " vocab " << vocab << " T " << p.temperature << " k " << p.top_k << " p "
        << p.top_p << " min_p " << p.min_p;
    sampled += !p.greedy();
  }
  EXPECT_GT(sampled, 2000);
}

TEST(KeyedSampler, EqualsTheReferenceWhenTopPKeepsMostOfTheVocabulary) {
  std::mt19937_64 rng(6);
  KeyedSampler sampler;
  for (int trial = 0; trial < 150; ++trial) {
    const int vocab = 5000 + static_cast<int>(rng() % 15000);
    const std::vector<float> z = normal_logits(rng, vocab, 0.01f + static_cast<float>(rng() % 50) / 100.0f);
    SamplingParams p = random_params(rng, vocab);
    p.top_k = 0;
    p.top_p = 0.05f + static_cast<float>(rng() % 95) / 100.0f;  // flat rows: a large set, drawn by threshold
    const reference::History h = random_history(rng, vocab);
    const std::vector<uint64_t> mask = rng() % 2 ? random_mask(rng, vocab, 80) : std::vector<uint64_t>{};
    const int64_t pos = static_cast<int64_t>(rng() % 100000);
    ASSERT_EQ(sampler.sample(z, p, pos, counts_of(h), mask), reference::sample(z, p, pos, h, mask)) << trial;
  }
}

TEST(KeyedSampler, EqualsTheReferenceOnTheFullVocabulary) {
  std::mt19937_64 rng(5);
  KeyedSampler sampler;
  for (int trial = 0; trial < 12; ++trial) {
    const float scale = trial % 3 == 0 ? 0.05f : 2.5f;  // 0.05: nearly flat, so top-p keeps ~90% of the vocab
    const std::vector<float> z = normal_logits(rng, 248320, scale);
    SamplingParams p = random_params(rng, 248320);
    if (trial % 2 == 0) p.top_k = 0;
    const reference::History h = random_history(rng, 248320);
    const int64_t pos = static_cast<int64_t>(rng() % 100000);
    EXPECT_EQ(sampler.sample(z, p, pos, counts_of(h), {}), reference::sample(z, p, pos, h, {})) << trial;
  }
}

}  // namespace
}  // namespace ds
