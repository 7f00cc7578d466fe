// The one-row tensor-core decode product (tcrow10; docs/cuda-products.md, "Decode products on the tensor
// cores", "The one-row kernel"): a launch of one row, or expert tiles of one slot, of MLX affine weights
// whose rows of codes are a multiple of 16 bytes and at most kInBlockMaxCols columns. The arithmetic of
// small_kernel<Bits, 1, true, PC> (tc_gemv.cu), so of decode_kernel<Bits, 1, PC>, operation for operation
// for the row: the same A fragments, the same B column of the row, the same MMA chain per unit, the same
// epilogue in unit order, the same column slices and merge. What it leaves out is the work of the 7 B
// columns (and D columns) that hold no row:
// - An MMA's D[i][n] depends only on A's row i, B's column n and C[i][n]. So the lanes that feed the empty
//   B columns (g != 0; plane columns: the zero column and row 1's) read the row's own fragment too (a
//   broadcast from shared memory, no predicate, no zeros), and only the D elements of the row are carried:
//   2 accumulators a lane (chained: elements 0 and 2, column 2t; t == 0 holds the row) instead of 4.
// - RowCopy offsets: each lane's cp.async chunks of a stage (16-byte code chunks of the warp's 16 rows, the
//   words of scales and biases) are computed once a warp; a stage's copy is a pointer bump per chunk.
// - The scale and bias index of a unit: the stage's words start at the word of its first group, so a unit's
//   local index is that word's parity (fixed per row for groups 32 and 64) plus (u * 32) >> shift.
// The row is split by each block in shared memory (split_row_in_block, unit-major, the split launch's bits),
// so no split launch runs. A single matrix runs persistent blocks (as many as are resident), each warp's ring
// running on into its next output block's stages; expert tiles one output block a block. Launch variants
// (tc_decode_row_variant) change only the grid, the register budget and how a stage's bytes are copied (the
// same bytes to the same places), never the arithmetic.
// SwiGLU (session 12): expert tiles of gate|up ([2 half, cols] an expert) with grid.x = half / block outputs,
// so a block's tasks are output block b of gate (o0) and then the same block of up (o0 + half, the
// persistent loop's next task): the lane that stores gate output o keeps it in a register and, at up output
// half + o, stores h[o] = silu(gate) * up (silu_mul_halves' expression) instead of both products. The chains,
// slices and merge are the plain launch's, so gate and up carry the same bits.
#include <algorithm>
#include <type_traits>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_decode_parts.cuh"
#include "backend/cuda/tc_row_copy.cuh"

