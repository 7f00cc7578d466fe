#pragma once
// What the sampler's kernels share (device_sampler.cu: the row-parallel passes; kept_set.cu: the kept set of
// the filters): the packed inputs, the per-row state, the scratch layout, the prepared logit, the rank key
// and the order-free bests (docs/cuda-engine.md, "Sampling").
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "runtime/logit_row.h"
#include "runtime/packed_draws.h"
#include "runtime/softmax_mass.h"

namespace ds::cuda::sampling {

constexpr int kThreads = 256;        // row-parallel passes
constexpr int kChunk = 8192;         // tokens per block of a row-parallel pass
constexpr int kSelectThreads = 512;  // one block per row (80 registers a thread: 1,024 do not fit)
constexpr int kIdBits = 19;          // ids below kMaxSampledVocab = 2^19
static_assert((1 << kIdBits) == kMaxSampledVocab);
constexpr uint64_t kNoKey = ~uint64_t{0};  // a bound no key reaches: nothing kept
constexpr int kCandidates = 4096;          // a row's candidate list (more: the row's selection reads the row)
constexpr int kMassBins = 512;  // top-p: mass by offset, 1/16 nat a bin (as the host's select_top_p)

// How a filtered row finds its kept set (RowState::plan).
enum Plan : int32_t {
  kDone = 0,       // greedy, temperature-only, or nothing drawable: no selection
  kSurvivors = 1,  // min-p alone: every survivor (bound 0)
  kTopK = 2,       // candidates = survivors at or above the top-k floor; top-k, then top-p, on that list
  kTopP = 3,       // top-p alone: mass by offset bin finds the cut bin; its tokens are ranked
};

struct RowState {
  double max_s;     // s of the argmax (filtered rows), -inf otherwise
  uint64_t bound;   // kept: rank keys >= bound (0: every survivor)
  uint64_t want;    // kTopP: the mass to reach inside the cut bin
  float floor_z;    // kTopK: a logit at most the k-th largest (the k-th largest thread maximum of pass A)
  int32_t plan;     // Plan
  uint32_t count;   // candidates offered to the row's list (over kCandidates: the list is incomplete)
  int32_t cut_bin;  // kTopP: the offset bin the top-p cut falls in
};

struct Inputs {
  const PackedRow* rows;
  const TokenCounts::Entry* entries;
  const uint64_t* masks;
  int64_t vocab;
  int parts;
};

// Device scratch of one draw call (sizes: DeviceSampler::draw).
struct Scratch {
  float* part_z;      // [rows, parts] pass A's best logit a chunk
  int32_t* part_zid;  // [rows, parts]
  double* part_s;     // [rows, parts] pass B's best Gumbel score a chunk
  int32_t* part_sid;  // [rows, parts]
  float* thread_max;  // [rows, parts * kThreads] pass A's best logit a thread (top-k rows)
  RowState* states;   // [rows]
  uint64_t* lists;    // [rows, kCandidates] candidate rank keys
  uint64_t* bins;     // [rows, kMassBins] top-p rows' mass by offset bin
  int32_t* tokens;    // [rows]
};

__device__ inline const uint64_t* row_mask(const Inputs& in, const PackedRow& r) {
  return r.mask_begin >= 0 ? in.masks + r.mask_begin : nullptr;
}

// LogitRow's prepared value before penalties (applied in place first): masked or not finite reads -inf.
__device__ inline float prepared(const float* row, const uint64_t* mask, int32_t id) {
  if (mask != nullptr && !((mask[id >> 6] >> (id & 63)) & 1)) return -INFINITY;
  const float v = row[id];
  return v < INFINITY ? v : -INFINITY;
}

// A float's order as an unsigned integer (larger = larger float); -0 and +0 are equal logits on the host, so
// they share one value.
__device__ inline uint32_t ordered(float z) {
  const uint32_t b = __float_as_uint(z == 0.0f ? 0.0f : z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ inline float of_ordered(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o);
}

// The ranking (logit descending, then id ascending) as one integer, larger = ahead.
__device__ inline uint64_t rank_key(float z, int32_t id) {
  return (uint64_t{ordered(z)} << kIdBits) | static_cast<uint64_t>((1 << kIdBits) - 1 - id);
}
__device__ inline float key_z(uint64_t key) {
  return of_ordered(static_cast<uint32_t>(key >> kIdBits));
}

__device__ inline double offset_of(float z, const PackedRow& r, double max_s) {
  return static_cast<double>(z) * r.inv_t - max_s;
}
__device__ inline bool survives(float z, const PackedRow& r, double max_s) {
  return z > -INFINITY && offset_of(z, r, max_s) >= r.log_min_p;
}
// The host's offset bin (select_top_p's bin_of), for offsets of tokens with mass (x > -31.2).
__device__ inline int mass_bin(double x) {
  return min(static_cast<int>(-x * 16.0), kMassBins - 1);
}

__device__ inline void offer_z(float& bz, int32_t& bi, float z, int32_t i) {
  if (z > bz || (z == bz && i < bi)) bz = z, bi = i;
}
__device__ inline void offer_score(double& bs, int32_t& bi, double s, int32_t i) {
  if (s > bs || (s == bs && i < bi)) bs = s, bi = i;
}

// Block-wide best (value descending, id ascending); every thread gets the result.
template <class T, class Offer>
__device__ void block_best(T& v, int32_t& id, Offer offer) {
  __shared__ T sv[32];
  __shared__ int32_t si[32];
  for (int o = 16; o > 0; o >>= 1)
    offer(v, id, __shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, id, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sv[warp] = v, si[warp] = id;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sv[lane] : sv[0];
    id = lane < warps ? si[lane] : si[0];
    for (int o = 16; o > 0; o >>= 1)
      offer(v, id, __shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, id, o));
    if (lane == 0) sv[0] = v, si[0] = id;
  }
  __syncthreads();
  v = sv[0], id = si[0];
  __syncthreads();
}

// Launches of kept_set.cu, enqueued between pass A and pass B (every row of the call; rows whose plan does
// not need a step return at once). `topk`, `topp`: some row has a top-k / a top-p-alone plan.
void launch_kept_set(const Inputs& in, const float* logits, const Scratch& s, int rows, bool topk, bool topp,
                     cudaStream_t stream);

}  // namespace ds::cuda::sampling
