// Tensor-core products for prompt passes (tc_products.h). x is first split once per product (split_kernel:
// three exact bf16 planes and each 32-column tile's sum). Then one block of 4 warps per (row tile, output
// tile); warp w computes rows 32*(w/2).. and outputs 32*(w%2).. as 2 x 4 m16n8 fragments. Per k tile of 32
// columns: the x planes and sums arrive by cp.async in two stages (the next tile's copy runs during this
// tile's MMAs); the weights (codes as exact bf16 integers, or the bf16 values) and the tile's scales and
// biases are loaded a tile ahead into registers and stored to shared memory; then each warp runs its MMAs in
// a fixed order.
#include <cuda_bf16.h>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/tc_common.cuh"
#include "backend/cuda/tc_products.h"

namespace ds::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kPad = 40;  // bf16 per shared row (32 + 8): the fragment loads of a warp hit 32 distinct banks
using tc::cp_async16;
using tc::cp_async4;
using tc::cp_async_commit;
using tc::from_bf16;
using tc::kTerms;
using tc::mma_bf16;
using tc::split3;
using tc::to_bf16;

constexpr int kStages = 2;

struct TileSmem {
  uint16_t x[kStages][kTerms][kTileRows][kPad];
  uint16_t w[kTileOutputs][kPad];
  float scale[kTileOutputs], bias[kTileOutputs], sumx[kStages][kTileRows];
};

__device__ __forceinline__ uint32_t ld32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Which rows a tile covers: y rows first .. first+count-1, x rows through row_ids (or first + j), expert.
struct TileRows {
  int64_t first;
  int count;
  int64_t expert;
};

// The weight of one expert as the kernel reads it. Bits 0: dense bf16.
template <int Bits>
struct TileWeight {
  const uint32_t* codes;
  const uint16_t* scales;
  const uint16_t* biases;
  const uint16_t* dense;
  int64_t rows, cols, words_per_row, groups_per_row;
  int group;
};

// Weight data of one k tile held in registers while the previous tile computes.
template <int Bits>
struct TileLoad {
  static constexpr int kWords = Bits == 0 ? 8 : Bits;
  uint32_t w[kWords];
  float sb;
};

template <int Bits>
__device__ __forceinline__ void load_tile(TileLoad<Bits>& L, const TileWeight<Bits>& W, int64_t n0,
                                          int64_t k0) {
  const int t = threadIdx.x;
  const int64_t o = n0 + t % kTileOutputs;
  const int half = t / kTileOutputs;
  if (o >= W.rows) {
#pragma unroll
    for (int j = 0; j < TileLoad<Bits>::kWords; ++j) L.w[j] = 0;
    L.sb = 0.0f;
    return;
  }
  if constexpr (Bits == 0) {
    const uint4* p = reinterpret_cast<const uint4*>(W.dense + o * W.cols + k0 + 16 * half);
    const uint4 a = __ldcs(p), b = __ldcs(p + 1);
    L.w[0] = a.x, L.w[1] = a.y, L.w[2] = a.z, L.w[3] = a.w, L.w[4] = b.x, L.w[5] = b.y, L.w[6] = b.z,
    L.w[7] = b.w;
  } else {
    const uint32_t* p = W.codes + o * W.words_per_row + (k0 / 32) * Bits;
#pragma unroll
    for (int j = 0; j < Bits; ++j) L.w[j] = __ldcs(p + j);
    const int64_t g = o * W.groups_per_row + k0 / W.group;
    L.sb = from_bf16(half == 0 ? W.scales[g] : W.biases[g]);
  }
}

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

template <int Bits>
__device__ __forceinline__ void store_tile(TileSmem& sm, const TileLoad<Bits>& L) {
  const int t = threadIdx.x;
  const int row = t % kTileOutputs, half = t / kTileOutputs;
  if constexpr (Bits == 0) {
    uint4* dst = reinterpret_cast<uint4*>(&sm.w[row][16 * half]);
    dst[0] = make_uint4(L.w[0], L.w[1], L.w[2], L.w[3]);
    dst[1] = make_uint4(L.w[4], L.w[5], L.w[6], L.w[7]);
  } else {
    if (half == 0)  // uniform per warp: warps 0-1 decode codes 0-15, warps 2-3 codes 16-31
      store_codes<Bits, 0>(&sm.w[row][0], L.w);
    else
      store_codes<Bits, 16>(&sm.w[row][16], L.w);
    (half == 0 ? sm.scale : sm.bias)[row] = L.sb;
  }
}

