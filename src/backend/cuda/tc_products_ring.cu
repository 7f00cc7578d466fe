// The ring kernel of the prompt tiles (experts10; tc_products_ring.h): affine weights at output tiles of 128,
// the register-staged kernel's arithmetic (tc_products.cu: the same fragments, MMAs in the same order, the
// same per-tile epilogue), so the same bits, with the data staged deeper. The register-staged kernel loads a
// tile's codes into registers one tile ahead and x one tile ahead, so each tile waits out a DRAM (codes) and
// an L2 (x) round trip behind one barrier; here every thread's copies go through cp.async into rings in
// shared memory: x's planes and sums kLeadX tiles ahead (kXSlots slots), the raw code words and the
// scale/bias words of the tile after (kRawSlots slots), one commit group a tile, one barrier a tile. The
// codes of tile kt+1 are decoded from the raw ring into the bf16 buffer of two after tile kt's MMAs are
// issued. A warp runs no MMAs on its m fragments past the tile's rows (rows >= count are never written; every
// other fragment's MMAs are unchanged). Each thread's copy state is 32-bit offsets from the kernel's
// parameters (session 11: the 64-bit pointers it held through the k loop spilled at 64-row tiles).
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/tc_products_parts.cuh"

namespace ds::cuda::tiled {

namespace {

using tc::cp_async16;
using tc::cp_async4;
using tc::cp_async_commit;
using tc::ldmatrix_x4;
using tc::mma_bf16;
using tc::mma_bf16_zero;

// An 8-byte asynchronous global -> shared copy (tc_common.cuh has the 16- and 4-byte ones); src_bytes 0
// writes zeros.
__device__ __forceinline__ void cp_async8(void* dst, const void* src, int src_bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}

constexpr int kN = 128, kThreads = 2 * kN;
// Tile kt+3's x and kt+4's raw weights are copied while tile kt computes: each copy has three tiles' time to
// land (the register-staged kernel: one). cp.async groups complete in order, so a copy is waited for with its
// group: a longer lead for the weights alone would buy nothing without a slot of x for each tile of it.
constexpr int kLeadX = 3, kXSlots = kLeadX + 1;
constexpr int kLeadW = kLeadX, kRawSlots = kLeadW + 1;

template <int Bits, int M>
struct RingSmem {
  uint16_t x[kXSlots][kTerms][M][kPad];
  float sumx[kXSlots][M];
  uint32_t codes[kRawSlots][kN][Bits];  // each output's code words of the tile
  uint32_t sb[kRawSlots][2][kN];        // the 4-byte word holding each output's scale (0) / bias (1)
  uint16_t w[2][kN][kPad];              // decoded codes (exact bf16 integers)
  float scale[2][kN], bias[2][kN];
};

// This thread's share of the raw weight copies: chunks t, t + 256, ... of the tile's kN x Bits code words in
// chunks of 16, 8 or 4 bytes (by Bits; 4-byte copies where the rows are not aligned), and the scale (t < kN)
// or bias word of output t % kN, as 32-bit offsets from the kernel's parameters (the stacked arrays; output
// row 0 of the expert where the output does not exist, copied as zeros).
template <int Bits>
struct RingWeight {
  static constexpr int kChunkBytes = Bits % 4 == 0 ? 16 : Bits % 2 == 0 ? 8 : 4;
  static constexpr int kChunkWords = kChunkBytes / 4, kPerRow = Bits / kChunkWords;
  static constexpr int kChunks = kN * kPerRow, kPer = (kChunks + kThreads - 1) / kThreads;
  uint32_t src[kPer];  // the chunk's words at k tile 0
  uint32_t sb;         // the output's scales or biases
  uint32_t valid;      // bit i: chunk i's output exists; bit kPer: output t % kN exists

