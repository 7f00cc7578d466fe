// The tensor-core decode product for windows of at most 8 rows (tc_decode.h; launched by tc_decode.cu for
// affine weights in windows of up to 8 rows and expert tiles of one slot): the arithmetic of
// decode_kernel<Bits, 1> operation for operation (same A fragments, same B values, same MMA order, same
// epilogue in unit order), so a row's bits are those of every tier. What differs is where x comes from:
// decode_kernel reads each unit's three x planes and its tile sums with two dependent L2 round trips per unit
// (at one row that latency, not the bytes, set its speed: one expert's gate|up 52 us, 80 units a warp), while
// here the rows' plane chunks and sums ride in the warp's cp.async ring with the weights, stages ahead, and
// the ring is deeper (6 stages at 1-2 rows); at one row the block splits the row itself (no split launch).
// With TcPlanes::Columns, windows of 1-2 rows run the columns arithmetic as plane columns (one fragment of
// two rows, 2 MMAs a unit instead of 6), 4-8 rows as decode_kernel's plane accumulators: the same bits.
#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_decode_parts.cuh"

namespace ds::cuda::tcd {
namespace {

// One warp's stage: the weights as Stage<Bits>, then x plane chunks [term][row][unit][lane t] (16 bytes
// each: the lane's 8 values of the unit), then the tile sums [row][unit]. XR rows (1, 2, 4 or 8) are held;
// rows past the window's count are zeros, as decode_kernel's missing rows are.
template <int Bits, int XR>
struct SmallStage {
  static constexpr int kXWords = kTerms * XR * kUnitsPerStage * 4 * 4;
  static constexpr int kSumWords = XR * kUnitsPerStage;
  static constexpr int kWords = Stage<Bits>::kWords + kXWords + kSumWords;
  static constexpr int kStages = XR <= 2 ? 6 : XR == 4 ? 4 : 3;
  static constexpr size_t kBlockBytes = size_t{kWarps} * kStages * kWords * 4;
};

// Copies the x chunks and sums of stage s (units 4s .. 4s+nu-1) for the window's rows (xr[r] < 0: none).
template <int Bits, int XR>
__device__ __forceinline__ void issue_x(const DecodeX& X, const int64_t (&xr)[XR], int64_t s, int64_t T,
                                        uint32_t* dst, int lane) {
  using L = SmallStage<Bits, XR>;
  const int64_t t0 = s * kUnitsPerStage;
  const int nu = static_cast<int>(min(int64_t{kUnitsPerStage}, T - t0));
  uint32_t* xd = dst + Stage<Bits>::kWords;
  constexpr int kChunks = kTerms * XR * kUnitsPerStage * 4;
#pragma unroll
  for (int c0 = 0; c0 < kChunks; c0 += 32) {
    const int c = c0 + lane;
    if (kChunks % 32 == 0 || c < kChunks) {
      const int tt = c & 3, u = (c >> 2) & 3, jr = c >> 4, r = jr % XR, j = jr / XR;
      int64_t row = -1;
#pragma unroll
      for (int k = 0; k < XR; ++k)
        if (k == r) row = xr[k];
      const bool ok = row >= 0 && u < nu;
      const uint4* src = ok ? X.planes + ((j * X.n_x + row) * X.cols + (t0 + u) * 32) / 8 + tt : X.planes;
      cp_async16(xd + 4 * c, src, ok ? 16 : 0);
    }
  }
  if (lane < XR * kUnitsPerStage) {
    const int r = lane / kUnitsPerStage, u = lane % kUnitsPerStage;
    int64_t row = -1;
#pragma unroll
    for (int k = 0; k < XR; ++k)
      if (k == r) row = xr[k];
    const bool ok = row >= 0 && u < nu;
    cp_async4(xd + L::kXWords + lane, ok ? X.sums + row * T + t0 + u : X.sums, ok ? 4 : 0);
  }
}

template <int Bits, int XR, bool InBlock, bool PC>
__global__ void __launch_bounds__(kThreads)
    small_kernel(DecodeWeight W, Slicing sl, const ExpertWindow* tiles, int n_rows, const int32_t* row_ids,
                 DecodeX X, float* y, int64_t ldy, int64_t n_experts) {
  static_assert(!InBlock || XR == 1, "the in-block split takes one row");
  using L = Stage<Bits>;
  using SL = SmallStage<Bits, XR>;
  constexpr int KS = SL::kStages;
  constexpr int kStride = InBlock ? L::kWords : SL::kWords;  // the in-block kernel's ring holds weights only
  // The columns arithmetic as plane columns for 1-2 rows (one fragment of 2 rows, one accumulator a lane), as
  // plane accumulators for 4-8 (decode_kernel's; the 4 D elements of one fragment of 8 rows, as chained).
  constexpr bool kPlaneCols = PC && XR <= kPcRows;
  constexpr int kAcc = kPlaneCols ? 1 : 4;
  static_assert(KS * kStride >= kAcc * 32, "the slices' merge fits in a warp's ring");
  extern __shared__ __align__(16) uint32_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int slice = warp % sl.slices;
  const int64_t o0 = int64_t{blockIdx.x} * sl.block_outputs() + (warp / sl.slices) * kWarpOutputs;
  // As decode_kernel: expert tiles are read after the wait; a single matrix's weight stages go out before it.
  if (tiles != nullptr) dev::grid_dependency_wait();
  int64_t first = 0;
  int count = 0;
  if (tiles != nullptr) {
    const ExpertWindow tw = tiles[blockIdx.y];
    if (tw.count <= 0 || tw.count > XR || tw.expert < 0 || tw.expert >= n_experts) return;  // whole block
    first = tw.first, count = tw.count;
    select_expert(W, tw.expert);
  } else {
    first = int64_t{blockIdx.y} * kDecodeTileRows;
    count = static_cast<int>(min(int64_t{XR}, n_rows - first));
  }
  // Uniform over the output group; the in-block split meets at block barriers, the slices at their group's.
  const bool active = o0 < W.rows;
  uint32_t* ring = smem + warp * (KS * kStride);
  const int64_t T = W.cols / 32, n_stages = (T + kUnitsPerStage - 1) / kUnitsPerStage;
  // This warp's slice: stages [s_begin, s_end), ring slot (s - s_begin) % KS.
  const int64_t s_begin = sl.begin(slice, n_stages), s_end = sl.end(slice, n_stages);
  // Groups: weights of the first KS-1 stages, then (ring x) their x, then one group per later stage, so
  // waiting until KS-1 groups remain finds stage s whole in every iteration.
  if (active) {
#pragma unroll
    for (int s = 0; s < KS - 1; ++s) issue_stage<Bits>(W, o0, s_begin + s, s_end, ring + s * kStride, lane);
  }
  if (tiles == nullptr) dev::grid_dependency_wait();
  int64_t xr[XR];
#pragma unroll
  for (int r = 0; r < XR; ++r)
    xr[r] = r < count ? (row_ids != nullptr ? int64_t{row_ids[first + r]} : first + r) : -1;
  uint4* xplanes = reinterpret_cast<uint4*>(smem + kWarps * KS * kStride);
  float* xsums = reinterpret_cast<float*>(xplanes + kTerms * T * 4);
  if constexpr (InBlock) split_row_in_block(X, xr[0], T, xplanes, xsums, xsums + T);
  if (!active) return;
  if constexpr (!InBlock) {
#pragma unroll
    for (int s = 0; s < KS - 1; ++s) {
      if (s_begin + s < s_end) issue_x<Bits, XR>(X, xr, s_begin + s, T, ring + s * SL::kWords, lane);
      cp_async_commit();
    }
  }

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  const int64_t og[2] = {min(o0 + g, W.rows - 1), min(o0 + g + 8, W.rows - 1)};
  const int64_t sb_row[2] = {W.sb_base + og[0] * W.groups_per_row, W.sb_base + og[1] * W.groups_per_row};
  const int pc_h = t & 1;  // plane columns: this lane's output is o0 + g + 8 pc_h
  const int64_t pc_sb_row = W.sb_base + min(o0 + g + 8 * pc_h, W.rows - 1) * W.groups_per_row;

  // decode_kernel's unit_step for the first XR rows (plane columns at 1-2 rows), with B and the sums read
  // from the stage.
  auto unit_step = [&](const uint32_t* st, int64_t t0, int u) {
    const int64_t unit = t0 + u;
    uint32_t P[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) unit_pairs<Bits>(st + (g + 8 * h) * L::kRowWords + u * Bits, t, P[h]);
    const uint32_t a[2][4] = {{P[0][0], P[1][0], P[0][1], P[1][1]}, {P[0][2], P[1][2], P[0][3], P[1][3]}};
    auto scale_bias = [&](int r, int64_t sb_r, float& scale, float& bias) {
      const int64_t w_lo = (sb_r + ((t0 * 32) >> W.group_shift)) >> 1;
      const int64_t li = sb_r + ((unit * 32) >> W.group_shift) - 2 * w_lo;
      const uint16_t* sb = reinterpret_cast<const uint16_t*>(st + r * L::kRowWords + L::kCodeWords);
      scale = from_bf16(sb[li]);
      bias = from_bf16(sb[8 + li]);
    };
    const uint32_t* xs = st + L::kWords;
    const float* sums = reinterpret_cast<const float*>(xs + SL::kXWords);
    if constexpr (kPlaneCols) {
      float scale, bias;
      scale_bias(g + 8 * pc_h, pc_sb_row, scale, bias);
      const int term = pc_term(g), rb = g >> 2, rc = t >> 1;  // B's row; this lane's d's row
      uint4 b = make_uint4(0, 0, 0, 0);
      if constexpr (InBlock) {
        if (rb == 0 && term >= 0) b = xplanes[(term * T + unit) * 4 + t];
      } else {
        if (rb < XR && term >= 0)
          b = *reinterpret_cast<const uint4*>(xs + 4 * (((term * XR + rb) * kUnitsPerStage + u) * 4 + t));
      }
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      pc_mma(c, a, b);
      const float d = pc_combine(c, t);
      float sx;
      if constexpr (InBlock)
        sx = rc == 0 ? xsums[unit] : 0.0f;
      else
        sx = rc < XR ? sums[rc * kUnitsPerStage + u] : 0.0f;
      acc[0] = __fmaf_rn(bias, sx, __fmaf_rn(scale, d, acc[0]));
    } else {
      float scale[2], bias[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) scale_bias(g + 8 * h, sb_row[h], scale[h], bias[h]);
      uint4 b[kTerms];
#pragma unroll
      for (int j = 0; j < kTerms; ++j) {
        if constexpr (InBlock)
          b[j] = g == 0 ? xplanes[(j * T + unit) * 4 + t] : make_uint4(0, 0, 0, 0);
        else
          b[j] = g < XR
                     ? *reinterpret_cast<const uint4*>(xs + 4 * (((j * XR + g) * kUnitsPerStage + u) * 4 + t))
                     : make_uint4(0, 0, 0, 0);
      }
      float sx[2];
      if constexpr (InBlock) {
        sx[0] = t == 0 ? xsums[unit] : 0.0f;
        sx[1] = 0.0f;
      } else {
        sx[0] = 2 * t < XR ? sums[(2 * t) * kUnitsPerStage + u] : 0.0f;
        sx[1] = 2 * t + 1 < XR ? sums[(2 * t + 1) * kUnitsPerStage + u] : 0.0f;
      }
      if constexpr (PC) {  // plane accumulators
        float c[kTerms][4] = {};
        pr_mma(c, a, b);
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[e] = __fmaf_rn(bias[e >> 1], sx[e & 1], __fmaf_rn(scale[e >> 1], pr_combine(c, e), acc[e]));
      } else {
        float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        unit_mma(part, a, b);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[e] = __fmaf_rn(scale[e >> 1], part[e], acc[e]);
          acc[e] = __fmaf_rn(bias[e >> 1], sx[e & 1], acc[e]);
        }
      }
    }
  };