// One thread per (row, 32-column tile): the row's three bf16 planes and the tile's sum, in the order
// (a + b) + (c + d) per 4 columns, then a balanced tree over the 8 groups.
__global__ void split_kernel(const float* x, int64_t ldx, int64_t n_x, int64_t cols, uint16_t* planes,
                             float* sums) {
  const int64_t tiles = cols / kTileCols, i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_x * tiles) return;
  const int64_t r = i / tiles, c0 = (i % tiles) * kTileCols;
  const float4* src = reinterpret_cast<const float4*>(x + r * ldx + c0);
  float q[8];
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const float4 v = src[c];
    const float vals[4] = {v.x, v.y, v.z, v.w};
    uint16_t parts[4][kTerms];
#pragma unroll
    for (int e = 0; e < 4; ++e) split3(vals[e], parts[e]);
#pragma unroll
    for (int j = 0; j < kTerms; ++j)
      *reinterpret_cast<uint2*>(planes + (j * n_x + r) * cols + c0 + 4 * c) = make_uint2(
          parts[0][j] | (uint32_t{parts[1][j]} << 16), parts[2][j] | (uint32_t{parts[3][j]} << 16));
    q[c] = tc::sum4(vals[0], vals[1], vals[2], vals[3]);
  }
  sums[i] = tc::tree8(q);
}

// x as the tile kernel reads it (split_kernel's output).
struct SplitX {
  const uint16_t* planes;  // [kTerms, n_x, cols]
  const float* sums;       // [n_x, cols / 32]
  int64_t n_x, cols;
};

// Copies k tile kt of the tile's x rows into stage st: three planes of 64 rows x 32 columns (768 chunks of 16
// bytes, 6 a thread: rows t/4 and 32 + t/4, chunk t%4) and the 64 rows' sums (threads 0-63). xr: x row of
// tile rows t/4, 32 + t/4 and t (-1 where the tile has no such row).
__device__ __forceinline__ void copy_x(TileSmem& sm, int st, const SplitX& X, const int64_t (&xr)[3],
                                       int64_t kt) {
  const int t = threadIdx.x, chunk = t % 4;
#pragma unroll
  for (int j = 0; j < 2 * kTerms; ++j) {
    const int plane = j / 2, half = j % 2, rr = half * 32 + t / 4;
    const int64_t r = xr[half];
    const uint16_t* src =
        X.planes + ((plane * X.n_x + (r < 0 ? 0 : r)) * X.cols + kt * kTileCols + chunk * 8);
    cp_async16(&sm.x[st][plane][rr][chunk * 8], src, r < 0 ? 0 : 16);
  }
  if (t < kTileRows) {
    const int64_t r = xr[2];
    cp_async4(&sm.sumx[st][t], X.sums + (r < 0 ? 0 : r) * (X.cols / kTileCols) + kt, r < 0 ? 0 : 4);
  }
  cp_async_commit();
}

template <int Bits>
__global__ void __launch_bounds__(kThreads, 4)
    tiled_kernel(TileWeight<Bits> W0, const ExpertWindow* tiles, int n_rows, const int32_t* row_ids, SplitX X,
                 float* y, int64_t ldy, int n_experts, int64_t split_stride) {
  __shared__ __align__(16) TileSmem sm;
  TileRows tr;
  if (tiles != nullptr) {
    const ExpertWindow tw = tiles[blockIdx.x];
    if (tw.count <= 0 || tw.count > kTileRows || tw.expert < 0 || tw.expert >= n_experts) return;
    tr = {tw.first, tw.count, tw.expert};
  } else {
    tr = {int64_t{blockIdx.x} * kTileRows, min(kTileRows, n_rows - static_cast<int>(blockIdx.x) * kTileRows),
          0};
  }
  TileWeight<Bits> W = W0;
  if constexpr (Bits == 0) {
    W.dense += tr.expert * W.rows * W.cols;
  } else {
    W.codes += tr.expert * W.rows * W.words_per_row;
    W.scales += tr.expert * W.rows * W.groups_per_row;
    W.biases += tr.expert * W.rows * W.groups_per_row;
  }
  const int64_t n0 = int64_t{blockIdx.y} * kTileOutputs;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32, g = lane / 4, tq = lane % 4;
  const int wm = warp / 2, wn = warp % 2;
  int64_t xr[3];
  const int my_rows[3] = {t / 4, 32 + t / 4, t < kTileRows ? t : kTileRows};
#pragma unroll
  for (int i = 0; i < 3; ++i) {
    const int rr = my_rows[i];
    xr[i] = rr < tr.count ? (row_ids != nullptr ? int64_t{row_ids[tr.first + rr]} : tr.first + rr) : -1;
  }

  float acc[2][4][4], part[2][4][4];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][ni][e] = 0.0f;

  // gridDim.z > 1 only in the split-K variant (tiled_wx_split_k): split z takes its share of the k tiles and
  // writes its partial sums to y + z * split_stride.
  const int64_t all_k = W.cols / kTileCols;
  const int64_t k_begin = all_k * blockIdx.z / gridDim.z, n_k = all_k * (blockIdx.z + 1) / gridDim.z;
  y += blockIdx.z * split_stride;
  TileLoad<Bits> L;
  copy_x(sm, 0, X, xr, k_begin);
  load_tile<Bits>(L, W, n0, k_begin * kTileCols);
  for (int64_t kt = k_begin; kt < n_k; ++kt) {
    const int st = static_cast<int>((kt - k_begin) & 1);
    // The stage written here and sm.w were last read in the previous iteration, which ended with a barrier.
    if (kt + 1 < n_k)
      copy_x(sm, st ^ 1, X, xr, kt + 1);
    else
      cp_async_commit();  // an empty group keeps the wait below uniform
    store_tile<Bits>(sm, L);
    if (kt + 1 < n_k) load_tile<Bits>(L, W, n0, (kt + 1) * kTileCols);
    tc::cp_async_wait<1>();  // this tile's copy has landed (the next one may still be in flight)
    __syncthreads();
    float(&target)[2][4][4] = Bits == 0 ? acc : part;
    if constexpr (Bits != 0) {
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) part[mi][ni][e] = 0.0f;
    }
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
      const int kc = ks * 16 + 2 * tq;
      uint32_t b[4][2];
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const uint16_t* wr = sm.w[wn * 32 + ni * 8 + g];
        b[ni][0] = ld32(wr + kc);
        b[ni][1] = ld32(wr + kc + 8);
      }
      // The smallest term first; the order (term, m fragment, n fragment) is fixed.