namespace ds::cuda::tcd {
namespace {

constexpr int kRowStages = 5;  // ring slots a warp: 4 stages in flight while one is decoded
// Launch modes past the lean copy (variant bits 4-5; tcmid12): kLean2 the stage copy by 32-bit shared
// addresses, 32-bit stage counters, and for groups of 32 a stage's scale and bias words read as words
// (shared by its units; each unit's bf16 by a funnel shift) instead of a 16-bit load a unit and value; kPair
// (always with kLean2) two stages a loop iteration (8 units' MMA chains in one block of code) on a ring of 6
// slots (still 4 stages in flight while two are decoded). The same copies, MMAs and epilogue order.
constexpr int kLean2 = 1, kPair = 2;
__host__ __device__ constexpr int row_slots(int mode) {
  return (mode & kPair) != 0 ? kRowStages + 1 : kRowStages;
}

// The slices' merge of merge_slices ((s0 + s1) + (s2 + s3), or s0 + s1) for 2 values a lane, through a
// merge area of its own (the ring holds the next task's stages in flight), double-buffered by the task's
// parity so a slice warp's next write never meets the first slice's read of this task's parts.
__device__ __forceinline__ bool merge_row(const Slicing& sl, float (&v)[2], float* area, int parity, int warp,
                                          int lane) {
  if (sl.slices == 1) return true;
  const int group = warp / sl.slices, slice = warp % sl.slices;
  float* base = area + parity * (kWarps * 64);
  base[warp * 64 + lane] = v[0];
  base[warp * 64 + 32 + lane] = v[1];
  if (group == 0)
    asm volatile("bar.sync 1, %0;" ::"r"(32 * sl.slices) : "memory");
  else
    asm volatile("bar.sync 2, %0;" ::"r"(32 * sl.slices) : "memory");
  if (slice != 0) return false;
  auto part = [&](int s, int k) { return base[(warp + s) * 64 + 32 * k + lane]; };
#pragma unroll
  for (int k = 0; k < 2; ++k)
    v[k] = sl.slices == 2 ? __fadd_rn(part(0, k), part(1, k))
                          : __fadd_rn(__fadd_rn(part(0, k), part(1, k)), __fadd_rn(part(2, k), part(3, k)));
  return true;
}

// Persistent over output blocks for a single matrix (block b takes output blocks b, b + gridDim.x, ...; each
// warp's ring runs on into its next task's stages); expert tiles: one output block a block (grid.x covers
// them), tile blockIdx.y; with half > 0 (SwiGLU, expert tiles only) the gate block, then its up block, and y
// holds h rows (ldy apart) of half outputs.
template <int Bits, bool PC, int MinBlocks, bool Lean, int Mode>
__global__ void __launch_bounds__(kThreads, MinBlocks)
    row_kernel(DecodeWeight W, Slicing sl, const ExpertWindow* tiles, int n_rows, const int32_t* row_ids,
               DecodeX X, float* y, int64_t ldy, int64_t n_experts, int64_t half, OneRowTiles group) {
  using L = Stage<Bits>;
  constexpr int KS = row_slots(Mode), kAhead = kRowStages - 1;  // kAhead stages in flight a warp
  extern __shared__ __align__(16) uint32_t smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int slice = warp % sl.slices;
  const int64_t group_off = (warp / sl.slices) * kWarpOutputs, step = int64_t{gridDim.x} * sl.block_outputs();
  int64_t o0 = int64_t{blockIdx.x} * sl.block_outputs() + group_off;
  // Expert tiles: from `tiles`, or found from one row's routing (group.topk). early (the down's routed form,
  // its topk written before the previous launch): the tile and the first stages before the wait.
  const bool tiled = tiles != nullptr || group.topk != nullptr, early = group.topk != nullptr && group.early;
  if (tiled && !early) dev::grid_dependency_wait();
  int64_t first = 0;
  int count = 0, n_tiles = 0;
  if (tiled) {
    // The routed form finds its tile itself (with group.tiles, block (0, 0)'s first warp writes the
    // grouping).
    const ExpertWindow tw =
        group.topk != nullptr
            ? one_row_tile(group, n_experts, static_cast<int>(blockIdx.y),
                           group.tiles != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && warp == 0, lane,
                           n_tiles)
            : tiles[blockIdx.y];
    if (tw.count <= 0 || tw.count > 1 || tw.expert < 0 || tw.expert >= n_experts) {  // whole block
      // early: this block has not waited yet. Wait before leaving, so the launch never completes (and lets a
      // later kernel past its wait) before the kernels before it have: with every id bad and no shared
      // expert no block would wait at all.
      if (early) dev::grid_dependency_wait();
      return;
    }
    first = tw.first, count = tw.count;
    select_expert(W, tw.expert);
  } else {
    first = int64_t{blockIdx.y} * kDecodeTileRows;
    count = static_cast<int>(min(int64_t{1}, n_rows - first));
  }
  uint32_t* ring = smem + warp * (KS * L::kWords);
  const int64_t T = W.cols / 32, n_stages = (T + kUnitsPerStage - 1) / kUnitsPerStage;
  const int64_t s_begin = sl.begin(slice, n_stages), s_end = sl.end(slice, n_stages);
  // The issue cursor: task output o_is, stage s_is (the tasks' stages in sequence; past the last: none).
  RowCopy<Bits> copy(W, o0, lane);
  int64_t o_is = o0, s_is = s_begin;
  const uint32_t ring_s = tc::smem_addr(ring);  // Mode != 0: the ring's shared address
  auto issue_next = [&](uint32_t* dst) {
    if constexpr (Mode != 0)
      copy.issue2(W, o_is < W.rows, static_cast<int>(s_is), static_cast<int>(T),
                  ring_s + static_cast<uint32_t>((dst - ring) * 4));
    else
      copy.template issue<Lean>(W, o_is < W.rows, s_is, T, dst);
    if (++s_is == s_end && o_is < W.rows) {
      s_is = s_begin, o_is += step;
      if (o_is < W.rows) copy.retarget(W, o_is);
    }
  };
#pragma unroll
  for (int s = 0; s < kAhead; ++s) issue_next(ring + s * L::kWords);
  if (!tiled || early) dev::grid_dependency_wait();
  const int64_t xrow = count > 0 ? (group.topk != nullptr ? (group.x_by_slot ? first : 0)
                                    : row_ids != nullptr  ? int64_t{row_ids[first]}
                                                          : first)
                                 : -1;
  uint4* xplanes = reinterpret_cast<uint4*>(smem + kWarps * KS * L::kWords);
  float* xsums = reinterpret_cast<float*>(xplanes + kTerms * T * 4);
  float* merge_area = xsums + 5 * T;  // after the split's sums and pair sums: [2][kWarps][2][32]
  split_row_in_block<true>(X, xrow, T, xplanes, xsums, xsums + T);
  if (o0 >= W.rows) return;  // uniform over the output group, which alone meets at the slices' barrier

  const int pc_h = t & 1;
  // The B column of lane (g, t) holds plane j of the row: chained every plane (column g == 0 is the row's,
  // the others only feed D columns not kept); plane columns pc_term(g), any plane for the zero column.
  const int pc_j = pc_term(g) < 0 ? 0 : pc_term(g);
  // Unit u's plane j at xplanes[(u * kTerms + j) * 4 + t].
  const uint4* xp = xplanes + (PC ? pc_j : 0) * 4 + t;
  const int row_off[2] = {g * L::kRowWords, (g + 8) * L::kRowWords};
  // Plane columns: this lane's output row g + 8 (t & 1), selected once (no runtime index into arrays).
  const int pc_off = pc_h ? row_off[1] : row_off[0];
  float* yr = y + first * ldy;
  int slot = 0;  // the ring slot of the warp's next stage to decode (its stages over its tasks in order)
  float gate[2] = {0.0f, 0.0f};  // SwiGLU: the gate outputs this lane stored at the block's first task
  // Output o's value v: y[o]; with SwiGLU gate o (o < half) is kept in gate[k], up o stores h[o - half].
  auto store = [&](int64_t o, int k, float v) {
    if (half == 0)
      yr[o] = v;
    else if (o < half)
      gate[k] = v;
    else
      yr[o - half] = __fmul_rn(dev::silu(gate[k]), v);
  };
  // Mode != 0: the stage loop with 32-bit counters; with kPair two stages an iteration (one when a task's
  // slice has one left). The stages' slots run in sequence over the tasks: `fill` the next one issued.
  int fill = kAhead;
  struct Ref {
    const uint32_t* st;
    int t0, nu, par[2];
  };
  auto stage_ref = [&](int sl_, int s, const int64_t(&sb_r)[2]) {
    Ref r;
    r.st = ring + sl_ * L::kWords, r.t0 = s * kUnitsPerStage;
    r.nu = min(kUnitsPerStage, static_cast<int>(T) - r.t0);
    const int g0 = (r.t0 * 32) >> W.group_shift;
#pragma unroll
    for (int h = 0; h < 2; ++h) r.par[h] = static_cast<int>((sb_r[h] + g0) & 1);
    return r;
  };
  // Unit u of stage r: unit_step's operations in its order. G32 (groups of 32, unit u's scale index par + u):
  // the stage's words read as words (shared by the units) and each bf16 taken by a funnel shift.
  auto unit2 = [&](float(&acc)[2], const Ref& r, int u, auto g32_tag) {
    constexpr bool G32 = decltype(g32_tag)::value;
    uint32_t P[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) unit_pairs<Bits>(r.st + row_off[h] + u * Bits, t, P[h]);
    const uint32_t a[2][4] = {{P[0][0], P[1][0], P[0][1], P[1][1]}, {P[0][2], P[1][2], P[0][3], P[1][3]}};
    const float sx = xsums[r.t0 + u];
    const uint4* xs = xp + (r.t0 + u) * (kTerms * 4);
    auto sb_of = [&](int h, float& scale, float& bias) {
      const uint32_t* w = r.st + (PC ? pc_off : row_off[h]) + L::kCodeWords;
      if constexpr (G32) {
        const int q = u >> 1, sh = 16 * r.par[h];
        const uint32_t ws = __funnelshift_r(w[q], w[q + 1], sh), wb = __funnelshift_r(w[4 + q], w[5 + q], sh);
        scale = __uint_as_float((u & 1) != 0 ? ws & 0xFFFF0000u : ws << 16);
        bias = __uint_as_float((u & 1) != 0 ? wb & 0xFFFF0000u : wb << 16);
      } else {
        const int li = r.par[h] + ((u * 32) >> W.group_shift);
        const uint16_t* w16 = reinterpret_cast<const uint16_t*>(w);
        scale = from_bf16(w16[li]), bias = from_bf16(w16[8 + li]);
      }
    };
    if constexpr (PC) {
      float scale, bias;
      sb_of(0, scale, bias);
      float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      pc_mma(c, a, xs[0]);
      const float d = pc_combine(c, t);
      acc[0] = __fmaf_rn(bias, sx, __fmaf_rn(scale, d, acc[0]));
    } else {
      uint4 b[kTerms];
#pragma unroll
      for (int j = 0; j < kTerms; ++j) b[j] = xs[j * 4];
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      unit_mma(part, a, b);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float scale, bias;
        sb_of(h, scale, bias);
        acc[h] = __fmaf_rn(scale, part[2 * h], acc[h]);
        acc[h] = __fmaf_rn(bias, sx, acc[h]);
      }
    }
  };
  auto units2 = [&](float(&acc)[2], const Ref& r, auto tag) {
    if (r.nu == kUnitsPerStage) {
#pragma unroll
      for (int u = 0; u < kUnitsPerStage; ++u) unit2(acc, r, u, tag);
    } else {
      for (int u = 0; u < r.nu; ++u) unit2(acc, r, u, tag);
    }
  };
  auto run_stages = [&](float(&acc)[2], const int64_t(&sb_r)[2]) {
    const int se = static_cast<int>(s_end);
    for (int s = static_cast<int>(s_begin); s < se;) {
      const int n = (Mode & kPair) != 0 ? min(2, se - s) : 1;
#pragma unroll
      for (int i = 0; i < ((Mode & kPair) != 0 ? 2 : 1); ++i) {  // into the slots decoded last
        if (i == 0 || n == 2) {
          issue_next(ring + fill * L::kWords);
          fill = fill == KS - 1 ? 0 : fill + 1;
        }
      }
      tc::cp_async_wait<kAhead>();  // the n oldest stages (s, s + 1) have landed (this lane's copies) ...
      __syncwarp();                 // ... and every lane's
      const Ref r0 = stage_ref(slot, s, sb_r), r1 = stage_ref(slot == KS - 1 ? 0 : slot + 1, s + 1, sb_r);
      auto decode = [&](auto tag) {
        if ((Mode & kPair) != 0 && n == 2 && r1.nu == kUnitsPerStage) {  // 8 units in one block of code
#pragma unroll
          for (int u = 0; u < 2 * kUnitsPerStage; ++u)
            unit2(acc, u < kUnitsPerStage ? r0 : r1, u % kUnitsPerStage, tag);
        } else {
          units2(acc, r0, tag);
          if (n == 2) units2(acc, r1, tag);
        }
      };
      if (W.group_shift == 5)
        decode(std::true_type{});
      else
        decode(std::false_type{});
      __syncwarp();  // every lane is done with the stages before their slots are refilled
      s += n, slot += n;
      if (slot >= KS) slot -= KS;
    }
  };
  for (int parity = 0; o0 < W.rows; o0 += step, parity ^= 1) {
    // Chained: acc[h] is D element 2h (output g + 8h, column 2t; the row's on t == 0). Plane columns: acc[0]
    // is this lane's d of output g + 8 (t & 1) (the row's on t < 2).
    float acc[2] = {0.0f, 0.0f};
    int64_t sb_r[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      sb_r[h] = W.sb_base + min(o0 + g + 8 * (PC ? pc_h : h), W.rows - 1) * W.groups_per_row;
    if constexpr (Mode != 0)
      run_stages(acc, sb_r);
    else
      for (int64_t s = s_begin; s < s_end; ++s, slot = slot == KS - 1 ? 0 : slot + 1) {
        issue_next(ring + (slot == 0 ? KS - 1 : slot - 1) * L::kWords);  // the slot decoded last
        tc::cp_async_wait<KS - 1>();  // stage s has landed (this lane's copies) ...
        __syncwarp();                 // ... and every lane's
        const uint32_t* st = ring + slot * L::kWords;
        const int64_t t0 = s * kUnitsPerStage;
        // The stage's scale words start at the word of its first group: li = parity + (u * 32) >> shift.
        const int64_t g0 = (t0 * 32) >> W.group_shift;
        int par[2];
        const uint16_t* sbp[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          par[h] = static_cast<int>((sb_r[h] + g0) & 1);
          sbp[h] = reinterpret_cast<const uint16_t*>(st + (PC ? pc_off : row_off[h]) + L::kCodeWords);
        }
        const float* sums = xsums + t0;
        const uint4* xs = xp + t0 * (kTerms * 4);
        auto unit_step = [&](int u) {
          uint32_t P[2][4];
#pragma unroll
          for (int h = 0; h < 2; ++h) unit_pairs<Bits>(st + row_off[h] + u * Bits, t, P[h]);
          const uint32_t a[2][4] = {{P[0][0], P[1][0], P[0][1], P[1][1]},
                                    {P[0][2], P[1][2], P[0][3], P[1][3]}};
          const int gl = (u * 32) >> W.group_shift;
          const float sx = sums[u];
          if constexpr (PC) {
            const int li = par[0] + gl;
            const float scale = from_bf16(sbp[0][li]), bias = from_bf16(sbp[0][8 + li]);
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            pc_mma(c, a, xs[u * kTerms * 4]);
            const float d = pc_combine(c, t);
            acc[0] = __fmaf_rn(bias, sx, __fmaf_rn(scale, d, acc[0]));
          } else {
            uint4 b[kTerms];
#pragma unroll
            for (int j = 0; j < kTerms; ++j) b[j] = xs[(u * kTerms + j) * 4];
            float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            // Per k step the smallest term first: decode_kernel's order.
            unit_mma(part, a, b);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int li = par[h] + gl;
              const float scale = from_bf16(sbp[h][li]), bias = from_bf16(sbp[h][8 + li]);
              acc[h] = __fmaf_rn(scale, part[2 * h], acc[h]);
              acc[h] = __fmaf_rn(bias, sx, acc[h]);
            }
          }
        };
        stage_units(static_cast<int>(min(int64_t{kUnitsPerStage}, T - t0)), unit_step);
        __syncwarp();  // every lane is done with stage s before its slot is refilled
      }
    if (!merge_row(sl, acc, merge_area, parity, warp, lane) || count <= 0) continue;
    if constexpr (PC) {
      const int64_t o = o0 + g + 8 * pc_h;
      if (t < 2 && o < W.rows) store(o, 0, acc[0]);
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int64_t o = o0 + g + 8 * h;
        if (t == 0 && o < W.rows) store(o, h, acc[h]);
      }
    }
  }
  // The combine folded into the down's routed form (rows a whole number of blocks: every warp gets here).
  if (group.combine.out != nullptr)
    dev::one_row_combine(group.combine, n_tiles, group.combine.counters + blockIdx.x,
                         int64_t{blockIdx.x} * sl.block_outputs(), static_cast<int>(sl.block_outputs()), y,
                         ldy);
}

