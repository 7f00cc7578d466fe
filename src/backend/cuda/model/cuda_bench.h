#pragma once
// Decode throughput of a CudaModel: rounds of one token per stream (each stream's greedy token fed back), and
// where one round's GPU time goes. Shared by cuda_model_check and `deltaserve bench --backend cuda`.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/model/cuda_model.h"

namespace ds::cuda {

struct DecodeRate {
  int streams = 0, rounds = 0;
  double ms_per_round = 0, tokens_per_s = 0;
};

// Each stream first reads `context` tokens (windows of 16), then `warmup` untimed rounds, then `rounds` timed
// by the wall clock (host work, uploads and GPU time together).
DecodeRate bench_decode_rounds(CudaModel& m, int streams, int rounds, int warmup, int context = 0);
// GPU time per op kind over `rounds` rounds of `streams` streams (CUDA events between op kinds, inside the
// replayed graph when graphs are on): (op, microseconds per round), largest first.
std::vector<std::pair<std::string, double>> op_breakdown(CudaModel& m, int rounds, int streams = 1);

}  // namespace ds::cuda
