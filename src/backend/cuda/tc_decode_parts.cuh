#pragma once
// The pieces of the tensor-core decode products (tc_decode.h) that both kernels use: the general one
// (tc_decode.cu, any row tier) and the one for windows of up to 8 rows (tc_gemv.cu), which must give the same
// bits: the stage layout of the per-warp cp.async ring, the weight and x descriptors, the code decoders and
// the stage copy.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/moe_epilogues.cuh"
#include "backend/cuda/moe_route_row.cuh"
#include "backend/cuda/tc_common.cuh"
#include "backend/cuda/wx_products.h"

namespace ds::cuda::tcd {

using tc::cp_async16;
using tc::cp_async4;
using tc::cp_async_commit;
using tc::from_bf16;
using tc::kTerms;
using tc::mma_bf16;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpOutputs = 16;
constexpr int kUnitsPerStage = 4;  // units of 32 columns
constexpr int kStages = 4;

// The column split (tc_decode_column_slices): S = 1, 2 or 4 slices of a matrix's stages, each its own chain,
// run by S warps of one block that share 16 outputs. Warp w of a block is slice w % S of output group w / S.
struct Slicing {
  int slices;
  __host__ __device__ int groups() const { return kWarps / slices; }
  __host__ __device__ int64_t block_outputs() const { return int64_t{groups()} * kWarpOutputs; }
  // Stages [begin, end) of slice `slice`: the floor split of n_stages, so slices differ by at most one stage.
  __host__ __device__ int64_t begin(int slice, int64_t n_stages) const { return slice * n_stages / slices; }
  __host__ __device__ int64_t end(int slice, int64_t n_stages) const {
    return (slice + 1) * n_stages / slices;
  }
};

// Merges the slices' chains of a warp's outputs (n values a lane) into the first slice's warp as (s0 + s1) +
// (s2 + s3) (or s0 + s1), through the warps' own ring memory (free once their loops are done), meeting at a
// named barrier per output group (so a group past the matrix's outputs may leave early). Returns whether
// this warp holds the result (the group's first slice).
template <int N>
__device__ __forceinline__ bool merge_slices(const Slicing& sl, float (&v)[N], uint32_t* own_ring,
                                             int ring_stride_words, int warp, int lane) {
  if (sl.slices == 1) return true;
  const int group = warp / sl.slices, slice = warp % sl.slices;
  float* mine = reinterpret_cast<float*>(own_ring);
#pragma unroll
  for (int k = 0; k < N; ++k) mine[k * 32 + lane] = v[k];
  // Barrier 1 or 2 (S = 2: groups 0 and 1; S = 4: group 0), immediate so the kernel reserves only these.
  if (group == 0)
    asm volatile("bar.sync 1, %0;" ::"r"(32 * sl.slices) : "memory");
  else
    asm volatile("bar.sync 2, %0;" ::"r"(32 * sl.slices) : "memory");
  if (slice != 0) return false;
  auto part = [&](int s, int k) {
    return reinterpret_cast<const float*>(own_ring + s * ring_stride_words)[k * 32 + lane];
  };
#pragma unroll
  for (int k = 0; k < N; ++k)
    v[k] = sl.slices == 2 ? __fadd_rn(part(0, k), part(1, k))
                          : __fadd_rn(__fadd_rn(part(0, k), part(1, k)), __fadd_rn(part(2, k), part(3, k)));
  return true;
}

// One warp's stage: per output row the codes of 4 units (+ 4 words of padding: distinct banks for 4-bit),
// then for affine 3 words of bf16 scales and 3 of biases (the words covering the stage's groups).
template <int Bits>
struct Stage {
  static constexpr int kCodeWords = (Bits == 0 ? 16 : Bits) * kUnitsPerStage + 4;
  static constexpr int kSbWords = Bits == 0 ? 0 : 8;  // scales at +0, biases at +4
  static constexpr int kRowWords = kCodeWords + kSbWords;
  static constexpr int kWords = kWarpOutputs * kRowWords;
  static constexpr size_t kBlockBytes = size_t{kWarps} * kStages * kWords * 4;
};

struct DecodeWeight {
  const uint32_t* codes;   // affine codes, or dense bf16 pairs
  const uint32_t* scales;  // affine only: bf16 pairs from a 4-byte aligned base
  const uint32_t* biases;
  int64_t sb_base;  // bf16 index of the matrix's first scale (and bias) from those bases
  int64_t rows, cols, words_per_row, groups_per_row;
  int group_shift;
  bool chunk16;  // rows of codes are a multiple of 16 bytes: 16-byte copies
};

// W moved to expert e of its stacked experts ([E, rows, ...]): its codes and its scale/bias index.
__device__ __forceinline__ void select_expert(DecodeWeight& W, int64_t e) {
  W.codes += e * W.rows * W.words_per_row;
  W.sb_base += e * W.rows * W.groups_per_row;
}

struct DecodeX {
  const uint4* planes;  // [kTerms, n_x, cols] bf16 in fragment order, as uint4 (8 values)
  const float* sums;    // [n_x, cols / 32]
  int64_t n_x, cols;
  const float* x = nullptr;  // the unsplit rows (ldx apart): the one-row kernel splits its row itself
  int64_t ldx = 0;
};

// One row's routing grouped into expert tiles of one slot by the product itself (tc_decode_experts_swiglu's
// routed form; topk == nullptr: off): pairs i < k are (expert topk[i], row 0), then with shared >= 0 one more
// (expert shared, row 0). Every block finds its own tile (one_row_tile) and block (0, 0) writes tiles,
// row_ids and slot_of as moe_expert_tiles(topk, 1, k, n_experts, ..., tile_rows 1, shared) would.
// The down's routed form (session 13, tc_decode_experts_routed): tiles == nullptr (nothing written), x rows
// by slot (h rows), early: topk was written before the previous launch, so a block finds its tile and issues
// its first stages before griddepcontrol.wait; combine.out set: the block that stores the last tile of its
// outputs also runs moe_combine's sum for them (OneRowCombine, moe_epilogues.cuh).
struct OneRowTiles {
  const int32_t* topk = nullptr;
  int k = 0, shared = -1, max_tiles = 0;
  ExpertWindow* tiles = nullptr;
  int32_t* row_ids = nullptr;
  int32_t* slot_of = nullptr;
  bool x_by_slot = false, early = false;
  dev::OneRowCombine combine;
  // The routing folded in (kTcRoutedRoute): with logits set, each warp routes the row itself from the
  // router's E logits (dev::route_lanes, moe_route's arithmetic) instead of reading topk, and the writing
  // warp also stores the ids (ids_out) and weights as moe_route does.
  const float* logits = nullptr;
  int route_E = 0;
  bool renormalise = false;
  bool route_fast = false;  // moe_route_fast(): the top k by redux (the same ids and weights)
  int32_t* ids_out = nullptr;
  float* weights_out = nullptr;
};

constexpr int kRouteSlots = 16;  // the folded routing's experts a lane: E <= 512

// Tile j of that grouping (count 0 past the last), by the warp (every lane calls; all = k + (shared >= 0) <=
// 32 pairs, lane i holds pair i). moe_expert_tiles' rule at one row and tiles of one slot: a valid pair (0 <=
// expert < n_experts; a routed id equal to the shared expert's is invalid) ranks by (expert, pair index);
// its tile is its rank, its slot its rank, or for the shared expert (the last id, its only pair) k; an
// invalid routed pair gets slot_of -1. write: also store every tile up to max_tiles (zeros past the last),
// row_ids and slot_of.
// n_tiles: the tiles of the grouping (its valid pairs). topk is read through L2 (the early form reads it
// before the wait).
__device__ __forceinline__ ExpertWindow one_row_tile(const OneRowTiles& g, int64_t n_experts, int j,
                                                     bool write, int lane, int& n_tiles) {
  const int all = g.k + (g.shared >= 0 ? 1 : 0);
  int routed_e = -1;
  if (g.logits != nullptr) {  // warp-uniform
    int id;
    float weight;
    dev::route_lanes<kRouteSlots>(g.logits, g.route_E, g.k, g.renormalise, id, weight, g.route_fast);
    if (lane < g.k) routed_e = id;
    if (write && lane < g.k) g.ids_out[lane] = id, g.weights_out[lane] = weight;
  } else if (lane < g.k) {
    routed_e = __ldcg(g.topk + lane);
  }
  const int e = lane < all ? (lane < g.k ? (routed_e == g.shared ? -1 : routed_e) : g.shared) : -1;
  const bool valid = lane < all && e >= 0 && e < n_experts;
  int rank = 0;
  for (int i = 0; i < 32; ++i) {
    const int ei = __shfl_sync(0xFFFFFFFFu, e, i);
    const bool vi = __shfl_sync(0xFFFFFFFFu, valid ? 1 : 0, i) != 0;
    rank += vi && (ei < e || (ei == e && i < lane)) ? 1 : 0;
  }
  const int slot = e == g.shared ? g.k : rank;
  n_tiles = __popc(__ballot_sync(0xFFFFFFFFu, valid));
  if (write) {
    if (valid && rank < g.max_tiles) g.tiles[rank] = ExpertWindow{e, slot, 1};
    for (int i = n_tiles + lane; i < g.max_tiles; i += 32) g.tiles[i] = ExpertWindow{0, 0, 0};
    if (valid) g.row_ids[slot] = 0;
    if (lane < g.k) g.slot_of[lane] = valid ? slot : -1;
  }
  const unsigned mine = __ballot_sync(0xFFFFFFFFu, valid && rank == j);
  if (mine == 0) return ExpertWindow{0, 0, 0};
  const int src = __ffs(mine) - 1;
  return ExpertWindow{__shfl_sync(0xFFFFFFFFu, e, src), __shfl_sync(0xFFFFFFFFu, slot, src), 1};
}

// The one-row small kernel that splits its x row in shared memory (no split launch) takes at most this many
// columns (its planes and sums then fit beside the ring).
constexpr int64_t kInBlockMaxCols = 8192;

__device__ __forceinline__ uint32_t and_or_code(uint32_t a, uint32_t mask, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(mask), "r"(c));  // (a & b) | c
  return d;
}