  __device__ RingWeight(const TileWeight<Bits>& W, int expert, int n0) {
    const int t = threadIdx.x;
    const uint32_t first = static_cast<uint32_t>(expert) * static_cast<uint32_t>(W.rows);
    valid = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = t + i * kThreads, row = c / kPerRow, piece = c % kPerRow;
      const bool ok = c < kChunks && n0 + row < W.rows;
      valid |= uint32_t{ok} << i;
      src[i] = (first + (ok ? n0 + row : 0)) * static_cast<uint32_t>(W.words_per_row) + piece * kChunkWords;
    }
    const bool ok = n0 + t % kN < W.rows;
    valid |= uint32_t{ok} << kPer;
    sb = (first + (ok ? n0 + t % kN : 0)) * static_cast<uint32_t>(W.groups_per_row);
  }
  // The word offset of chunk i in a codes slot.
  static __device__ __forceinline__ int dst(int i) {
    const int c = threadIdx.x + i * kThreads;
    return c / kPerRow * Bits + c % kPerRow * kChunkWords;
  }
  // The scale (t < kN) or bias of k tile kt.
  __device__ __forceinline__ const uint16_t* sb_src(const TileWeight<Bits>& W, int kt) const {
    return (threadIdx.x < kN ? W.scales : W.biases) + (sb + (static_cast<uint32_t>(kt) >> W.group_shift));
  }
};

// Whether the code chunks copy whole (the stack starts on a chunk and every row is a whole count of chunks),
// and the scale/bias words by cp.async: a 4-byte copy of the aligned pair holding the element stays inside
// the stacked array when it starts on 4 bytes and every row holds an even count of groups; else a plain load.
template <int Bits>
__device__ __forceinline__ bool codes_aligned(const TileWeight<Bits>& W) {
  constexpr int kBytes = RingWeight<Bits>::kChunkBytes;
  return reinterpret_cast<uintptr_t>(W.codes) % kBytes == 0 && (W.words_per_row * 4) % kBytes == 0;
}
template <int Bits>
__device__ __forceinline__ bool sb_async(const TileWeight<Bits>& W) {
  return (reinterpret_cast<uintptr_t>(W.scales) | reinterpret_cast<uintptr_t>(W.biases)) % 4 == 0 &&
         W.groups_per_row % 2 == 0;
}

// Copies k tile kt's raw weights into slot rs (no commit).
template <int Bits, int M>
__device__ __forceinline__ void copy_raw(RingSmem<Bits, M>& sm, int rs, const TileWeight<Bits>& W,
                                         const RingWeight<Bits>& R, int kt) {
  using RW = RingWeight<Bits>;
#pragma unroll
  for (int i = 0; i < RW::kPer; ++i) {
    if (RW::kChunks % kThreads != 0 && threadIdx.x + i * kThreads >= RW::kChunks) break;
    uint32_t* dst = &sm.codes[rs][0][0] + RW::dst(i);
    const uint32_t* src = W.codes + (R.src[i] + static_cast<uint32_t>(kt) * Bits);
    const bool ok = (R.valid >> i) & 1;
    if (RW::kChunkBytes == 16 && codes_aligned(W)) {
      cp_async16(dst, src, ok ? 16 : 0);
    } else if (RW::kChunkBytes == 8 && codes_aligned(W)) {
      cp_async8(dst, src, ok ? 8 : 0);
    } else {
#pragma unroll
      for (int j = 0; j < RW::kChunkWords; ++j) cp_async4(dst + j, src + j, ok ? 4 : 0);
    }
  }
  const int t = threadIdx.x, half = t / kN, row = t % kN;
  const bool ok = (R.valid >> RW::kPer) & 1;
  const uint16_t* p = R.sb_src(W, kt);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t* dst = &sm.sb[rs][half][row];
  if (sb_async(W)) {
    cp_async4(dst, reinterpret_cast<const void*>(a & ~uintptr_t{3}), ok ? 4 : 0);
  } else {  // the value in the half of the word its address picks, as the copy puts it
    const uint32_t v = ok ? uint32_t{*p} : 0u;
    *dst = v << (8 * (a & 2));
  }
}

// Copies k tile kt of the tile's x rows into slot xs (as copy_x in tc_products.cu; no commit).
template <int Bits, int M>
__device__ __forceinline__ void copy_x_ring(RingSmem<Bits, M>& sm, int xs, const SplitX& X,
                                            const ThreadCopy& C, int kt) {
  constexpr int kChunks = kTerms * M * 4;
  const int t = threadIdx.x;
#pragma unroll
  for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
    const int c = t + i * kThreads;
    if (kChunks % kThreads != 0 && c >= kChunks) break;
    const int plane = c / (4 * M), rr = (c / 4) % M, chunk = c % 4;
    const int ri = (kThreads / 4) % M == 0 ? 0 : (i & 1);
    cp_async16(&sm.x[xs][plane][rr][chunk * 8], C.x_src(X, ri, plane, kt), C.x_bytes(ri));
  }
  if (t < M) cp_async4(&sm.sumx[xs][t], C.sum_src(X, kt), C.sum_bytes());
}