template <int Bits, bool PC, int MinBlocks, bool Lean, int Mode>
struct RowLaunch {
  static constexpr auto kernel = row_kernel<Bits, PC, MinBlocks, Lean, Mode>;
  static constexpr size_t kRing = size_t{kWarps} * row_slots(Mode) * Stage<Bits>::kWords * 4;
  static constexpr size_t kMerge = size_t{2} * kWarps * 64 * 4;
  // The split's planes, sums and pair sums (split_row_in_block), then the merge area.
  static size_t bytes(int64_t T) { return kRing + static_cast<size_t>(T) * (kTerms * 64 + 4 + 16) + kMerge; }
  // Blocks resident at once on the current device for a row width (its split takes shared memory), after the
  // opt-in for the widest row on that device (kernel_limits.h: each once per device, then lookups).
  static int64_t resident(int64_t T) {
    opt_in_dynamic_smem(kernel, static_cast<int>(bytes(kInBlockMaxCols / 32)),
                        "tc_decode (one row): cudaFuncSetAttribute");
    return blocks_resident(kernel, kThreads, bytes(T), "tc_decode (one row): occupancy");
  }
  // A single matrix: persistent blocks over the output blocks (as many as are resident at once); expert
  // tiles: one output block a block.
  static void launch(const DecodeWeight& W, Slicing sl, dim3 grid, bool persistent, const ExpertWindow* tiles,
                     int n_rows, const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy,
                     int64_t n_experts, int64_t half, const OneRowTiles& group, cudaStream_t stream) {
    const int64_t T = W.cols / 32, resident_now = resident(T);
    dim3 g = grid;
    const bool tiled = tiles != nullptr || group.topk != nullptr;
    if (!tiled && persistent) g.x = static_cast<unsigned>(std::min<int64_t>(grid.x, resident_now));
    kernel<<<g, kThreads, bytes(T), stream>>>(W, sl, tiles, n_rows, row_ids, X, y, ldy, n_experts, half,
                                              group);
  }
};

