// Tensor-core products for prompt passes (tc_products.h). x is first split once per product (split_kernel:
// three exact bf16 planes and each 32-column tile's sum). Then one block of 2N threads per (row tile of M
// rows, output tile of N, k split), the warps as Tile<M, N> says. Per 32-column k tile, one barrier: x and
// its sums arrive by cp.async into one of two stages during the previous tile's MMAs; the weights (codes as
// exact bf16 integers, or bf16 values) and scales/biases are loaded a tile ahead into registers and stored
// to one of two shared buffers; each warp loads its fragments by ldmatrix and runs its MMAs in a fixed order.
// Affine weights at 128 outputs run the ring kernel instead where tiled_ring says (tc_products_ring.h; by
// default the expert tiles): the same MMAs and epilogue, the data staged through cp.async three tiles ahead.
#include <cuda_bf16.h>

#include <string>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/tc_common.cuh"
#include "backend/cuda/tc_products.h"
#include "backend/cuda/tc_products_parts.cuh"
#include "backend/cuda/tc_products_ring.h"

namespace ds::cuda {

namespace {

using namespace tiled;
using tc::cp_async16;
using tc::cp_async4;
using tc::cp_async_commit;
using tc::from_bf16;
using tc::ldmatrix_x4;
using tc::mma_bf16;
using tc::mma_bf16_zero;
using tc::split3;
using tc::to_bf16;

constexpr int kStages = 2;

template <int M, int N>
struct TileSmem {
  uint16_t x[kStages][kTerms][M][kPad];
  uint16_t w[kStages][N][kPad];
  float scale[kStages][N], bias[kStages][N], sumx[kStages][M];
};

// Weight data of one k tile held in registers while the previous tile computes.
template <int Bits>
struct TileLoad {
  static constexpr int kWords = Bits == 0 ? 8 : Bits;
  uint32_t w[kWords];
  float sb;
};

// This thread's share of the weight loads: output n0 + t % N, half t / N (dense: columns 16 half..; affine:
// the codes, and the scale (half 0) or bias (half 1) of the tile's group), as 32-bit offsets from the
// kernel's parameters (the stacked arrays; output row 0 of the expert where the output does not exist).
template <int Bits, int N>
struct ThreadWeight {
  uint32_t codes;  // the output's code words (Bits a 32-column tile), or its dense row's 16 half (bf16)
  uint32_t sb;     // its scales (half 0) or biases (half 1)
  bool valid;      // the output exists