// 16 4-bit codes (two words) as 8 bf16 pairs in column order, the values store_codes<4, J0> gives: per word,
// (w >> 4p) & 0x000F000F | 0x43004300 holds codes p and p + 4 as the bf16 128 + q (exact: 128 + q < 256
// has a step of 1 in bf16), one fma.rn.bf16x2 (x 1 - 128) makes them q exactly (+0 for 0, as the conversion),
// and two byte permutes pair codes (2i, 2i + 1). No conversion instructions (the other way costs two a code).
// (The integer trick of Marlin's dequantizers, IST-DASLab/marlin: the idea only.)
__device__ __forceinline__ uint32_t bf16_minus_128(uint32_t v) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(v), "r"(0x3F803F80u), "r"(0xC300C300u));
  return r;
}
__device__ __forceinline__ uint32_t lop3_or_and(uint32_t a, uint32_t mask, uint32_t bits) {
  uint32_t r;  // (a & mask) | bits
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(mask), "r"(bits));
  return r;
}
__device__ __forceinline__ void store_codes4_lop3(uint16_t* dst, uint32_t w0, uint32_t w1) {
  uint32_t packed[8];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t w = h == 0 ? w0 : w1;
    uint32_t q[4];  // q[p]: codes p (low half) and p + 4 (high half) of this word
#pragma unroll
    for (int p = 0; p < 4; ++p) q[p] = bf16_minus_128(lop3_or_and(w >> (4 * p), 0x000F000Fu, 0x43004300u));
    packed[4 * h + 0] = __byte_perm(q[0], q[1], 0x5410);  // codes 0, 1
    packed[4 * h + 1] = __byte_perm(q[2], q[3], 0x5410);  // codes 2, 3
    packed[4 * h + 2] = __byte_perm(q[0], q[1], 0x7632);  // codes 4, 5
    packed[4 * h + 3] = __byte_perm(q[2], q[3], 0x7632);  // codes 6, 7
  }
  reinterpret_cast<uint4*>(dst)[0] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  reinterpret_cast<uint4*>(dst)[1] = make_uint4(packed[4], packed[5], packed[6], packed[7]);
}

