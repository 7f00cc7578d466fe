// Microseconds per draw of the keyed sampler on a 248,320-token row; results go to docs/receipts/sampler.md.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "runtime/block_simd.h"
#include "runtime/keyed_sampler.h"
#include "runtime/token_logprobs.h"

namespace {

constexpr int kVocab = 248320;
constexpr int kRows = 8;

// peaked: a bulk N(0, 2^2) plus a head of 50 tokens near 18, so the head holds ~97% of the mass at T = 1
// (like a confident model). flat: N(0, 1) and no head, the worst case for top-p (the 0.9 set is most of the
// vocabulary).
std::vector<std::vector<float>> make_rows(bool peaked) {
  std::mt19937_64 rng(peaked ? 1 : 2);
  std::normal_distribution<float> bulk(0.0f, peaked ? 2.0f : 1.0f), head(18.0f, 2.0f);
  std::vector<std::vector<float>> rows(kRows, std::vector<float>(kVocab));
  for (auto& row : rows) {
    for (float& v : row) v = bulk(rng);
    if (peaked)
      for (int i = 0; i < 50; ++i) row[rng() % kVocab] = head(rng);
  }
  return rows;
}

const std::vector<std::vector<float>>& rows(bool peaked) {
  static const auto peaked_rows = make_rows(true), flat_rows = make_rows(false);
  return peaked ? peaked_rows : flat_rows;
}

void run(benchmark::State& state, ds::SamplingParams params, bool peaked, int history = 0) {
  ds::KeyedSampler sampler;
  ds::TokenCounts counts;
  std::mt19937_64 rng(3);
  for (int i = 0; i < history; ++i) counts.add_generated(static_cast<int32_t>(rng() % kVocab));
  params.seed = 1234;
  int64_t position = 0;
  for (auto _ : state) {
    const auto& row = rows(peaked)[static_cast<size_t>(position % kRows)];
    benchmark::DoNotOptimize(sampler.sample(row, params, position++, counts));
  }
  state.SetLabel(peaked ? "peaked" : "flat");
}

ds::SamplingParams with(float temperature, int top_k, float top_p, float min_p) {
  ds::SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

// The floor for any pass: a plain vectorised max over the same rows (one read of 1 MB).
void BM_RowReadFloor(benchmark::State& s) {
  int64_t i = 0;
  for (auto _ : s) {
    const auto& row = rows(true)[static_cast<size_t>(i++ % kRows)];
    float best = row[0];
    for (size_t j = 0; j + 64 <= row.size(); j += 64) {
      const float m = ds::simd::max_block(row.data() + j);
      best = m > best ? m : best;
    }
    benchmark::DoNotOptimize(best);
  }
}
void BM_Greedy(benchmark::State& s) {
  run(s, with(0, 0, 1, 0), true);
}
void BM_T1NoFilters(benchmark::State& s) {
  run(s, with(1, 0, 1, 0), true);
}
void BM_T1NoFiltersFlat(benchmark::State& s) {
  run(s, with(1, 0, 1, 0), false);
}
void BM_TopP09(benchmark::State& s) {
  run(s, with(1, 0, 0.9f, 0), true);
}
void BM_TopP09Flat(benchmark::State& s) {
  run(s, with(1, 0, 0.9f, 0), false);
}
void BM_TopK40(benchmark::State& s) {
  run(s, with(1, 40, 1, 0), true);
}
void BM_TopK40TopP09(benchmark::State& s) {
  run(s, with(0.7f, 40, 0.9f, 0), true);
}
void BM_MinP005(benchmark::State& s) {
  run(s, with(1, 0, 1, 0.05f), true);
}
void BM_T1Penalties4kHistory(benchmark::State& s) {
  ds::SamplingParams p = with(1, 0, 1, 0);
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.2f;
  p.repetition_penalty = 1.1f;
  run(s, p, true, 4096);
}
void BM_RawLogprobsTop20(benchmark::State& s) {
  int64_t i = 0;
  for (auto _ : s) {
    const auto& row = rows(true)[static_cast<size_t>(i++ % kRows)];
    benchmark::DoNotOptimize(ds::raw_logprobs(row, {}, 7, 20));
  }
}

BENCHMARK(BM_RowReadFloor)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Greedy)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_T1NoFilters)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_T1NoFiltersFlat)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP09Flat)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK40)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK40TopP09)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MinP005)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_T1Penalties4kHistory)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RawLogprobsTop20)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