  __device__ ThreadWeight(const TileWeight<Bits>& W, int expert, int n0) {
    const int t = threadIdx.x, half = t / N;
    valid = n0 + t % N < W.rows;
    const uint32_t o =
        static_cast<uint32_t>(expert) * static_cast<uint32_t>(W.rows) + (valid ? n0 + t % N : 0);
    if constexpr (Bits == 0) {
      codes = o * static_cast<uint32_t>(W.cols) + 16 * half;
      sb = 0;
    } else {
      codes = o * static_cast<uint32_t>(W.words_per_row);
      sb = o * static_cast<uint32_t>(W.groups_per_row);
    }
  }
};

// Whether the code words load as 8- or 16-byte vectors (bits 2, 4, 6, 8 on aligned rows): a function of the
// kernel's parameters.
template <int Bits>
__device__ __forceinline__ bool codes_vec(const TileWeight<Bits>& W) {
  constexpr int kBytes = Bits % 4 == 0 ? 16 : 8;
  return reinterpret_cast<uintptr_t>(W.codes) % kBytes == 0 && (W.words_per_row * 4) % kBytes == 0;
}

template <int Bits, int N>
__device__ __forceinline__ void load_tile(TileLoad<Bits>& L, const TileWeight<Bits>& W,
                                          const ThreadWeight<Bits, N>& T, int kt) {
  if (!T.valid) {
#pragma unroll
    for (int j = 0; j < TileLoad<Bits>::kWords; ++j) L.w[j] = 0;
    L.sb = 0.0f;
    return;
  }
  if constexpr (Bits == 0) {
    const uint4* p =
        reinterpret_cast<const uint4*>(W.dense + (T.codes + static_cast<uint32_t>(kt) * kTileCols));
    const uint4 a = __ldcs(p), b = __ldcs(p + 1);
    L.w[0] = a.x, L.w[1] = a.y, L.w[2] = a.z, L.w[3] = a.w, L.w[4] = b.x, L.w[5] = b.y, L.w[6] = b.z,
    L.w[7] = b.w;
  } else {
    const uint32_t* p = W.codes + (T.codes + static_cast<uint32_t>(kt) * Bits);
    // One request per 8 or 16 bytes where aligned: each lane's row is a different cache line, so a warp's
    // load costs a line lookup per lane whatever its width.
    if constexpr (Bits % 4 == 0) {
      if (codes_vec(W)) {
#pragma unroll
        for (int j = 0; j < Bits; j += 4) {
          const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p + j));
          L.w[j] = v.x, L.w[j + 1] = v.y, L.w[j + 2] = v.z, L.w[j + 3] = v.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < Bits; ++j) L.w[j] = __ldcs(p + j);
      }
    } else if constexpr (Bits % 2 == 0) {
      if (codes_vec(W)) {
#pragma unroll
        for (int j = 0; j < Bits; j += 2) {
          const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p + j));
          L.w[j] = v.x, L.w[j + 1] = v.y;
        }
      } else {
#pragma unroll
        for (int j = 0; j < Bits; ++j) L.w[j] = __ldcs(p + j);
      }
    } else {
#pragma unroll
      for (int j = 0; j < Bits; ++j) L.w[j] = __ldcs(p + j);
    }
    const uint16_t* sbp = threadIdx.x < N ? W.scales : W.biases;
    L.sb = from_bf16(sbp[T.sb + (static_cast<uint32_t>(kt) >> W.group_shift)]);
  }
}