// bf16x2 (128 + q) -> q, exactly.
__device__ __forceinline__ uint32_t minus128(uint32_t v) {
  uint32_t d;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(v), "r"(0x3F803F80u), "r"(0xC300C300u));
  return d;
}

constexpr uint32_t kBf16Magic = 0x43004300u;  // bf16 128.0 in both halves

template <int Bits, int I>
__device__ __forceinline__ uint32_t code_of(uint32_t lo, uint32_t hi) {
  constexpr int b = I * Bits;
  constexpr uint32_t mask = (1u << Bits) - 1u;
  if constexpr (b + Bits <= 32)
    return (lo >> b) & mask;
  else if constexpr (b >= 32)
    return (hi >> (b - 32)) & mask;
  else
    return __funnelshift_r(lo, hi, b) & mask;
}

// The 4 bf16x2 pairs (columns (8t + p, 8t + p + 4), p = 0..3) of one output row's unit; uw: the unit's words.
template <int Bits>
__device__ __forceinline__ void unit_pairs(const uint32_t* uw, int t, uint32_t (&P)[4]) {
  if constexpr (Bits == 0) {
    const uint4 v = *reinterpret_cast<const uint4*>(uw + 4 * t);
    P[0] = __byte_perm(v.x, v.z, 0x5410);
    P[1] = __byte_perm(v.x, v.z, 0x7632);
    P[2] = __byte_perm(v.y, v.w, 0x5410);
    P[3] = __byte_perm(v.y, v.w, 0x7632);
  } else if constexpr (Bits == 4) {
    const uint32_t v = uw[t];
#pragma unroll
    for (int p = 0; p < 4; ++p) P[p] = minus128(and_or_code(v >> (4 * p), 0x000F000Fu, kBf16Magic));
  } else if constexpr (Bits == 8) {
    const uint32_t v0 = uw[2 * t], v1 = uw[2 * t + 1];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      // 2^23 + q as fp32 (byte p into the low byte of 0x4B000000), minus 2^23: q exactly, then two to bf16x2.
      const float lo = __fsub_rn(__uint_as_float(__byte_perm(v0, 0x4B000000u, 0x7540 | p)), 8388608.0f);
      const float hi = __fsub_rn(__uint_as_float(__byte_perm(v1, 0x4B000000u, 0x7540 | p)), 8388608.0f);
      const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // q < 256: exact
      P[p] = *reinterpret_cast<const uint32_t*>(&h);
    }
  } else {
    const int bit0 = t * 8 * Bits, w0 = bit0 >> 5, sh = bit0 & 31;
    const uint32_t lo = __funnelshift_r(uw[w0], uw[w0 + 1], sh);
    uint32_t hi = 0;
    if constexpr (8 * Bits > 32) hi = __funnelshift_r(uw[w0 + 1], uw[w0 + 2], sh);
    const uint32_t c[8] = {code_of<Bits, 0>(lo, hi), code_of<Bits, 1>(lo, hi), code_of<Bits, 2>(lo, hi),
                           code_of<Bits, 3>(lo, hi), code_of<Bits, 4>(lo, hi), code_of<Bits, 5>(lo, hi),
                           code_of<Bits, 6>(lo, hi), code_of<Bits, 7>(lo, hi)};
#pragma unroll
    for (int p = 0; p < 4; ++p) P[p] = minus128(c[p] | (c[p + 4] << 16) | kBf16Magic);
  }
}

