// The one-row product with a matrix's units spread over a block's warps (dnrow13; launch variant bits 6-7,
// tc_decode_parts.cuh): the bits of the one-row kernel (tc_row.cu), so of small_kernel<Bits, 1, true, false>
// at one row, chained layout only. Why the same bits: per (output, 32-column unit) the kernel's d is the
// unit's 6-MMA chain (part, from zero), which depends on nothing else; only the epilogue (y = fma(bias, sum,
// fma(scale, d, y)) in unit order over a column slice, then the slices' merge) is a chain. So here each of
// NW warps of a block computes the parts of a contiguous range of the 16 outputs' units (the same MMAs: the
// same A fragments, the row's B column, the same order) and keeps each unit's part with its scale and bias
// (bf16 pair) in shared memory; then 16 x S threads run the S slices' epilogue chains in unit order, and 16
// merge them as merge_row does ((s0 + s1) + (s2 + s3), or s0 + s1). The slices are the shape's
// (tc_decode_column_slices): the chains and merge stay, only who computes the parts changes.
// What it is for: the mid-size matrices (deltanet and attention in/out at one stream) run few output groups
// of long chains on the one-row kernel (a deltanet out warp 12 stages in sequence, 160 blocks); here a warp
// has n_stages / NW stages, so more warps and loads in flight a block and a shorter path a block.
// One output group (16 outputs) a block, not persistent; single matrices only (not expert tiles or SwiGLU).
#include <algorithm>
#include <atomic>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_decode_parts.cuh"
#include "backend/cuda/tc_row_copy.cuh"

