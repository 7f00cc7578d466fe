#pragma once
// The prompt tiles' pieces shared by the two tile kernels (tc_products.cu: a tile's weights loaded a tile
// ahead into registers; tc_products_ring.cu: weights and x through a ring of cp.async stages): the tile
// shapes, the weight and x views, the code decode and the per-thread x copies. Internal to the tiled
// products.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/tc_common.cuh"
#include "backend/cuda/tc_products.h"

namespace ds::cuda::tiled {

constexpr int kPad = 40;  // bf16 per shared row (32 + 8): a warp's ldmatrix rows hit 32 distinct banks
using tc::from_bf16;
using tc::kTerms;
using tc::to_bf16;

// A tile of M rows x N outputs: 2N threads (two per output for the weight loads), kWm x kWn warps, each kMi
// x kNi fragments of 16 x 8.
template <int M, int N>
struct Tile {
  static_assert(M == 16 || M == 32 || M == 64, "row tiles of 16, 32 or 64");
  static_assert(N == 64 || N == 128, "output tiles of 64 or 128");
  static constexpr int kThreads = 2 * N;
  static constexpr int kWm = M == 16 ? 1 : 2, kWn = kThreads / 32 / kWm;
  static constexpr int kRows = M / kWm, kOuts = N / kWn;
  static constexpr int kMi = kRows / 16, kNi = kOuts / 8;
};

// Which rows a tile covers: y rows first .. first+count-1, x rows through row_ids (or first + j), expert.
struct TileRows {
  int first, count, expert;
};

// The weights of all experts as the kernels read them (the kernel parameters: an expert's rows and a k tile
// are 32-bit offsets from these, tiled_supported keeps them under 2^31). Bits 0: dense bf16.
template <int Bits>
struct TileWeight {
  const uint32_t* codes;
  const uint16_t* scales;
  const uint16_t* biases;
  const uint16_t* dense;
  int rows, cols, words_per_row, groups_per_row;
  int group_shift;  // k tile -> group: kt >> group_shift
};

// Code j of the unit's bit stream (j is a constant after unrolling, so the indexing stays in registers).
template <int Bits>
__device__ __forceinline__ uint32_t code_at(const uint32_t (&w)[Bits], int j) {
  const int bit = j * Bits, wi = bit / 32, sh = bit % 32;
  uint32_t v = w[wi] >> sh;
  if (sh + Bits > 32) v |= w[wi + 1] << (32 - sh);
  return v & ((1u << Bits) - 1u);
}

template <int Bits, int J0>
__device__ __forceinline__ void store_codes(uint16_t* dst, const uint32_t (&w)[Bits]) {
  uint32_t packed[8];
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    const uint32_t lo = to_bf16(static_cast<float>(code_at<Bits>(w, J0 + 2 * p)));  // q < 256: exact
    const uint32_t hi = to_bf16(static_cast<float>(code_at<Bits>(w, J0 + 2 * p + 1)));
    packed[p] = lo | (hi << 16);
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

// x as the tile kernel reads it (split_kernel's output; dispatch keeps a plane under 2^31 elements).
struct SplitX {
  const uint16_t* planes;  // [kTerms, n_x, cols]
  const float* sums;       // [n_x, cols / 32]
  int n_x, cols;
};

// This thread's x copies: tile rows (t/4) % M and (t/4 + T/4) % M (plane 0, its 8 columns at (t % 4) * 8)
// and the sums of tile row t, as 32-bit offsets into plane 0 and the sums; x row 0 where the tile has no
// such row (copied as zeros: bit i of `has` clear). The addresses are made at each copy from the kernel's
// parameters: 64-bit pointers held through the k loop spilled at 64-row tiles (session 11).
struct ThreadCopy {
  uint32_t row[2], sum;
  uint32_t has;  // bits 0, 1: row[i] exists; bit 2: the sum's row

  __device__ ThreadCopy(const SplitX& X, const int (&xr)[3]) {
    const uint32_t chunk = threadIdx.x % 4, cols = static_cast<uint32_t>(X.cols);
    has = 0;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      has |= uint32_t{xr[i] >= 0} << i;
      row[i] = static_cast<uint32_t>(xr[i] >= 0 ? xr[i] : 0) * cols + chunk * 8;
    }
    has |= uint32_t{xr[2] >= 0} << 2;
    sum = static_cast<uint32_t>(xr[2] >= 0 ? xr[2] : 0) * (cols / kTileCols);
  }
  // The 16 bytes of plane `plane`, row ri, k tile kt; the bytes to copy (0: zeros).
  __device__ __forceinline__ const uint16_t* x_src(const SplitX& X, int ri, int plane, int kt) const {
    return X.planes + static_cast<int64_t>(plane) * X.n_x * X.cols +
           (row[ri] + static_cast<uint32_t>(kt) * kTileCols);
  }
  __device__ __forceinline__ int x_bytes(int ri) const {
    return (has >> ri) & 1 ? 16 : 0;
  }
  __device__ __forceinline__ const float* sum_src(const SplitX& X, int kt) const {
    return X.sums + (sum + static_cast<uint32_t>(kt));
  }
  __device__ __forceinline__ int sum_bytes() const {
    return (has >> 2) & 1 ? 4 : 0;
  }
};

// The block's rows: expert window blockIdx.x of `tiles`, else row tile blockIdx.x of the n_rows rows; false
// for a window the kernels must not run (count out of 1..M or expert out of range: no writes).
template <int M>
__device__ __forceinline__ bool block_tile_rows(const ExpertWindow* tiles, int n_rows, int n_experts,
                                                TileRows& tr) {
  if (tiles != nullptr) {
    const ExpertWindow tw = tiles[blockIdx.x];
    if (tw.count <= 0 || tw.count > M || tw.expert < 0 || tw.expert >= n_experts) return false;
    tr = {tw.first, tw.count, tw.expert};
  } else {
    tr = {static_cast<int>(blockIdx.x) * M, min(M, n_rows - static_cast<int>(blockIdx.x) * M), 0};
  }
  return true;
}

// The x rows thread t copies (ThreadCopy): tile rows (t/4) % M and (t/4 + Threads/4) % M and the sums of
// tile row t (none where t >= M), through row_ids where set; -1 past the tile's rows.
template <int M, int Threads>
__device__ __forceinline__ void thread_x_rows(int t, const TileRows& tr, const int32_t* row_ids,
                                              int (&xr)[3]) {
  const int my_rows[3] = {(t / 4) % M, (t / 4 + Threads / 4) % M, t < M ? t : M};
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int rr = my_rows[i];
    xr[i] = rr < tr.count ? (row_ids != nullptr ? row_ids[tr.first + rr] : tr.first + rr) : -1;
  }
}

