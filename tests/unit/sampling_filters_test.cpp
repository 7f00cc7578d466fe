#include "runtime/sampling_filters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "reference_sampler.h"
#include "runtime/softmax_mass.h"

namespace ds {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> random_row(std::mt19937_64& rng, int vocab) {
  std::vector<float> z(static_cast<size_t>(vocab));
  const int kind = static_cast<int>(rng() % 3);
  std::normal_distribution<float> normal(0.0f, kind == 0 ? 3.0f : 0.02f);  // 0.02: nearly flat
  const int levels = 1 + static_cast<int>(rng() % 6);
  for (float& v : z) {
    v = kind == 2 ? static_cast<float>(static_cast<int>(rng() % levels)) * 0.5f : normal(rng);  // exact ties
    if (rng() % 50 == 0) v = -kInf;
  }
  z[rng() % z.size()] = 1.0f;  // at least one finite token
  return z;
}

struct Prepared {
  std::vector<float> block_max;
  RowMax top;
  ScaledRow sc;
};

Prepared prepare(const LogitRow& row, const SamplingParams& p) {
  Prepared out;
  out.top = scan_max(row, out.block_max);
  out.sc.inv_t = 1.0 / static_cast<double>(p.temperature);
  out.sc.max_s = out.sc.scaled(out.top.z);
  out.sc.log_min_p = p.min_p > 0 ? std::log(static_cast<double>(p.min_p)) : -INFINITY;
  return out;
}

std::vector<int32_t> sorted_ids(const std::vector<Candidate>& c) {
  std::vector<int32_t> ids;
  for (const Candidate& x : c) ids.push_back(x.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<int32_t> sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

SamplingParams random_filters(std::mt19937_64& rng, int vocab) {
  SamplingParams p;
  const float temps[] = {0.3f, 1.0f, 1.6f};
  const float min_ps[] = {0.0f, 0.0f, 0.01f, 0.4f};
  const float top_ps[] = {0.9f, 0.5f, 0.01f, 0.999f, 0.99999994f};
  p.temperature = temps[rng() % 3];
  p.min_p = min_ps[rng() % 4];
  p.top_p = top_ps[rng() % 5];
  p.top_k = 1 + static_cast<int32_t>(rng() % (rng() % 2 ? 70 : static_cast<uint64_t>(vocab) + 10));
  return p;
}

TEST(SamplingFilters, TopKEqualsAFullSort) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 1500; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % (trial % 20 == 0 ? 20000 : 500));
    const std::vector<float> z = random_row(rng, vocab);
    SamplingParams p = random_filters(rng, vocab);
    p.top_p = 1;
    const LogitRow row(z, {}, nullptr, Penalties{});
    const Prepared pr = prepare(row, p);
    std::vector<Candidate> kept;
    select_top_k(row, pr.block_max, pr.sc, p.top_k, kept);
    ASSERT_EQ(sorted_ids(kept), sorted(reference::kept_tokens(z, p))) << trial;
  }
}

// The ids a KeptSet stands for, ascending.
std::vector<int32_t> expand(const KeptSet& set, const std::vector<Candidate>& kept, const LogitRow& row,
                            const ScaledRow& sc) {
  if (set.listed) return sorted_ids(kept);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < row.vocab(); ++i)
    if (sc.passes_min_p(row.at(i)) && at_or_ahead(row.at(i), i, set.last)) ids.push_back(i);
  return ids;
}

TEST(SamplingFilters, TopPEqualsAFullSortWithAndWithoutTopK) {
  std::mt19937_64 rng(2);
  int listed = 0, thresholded = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const int vocab = trial % 100 == 0  ? 248320
                      : trial % 10 == 0 ? 5000 + static_cast<int>(rng() % 20000)
                                        : 1 + static_cast<int>(rng() % 700);
    const std::vector<float> z = random_row(rng, vocab);
    SamplingParams p = random_filters(rng, vocab);
    const LogitRow row(z, {}, nullptr, Penalties{});
    const Prepared pr = prepare(row, p);
    std::vector<Candidate> kept, scratch;
    select_top_k(row, pr.block_max, pr.sc, p.top_k, kept);
    cut_top_p(kept, pr.sc, p.top_p);
    ASSERT_EQ(sorted_ids(kept), sorted(reference::kept_tokens(z, p))) << "top-k then top-p, trial " << trial;
    p.top_k = 0;
    const KeptSet set = select_top_p(row, pr.block_max, pr.sc, p.top_p, kept, scratch);
    (set.listed ? listed : thresholded)++;
    ASSERT_EQ(expand(set, kept, row, pr.sc), sorted(reference::kept_tokens(z, p)))
        << "top-p alone, trial " << trial;
  }
  EXPECT_GT(listed, 500);
  EXPECT_GT(thresholded, 50);
}

TEST(SamplingFilters, CutByMassFindsTheShortestRankedPrefix) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<Candidate> v;
    const int n = 1 + static_cast<int>(rng() % 3000);
    uint64_t total = 0;
    for (int i = 0; i < n; ++i) {
      const uint64_t mass = rng() % 4 == 0 ? 0 : rng() % 1000;
      v.push_back({i, static_cast<float>(rng() % 20), mass});
      total += mass;
    }
    if (total == 0) continue;
    const uint64_t need = 1 + rng() % total;
    std::vector<Candidate> ranked = v;
    std::sort(ranked.begin(), ranked.end(), ahead);
    size_t expect = 0;
    for (uint64_t cum = 0; cum < need; ++expect) cum += ranked[expect].mass;
    std::shuffle(v.begin(), v.end(), rng);
    const size_t r = cut_by_mass(v, need);
    ASSERT_EQ(r, expect);
    std::vector<Candidate> prefix(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(r));
    std::sort(prefix.begin(), prefix.end(), ahead);
    for (size_t i = 0; i < r; ++i) ASSERT_EQ(prefix[i].id, ranked[i].id);
  }
}

}  // namespace
}  // namespace ds