// Decodes k tile kt from raw slot rs into bf16 buffer wb: thread (row t % kN, half t / kN) codes 16 half ..
// 16 half + 15 of its row, and its row's scale (half 0) or bias (half 1), as store_tile does.
template <int Bits, int M>
__device__ __forceinline__ void decode_raw(RingSmem<Bits, M>& sm, int rs, int wb, const TileWeight<Bits>& W,
                                           const RingWeight<Bits>& R, int kt, bool lop3) {
  const int t = threadIdx.x, half = t / kN, row = t % kN;
  const uintptr_t a = reinterpret_cast<uintptr_t>(R.sb_src(W, kt));
  const uint32_t word = sm.sb[rs][half][row];
  (half == 0 ? sm.scale[wb] : sm.bias[wb])[row] = from_bf16(static_cast<uint16_t>(word >> (8 * (a & 2))));
  if constexpr (Bits == 4) {
    if (lop3) {  // this half's two words
      const uint2 v = reinterpret_cast<const uint2*>(sm.codes[rs][row])[half];
      store_codes4_lop3(&sm.w[wb][row][16 * half], v.x, v.y);
      return;
    }
  }
  uint32_t w[Bits];
  const uint32_t* src = sm.codes[rs][row];
  if constexpr (Bits % 4 == 0) {
#pragma unroll
    for (int j = 0; j < Bits; j += 4) {
      const uint4 v = reinterpret_cast<const uint4*>(src)[j / 4];
      w[j] = v.x, w[j + 1] = v.y, w[j + 2] = v.z, w[j + 3] = v.w;
    }
  } else if constexpr (Bits % 2 == 0) {
#pragma unroll
    for (int j = 0; j < Bits; j += 2) {
      const uint2 v = reinterpret_cast<const uint2*>(src)[j / 2];
      w[j] = v.x, w[j + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int j = 0; j < Bits; ++j) w[j] = src[j];
  }
  if (half == 0)
    store_codes<Bits, 0>(&sm.w[wb][row][0], w);
  else
    store_codes<Bits, 16>(&sm.w[wb][row][16], w);
}

template <int Bits, int M>
__global__ void __launch_bounds__(kThreads, 2)
    ring_kernel(TileWeight<Bits> W, const ExpertWindow* tiles, int n_rows, const int32_t* row_ids, SplitX X,
                float* y, int64_t ldy, int n_experts, int64_t split_stride, bool lop3) {
  using Wp = Tile<M, kN>;
  constexpr int kMi = Wp::kMi, kNi = Wp::kNi;
  extern __shared__ __align__(16) unsigned char ring_smem[];
  RingSmem<Bits, M>& sm = *reinterpret_cast<RingSmem<Bits, M>*>(ring_smem);
  TileRows tr;
  if (!block_tile_rows<M>(tiles, n_rows, n_experts, tr)) return;
  const int n0 = static_cast<int>(blockIdx.y) * kN;
  const int t = threadIdx.x, warp = t / 32, lane = t % 32;
  const int row0 = (warp / Wp::kWn) * Wp::kRows, out0 = (warp % Wp::kWn) * Wp::kOuts;
  // This warp's m fragments that hold a row of the tile (warp-uniform); the others run no MMAs.
  const int frags = min(kMi, max(0, (tr.count - row0 + 15) / 16));
  int xr[3];
  thread_x_rows<M, kThreads>(t, tr, row_ids, xr);
  const uint32_t a_lane = tc::smem_addr(&sm.x[0][0][row0 + lane % 16][(lane / 16) * 8]);
  const uint32_t b_lane = tc::smem_addr(&sm.w[0][out0 + lane % 8 + (lane / 16) * 8][((lane / 8) % 2) * 8]);
  constexpr uint32_t kRowBytes = kPad * 2, kPlaneBytes = M * kRowBytes;
  constexpr uint32_t kXStage = kTerms * kPlaneBytes, kWStage = kN * kRowBytes;

  float acc[kMi][kNi][4], part[kMi][kNi][4];
  zero_fragments(acc);

  const int all_k = W.cols / kTileCols;
  const int k_begin = static_cast<int>(int64_t{all_k} * blockIdx.z / gridDim.z);
  const int n_k = static_cast<int>(int64_t{all_k} * (blockIdx.z + 1) / gridDim.z);
  const RingWeight<Bits> RW(W, tr.expert, n0);
  const ThreadCopy C(X, xr);
  // Group j (one a tile, committed after the barrier of tile j - kLeadX, or before the loop) holds x of tile
  // j and the raw weights of tile j + 1 + kLeadW - kLeadX; the first group also the raw weights of tiles
  // k_begin .. k_begin + kLeadW - kLeadX. Before tile kt's barrier, group kt must have landed: x of kt and
  // the raw weights of kt + 1 (decoded during tile kt).
  auto issue = [&](int j) {
    if (j < n_k) copy_x_ring<Bits, M>(sm, (j - k_begin) % kXSlots, X, C, j);
    const int jw = j + 1 + kLeadW - kLeadX;
    if (jw < n_k) copy_raw<Bits, M>(sm, (jw - k_begin) % kRawSlots, W, RW, jw);
    cp_async_commit();
  };
  for (int j = k_begin; j <= k_begin + kLeadW - kLeadX && j < n_k; ++j)
    copy_raw<Bits, M>(sm, j - k_begin, W, RW, j);
  for (int j = k_begin; j < k_begin + kLeadX; ++j) issue(j);
  tc::cp_async_wait<kLeadX - 1>();
  __syncthreads();
  decode_raw<Bits, M>(sm, 0, 0, W, RW, k_begin, lop3);
  for (int kt = k_begin; kt < n_k; ++kt) {
    const int i = kt - k_begin;
    const int xs = i % kXSlots, wb = i & 1;
    tc::cp_async_wait<kLeadX - 1>();  // group kt: x of kt, raw weights of kt + 1
    __syncthreads();  // every thread's copies of group kt and the decode of tile kt are visible; kt-1 is done
    issue(kt + kLeadX);
    // The register-staged kernel's MMAs and order (tile_mmas), on the fragments that hold rows.
    if (frags > 0) tile_mmas<M, kMi, kNi, true>(a_lane + xs * kXStage, b_lane + wb * kWStage, frags, part);
    // Tile kt+1's codes (landed before this barrier) into the other buffer, last read by tile kt-1.
    if (kt + 1 < n_k) decode_raw<Bits, M>(sm, (i + 1) % kRawSlots, wb ^ 1, W, RW, kt + 1, lop3);
    add_affine_tile(acc, part, sm.scale[wb], sm.bias[wb], sm.sumx[xs], row0, out0, frags);
  }
  tc::cp_async_wait<0>();  // no copy outlives the block (the last groups are empty or past n_k)
  store_fragments(y + blockIdx.z * split_stride, ldy, acc, tr, row0, out0, n0, W.rows);
}

}  // namespace

