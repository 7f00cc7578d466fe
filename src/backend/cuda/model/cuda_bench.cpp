#include "backend/cuda/model/cuda_bench.h"

#include <algorithm>
#include <chrono>

namespace ds::cuda {

namespace {

// Streams with their next token; each round feeds every stream one token and takes its greedy next one.
struct Rounds {
  CudaModel& m;
  std::vector<CudaStreamState> states;
  std::vector<int32_t> next;
  Rounds(CudaModel& model, int streams) : m(model), next(streams) {
    for (int i = 0; i < streams; ++i)
      states.push_back(m.new_state()),
          next[i] = static_cast<int32_t>((1000 + 7919 * i) % m.config().vocab_size);
  }
  void run() {
    std::vector<CudaSegment> segs;
    for (size_t i = 0; i < states.size(); ++i)
      segs.push_back({&states[i], std::span<const int32_t>(&next[i], 1), false});
    next = m.forward_greedy(segs);
  }
};

}  // namespace

DecodeRate bench_decode_rounds(CudaModel& m, int streams, int rounds, int warmup, int context) {
  Rounds r(m, streams);
  std::vector<int32_t> prompt(16);
  for (int at = 0; at < context; at += 16) {
    std::vector<CudaSegment> segs;
    const size_t len = std::min<size_t>(16, static_cast<size_t>(context - at));
    for (int i = 0; i < 16; ++i)
      prompt[i] = static_cast<int32_t>((at * 31 + i * 7 + 5) % m.config().vocab_size);
    for (auto& st : r.states) segs.push_back({&st, std::span<const int32_t>(prompt.data(), len), false});
    m.forward_greedy(segs);
  }
  for (int i = 0; i < warmup; ++i) r.run();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) r.run();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {streams, rounds, 1e3 * sec / rounds, streams * rounds / sec};
}

std::vector<std::pair<std::string, double>> op_breakdown(CudaModel& m, int rounds, int streams) {
  Rounds r(m, streams);
  r.run();
  m.set_time_ops(true);
  // Two rounds with the events, not counted: a round's graph may be captured only at its shape's second call.
  r.run(), r.run();
  m.reset_op_times();
  for (int i = 0; i < rounds; ++i) r.run();
  m.set_time_ops(false);
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [k, v] : m.op_times()) out.push_back({k, 1e3 * v / rounds});
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

}  // namespace ds::cuda
