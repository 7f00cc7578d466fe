// The sampler's inputs and primitives: params validation, token counts, penalties, noise, exp and masses.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "reference_sampler.h"
#include "runtime/block_simd.h"
#include "runtime/keyed_noise.h"
#include "runtime/keyed_sampler.h"
#include "runtime/logit_row.h"
#include "runtime/sampling_params.h"
#include "runtime/softmax_mass.h"
#include "runtime/token_counts.h"

namespace ds {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string validation_error(const SamplingParams& p) {
  try {
    p.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(SamplingParams, ValidationNamesTheField) {
  EXPECT_EQ(validation_error(SamplingParams{}), "");
  SamplingParams p;
  p.top_p = 1.5f;
  EXPECT_EQ(validation_error(p), "top_p must be in (0, 1], got 1.5");
  p.top_p = 0;
  EXPECT_EQ(validation_error(p), "top_p must be in (0, 1], got 0");
  p = SamplingParams{};
  p.temperature = -0.5f;
  EXPECT_EQ(validation_error(p), "temperature must be a finite number >= 0, got -0.5");
  p.temperature = NAN;
  EXPECT_EQ(validation_error(p), "temperature must be a finite number >= 0, got nan");
  p = SamplingParams{};
  p.top_k = -2;
  EXPECT_EQ(validation_error(p), "top_k must be -1 or 0 (off) or at least 1, got -2");
  p = SamplingParams{};
  p.min_p = 1.25f;
  EXPECT_EQ(validation_error(p), "min_p must be in [0, 1], got 1.25");
  p = SamplingParams{};
  p.presence_penalty = 2.5f;
  EXPECT_EQ(validation_error(p), "presence_penalty must be in [-2, 2], got 2.5");
  p = SamplingParams{};
  p.frequency_penalty = -3;
  EXPECT_EQ(validation_error(p), "frequency_penalty must be in [-2, 2], got -3");
  p = SamplingParams{};
  p.repetition_penalty = 0;
  EXPECT_EQ(validation_error(p), "repetition_penalty must be a finite number > 0, got 0");
  p = SamplingParams{.temperature = 0, .top_k = -1, .top_p = 1, .min_p = 1};
  p.presence_penalty = -2;
  p.frequency_penalty = 2;
  p.repetition_penalty = 0.01f;
  EXPECT_EQ(validation_error(p), "");
  EXPECT_TRUE(p.greedy());
  EXPECT_FALSE(p.top_k_active());
}

TEST(SamplingParams, RandomSeedsFitInAJsonNumber) {
  const uint64_t a = random_seed(), b = random_seed();
  EXPECT_LT(a, uint64_t{1} << 53);
  EXPECT_LT(b, uint64_t{1} << 53);
  EXPECT_NE(a, b);
}

TEST(TokenCounts, CountsPromptAndGeneratedAndUndoesDrafts) {
  TokenCounts c;
  c.add_prompt(std::vector<int32_t>{5, 3, 5, 9});
  c.add_generated(3);
  c.add_generated(7);
  c.add_generated(7);
  c.add_prompt(std::vector<int32_t>{7, 1});
  ASSERT_EQ(c.entries().size(), 5u);
  const int32_t ids[] = {1, 3, 5, 7, 9};
  const uint32_t prompt[] = {1, 1, 2, 1, 1}, generated[] = {0, 1, 0, 2, 0};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(c.entries()[i].id, ids[i]);
    EXPECT_EQ(c.entries()[i].prompt, prompt[i]);
    EXPECT_EQ(c.entries()[i].generated, generated[i]);
  }
  c.add_generated(11);
  c.remove_generated(11);  // a rejected draft leaves no trace
  EXPECT_EQ(c.find(11), nullptr);
  EXPECT_EQ(c.entries().size(), 5u);
  EXPECT_THROW(c.remove_generated(5), Error);  // prompt only
  EXPECT_THROW(c.remove_generated(12), Error);
  EXPECT_THROW(c.add_generated(-1), Error);
  EXPECT_THROW(c.add_prompt(std::vector<int32_t>{-4}), Error);
  EXPECT_EQ(c.max_id(), 9);
}

TEST(Penalties, FollowVllmFormulas) {
  TokenCounts c;
  c.add_prompt(std::vector<int32_t>{0, 1});
  c.add_generated(2);
  c.add_generated(2);
  c.add_generated(3);
  const std::vector<float> z = {2.0f, -2.0f, 2.0f, -1.0f, 2.0f};
  const Penalties p{0.5f, 0.25f, 2.0f};
  const LogitRow row(z, {}, &c, p);
  EXPECT_EQ(row.at(0), 1.0f);                         // prompt: repetition only, positive divides
  EXPECT_EQ(row.at(1), -4.0f);                        // negative multiplies
  EXPECT_EQ(row.at(2), 2.0f / 2 - 0.25f * 2 - 0.5f);  // generated twice: then frequency * 2 and presence
  EXPECT_EQ(row.at(3), -1.0f * 2 - 0.25f - 0.5f);
  EXPECT_EQ(row.at(4), 2.0f);  // unseen
}

TEST(Penalties, BlocksEqualTheNaiveReference) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 200; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % 1000);
    std::vector<float> z(static_cast<size_t>(vocab));
    for (float& v : z) v = rng() % 40 == 0 ? NAN : normal(rng);
    reference::History h;
    for (int i = static_cast<int>(rng() % 300); i > 0; --i)
      h.prompt.push_back(static_cast<int32_t>(rng() % vocab));
    for (int i = static_cast<int>(rng() % 300); i > 0; --i)
      h.generated.push_back(static_cast<int32_t>(rng() % vocab));
    std::vector<uint64_t> mask;
    if (trial % 2) {
      mask.assign(static_cast<size_t>((vocab + 63) / 64), 0);
      for (uint64_t& w : mask) w = rng();
    }
    SamplingParams p;
    p.presence_penalty = static_cast<float>(static_cast<int>(rng() % 41) - 20) / 10;
    p.frequency_penalty = static_cast<float>(static_cast<int>(rng() % 41) - 20) / 10;
    p.repetition_penalty = 0.25f + static_cast<float>(rng() % 8) / 4;
    TokenCounts c;
    c.add_prompt(h.prompt);
    for (int32_t t : h.generated) c.add_generated(t);
    const LogitRow row(z, mask, &c, Penalties{p.presence_penalty, p.frequency_penalty, p.repetition_penalty});
    const std::vector<float> expect = reference::prepared_logits(z, p, h, mask);
    LogitRow::Reader reader(row);
    float block[LogitRow::kBlock];
    for (int64_t b = 0; b < row.blocks();
         b += 1 + static_cast<int64_t>(rng() % 2)) {  // skipping blocks is fine
      const int n = reader.load(b, block);
      for (int j = 0; j < LogitRow::kBlock; ++j) {
        const size_t id = static_cast<size_t>(b * LogitRow::kBlock + j);
        ASSERT_EQ(block[j], j < n ? expect[id] : -kInf) << trial << " " << id;
        if (j < n) {
          ASSERT_EQ(row.at(static_cast<int32_t>(id)), expect[id]);
        }
      }
    }
  }
}