template <int Bits, int M>
void launch_ring(const TiledWeight& w, const Launch& l, const SplitX& X, float* y, int64_t ldy,
                 cudaStream_t stream, bool lop3) {
  const dim3 grid(l.row_tiles, static_cast<unsigned>((w.rows + kN - 1) / kN),
                  static_cast<unsigned>(l.splits));
  constexpr size_t kSmem = sizeof(RingSmem<Bits, M>);
  static_assert(kSmem <= 112 * 1024, "two blocks an SM");
  auto* kernel = ring_kernel<Bits, M>;
  // Once an instantiation and device (a prompt pass launches it hundreds of times), as attention_decode does.
  opt_in_dynamic_smem(kernel, static_cast<int>(kSmem), "tiled_wx: shared memory size (ring)");
  kernel<<<grid, kThreads, kSmem, stream>>>(tile_weight<Bits>(w), l.tiles, l.n_rows, l.row_ids, X, y, ldy,
                                            static_cast<int>(w.n_experts), l.split_stride, lop3);
  check_launch("tiled_wx (ring)");
}

#define DS_RING(B)                                                                                    \
  template void launch_ring<B, 16>(const TiledWeight&, const Launch&, const SplitX&, float*, int64_t, \
                                   cudaStream_t, bool);                                               \
  template void launch_ring<B, 32>(const TiledWeight&, const Launch&, const SplitX&, float*, int64_t, \
                                   cudaStream_t, bool);                                               \
  template void launch_ring<B, 64>(const TiledWeight&, const Launch&, const SplitX&, float*, int64_t, \
                                   cudaStream_t, bool);
DS_RING(2)
DS_RING(3)
DS_RING(4)
DS_RING(5)
DS_RING(6)
DS_RING(8)
#undef DS_RING

}  // namespace ds::cuda::tiled