// Copies stage s (units 4s .. 4s+nu-1) of the warp's 16 outputs from o0 into dst; one commit group per call.
template <int Bits>
__device__ __forceinline__ void issue_stage(const DecodeWeight& W, int64_t o0, int64_t s, int64_t n_stages,
                                            uint32_t* dst, int lane) {
  using L = Stage<Bits>;
  if (s < n_stages) {
    const int64_t T = W.cols / 32, t0 = s * kUnitsPerStage;
    const int nu = static_cast<int>(min(int64_t{kUnitsPerStage}, T - t0));
    if constexpr (Bits == 0) {
      const int cpr = nu * 4;  // 16-byte chunks per output row (a unit is 64 bytes)
      for (int c = lane; c < kWarpOutputs * cpr; c += 32) {
        const int r = c / cpr, k = c % cpr;
        const int64_t o = min(o0 + r, W.rows - 1);
        cp_async16(dst + r * L::kRowWords + 4 * k, W.codes + o * W.words_per_row + t0 * 16 + 4 * k, 16);
      }
    } else {
      const int rw = nu * Bits;
      if (W.chunk16) {
        const int cpr = rw / 4;
        for (int c = lane; c < kWarpOutputs * cpr; c += 32) {
          const int r = c / cpr, k = c % cpr;
          const int64_t o = min(o0 + r, W.rows - 1);
          cp_async16(dst + r * L::kRowWords + 4 * k, W.codes + o * W.words_per_row + t0 * Bits + 4 * k, 16);
        }
      } else {
        for (int c = lane; c < kWarpOutputs * rw; c += 32) {
          const int r = c / rw, k = c % rw;
          const int64_t o = min(o0 + r, W.rows - 1);
          cp_async4(dst + r * L::kRowWords + k, W.codes + o * W.words_per_row + t0 * Bits + k, 4);
        }
      }
      // Lanes 0-15 the scales of output row lane, 16-31 the biases: the 1-3 words covering the stage's
      // groups.
      const int half = lane >> 4, r = lane & 15;
      const int64_t o = min(o0 + r, W.rows - 1);
      const int64_t i_lo = W.sb_base + o * W.groups_per_row + ((t0 * 32) >> W.group_shift);
      const int64_t i_hi = W.sb_base + o * W.groups_per_row + (((t0 + nu) * 32 - 1) >> W.group_shift);
      const uint32_t* src = half == 0 ? W.scales : W.biases;
      for (int64_t w = i_lo >> 1; w <= (i_hi >> 1); ++w)
        cp_async4(dst + r * L::kRowWords + L::kCodeWords + 4 * half + (w - (i_lo >> 1)), src + w, 4);
    }
  }
  cp_async_commit();
}