#pragma unroll
      for (int j = kTerms - 1; j >= 0; --j)
#pragma unroll
        for (int mi = 0; mi < 2; ++mi) {
          const int r0 = wm * 32 + mi * 16 + g;
          const uint16_t(&xs)[kTileRows][kPad] = sm.x[st][j];
          const uint32_t a[4] = {ld32(&xs[r0][kc]), ld32(&xs[r0 + 8][kc]), ld32(&xs[r0][kc + 8]),
                                 ld32(&xs[r0 + 8][kc + 8])};
#pragma unroll
          for (int ni = 0; ni < 4; ++ni) mma_bf16(target[mi][ni], a, b[ni][0], b[ni][1]);
        }
    }
    if constexpr (Bits != 0) {
      // y += scale * (x . q) + bias * sum(x), per tile in k order.
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = wm * 32 + mi * 16 + g + (e >= 2 ? 8 : 0);
            const int col = wn * 32 + ni * 8 + 2 * tq + (e & 1);
            acc[mi][ni][e] = __fmaf_rn(sm.scale[col], part[mi][ni][e], acc[mi][ni][e]);
            acc[mi][ni][e] = __fmaf_rn(sm.bias[col], sm.sumx[st][row], acc[mi][ni][e]);
          }
    }
    __syncthreads();  // every warp is done with this stage and sm.w
  }
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = wm * 32 + mi * 16 + g + (e >= 2 ? 8 : 0);
        const int64_t o = n0 + wn * 32 + ni * 8 + 2 * tq + (e & 1);
        if (row < tr.count && o < W.rows) y[(tr.first + row) * ldy + o] = acc[mi][ni][e];
      }
}

template <int Bits>
TileWeight<Bits> tile_weight(const TiledWeight& w) {
  TileWeight<Bits> t{};
  t.rows = w.rows;
  t.cols = w.cols;
  if constexpr (Bits == 0) {
    t.dense = w.dense;
  } else {
    t.codes = w.affine.codes;
    t.scales = w.affine.scales;
    t.biases = w.affine.biases;
    t.group = w.affine.group;
    t.words_per_row = w.cols / 32 * Bits;
    t.groups_per_row = w.cols / w.affine.group;
  }
  return t;
}

template <int Bits>
void launch(const TiledWeight& w, const ExpertWindow* tiles, unsigned row_tiles, int n_rows,
            const int32_t* row_ids, const SplitX& X, float* y, int64_t ldy, int splits, int64_t split_stride,
            cudaStream_t stream) {
  const dim3 grid(row_tiles, static_cast<unsigned>((w.rows + kTileOutputs - 1) / kTileOutputs), splits);
  tiled_kernel<Bits><<<grid, kThreads, 0, stream>>>(tile_weight<Bits>(w), tiles, n_rows, row_ids, X, y, ldy,
                                                    static_cast<int>(w.n_experts), split_stride);
  check_launch("tiled_wx");
}