TEST(Penalties, HistoryOutsideTheVocabularyIsAnError) {
  TokenCounts c;
  c.add_generated(10);
  SamplingParams p;
  p.presence_penalty = 1;
  EXPECT_THROW(sample_token(std::vector<float>(10, 0.0f), p, 0, c), Error);
  EXPECT_EQ(sample_token(std::vector<float>(11, 0.0f), p, 0, c) >= 0, true);
}

TEST(KeyedNoise, UniformIsOpenAndBucketBoundsHold) {
  EXPECT_EQ(uniform_open(0), 0x1p-53);
  EXPECT_EQ(uniform_open(~uint64_t{0}), 1.0 - 0x1p-53);
  EXPECT_LT(uniform_open(~uint64_t{0}), 1.0);
  EXPECT_TRUE(std::isfinite(gumbel_of_bits(0)));
  EXPECT_TRUE(std::isfinite(gumbel_of_bits(~uint64_t{0})));
  const double* bounds = gumbel_bucket_bounds();
  std::mt19937_64 rng(1);
  for (int i = 0; i < 200000; ++i) {
    const uint64_t bits = rng();
    ASSERT_LE(gumbel_of_bits(bits), bounds[bits >> 52]);
    const uint64_t top = bits | ((uint64_t{1} << 52) - 1);  // the largest bits of the bucket
    ASSERT_LE(gumbel_of_bits(top), bounds[bits >> 52]);
  }
  EXPECT_EQ(gumbel_max(), bounds[kNoiseBuckets - 1]);
  double mean = 0;  // Gumbel(0, 1) has mean 0.5772 and variance pi^2 / 6
  const uint64_t key = draw_key(3, 4);
  for (int32_t id = 0; id < 1000000; ++id) mean += gumbel_of_bits(token_bits(key, id));
  EXPECT_NEAR(mean / 1e6, 0.5772156649, 5 * 1.2825 / 1000.0);
}

