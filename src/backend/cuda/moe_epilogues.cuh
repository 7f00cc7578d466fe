#pragma once
// What the grouped expert product (wx_products.cu, grouped_row_kernel) does with a task's outputs: store them
// (PlainOut), or fold the MoE op that reads them next into the same launch (docs/cuda-model.md "Whole
// model"), each giving the bits of the separate ops:
// - SwigluOut (gate|up): a warp's 4 outputs are gate rows q, q+1 and up rows I+q, I+q+1, so it stores
//   h[q + j] = silu(gate) * up, silu_mul_halves' expression, instead of the 4 products;
// - CombineOut (down): the products are stored as before (the slots); the block that stores the last slot of
//   a (row, output tile) -- a completion counter per tile, integers only, reset by that block -- sums the
//   tile's outputs over the ranks in order, moe_combine's arithmetic.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/wx_kernels.cuh"

namespace ds::cuda::dev {

// moe_combine's sum for one output: sum_k w(k) * v(k) over the ranks k < K in order (kMaxK >= K), then the
// shared expert's sigmoid-gated value when there is one. Shared by moe_combine (glue_kernels.cu).
template <int kMaxK, class W, class V>
__device__ __forceinline__ float moe_combine_sum(const W& w, const V& v, int K, bool shared, float gate_logit,
                                                 float shared_v) {
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxK; ++k)
    if (k < K) s = __fadd_rn(s, __fmul_rn(w(k), v(k)));
  if (shared) s = __fadd_rn(s, __fmul_rn(sigmoid(gate_logit), shared_v));
  return s;
}

// The combine folded into a one-row down launch over expert tiles of one slot (tc_decode_experts_routed,
// session 13): out [rows] = moe_combine of the slots (ld apart) for one row: the routed ranks k < K by
// slot_of (a bad id's -1: NaN), weights in rank order, then with `shared` the shared expert's slot K gated by
// sigmoid(*shared_gate). out == nullptr: off. counters: one per output block, zero at the launch (left zero).
struct OneRowCombine {
  const float* weights = nullptr;
  const int32_t* slot_of = nullptr;
  const float* shared_gate = nullptr;
  float* out = nullptr;
  uint32_t* counters = nullptr;
  int K = 0;
  bool shared = false;
};

// Block-uniform, after the block stored its outputs [o_first, o_first + width) of one tile into the slots:
// the block that stores the last of the launch's n_tiles tiles of those outputs (its counter, integers only,
// reset by that block) sums them, moe_combine's expression (moe_combine_sum) output by output.
__device__ __forceinline__ void one_row_combine(const OneRowCombine& c, int n_tiles, uint32_t* counter,
                                                int64_t o_first, int width, const float* slots, int64_t ld) {
  constexpr int kMaxK = 32;
  __shared__ int last;
  __shared__ int32_t slot_s[kMaxK];
  __shared__ float w_s[kMaxK];
  __threadfence();  // this thread's slot stores, before the block's count
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == static_cast<uint32_t>(n_tiles - 1);
    if (last) *counter = 0;  // every tile of these outputs has arrived: ready for the next launch
  }
  __syncthreads();
  if (!last) return;  // uniform over the block
  __threadfence();
  if (threadIdx.x < c.K)
    slot_s[threadIdx.x] = __ldcg(c.slot_of + threadIdx.x), w_s[threadIdx.x] = c.weights[threadIdx.x];
  __syncthreads();
  const float nan = __int_as_float(0x7FC00000);
  for (int j = threadIdx.x; j < width; j += blockDim.x) {
    const int64_t d = o_first + j;
    c.out[d] = moe_combine_sum<kMaxK>(
        [&](int k) { return w_s[k]; },
        [&](int k) { return slot_s[k] < 0 ? nan : __ldcg(slots + slot_s[k] * ld + d); }, c.K, c.shared,
        c.shared ? *c.shared_gate : 0.0f, c.shared ? __ldcg(slots + c.K * ld + d) : 0.0f);
  }
}

}  // namespace ds::cuda::dev

