#include "runtime/token_logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"

namespace ds {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Plain log_softmax in double over the allowed tokens.
std::vector<double> naive_logprobs(const std::vector<float>& z, const std::vector<uint64_t>& mask) {
  auto allowed = [&](size_t i) { return mask.empty() || ((mask[i / 64] >> (i % 64)) & 1); };
  double max = -INFINITY, sum = 0;
  for (size_t i = 0; i < z.size(); ++i)
    if (allowed(i)) max = std::max(max, static_cast<double>(z[i]));
  for (size_t i = 0; i < z.size(); ++i)
    if (allowed(i)) sum += std::exp(z[i] - max);
  std::vector<double> out(z.size());
  for (size_t i = 0; i < z.size(); ++i) out[i] = allowed(i) ? z[i] - max - std::log(sum) : -INFINITY;
  return out;
}

TEST(TokenLogprobs, MatchLogSoftmaxOfTheMaskedRow) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int trial = 0; trial < 30; ++trial) {
    const int vocab = trial < 5 ? 248320 : 1 + static_cast<int>(rng() % 3000);
    std::vector<float> z(static_cast<size_t>(vocab));
    for (float& v : z) v = normal(rng);
    std::vector<uint64_t> mask;
    if (trial % 2) {
      mask.assign(static_cast<size_t>((vocab + 63) / 64), 0);
      for (int i = 0; i < vocab; ++i)
        if (rng() % 3) mask[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
      mask[0] |= 1;
    }
    const std::vector<double> expect = naive_logprobs(z, mask);
    const int32_t chosen = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    const LogprobReport r = raw_logprobs(z, mask, chosen, 20);
    if (std::isinf(expect[static_cast<size_t>(chosen)])) {
      EXPECT_EQ(r.chosen, -kInf);
    } else {
      EXPECT_NEAR(r.chosen, expect[static_cast<size_t>(chosen)], 2e-5);
    }
    std::vector<int32_t> order;
    for (int32_t i = 0; i < vocab; ++i)
      if (!std::isinf(expect[static_cast<size_t>(i)])) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
    ASSERT_EQ(r.top.size(), std::min<size_t>(20, order.size()));
    for (size_t i = 0; i < r.top.size(); ++i) {
      EXPECT_EQ(r.top[i].id, order[i]);
      EXPECT_NEAR(r.top[i].logprob, expect[static_cast<size_t>(order[i])], 2e-5);
    }
  }
}

TEST(TokenLogprobs, TiesListTheLowerIdFirstAndTopNIsChecked) {
  const std::vector<float> z = {0, 1, 1, -kInf, 1, 0.5f};
  const LogprobReport r = raw_logprobs(z, {}, 5, 3);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].id, 1);
  EXPECT_EQ(r.top[1].id, 2);
  EXPECT_EQ(r.top[2].id, 4);
  EXPECT_EQ(raw_logprobs(z, {}, 3, 0).chosen, -kInf);
  EXPECT_EQ(raw_logprobs(z, {}, 1, 20).top.size(), 5u);  // only finite tokens are listed
  EXPECT_TRUE(raw_logprobs(z, {}, 1, 0).top.empty());
  try {
    raw_logprobs(z, {}, 1, 21);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "top_logprobs must be in [0, 20], got 21");
  }
  EXPECT_THROW(raw_logprobs(z, {}, 6, 1), Error);
}

}  // namespace
}  // namespace ds