template <int Mi, int Ni>
__device__ __forceinline__ void zero_fragments(float (&acc)[Mi][Ni][4]) {
#pragma unroll
  for (int mi = 0; mi < Mi; ++mi)
#pragma unroll
    for (int ni = 0; ni < Ni; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;
}

// A k tile's MMAs on a warp's fragments from the stage at a_st (x: kTerms planes of M rows) and b_st (the
// weights), in the one order both kernels keep: k step, term (the smallest first), m fragment, n fragment.
// zero_first: each fragment's first MMA starts at zero (the affine tile's partial sum). Fragments mi >=
// frags hold no row of the tile and run no MMAs (frags = Mi: all).
template <int M, int Mi, int Ni, bool ZeroFirst>
__device__ __forceinline__ void tile_mmas(uint32_t a_st, uint32_t b_st, int frags,
                                          float (&target)[Mi][Ni][4]) {
  constexpr uint32_t kRowBytes = kPad * 2, kPlaneBytes = M * kRowBytes;
#pragma unroll
  for (int ks = 0; ks < 2; ++ks) {
    uint32_t b[Ni][2];
#pragma unroll
    for (int p = 0; p < Ni / 2; ++p) {
      tc::ldmatrix_x4(b_st + p * 16 * kRowBytes + ks * 32, b[2 * p][0], b[2 * p][1], b[2 * p + 1][0],
                      b[2 * p + 1][1]);
    }
#pragma unroll
    for (int j = kTerms - 1; j >= 0; --j)
#pragma unroll
      for (int mi = 0; mi < Mi; ++mi) {
        if (mi >= frags) break;
        uint32_t a[4];
        tc::ldmatrix_x4(a_st + j * kPlaneBytes + mi * 16 * kRowBytes + ks * 32, a[0], a[1], a[2], a[3]);
#pragma unroll
        for (int ni = 0; ni < Ni; ++ni) {
          if (ZeroFirst && ks == 0 && j == kTerms - 1)
            tc::mma_bf16_zero(target[mi][ni], a, b[ni][0], b[ni][1]);
          else
            tc::mma_bf16(target[mi][ni], a, b[ni][0], b[ni][1]);
        }
      }
  }
}

// y += scale * (x . q) + bias * sum(x) for one k tile (tiles in k order): acc from the tile's partial sums,
// the stage's scales and biases by output column and x sums by tile row.
template <int Mi, int Ni>
__device__ __forceinline__ void add_affine_tile(float (&acc)[Mi][Ni][4], const float (&part)[Mi][Ni][4],
                                                const float* scale, const float* bias, const float* sumx,
                                                int row0, int out0, int frags) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mi = 0; mi < Mi; ++mi) {
    if (mi >= frags) break;
#pragma unroll
    for (int ni = 0; ni < Ni; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + mi * 16 + g + (e >= 2 ? 8 : 0);
        const int col = out0 + ni * 8 + 2 * tq + (e & 1);
        acc[mi][ni][e] = __fmaf_rn(scale[col], part[mi][ni][e], acc[mi][ni][e]);
        acc[mi][ni][e] = __fmaf_rn(bias[col], sumx[row], acc[mi][ni][e]);
      }
  }
}