  for (int64_t s = s_begin; s < s_end; ++s) {
    const int64_t next = s + KS - 1, i = s - s_begin;
    uint32_t* nd = ring + ((i + KS - 1) % KS) * kStride;
    if constexpr (!InBlock) {
      if (next < s_end) issue_x<Bits, XR>(X, xr, next, T, nd, lane);
    }
    issue_stage<Bits>(W, o0, next, s_end, nd, lane);  // commits the stage's weights and x as one group
    tc::cp_async_wait<KS - 1>();                      // stage s has landed (this lane's copies) ...
    __syncwarp();                                     // ... and every lane's
    const uint32_t* st = ring + (i % KS) * kStride;
    const int64_t t0 = s * kUnitsPerStage;
    stage_units(static_cast<int>(min(int64_t{kUnitsPerStage}, T - t0)), [&](int u) { unit_step(st, t0, u); });
    __syncwarp();  // every lane is done with stage s before its slot is refilled
  }
  if (!merge_slices(sl, acc, ring, KS * kStride, warp, lane)) return;
#pragma unroll
  for (int i = 0; i < kAcc; ++i) {
    const int row = kPlaneCols ? t >> 1 : 2 * t + (i & 1);
    const int64_t o = o0 + g + 8 * (kPlaneCols ? pc_h : i >> 1);
    if (row < count && o < W.rows) y[(first + row) * ldy + o] = acc[i];
  }
}

template <int Bits, int XR, bool InBlock, bool PC>
void launch_xr(const DecodeWeight& W, Slicing sl, dim3 grid, const ExpertWindow* tiles, int n_rows,
               const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy, int64_t n_experts,
               cudaStream_t stream) {
  constexpr auto kernel = small_kernel<Bits, XR, InBlock, PC>;
  // The in-block kernel: a weights-only ring, then the row's planes, sums and the pair sums of the split.
  constexpr size_t ring = InBlock ? size_t{kWarps} * SmallStage<Bits, XR>::kStages * Stage<Bits>::kWords * 4
                                  : SmallStage<Bits, XR>::kBlockBytes;
  auto split_bytes = [](int64_t T) { return static_cast<size_t>(T) * (kTerms * 64 + 4 + 16); };
  const size_t most = ring + (InBlock ? split_bytes(kInBlockMaxCols / 32) : 0);
  opt_in_dynamic_smem(kernel, static_cast<int>(most), "tc_decode (small windows): cudaFuncSetAttribute");
  const size_t bytes = ring + (InBlock ? split_bytes(W.cols / 32) : 0);
  kernel<<<grid, kThreads, bytes, stream>>>(W, sl, tiles, n_rows, row_ids, X, y, ldy, n_experts);
}

}  // namespace