template <int Bits, int M, int N>
__device__ __forceinline__ void store_tile(TileSmem<M, N>& sm, int st, const TileLoad<Bits>& L) {
  const int t = threadIdx.x;
  const int row = t % N, half = t / N;
  if constexpr (Bits == 0) {
    uint4* dst = reinterpret_cast<uint4*>(&sm.w[st][row][16 * half]);
    dst[0] = make_uint4(L.w[0], L.w[1], L.w[2], L.w[3]);
    dst[1] = make_uint4(L.w[4], L.w[5], L.w[6], L.w[7]);
  } else {
    if (half == 0)  // uniform per warp: the first N threads decode codes 0-15, the others codes 16-31
      store_codes<Bits, 0>(&sm.w[st][row][0], L.w);
    else
      store_codes<Bits, 16>(&sm.w[st][row][16], L.w);
    (half == 0 ? sm.scale[st] : sm.bias[st])[row] = L.sb;
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

// Copies k tile kt of the tile's x rows into stage st: three planes of M rows x 32 columns (12 M chunks of
// 16 bytes; chunk c = t + T i is plane c / 4M, row (c / 4) % M, 8 columns at c % 4) and the M rows' sums
// (threads 0..M-1).
template <int M, int N>
__device__ __forceinline__ void copy_x(TileSmem<M, N>& sm, int st, const SplitX& X, const ThreadCopy& C,
                                       int kt) {
  constexpr int kChunks = kTerms * M * 4, kT = Tile<M, N>::kThreads;
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < (kChunks + kT - 1) / kT; ++i) {
    const int c = t + i * kT;
    if (kChunks % kT != 0 && c >= kChunks) break;
    const int plane = c / (4 * M), rr = (c / 4) % M, chunk = c % 4;
    const int ri = (kT / 4) % M == 0 ? 0 : (i & 1);  // row (t/4 + (T/4) i) % M
    cp_async16(&sm.x[st][plane][rr][chunk * 8], C.x_src(X, ri, plane, kt), C.x_bytes(ri));
  }
  if (t < M) cp_async4(&sm.sumx[st][t], C.sum_src(X, kt), C.sum_bytes());
  cp_async_commit();
}

// MinBlocks: blocks an SM the registers are fitted to (128 a thread at 128 threads x 4 or 256 x 2, 168 at
// 128 x 3). The shared memory is dynamic (over 48 KB at N = 128).
template <int Bits, int M, int N, int MinBlocks>
__global__ void __launch_bounds__(Tile<M, N>::kThreads, MinBlocks)
    tiled_kernel(TileWeight<Bits> W, const ExpertWindow* tiles, int n_rows, const int32_t* row_ids, SplitX X,
                 float* y, int64_t ldy, int n_experts, int64_t split_stride) {
  using Wp = Tile<M, N>;
  constexpr int kMi = Wp::kMi, kNi = Wp::kNi;
  extern __shared__ __align__(16) unsigned char tile_smem[];
  TileSmem<M, N>& sm = *reinterpret_cast<TileSmem<M, N>*>(tile_smem);
  TileRows tr;
  if (!block_tile_rows<M>(tiles, n_rows, n_experts, tr)) return;
  const int n0 = static_cast<int>(blockIdx.y) * N;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int row0 = (warp / Wp::kWn) * Wp::kRows, out0 = (warp % Wp::kWn) * Wp::kOuts;
  int xr[3];
  thread_x_rows<M, Wp::kThreads>(t, tr, row_ids, xr);

  // This lane's ldmatrix rows in stage 0 at k step 0; the stage, term, fragment and k step add constants.
  const uint32_t a_lane = tc::smem_addr(&sm.x[0][0][row0 + lane % 16][(lane / 16) * 8]);
  const uint32_t b_lane = tc::smem_addr(&sm.w[0][out0 + lane % 8 + (lane / 16) * 8][((lane / 8) % 2) * 8]);
  constexpr uint32_t kRowBytes = kPad * 2, kPlaneBytes = M * kRowBytes;
  constexpr uint32_t kXStage = kTerms * kPlaneBytes, kWStage = N * kRowBytes;

  float acc[kMi][kNi][4], part[kMi][kNi][4];
  zero_fragments(acc);

  // gridDim.z > 1 only for split-K (tiled_fixed_splits, tiled_wx_split_k): split z takes its share of the k
  // tiles and writes its partial sums to y + z * split_stride.
  const int all_k = W.cols / kTileCols;
  const int k_begin = static_cast<int>(int64_t{all_k} * blockIdx.z / gridDim.z);
  const int n_k = static_cast<int>(int64_t{all_k} * (blockIdx.z + 1) / gridDim.z);
  TileLoad<Bits> L;
  const ThreadWeight<Bits, N> TW(W, tr.expert, n0);
  const ThreadCopy C(X, xr);
  copy_x<M, N>(sm, 0, X, C, k_begin);
  load_tile<Bits>(L, W, TW, k_begin);
  for (int kt = k_begin; kt < n_k; ++kt) {
    const int st = (kt - k_begin) & 1;
    // Buffers st were last read two tiles ago, before the previous iteration's barrier.
    store_tile<Bits, M, N>(sm, st, L);
    tc::cp_async_wait<0>();  // this tile's x (the only copy in flight)
    __syncthreads();         // every thread's copies and stores of tile kt are visible; tile kt-1 is done
    if (kt + 1 < n_k) {
      copy_x<M, N>(sm, st ^ 1, X, C, kt + 1);
      load_tile<Bits>(L, W, TW, kt + 1);
    }
    // Dense weights sum every tile's MMAs in acc; affine tiles start a partial sum at zero, then the tile
    // sum.
    tile_mmas<M, kMi, kNi, Bits != 0>(a_lane + st * kXStage, b_lane + st * kWStage, kMi,
                                      Bits == 0 ? acc : part);
    if constexpr (Bits != 0)
      add_affine_tile(acc, part, sm.scale[st], sm.bias[st], sm.sumx[st], row0, out0, kMi);
  }
  store_fragments(y + blockIdx.z * split_stride, ldy, acc, tr, row0, out0, n0, W.rows);
}

template <int Bits, int M, int N, int MinBlocks>
void launch_m(const TiledWeight& w, const Launch& l, const SplitX& X, float* y, int64_t ldy,
              cudaStream_t stream) {
  const dim3 grid(l.row_tiles, static_cast<unsigned>((w.rows + N - 1) / N), static_cast<unsigned>(l.splits));
  constexpr size_t kSmem = sizeof(TileSmem<M, N>);
  auto* kernel = tiled_kernel<Bits, M, N, MinBlocks>;
  if constexpr (kSmem > 48 * 1024)
    opt_in_dynamic_smem(kernel, static_cast<int>(kSmem), "tiled_wx: shared memory size");
  kernel<<<grid, Tile<M, N>::kThreads, kSmem, stream>>>(tile_weight<Bits>(w), l.tiles, l.n_rows, l.row_ids, X,
                                                        y, ldy, static_cast<int>(w.n_experts),
                                                        l.split_stride);
  check_launch("tiled_wx");
}

template <int Bits, int M>
void launch_rows(const TiledWeight& w, const Launch& l, const SplitX& X, float* y, int64_t ldy,
                 cudaStream_t stream) {
  const TiledConfig c = tiled_config();
  if constexpr (Bits != 0)
    if (const int ring = tiled_ring();
        c.tile_outputs == 128 && (ring == 1 || ring == 2 || (ring == 3 && l.tiles != nullptr)))
      return launch_ring<Bits, M>(w, l, X, y, ldy, stream, ring != 1);
  if (c.tile_outputs == 128) return launch_m<Bits, M, 128, 2>(w, l, X, y, ldy, stream);
  if constexpr (M == 64)  // the smaller row tiles fit 4 blocks without spilling
    if (c.min_blocks == 3) return launch_m<Bits, M, 64, 3>(w, l, X, y, ldy, stream);
  launch_m<Bits, M, 64, 4>(w, l, X, y, ldy, stream);
}

template <int Bits>
void launch(const TiledWeight& w, const Launch& l, const SplitX& X, float* y, int64_t ldy,
            cudaStream_t stream) {
  if (l.tile_m == 16) return launch_rows<Bits, 16>(w, l, X, y, ldy, stream);
  if (l.tile_m == 32) return launch_rows<Bits, 32>(w, l, X, y, ldy, stream);
  launch_rows<Bits, 64>(w, l, X, y, ldy, stream);
}

// The split-K reduction: y = the splits' partials added in split order (a fixed order, no atomics).
__global__ void reduce_splits_kernel(const float* part, int splits, int64_t n_rows, int64_t n_out, float* y,
                                     int64_t ldy) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n_rows * n_out) return;
  const int64_t r = i / n_out, o = i % n_out;
  float acc = part[i];
  for (int z = 1; z < splits; ++z) acc = __fadd_rn(acc, part[z * n_rows * n_out + i]);
  y[r * ldy + o] = acc;
}