// step(u) for the nu units of one stage. A full stage unrolled: the units' MMA chains are independent (only
// the epilogue runs in unit order), so the compiler can overlap them.
template <class Step>
__device__ __forceinline__ void stage_units(int nu, Step&& step) {
  if (nu == kUnitsPerStage) {
#pragma unroll
    for (int u = 0; u < kUnitsPerStage; ++u) step(u);
  } else {
    for (int u = 0; u < nu; ++u) step(u);
  }
}

// The columns arithmetic (tc_decode_planes() == TcPlanes::Columns), per (row, output, 32-column tile): each
// plane's own 2-MMA chain d_p (k step 0 onto zero, then k step 1), then d = (d2 + d1) + d0 (d2 the smallest
// plane's). Two ways to run it, the same bits (an MMA's D[i][n] depends only on A's row i, B's column n and
// C[i][n], never on n or on the other columns, which row invariance already rests on):
// - plane columns (pc_*; one or two rows): B columns 4j .. 4j+3 hold row j's planes (x2, x1, x0, 0), one MMA
//   a k step for two rows, and one shuffle a lane pair meets the planes; lane (g, t) feeds B column g: term
//   pc_term(g) (< 0: the zero column) of the fragment's row g >> 2.
// - plane accumulators (pr_*; 4+ rows): B columns are 8 rows as in the chained layout, each plane its own
//   accumulator (3 independent MMAs a k step for 8 rows, the chained layout's count), met in registers.
constexpr int kPcRows = 2;  // rows of a plane-column fragment
__device__ __forceinline__ int pc_term(int g) {
  return kTerms - 1 - (g & 3);
}
// The unit's two k steps of one plane-column fragment into c (zeroed by the caller).
__device__ __forceinline__ void pc_mma(float (&c)[4], const uint32_t (&a)[2][4], uint4 b) {
  mma_bf16(c, a[0], b.x, b.y);
  mma_bf16(c, a[1], b.z, b.w);
}
// d of (row t >> 1, output g + 8 (t & 1)) from a plane-column fragment's D: lane 2j holds (d2, d1) of
// outputs g and g + 8, lane 2j + 1 (d0, 0) of both; each sends the other the output it does not keep (one
// shuffle), and both add (d2 + d1) and d0 (a + b == b + a, signed zeros too; the zero column is never added).
__device__ __forceinline__ float pc_combine(const float (&c)[4], int t) {
  const bool odd = (t & 1) != 0;
  const float s01 = odd ? c[0] : __fadd_rn(c[0], c[1]), s23 = odd ? c[2] : __fadd_rn(c[2], c[3]);
  const float send = odd ? s01 : s23, keep = odd ? s23 : s01;
  return __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, 1));
}
// d += the unit's MMAs of one 8-row fragment chained over the planes: per k step the smallest term first (the
// prompt products' order, which every decode kernel keeps).
__device__ __forceinline__ void unit_mma(float (&d)[4], const uint32_t (&a)[2][4], const uint4 (&b)[kTerms]) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks)
#pragma unroll
    for (int j = kTerms - 1; j >= 0; --j)
      mma_bf16(d, a[ks], ks == 0 ? b[j].x : b[j].z, ks == 0 ? b[j].y : b[j].w);
}
// The unit's MMAs of one 8-row fragment, each plane j (b[j]) its own accumulator c[j] (zeroed by the caller).
__device__ __forceinline__ void pr_mma(float (&c)[kTerms][4], const uint32_t (&a)[2][4],
                                       const uint4 (&b)[kTerms]) {
#pragma unroll
  for (int ks = 0; ks < 2; ++ks)
#pragma unroll
    for (int j = kTerms - 1; j >= 0; --j)
      mma_bf16(c[j], a[ks], ks == 0 ? b[j].x : b[j].z, ks == 0 ? b[j].y : b[j].w);
}
// d of D element e: (d2 + d1) + d0.
__device__ __forceinline__ float pr_combine(const float (&c)[kTerms][4], int e) {
  return __fadd_rn(__fadd_rn(c[2][e], c[1][e]), c[0][e]);
}

