#pragma once
// A decode through an Engine for the benches (`bench --backend cuda`, cuda_sampling_engine): every stream a
// 16-token synthetic prompt of its own, then a reply of `tokens` tokens after its first.
#include <cstdint>
#include <vector>

#include "runtime/engine.h"

namespace ds {

struct BenchDecode {
  std::vector<std::vector<int32_t>> replies;  // by stream
  double decode_seconds = 0;                  // the longest stream's decode time
  int64_t decoded = 0;                        // tokens after each stream's first, summed
  int64_t drafted = 0, accepted = 0;
  double tokens_per_s() const {
    return decode_seconds > 0 ? static_cast<double>(decoded) / decode_seconds : 0;
  }
};

// Stream i's 16-token synthetic prompt (ids below `vocab`, different for every stream).
std::vector<int32_t> bench_prompt(int stream, int64_t vocab);

// `streams` requests at once (EOS ignored, no prompt cache), stream i with `params` seeded `seed_base + i`;
// waits for every reply. A request that ends in an error fails by name.
BenchDecode bench_decode(Engine& engine, int64_t vocab, int streams, int tokens, const SamplingParams& params,
                         uint64_t seed_base);

}  // namespace ds
