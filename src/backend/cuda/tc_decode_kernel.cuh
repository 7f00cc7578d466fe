#pragma once
// The general tensor-core decode product kernel (decode_kernel, tiers of NF row fragments) and the split
// launch (decode_split_kernel); tc_decode.cu's header comment explains both. Moved out of tc_decode.cu
// unchanged (review13: the file was past ~600 lines); included by tc_decode.cu alone, in its anonymous
// namespace as before.
#include <cstdint>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/tc_common.cuh"
#include "backend/cuda/tc_decode_parts.cuh"

namespace ds::cuda {

namespace {

using namespace tcd;

template <int Bits, int NF, bool PC>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(DecodeWeight W, Slicing sl, const ExpertWindow* tiles, int n_rows, const int32_t* row_ids,
                  DecodeX X, float* y, int64_t ldy, int64_t n_experts) {
  using L = Stage<Bits>;
  static_assert(kStages * L::kWords >= NF * 4 * 32, "the slices' merge fits in a warp's ring");
  extern __shared__ __align__(16) uint32_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int slice = warp % sl.slices;
  const int64_t o0 = int64_t{blockIdx.x} * sl.block_outputs() + (warp / sl.slices) * kWarpOutputs;
  // Expert tiles are written by the previous kernel: wait before reading them. A single matrix's weights
  // never change during a round, so their first stages go out before the wait (programmatic launch).
  if (tiles != nullptr) dev::grid_dependency_wait();
  int64_t first = 0;
  int count = 0;
  if (tiles != nullptr) {
    const ExpertWindow tw = tiles[blockIdx.y];
    if (tw.count <= 0 || tw.count > kDecodeTileRows || tw.expert < 0 || tw.expert >= n_experts) return;
    first = tw.first, count = tw.count;
    select_expert(W, tw.expert);
  } else {
    first = int64_t{blockIdx.y} * kDecodeTileRows;
    count = static_cast<int>(min(int64_t{kDecodeTileRows}, n_rows - first));
  }
  if (o0 >= W.rows) return;  // uniform over the output group, which alone meets at the slices' barrier
  uint32_t* ring = smem + warp * (kStages * L::kWords);
  const int64_t T = W.cols / 32, n_stages = (T + kUnitsPerStage - 1) / kUnitsPerStage;
  // This warp's slice: stages [s_begin, s_end), ring slot (s - s_begin) % kStages.
  const int64_t s_begin = sl.begin(slice, n_stages), s_end = sl.end(slice, n_stages);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s)
    issue_stage<Bits>(W, o0, s_begin + s, s_end, ring + s * L::kWords, lane);
  if (tiles == nullptr) dev::grid_dependency_wait();

  // x rows of this lane's B column (tile row 8f + g) and of its C columns (8f + 2t, 8f + 2t + 1); -1: none.
  auto x_row = [&](int r) -> int64_t {
    return r < count ? (row_ids != nullptr ? int64_t{row_ids[first + r]} : first + r) : -1;
  };
  int64_t xb[NF], xc[NF][2];
#pragma unroll
  for (int f = 0; f < NF; ++f) {
    xb[f] = x_row(8 * f + g);
    xc[f][0] = x_row(8 * f + 2 * t);
    xc[f][1] = x_row(8 * f + 2 * t + 1);
  }
  float acc[NF][4];
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[f][e] = 0.0f;
  const int64_t og[2] = {min(o0 + g, W.rows - 1), min(o0 + g + 8, W.rows - 1)};