// The one-row kernels' split (tc_gemv.cu in_block, tc_row.cu), by the whole block into shared memory: planes
// [kTerms][T][4] (lane t's uint4 of each unit, as decode_split_kernel stores them) and sums [T], each value
// by decode_split_kernel's operations (tc::split3 per value, sum4 per 4 columns, the tile's tree over the 8
// partial sums); row < 0: zeros. UnitMajor (tc_row.cu): planes [T][kTerms][4] instead, a unit's three planes
// side by side. Threads: the block's threads (tc_row_par.cu's blocks have more than kThreads).
template <bool UnitMajor = false, int Threads = kThreads>
__device__ __forceinline__ void split_row_in_block(const DecodeX& X, int64_t row, int64_t T, uint4* planes,
                                                   float* sums, float* pair_sums) {
  for (int64_t i = threadIdx.x; i < T * 4; i += Threads) {
    const int64_t unit = i >> 2;
    const int b = static_cast<int>(i & 3);
    float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (row >= 0) {
      const float4* src = reinterpret_cast<const float4*>(X.x + row * X.ldx + unit * 32 + 8 * b);
      const float4 lo = src[0], hi = src[1];
      v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
    }
    uint4 plane[kTerms];
    tc::split3_planes(v, plane);
#pragma unroll
    for (int j = 0; j < kTerms; ++j)
      planes[(UnitMajor ? unit * kTerms + j : j * T + unit) * 4 + b] = plane[j];
    // q[2b] + q[2b+1] of the split kernel's tree8: (q0 + q1), (q2 + q3), (q4 + q5), (q6 + q7).
    pair_sums[i] = __fadd_rn(tc::sum4(v[0], v[1], v[2], v[3]), tc::sum4(v[4], v[5], v[6], v[7]));
  }
  __syncthreads();
  for (int64_t u = threadIdx.x; u < T; u += Threads)
    sums[u] = __fadd_rn(__fadd_rn(pair_sums[4 * u], pair_sums[4 * u + 1]),
                        __fadd_rn(pair_sums[4 * u + 2], pair_sums[4 * u + 3]));
  __syncthreads();
}