TEST(SoftmaxMass, ExpIsAccurateAndMassesAreExact) {
  EXPECT_EQ(exp_nonpositive(0.0), 1.0);
  EXPECT_EQ(exp_nonpositive(-INFINITY), 0.0);
  EXPECT_EQ(exp_nonpositive(-800.0), 0.0);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> x(-708.0, 0.0), small(-2.0, 0.0);
  for (int i = 0; i < 200000; ++i) {
    const double v = i % 2 ? x(rng) : small(rng);
    ASSERT_NEAR(exp_nonpositive(v) / std::exp(v), 1.0, 5e-16) << v;
  }
  EXPECT_EQ(mass_of(0.0), uint64_t{1} << 44);
  EXPECT_EQ(mass_of(kMassFloor), 0u);
  EXPECT_EQ(mass_of(-std::log(2.0)), uint64_t{1} << 43);
  EXPECT_EQ(ceil_fraction(0.5f, 7), 4u);
  EXPECT_EQ(ceil_fraction(0.5f, 8), 4u);
  EXPECT_EQ(ceil_fraction(1.0f, 123456789), 123456789u);
  EXPECT_EQ(ceil_fraction(0.1f, 10), 2u);  // 0.1f is slightly above 0.1
  EXPECT_EQ(ceil_fraction(1e-45f, uint64_t{1} << 62), 1u);
  for (int i = 0; i < 100000; ++i) {  // small totals: p * total is exact in double
    const float p = std::nextafter(static_cast<float>(rng() % 1000001) / 1e6f, 2.0f);
    const uint64_t total = rng() % (uint64_t{1} << 28);
    ASSERT_EQ(ceil_fraction(p, total), static_cast<uint64_t>(std::ceil(static_cast<double>(p) * total)));
  }
}

TEST(SoftmaxMass, VectorBlocksGiveTheScalarBits) {
  std::mt19937_64 rng(2);
  std::uniform_real_distribution<float> wide(-800.0f, 0.0f), near(-40.0f, 0.0f);
  const float edges[] = {0.0f,
                         -0.0f,
                         -708.0f,
                         std::nextafter(-708.0f, 0.0f),
                         std::nextafter(-708.0f, -1000.0f),
                         -31.0f,
                         -31.2f,
                         -32.0f,
                         -1e-30f,
                         -kInf};
  for (int trial = 0; trial < 2000; ++trial) {
    alignas(64) float z[simd::kBlock];
    alignas(64) uint64_t mass[simd::kBlock];
    for (int j = 0; j < simd::kBlock; ++j)
      z[j] = trial < 20 ? edges[(trial + j) % 10] : (j % 2 ? wide(rng) : near(rng));
    const double inv_t = trial % 3 == 0 ? 1.0 : 0.37 + static_cast<double>(trial % 7);
    const double max_s = trial % 5 == 0 ? 0.0 : -0.25 * (trial % 4);
    const double log_min_p = trial % 4 == 0 ? -INFINITY : -3.0;
    const uint64_t sum = simd::mass_block(z, inv_t, max_s, log_min_p, mass);
    uint64_t expect_sum = 0;
    for (int j = 0; j < simd::kBlock; ++j) {
      const double x = static_cast<double>(z[j]) * inv_t - max_s;
      const uint64_t expect = x >= log_min_p ? mass_of(x) : 0;
      ASSERT_EQ(mass[j], expect) << z[j];
      expect_sum += expect;
    }
    ASSERT_EQ(sum, expect_sum);
  }
}

TEST(KeyedSampler, ExtremeTemperaturesEqualTheReference) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float t : {1e-38f, 1e-20f, 1e-5f, 1e-2f, 50.0f, 1e20f, 3e38f}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> z(static_cast<size_t>(1 + rng() % 3000));
      for (float& v : z) v = trial % 2 ? normal(rng) : normal(rng) * 1e30f;
      SamplingParams p;
      p.temperature = t;
      p.seed = rng();
      p.min_p = trial % 3 == 0 ? 0.1f : 0.0f;
      p.top_p = trial % 4 == 1 ? 0.7f : 1.0f;
      const int64_t pos = trial;
      ASSERT_EQ(sample_token(z, p, pos, TokenCounts{}), reference::sample(z, p, pos, {}, {}))
          << t << " " << trial;
    }
  }
}

}  // namespace
}  // namespace ds