template <int Bits, bool PC, bool Lean, int Mode = 0>
void launch_lean(int v, const DecodeWeight& W, Slicing sl, dim3 grid, const ExpertWindow* tiles, int n_rows,
                 const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy, int64_t n_experts,
                 int64_t half, const OneRowTiles& group, cudaStream_t stream) {
  using Three = RowLaunch<Bits, PC, 3, Lean, Mode>;
  using Four = RowLaunch<Bits, PC, 4, Lean, Mode>;
  bool three = (v & 2) != 0;
  // Bit 3: expert tiles take the 4-block kernel where it runs them in fewer waves than the 3-block one
  // (e.g. one stream's down, 11 tiles x 40 blocks: 1 wave against 2 on 132 SMs).
  if (three && (v & 8) != 0 && (tiles != nullptr || group.topk != nullptr)) {
    const int64_t T = W.cols / 32, blocks = int64_t{grid.x} * grid.y;
    const int64_t r3 = Three::resident(T), r4 = Four::resident(T);
    if ((blocks + r4 - 1) / r4 < (blocks + r3 - 1) / r3) three = false;
  }
  const bool persistent = (v & 1) == 0;
  if (three)
    Three::launch(W, sl, grid, persistent, tiles, n_rows, row_ids, X, y, ldy, n_experts, half, group, stream);
  else
    Four::launch(W, sl, grid, persistent, tiles, n_rows, row_ids, X, y, ldy, n_experts, half, group, stream);
}

}  // namespace