  // One unit of 32 columns of stage st (its first unit t0): decode, MMAs per fragment, epilogue in order.
  auto unit_step = [&](const uint32_t* st, int64_t t0, int u) {
    const int64_t unit = t0 + u;
    uint32_t P[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      unit_pairs<Bits>(st + (g + 8 * h) * L::kRowWords + u * (Bits == 0 ? 16 : Bits), t, P[h]);
    const uint32_t a[2][4] = {{P[0][0], P[1][0], P[0][1], P[1][1]}, {P[0][2], P[1][2], P[0][3], P[1][3]}};
    // The scale and bias of output row r (0..15) of the warp's 16, output o_r (clamped to the matrix).
    auto scale_bias = [&](int r, int64_t o_r, float& scale, float& bias) {
      const int64_t base = W.sb_base + o_r * W.groups_per_row;
      const int64_t w_lo = (base + ((t0 * 32) >> W.group_shift)) >> 1;
      const int64_t li = base + ((unit * 32) >> W.group_shift) - 2 * w_lo;
      const uint16_t* sb = reinterpret_cast<const uint16_t*>(st + r * L::kRowWords + L::kCodeWords);
      scale = from_bf16(sb[li]);
      bias = from_bf16(sb[8 + li]);
    };
    float scale[2] = {0.0f, 0.0f}, bias[2] = {0.0f, 0.0f};
    if constexpr (Bits != 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) scale_bias(g + 8 * h, og[h], scale[h], bias[h]);
    }
#pragma unroll
    for (int f = 0; f < NF; ++f) {
      if (8 * f >= count) break;  // uniform over the block
      uint4 b[kTerms];
#pragma unroll
      for (int j = 0; j < kTerms; ++j)
        b[j] = xb[f] >= 0 ? __ldg(X.planes + ((j * X.n_x + xb[f]) * X.cols + unit * 32) / 8 + t)
                          : make_uint4(0, 0, 0, 0);
      float sx[2] = {0.0f, 0.0f};
      if constexpr (Bits != 0) {
        sx[0] = xc[f][0] >= 0 ? __ldg(X.sums + xc[f][0] * T + unit) : 0.0f;
        sx[1] = xc[f][1] >= 0 ? __ldg(X.sums + xc[f][1] * T + unit) : 0.0f;
      }
      if constexpr (PC) {  // the columns arithmetic as plane accumulators
        float c[kTerms][4] = {};
        pr_mma(c, a, b);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float d = pr_combine(c, e);
          acc[f][e] = Bits == 0 ? __fadd_rn(acc[f][e], d)
                                : __fmaf_rn(bias[e >> 1], sx[e & 1], __fmaf_rn(scale[e >> 1], d, acc[f][e]));
        }
      } else {
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        float(&target)[4] = Bits == 0 ? acc[f] : part;
        // Per k step the smallest term first: the prompt products' order.
        unit_mma(target, a, b);
        if constexpr (Bits != 0) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[f][e] = __fmaf_rn(scale[e >> 1], part[e], acc[f][e]);
            acc[f][e] = __fmaf_rn(bias[e >> 1], sx[e & 1], acc[f][e]);
          }
        }
      }
    }
  };

  for (int64_t s = s_begin; s < s_end; ++s) {
    const int64_t i = s - s_begin;
    issue_stage<Bits>(W, o0, s + kStages - 1, s_end, ring + ((i + kStages - 1) % kStages) * L::kWords, lane);
    tc::cp_async_wait<kStages - 1>();  // stage s has landed (this lane's copies) ...
    __syncwarp();                      // ... and every lane's
    const uint32_t* st = ring + (i % kStages) * L::kWords;
    const int64_t t0 = s * kUnitsPerStage;
    stage_units(static_cast<int>(min(int64_t{kUnitsPerStage}, T - t0)), [&](int u) { unit_step(st, t0, u); });
    __syncwarp();  // every lane is done with stage s before its slot is refilled
  }
  float(&flat)[NF * 4] = reinterpret_cast<float(&)[NF * 4]>(acc);
  if (!merge_slices(sl, flat, ring, kStages * L::kWords, warp, lane)) return;
#pragma unroll
  for (int f = 0; f < NF; ++f)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = 8 * f + 2 * t + (e & 1);
      const int64_t o = o0 + g + 8 * (e >> 1);
      if (row < count && o < W.rows) y[(first + row) * ldy + o] = acc[f][e];
    }
}

// One thread per (row, 32-column tile): the three bf16 planes in fragment order and the tile's sum (the
// prompt split's order, so sums are the same bits).
__global__ void decode_split_kernel(const float* x, int64_t ldx, int64_t n_x, int64_t cols, uint16_t* planes,
                                    float* sums) {
  dev::grid_dependency_wait();
  const int64_t tiles = cols / 32, i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_x * tiles) return;
  const int64_t r = i / tiles, c0 = (i % tiles) * 32;
  const float4* src = reinterpret_cast<const float4*>(x + r * ldx + c0);
  float q[8];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const float4 lo = src[2 * b], hi = src[2 * b + 1];
    const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    uint4 plane[kTerms];
    tc::split3_planes(v, plane);
#pragma unroll
    for (int j = 0; j < kTerms; ++j)
      *reinterpret_cast<uint4*>(planes + (j * n_x + r) * cols + c0 + 8 * b) = plane[j];
    q[2 * b] = tc::sum4(v[0], v[1], v[2], v[3]);
    q[2 * b + 1] = tc::sum4(v[4], v[5], v[6], v[7]);
  }
  sums[i] = tc::tree8(q);
}

}  // namespace

}  // namespace ds::cuda