// The warp's fragments to y rows tr.first + row (row < tr.count) and outputs n0 + o (< rows).
template <int Mi, int Ni>
__device__ __forceinline__ void store_fragments(float* out, int64_t ldy, const float (&acc)[Mi][Ni][4],
                                                const TileRows& tr, int row0, int out0, int n0, int rows) {
  const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
#pragma unroll
  for (int mi = 0; mi < Mi; ++mi)
#pragma unroll
    for (int ni = 0; ni < Ni; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = row0 + mi * 16 + g + (e >= 2 ? 8 : 0);
        const int o = n0 + out0 + ni * 8 + 2 * tq + (e & 1);
        if (row < tr.count && o < rows) out[(tr.first + row) * ldy + o] = acc[mi][ni][e];
      }
}

template <int Bits>
TileWeight<Bits> tile_weight(const TiledWeight& w) {
  TileWeight<Bits> t{};
  t.rows = static_cast<int>(w.rows);
  t.cols = static_cast<int>(w.cols);
  if constexpr (Bits == 0) {
    t.dense = w.dense;
  } else {
    t.codes = w.affine.codes;
    t.scales = w.affine.scales;
    t.biases = w.affine.biases;
    t.group_shift = w.affine.group == 32 ? 0 : w.affine.group == 64 ? 1 : 2;
    t.words_per_row = static_cast<int>(w.cols / 32 * Bits);
    t.groups_per_row = static_cast<int>(w.cols / w.affine.group);
  }
  return t;
}

// One launch's shape: row tiles of `tile_m` rows (16, 32 or 64), `splits` k ranges writing partials to y +
// z * split_stride.
struct Launch {
  const ExpertWindow* tiles;
  unsigned row_tiles;
  int tile_m, n_rows;
  const int32_t* row_ids;
  int splits;
  int64_t split_stride;
};

// The tiles of one launch (Launch) with x split (SplitX): the ring kernel's launch for affine weights at
// output tiles of 128 (tc_products_ring.cu, instantiated for bits 2-6/8 and M 16/32/64); lop3: 4-bit codes
// made bf16 by LOP3 and a bf16x2 FMA (other bits: the conversions either way).
template <int Bits, int M>
void launch_ring(const TiledWeight& w, const Launch& l, const SplitX& X, float* y, int64_t ldy,
                 cudaStream_t stream, bool lop3);

}  // namespace ds::cuda::tiled