namespace ds::cuda::tcd {
namespace {

template <int Bits, int NW, int KS>
__global__ void __launch_bounds__(NW * 32)
    row_par_kernel(DecodeWeight W, Slicing sl, int n_rows, const int32_t* row_ids, DecodeX X, float* y,
                   int64_t ldy) {
  using L = Stage<Bits>;
  constexpr int kAhead = KS - 1;  // stages in flight a warp while one is decoded
  extern __shared__ __align__(16) uint32_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t o0 = int64_t{blockIdx.x} * kWarpOutputs;
  const int64_t first = int64_t{blockIdx.y} * kDecodeTileRows;
  const int count = static_cast<int>(min(int64_t{1}, n_rows - first));
  const int T = static_cast<int>(W.cols / 32), n_stages = (T + kUnitsPerStage - 1) / kUnitsPerStage;
  const int s_begin = warp * n_stages / NW, s_end = (warp + 1) * n_stages / NW;
  uint32_t* ring = smem + warp * (KS * L::kWords);
  const uint32_t ring_s = tc::smem_addr(ring);
  RowCopy<Bits> copy(W, o0, lane);
  int s_is = s_begin;
  auto issue_next = [&](int slot) {  // only weights (codes, scales, biases) before the grid wait
    copy.issue2(W, s_is < s_end, s_is, T, ring_s + static_cast<uint32_t>(slot * L::kWords * 4));
    ++s_is;
  };
#pragma unroll
  for (int s = 0; s < kAhead; ++s) issue_next(s);
  dev::grid_dependency_wait();
  const int64_t xrow = count > 0 ? (row_ids != nullptr ? int64_t{row_ids[first]} : first) : -1;
  uint4* xplanes = reinterpret_cast<uint4*>(smem + NW * KS * L::kWords);
  float* xsums = reinterpret_cast<float*>(xplanes + kTerms * T * 4);
  float* parts = xsums + 5 * T;                                           // [T][16] the units' d
  uint32_t* sbs = reinterpret_cast<uint32_t*>(parts + T * kWarpOutputs);  // [T][16] scale | bias << 16
  float* merged = reinterpret_cast<float*>(sbs + T * kWarpOutputs);       // [4][16] the slices' chains
  split_row_in_block<true, NW * 32>(X, xrow, T, xplanes, xsums, xsums + T);

  const uint4* xp = xplanes + t;  // unit u's plane j at xplanes[(u * kTerms + j) * 4 + t]
  const int row_off[2] = {g * L::kRowWords, (g + 8) * L::kRowWords};
  int sb_par0[2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
    sb_par0[h] = static_cast<int>((W.sb_base + min(o0 + g + 8 * h, W.rows - 1) * W.groups_per_row) & 1);
  int slot = 0, fill = kAhead;
  for (int s = s_begin; s < s_end; ++s) {
    issue_next(fill);  // into the slot decoded last
    fill = fill == KS - 1 ? 0 : fill + 1;
    tc::cp_async_wait<kAhead>();  // stage s has landed (this lane's copies) ...
    __syncwarp();                 // ... and every lane's
    const uint32_t* st = ring + slot * L::kWords;
    const int t0 = s * kUnitsPerStage, nu = min(kUnitsPerStage, T - t0);
    const int g0 = (t0 * 32) >> W.group_shift;
    auto unit = [&](int u) {
      uint32_t P[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) unit_pairs<Bits>(st + row_off[h] + u * Bits, t, P[h]);
      const uint32_t a[2][4] = {{P[0][0], P[1][0], P[0][1], P[1][1]}, {P[0][2], P[1][2], P[0][3], P[1][3]}};
      const uint4* xs = xp + (t0 + u) * (kTerms * 4);
      uint4 b[kTerms];
#pragma unroll
      for (int j = 0; j < kTerms; ++j) b[j] = xs[j * 4];
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      // Per k step the smallest term first: decode_kernel's order.
      unit_mma(part, a, b);
      if (t == 0) {  // D column 0 holds the row: elements 0 (output g) and 2 (output g + 8)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          // The stage's scale words start at the word of its first group: li = parity + (u * 32) >> shift.
          const int li = ((sb_par0[h] + g0) & 1) + ((u * 32) >> W.group_shift);
          const uint16_t* w16 = reinterpret_cast<const uint16_t*>(st + row_off[h] + L::kCodeWords);
          const int at = (t0 + u) * kWarpOutputs + g + 8 * h;
          parts[at] = part[2 * h];
          sbs[at] = uint32_t{w16[li]} | (uint32_t{w16[8 + li]} << 16);
        }
      }
    };
    if (nu == kUnitsPerStage) {
#pragma unroll
      for (int u = 0; u < kUnitsPerStage; ++u) unit(u);
    } else {
      for (int u = 0; u < nu; ++u) unit(u);
    }
    __syncwarp();  // every lane is done with stage s before its slot is refilled
    slot = slot == KS - 1 ? 0 : slot + 1;
  }
  __syncthreads();
  // The slices' chains in unit order (thread: slice threadIdx.x / 16, output threadIdx.x % 16), then merge.
  const int r = threadIdx.x % kWarpOutputs;
  if (threadIdx.x < kWarpOutputs * sl.slices) {
    const int slice = threadIdx.x / kWarpOutputs;
    const int u_end = min(static_cast<int>(sl.end(slice, n_stages)) * kUnitsPerStage, T);
    float acc = 0.0f;
    for (int u = static_cast<int>(sl.begin(slice, n_stages)) * kUnitsPerStage; u < u_end; ++u) {
      const uint32_t v = sbs[u * kWarpOutputs + r];
      acc = __fmaf_rn(__uint_as_float(v << 16), parts[u * kWarpOutputs + r], acc);
      acc = __fmaf_rn(__uint_as_float(v & 0xFFFF0000u), xsums[u], acc);
    }
    merged[slice * kWarpOutputs + r] = acc;
  }
  __syncthreads();
  if (threadIdx.x < kWarpOutputs && count > 0 && o0 + r < W.rows) {
    auto m = [&](int s) { return merged[s * kWarpOutputs + r]; };
    const float v = sl.slices == 1   ? m(0)
                    : sl.slices == 2 ? __fadd_rn(m(0), m(1))
                                     : __fadd_rn(__fadd_rn(m(0), m(1)), __fadd_rn(m(2), m(3)));
    y[first * ldy + o0 + r] = v;
  }
}

template <int Bits, int NW, int KS>
void launch_par(const DecodeWeight& W, Slicing sl, unsigned grid_y, int n_rows, const int32_t* row_ids,
                const DecodeX& X, float* y, int64_t ldy, cudaStream_t stream) {
  constexpr auto kernel = row_par_kernel<Bits, NW, KS>;
  const int64_t T = W.cols / 32;
  auto bytes = [](int64_t units) {
    return size_t{NW} * KS * Stage<Bits>::kWords * 4 + static_cast<size_t>(units) * (kTerms * 64 + 20) +
           static_cast<size_t>(units) * kWarpOutputs * 8 + 4 * kWarpOutputs * 4;
  };
  opt_in_dynamic_smem(kernel, static_cast<int>(bytes(kInBlockMaxCols / 32)),
                      "tc_decode (one row, units over warps): cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>((W.rows + kWarpOutputs - 1) / kWarpOutputs), grid_y);
  kernel<<<grid, NW * 32, bytes(T), stream>>>(W, sl, n_rows, row_ids, X, y, ldy);
}

}  // namespace

bool row_par_takes(const DecodeWeight& W, bool tiles, int64_t half, bool pc) {
  return !tiles && half == 0 && !pc && (W.rows + kWarpOutputs - 1) / kWarpOutputs <= kRowParMaxGroups;
}

template <int Bits>
void launch_row_par(int v, const DecodeWeight& W, Slicing sl, unsigned grid_y, int n_rows,
                    const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy, cudaStream_t stream) {
  int which = (v >> 6) & 3;  // 1: 8 warps (3 slots), 2: 4 warps (5 slots), 3: the shape's rule
  if (which == 3) which = sl.slices > 1 ? 1 : 2;
  if (which == 1)
    launch_par<Bits, 8, 3>(W, sl, grid_y, n_rows, row_ids, X, y, ldy, stream);
  else
    launch_par<Bits, 4, 5>(W, sl, grid_y, n_rows, row_ids, X, y, ldy, stream);
}

#define DS_TC_ROW_PAR(B)                                                                            \
  template void launch_row_par<B>(int, const DecodeWeight&, Slicing, unsigned, int, const int32_t*, \
                                  const DecodeX&, float*, int64_t, cudaStream_t);
DS_TC_ROW_PAR(2)
DS_TC_ROW_PAR(3)
DS_TC_ROW_PAR(4)
DS_TC_ROW_PAR(5)
DS_TC_ROW_PAR(6)
DS_TC_ROW_PAR(8)
#undef DS_TC_ROW_PAR

}  // namespace ds::cuda::tcd
