// A decode window of W rows on the tiny fixtures, plain and with a WindowRecord (draft rollback), so the
// record's cost is seen next to the forward; results go to docs/receipts/speculative.md.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "model/model.h"

namespace {

void window(benchmark::State& bench, const std::string& fixture, bool record) {
  ds::Model m(std::string(DELTASERVE_SOURCE_DIR) + "/tests/fixtures/" + fixture);
  std::vector<int32_t> prompt(40), win(bench.range(0));
  for (int i = 0; i < 40; ++i) prompt[i] = 3 + (i * 37) % 300;
  for (size_t i = 0; i < win.size(); ++i) win[i] = 5 + static_cast<int32_t>(i);
  ds::StreamState base = m.new_state();
  ds::ForwardSegment p{&base, prompt, true, false};
  m.forward({&p, 1});
  ds::WindowRecord rec;
  for (auto _ : bench) {
    bench.PauseTiming();
    ds::StreamState st = base;
    bench.ResumeTiming();
    ds::ForwardSegment seg{&st, win, false, true, nullptr, record ? &rec : nullptr};
    benchmark::DoNotOptimize(m.forward({&seg, 1}));
  }
}

void BM_Qwen4ExpPlain(benchmark::State& s) {
  window(s, "qwen4exp_base", false);
}
void BM_Qwen4ExpRecorded(benchmark::State& s) {
  window(s, "qwen4exp_base", true);
}
void BM_Qwen3NextPlain(benchmark::State& s) {
  window(s, "qwen3next", false);
}
void BM_Qwen3NextRecorded(benchmark::State& s) {
  window(s, "qwen3next", true);
}

}  // namespace

BENCHMARK(BM_Qwen4ExpPlain)->Arg(1)->Arg(2)->Arg(5)->Arg(9)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Qwen4ExpRecorded)->Arg(1)->Arg(2)->Arg(5)->Arg(9)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Qwen3NextPlain)->Arg(1)->Arg(2)->Arg(5)->Arg(9)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Qwen3NextRecorded)->Arg(1)->Arg(2)->Arg(5)->Arg(9)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