// The small-window product (tc_gemv.cu): windows (or expert tiles) of at most x_rows <= 8 rows, the bits of
// decode_kernel<Bits, 1>; x and its tile sums ride in the weights' cp.async ring.
// in_block: one row (x_rows 1, cols <= kInBlockMaxCols) split by each block from X.x into shared memory,
// the planes and sums of the split launch bit for bit (tc::split3, the tile sum's order), so X.planes and
// X.sums are not read and the split launch can be left out.
// PC: the columns arithmetic (tc_decode.h, TcPlanes::Columns): plane columns at 1-2 rows, plane
// accumulators at 4-8 (decode_kernel's PC).
template <int Bits, bool PC>
void launch_small(const DecodeWeight& W, Slicing sl, dim3 grid, int x_rows, bool in_block,
                  const ExpertWindow* tiles, int n_rows, const int32_t* row_ids, const DecodeX& X, float* y,
                  int64_t ldy, int64_t n_experts, cudaStream_t stream);

// The one-row product (tc_row.cu): a launch of one row, or expert tiles of one slot, of MLX affine weights
// with rows of codes a multiple of 16 bytes (W.chunk16) and at most kInBlockMaxCols columns; the row split in
// each block. The bits of launch_small at one row (the same MMAs and epilogue for the row), with less work a
// unit: no work kept for the B columns that hold no row, precomputed copy offsets, cheaper scale indices.
// Its launch variant (tc_decode_row_variant; the same arithmetic, so the same bits), from
// DS_CUDA_TC_ROW_VARIANT (0..255) at every launch, else kDefaultRowVariant: bit 0: one output block a block
// instead of persistent blocks; bit 1: registers for 3 blocks an SM instead of 4 (no spills; 4 blocks capped
// the chained kernels at 128 registers with 8-40 bytes of spill and left too few units in flight); bit 2: the
// lean stage copy (the same bytes to the same places with fewer instructions); bit 3 (with bit 1): expert
// tiles on the 4-block kernel where that runs them in fewer waves; bit 4 (tcmid12): kLean2 (the copy by
// 32-bit shared addresses, 32-bit stage counters, a stage's g32 scale and bias words read as words); bit 5:
// kPair (with kLean2: two stages a loop iteration on a 6-slot ring). For the bench's before/after.
// Measured fastest (tc11): lean copy, 3 blocks an SM, tile waves; the model at one stream 6.866 -> 6.770 ms
// a round against variant 2 (tcrow10's default).
// half > 0 (expert tiles of gate|up, [2 half, cols] an expert; grid.x = half / sl.block_outputs()): the
// SwiGLU in the epilogue, y then holds h rows of half outputs (tc_decode_experts_swiglu); 0: plain. group
// (topk set; with half > 0, grid.y = group.max_tiles): the tiles grouped by the launch itself from one row's
// routing (OneRowTiles), `tiles` and `row_ids` not read.
// Bits 6-7 (dnrow13, tc_row_par.cu): single matrices of at most kRowParMaxGroups output groups under the
// chained layout take the kernel with each 16 outputs' units spread over a block's warps (the same bits): 64
// 8 warps a block (3 ring slots a warp), 128 4 warps (5 slots), 192 the shape's rule (8 warps when the shape
// has column slices, else 4); the other launches keep bits 0-5's variant.
// Default 30 (session 13): 14 plus kLean2, -1.5% on the round at one stream in tcmid12's and the lead's runs
// (5.727 / 5.718 ms against 5.884 / 5.815, interleaved), every check passing under it (tensor-all 484/484,
// the decode-tc checks alone and as two processes sharing the GPU, the contract on the real hc/expert
// shapes).
constexpr int kDefaultRowVariant = 30;
constexpr int64_t kRowParMaxGroups = 4096;
bool row_par_takes(const DecodeWeight& W, bool tiles, int64_t half, bool pc);
template <int Bits>
void launch_row_par(int v, const DecodeWeight& W, Slicing sl, unsigned grid_y, int n_rows,
                    const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy, cudaStream_t stream);
template <int Bits, bool PC>
void launch_row(const DecodeWeight& W, Slicing sl, dim3 grid, const ExpertWindow* tiles, int n_rows,
                const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy, int64_t n_experts,
                int64_t half, const OneRowTiles& group, cudaStream_t stream);

}  // namespace ds::cuda::tcd