// Splits x (n_x rows) into scratch from the stream-ordered pool, then runs the tiles; with l.splits > 1 the
// partials go to `workspace` (or more scratch when null) and are added into y. Refusals name `op`.
void dispatch(const char* op, const TiledWeight& w, Launch l, const float* x, int64_t ldx, int64_t n_x,
              float* y, int64_t ldy, cudaStream_t stream, float* workspace = nullptr) {
  const std::string name(op);
  if (!tiled_supported(w))
    throw ArgumentError(name +
                        ": the weight must be dense bf16 or MLX affine bits 2-6/8, group 32/64/128, "
                        "with cols a multiple of 32");
  if ((w.rows + 63) / 64 > 65535) throw ArgumentError(name + ": at most 65535 * 64 output rows");
  if (ldx % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    throw ArgumentError(name + ": x must be 16-byte aligned with ldx a multiple of 4");
  if (n_x > 1 && ldx < w.cols)  // several x rows ldx apart must not overlap
    throw ArgumentError(name + ": ldx must be >= the weight's cols when more than one x row is read (ldx " +
                        std::to_string(ldx) + ", cols " + std::to_string(w.cols) + ", " +
                        std::to_string(n_x) + " rows)");
  if (l.row_tiles == 0 || n_x <= 0) return;
  if (n_x >= (int64_t{1} << 31) / w.cols - 1)
    throw ArgumentError(name + ": x of under 2^31 values a plane (32-bit offsets)");
  const int64_t cols = w.cols, plane_bytes = kTerms * n_x * cols * 2, sum_count = n_x * (cols / kTileCols);
  const int64_t part_count = l.splits > 1 ? int64_t{l.n_rows} * w.rows : 0;
  const int64_t part_bytes = workspace == nullptr ? l.splits * part_count * 4 : 0;
  void* scratch = nullptr;
  check(cudaMallocAsync(&scratch, static_cast<size_t>(plane_bytes + part_bytes + sum_count * 4), stream),
        "tiled_wx: cudaMallocAsync (x planes)");
  auto* planes = static_cast<uint16_t*>(scratch);
  auto* sums = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + plane_bytes + part_bytes);
  float* part = workspace != nullptr ? workspace
                                     : reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + plane_bytes);
  split_kernel<<<static_cast<unsigned>((sum_count + 127) / 128), 128, 0, stream>>>(x, ldx, n_x, cols, planes,
                                                                                   sums);
  const cudaError_t split_err = cudaGetLastError();
  const SplitX X{planes, sums, static_cast<int>(n_x), static_cast<int>(cols)};
  float* out = l.splits > 1 ? part : y;
  const int64_t ld_out = l.splits > 1 ? w.rows : ldy;
  l.split_stride = part_count;
  try {
    if (split_err != cudaSuccess) check(split_err, "tiled_wx: split");
    if (w.dense != nullptr) {
      launch<0>(w, l, X, out, ld_out, stream);
    } else {
      with_bits(w.affine.bits,
                [&](auto bits) { launch<decltype(bits)::value>(w, l, X, out, ld_out, stream); });
    }
    if (l.splits > 1) {
      reduce_splits_kernel<<<static_cast<unsigned>((part_count + 255) / 256), 256, 0, stream>>>(
          part, l.splits, l.n_rows, w.rows, y, ldy);
      check_launch("tiled_wx: split-K sum");
    }
  } catch (...) {
    cudaFreeAsync(scratch, stream);
    throw;
  }
  check(cudaFreeAsync(scratch, stream), "tiled_wx: cudaFreeAsync (x planes)");
}