namespace ds::cuda::detail {

struct PlainOut {
  // The weight row of output o0 + o (o < kOutputsPerWarp; the tail clamped: its loads are never used).
  __device__ __forceinline__ int64_t row(int64_t o0, int o, int64_t n_out) const {
    return o0 + o < n_out ? o0 + o : n_out - 1;
  }
  // Lane o stores output o0 + o of the task's pair row y (NaN for a bad pair).
  __device__ __forceinline__ void store(float* y, int64_t o0, const float (&acc)[kOutputsPerWarp], bool ok,
                                        int lane, int64_t n_out) const {
#pragma unroll
    for (int o = 0; o < kOutputsPerWarp; ++o)
      if (o0 + o < n_out && lane == o) y[o0 + o] = ok ? acc[o] : __int_as_float(0x7FC00000);
  }
  // Called by every thread of the block after each task: pair p, output tile `tile` (outputs tile * per_task
  // ..
  // + per_task - 1, those < n_out), the pairs' rows y (ld ldy).
  __device__ __forceinline__ void task_done(int64_t, int64_t, int64_t, const float*, int64_t, int64_t) const {
  }
};

// gate|up [2 half, cols] per expert (half even): y rows are h rows of `half` floats.
struct SwigluOut {
  int64_t half;
  __device__ __forceinline__ int64_t row(int64_t o0, int o, int64_t) const {
    return o0 / 2 + (o & 1) + (o >> 1) * half;
  }
  __device__ __forceinline__ void store(float* h, int64_t o0, const float (&acc)[kOutputsPerWarp], bool ok,
                                        int lane, int64_t) const {
    if (lane < 2) {
      const float g = lane == 0 ? acc[0] : acc[1], u = lane == 0 ? acc[2] : acc[3];
      h[o0 / 2 + lane] = ok ? __fmul_rn(dev::silu(g), u) : __int_as_float(0x7FC00000);
    }
  }
  __device__ __forceinline__ void task_done(int64_t, int64_t, int64_t, const float*, int64_t, int64_t) const {
  }
};

// down [D, inter] per expert, pairs as moe_route writes them: p < n_rows*K is (row p / K, rank p % K), then
// with `shared` one pair per row for the stacked shared expert (its gate logit at shared_gate[row *
// ld_gate]). out [n_rows, n_out]; counters [n_rows, tiles] zero at the launch (and left zero).
struct CombineOut {
  const float* weights;
  const float* shared_gate;
  int64_t ld_gate;
  float* out;
  uint32_t* counters;
  int64_t tiles;
  int n_rows, K;
  bool shared;
  __device__ __forceinline__ int64_t row(int64_t o0, int o, int64_t n_out) const {
    return PlainOut{}.row(o0, o, n_out);
  }
  __device__ __forceinline__ void store(float* y, int64_t o0, const float (&acc)[kOutputsPerWarp], bool ok,
                                        int lane, int64_t n_out) const {
    PlainOut{}.store(y, o0, acc, ok, lane, n_out);
  }
  // Block-uniform; slots: the product's rows (ld ldy). The last block of a tile stages the tile's slot values
  // and weights in shared memory, every load at once (few registers: the product's loop around it keeps
  // its own), then a thread per output sums them.
  __device__ void task_done(int64_t p, int64_t tile, int64_t per_task, const float* slots, int64_t ldy,
                            int64_t n_out) const {
    constexpr int kMaxK = 32, kMaxTile = kWarpsPerBlock * kOutputsPerWarp;
    __shared__ int last;
    __shared__ float vals[kMaxK + 1][kMaxTile], wts[kMaxK + 1];
    __threadfence();  // this thread's slot stores, before the block's count
    __syncthreads();
    const int64_t routed = int64_t{n_rows} * K;
    const int64_t r = p < routed ? p / K : p - routed;
    if (threadIdx.x == 0) {
      uint32_t* c = counters + r * tiles + tile;
      last = atomicAdd(c, 1u) == static_cast<uint32_t>(K + (shared ? 1 : 0) - 1);
      if (last) *c = 0;  // every slot of the tile has arrived: ready for the next launch
    }
    __syncthreads();
    if (!last) return;  // uniform over the block
    __threadfence();
    const int64_t first = tile * per_task;
    const int n_slots = K + (shared ? 1 : 0), width = static_cast<int>(per_task);
    for (int i = threadIdx.x; i < n_slots * width; i += blockDim.x) {
      const int k = i / width, j = i % width;
      const int64_t slot = k < K ? r * K + k : routed + r;
      if (first + j < n_out) vals[k][j] = __ldcg(slots + slot * ldy + first + j);
    }
    if (threadIdx.x < K) wts[threadIdx.x] = weights[r * K + threadIdx.x];
    if (shared && threadIdx.x == 0) wts[kMaxK] = shared_gate[r * ld_gate];
    __syncthreads();
    const int j = threadIdx.x;
    if (j < width && first + j < n_out)
      out[r * n_out + first + j] =
          dev::moe_combine_sum<kMaxK>([&](int k) { return wts[k]; }, [&](int k) { return vals[k][j]; }, K,
                                      shared, shared ? wts[kMaxK] : 0.0f, shared ? vals[K][j] : 0.0f);
    __syncthreads();  // vals and wts are staged again by the block's next last tile
  }
};

}  // namespace ds::cuda::detail