// Splits x (n_x rows) into scratch from the stream-ordered pool, then runs the tiles.
void dispatch(const TiledWeight& w, const ExpertWindow* tiles, unsigned row_tiles, int n_rows,
              const int32_t* row_ids, const float* x, int64_t ldx, int64_t n_x, float* y, int64_t ldy,
              cudaStream_t stream, int splits = 1, int64_t split_stride = 0) {
  if (!tiled_supported(w))
    throw ArgumentError(
        "tiled_wx: the weight must be dense bf16 or MLX affine bits 2-6/8, group 32/64/128, "
        "with cols a multiple of 32");
  if ((w.rows + kTileOutputs - 1) / kTileOutputs > 65535)
    throw ArgumentError("tiled_wx: at most 65535 * 64 output rows");
  if (ldx % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    throw ArgumentError("tiled_wx: x must be 16-byte aligned with ldx a multiple of 4");
  if (row_tiles == 0 || n_x <= 0) return;
  const int64_t cols = w.cols, plane_bytes = kTerms * n_x * cols * 2, sum_count = n_x * (cols / kTileCols);
  void* scratch = nullptr;
  check(cudaMallocAsync(&scratch, static_cast<size_t>(plane_bytes + sum_count * 4), stream),
        "tiled_wx: cudaMallocAsync (x planes)");
  auto* planes = static_cast<uint16_t*>(scratch);
  auto* sums = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + plane_bytes);
  split_kernel<<<static_cast<unsigned>((sum_count + 127) / 128), 128, 0, stream>>>(x, ldx, n_x, cols, planes,
                                                                                   sums);
  const cudaError_t split_err = cudaGetLastError();
  const SplitX X{planes, sums, n_x, cols};
  try {
    if (split_err != cudaSuccess) check(split_err, "tiled_wx: split");
    if (w.dense != nullptr) {
      launch<0>(w, tiles, row_tiles, n_rows, row_ids, X, y, ldy, splits, split_stride, stream);
    } else {
      with_bits(w.affine.bits, [&](auto bits) {
        launch<decltype(bits)::value>(w, tiles, row_tiles, n_rows, row_ids, X, y, ldy, splits, split_stride,
                                      stream);
      });
    }
  } catch (...) {
    cudaFreeAsync(scratch, stream);
    throw;
  }
  check(cudaFreeAsync(scratch, stream), "tiled_wx: cudaFreeAsync (x planes)");
}

// The split-K variant's reduction: y = sum of the splits' partials in split order.
__global__ void reduce_splits_kernel(const float* part, int splits, int64_t n_rows, int64_t n_out, float* y,
                                     int64_t ldy) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_rows * n_out) return;
  const int64_t r = i / n_out, o = i % n_out;
  float acc = part[i];
  for (int z = 1; z < splits; ++z) acc = __fadd_rn(acc, part[z * n_rows * n_out + i]);
  y[r * ldy + o] = acc;
}

}  // namespace

bool tiled_supported(const TiledWeight& w) {
  if (w.rows <= 0 || w.cols <= 0 || w.cols % kTileCols != 0 || w.n_experts < 1) return false;
  if (w.dense != nullptr) return true;
  const int b = w.affine.bits, g = w.affine.group;
  return w.affine.codes != nullptr && (b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8) &&
         (g == 32 || g == 64 || g == 128) && w.cols % g == 0;
}

void tiled_wx(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
              cudaStream_t stream) {
  if (n_rows < 0) throw ArgumentError("tiled_wx: n_rows must be >= 0");
  const unsigned row_tiles = static_cast<unsigned>((n_rows + kTileRows - 1) / kTileRows);
  dispatch(w, nullptr, row_tiles, n_rows, nullptr, x, ldx, n_rows, y, ldy, stream);
}

void tiled_wx_experts(const TiledWeight& w, const ExpertWindow* tiles, int max_tiles, const int32_t* row_ids,
                      const float* x, int64_t ldx, int n_x_rows, float* y, int64_t ldy, cudaStream_t stream) {
  if (max_tiles < 0) throw ArgumentError("tiled_wx_experts: max_tiles must be >= 0");
  dispatch(w, tiles, static_cast<unsigned>(max_tiles), 0, row_ids, x, ldx, n_x_rows, y, ldy, stream);
}

void tiled_wx_split_k(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
                      int splits, float* workspace, cudaStream_t stream) {
  if (splits < 1 || splits > w.cols / kTileCols)
    throw ArgumentError("tiled_wx_split_k: splits must be 1 .. cols / 32");
  if (splits == 1) return tiled_wx(w, x, ldx, n_rows, y, ldy, stream);
  const unsigned row_tiles = static_cast<unsigned>((n_rows + kTileRows - 1) / kTileRows);
  const int64_t stride = int64_t{n_rows} * w.rows;
  dispatch(w, nullptr, row_tiles, n_rows, nullptr, x, ldx, n_rows, workspace, w.rows, stream, splits, stride);
  if (row_tiles == 0) return;
  reduce_splits_kernel<<<static_cast<unsigned>((stride + 255) / 256), 256, 0, stream>>>(
      workspace, splits, n_rows, w.rows, y, ldy);
  check_launch("tiled_wx_split_k: reduce");
}

}  // namespace ds::cuda