unsigned row_tiles_of(int n_rows) {
  return static_cast<unsigned>((n_rows + kTileRows - 1) / kTileRows);
}

}  // namespace

void tiled_wx(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
              cudaStream_t stream) {
  if (n_rows < 0) throw ArgumentError("tiled_wx: n_rows must be >= 0");
  const int splits = tiled_supported(w) ? tiled_fixed_splits(w) : 1;
  dispatch("tiled_wx", w, Launch{nullptr, row_tiles_of(n_rows), kTileRows, n_rows, nullptr, splits, 0}, x,
           ldx, n_rows, y, ldy, stream);
}

void tiled_wx_experts(const TiledWeight& w, const ExpertWindow* tiles, int max_tiles, const int32_t* row_ids,
                      const float* x, int64_t ldx, int n_x_rows, float* y, int64_t ldy, cudaStream_t stream,
                      int tile_rows) {
  if (max_tiles < 0) throw ArgumentError("tiled_wx_experts: max_tiles must be >= 0");
  if (tile_rows < 1 || tile_rows > kTileRows)
    throw ArgumentError("tiled_wx_experts: tile_rows must be 1..64");
  const int m = tile_rows <= 16 ? 16 : tile_rows <= 32 ? 32 : kTileRows;
  dispatch("tiled_wx_experts", w, Launch{tiles, static_cast<unsigned>(max_tiles), m, 0, row_ids, 1, 0}, x,
           ldx, n_x_rows, y, ldy, stream);
}

void tiled_wx_split_k(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
                      int splits, float* workspace, cudaStream_t stream) {
  if (splits < 1 || splits > w.cols / kTileCols)
    throw ArgumentError("tiled_wx_split_k: splits must be 1 .. cols / 32");
  dispatch("tiled_wx_split_k", w,
           Launch{nullptr, row_tiles_of(n_rows), kTileRows, n_rows, nullptr, splits, 0}, x, ldx, n_rows, y,
           ldy, stream, workspace);
}

}  // namespace ds::cuda