// Variants (tc_decode_row_variant; the same arithmetic, so the same bits): bit 0: one output block a block
// instead of persistent blocks; bit 1: registers for 3 blocks an SM instead of 4; bit 2: the lean stage copy
// (RowCopy::issue); bit 3 (with bit 1): expert tiles on the 4-block kernel where that saves a wave; bit 4
// (tcmid12; the copy then always lean): kLean2; bit 5: kPair with kLean2 (+32 and +48 are the same launch).
template <int Bits, bool PC>
void launch_row(const DecodeWeight& W, Slicing sl, dim3 grid, const ExpertWindow* tiles, int n_rows,
                const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy, int64_t n_experts,
                int64_t half, const OneRowTiles& group, cudaStream_t stream) {
  const int v = tc_decode_row_variant();
  // Expert tiles from `tiles` or found by the launch itself (group.topk: the routed down has tiles ==
  // nullptr, half == 0) never take the single-matrix warp-parallel kernel, which ignores the group.
  if ((v & 192) != 0 && row_par_takes(W, tiles != nullptr || group.topk != nullptr, half, PC))
    return launch_row_par<Bits>(v, W, sl, grid.y, n_rows, row_ids, X, y, ldy, stream);
  const int mode = (v >> 4) & 3;
  if (mode == kLean2)
    launch_lean<Bits, PC, true, kLean2>(v, W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, half,
                                        group, stream);
  else if (mode != 0)  // kPair always with kLean2
    launch_lean<Bits, PC, true, kLean2 | kPair>(v, W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts,
                                                half, group, stream);
  else if (v & 4)
    launch_lean<Bits, PC, true>(v, W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, half, group,
                                stream);
  else
    launch_lean<Bits, PC, false>(v, W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, half, group,
                                 stream);
}

#define DS_TC_ROW(B)                                                                                    \
  template void launch_row<B, false>(const DecodeWeight&, Slicing, dim3, const ExpertWindow*, int,      \
                                     const int32_t*, const DecodeX&, float*, int64_t, int64_t, int64_t, \
                                     const OneRowTiles&, cudaStream_t);                                 \
  template void launch_row<B, true>(const DecodeWeight&, Slicing, dim3, const ExpertWindow*, int,       \
                                    const int32_t*, const DecodeX&, float*, int64_t, int64_t, int64_t,  \
                                    const OneRowTiles&, cudaStream_t);
DS_TC_ROW(2)
DS_TC_ROW(3)
DS_TC_ROW(4)
DS_TC_ROW(5)
DS_TC_ROW(6)
DS_TC_ROW(8)
#undef DS_TC_ROW

}  // namespace ds::cuda::tcd