template <int Bits, bool PC>
void launch_small(const DecodeWeight& W, Slicing sl, dim3 grid, int x_rows, bool in_block,
                  const ExpertWindow* tiles, int n_rows, const int32_t* row_ids, const DecodeX& X, float* y,
                  int64_t ldy, int64_t n_experts, cudaStream_t stream) {
  if (x_rows <= 1 && in_block)
    launch_xr<Bits, 1, true, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
  else if (x_rows <= 1)
    launch_xr<Bits, 1, false, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
  else if (x_rows <= 2)
    launch_xr<Bits, 2, false, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
  else if (x_rows <= 4)
    launch_xr<Bits, 4, false, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
  else
    launch_xr<Bits, 8, false, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
}

#define DS_TC_SMALL(B)                                                                                     \
  template void launch_small<B, false>(const DecodeWeight&, Slicing, dim3, int, bool, const ExpertWindow*, \
                                       int, const int32_t*, const DecodeX&, float*, int64_t, int64_t,      \
                                       cudaStream_t);                                                      \
  template void launch_small<B, true>(const DecodeWeight&, Slicing, dim3, int, bool, const ExpertWindow*,  \
                                      int, const int32_t*, const DecodeX&, float*, int64_t, int64_t,       \
                                      cudaStream_t);
DS_TC_SMALL(2)
DS_TC_SMALL(3)
DS_TC_SMALL(4)
DS_TC_SMALL(5)
DS_TC_SMALL(6)
DS_TC_SMALL(8)
#undef DS_TC_SMALL

}  // namespace ds::cuda::tcd
