#pragma once
// Tensor-core weight products for decode (docs/cuda-products.md, "Decode products on the tensor cores"): y =
// x W^T for any number of rows (1 .. 64 a tile, tiles of 64 rows side by side in one launch), W MLX affine
// (bits 2-6, 8; group 32/64/128) or dense bf16, with `mma.sync` m16n8k16: the weights are the A operand (16
// outputs a fragment), the rows the B operand (8 rows a fragment, so one row costs a fragment of 8, not 16).
//
// Per (row r, output o) the arithmetic is the prompt products' (tc_products.h): x split exactly into three
// bf16 terms, per 32-column tile d = x . q inside the MMAs (smallest term first; or per term, TcPlanes
// below), then y = fma(bias, sum(x), fma(scale, d, y)) in column order; dense: the MMAs summed over the row
// (columns: y + d per tile). The columns inside a tile are taken
// in a fixed permuted order (each lane's 8 codes are contiguous in the bit stream), so the bits need not
// equal the prompt kernel's; the order depends on the weight's shape alone. No split-K, no atomics, rows past
// the count are zeros: a row's bits depend only on its own x row and W, never on the rows beside it. The
// columns may be cut into 2 or 4 slices by the matrix's shape alone (tc_decode_column_slices).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/tc_products.h"

namespace ds::cuda {

constexpr int kDecodeTileRows = 64;  // rows of one tile (the row tier is 8, 16, 32 or 64: same bits)
// Decode expert tiles hold at most 8 slots (one B fragment): the kernel then runs its lightest tier at every
// row count; an expert serving more rows of a step is read once per 8 of them (rare with 512 experts).
constexpr int kDecodeExpertTileRows = 8;

// Whether the decode tensor products take this weight: tiled_supported (cols a multiple of 32), codes 16-byte
// aligned, scales and biases at the same offset mod 4 bytes. A function of the weight alone.
bool tc_decode_supported(const TiledWeight& w);
// Below this many outputs a weight leaves most of the GPU idle (16 outputs a warp, no split-K): the model
// keeps the FMA products (column slices) for it by default.
constexpr int64_t kDecodeMinRows = 1024;

// Whether windows (and expert tiles) of at most 8 rows of MLX affine weights run the small-window kernel
// (tc_gemv.cu: x and its tile sums staged in the weights' cp.async ring; the same bits as the general kernel,
// checked) instead of the general one. On by default; off is for the bench's before/after. Process-wide.
void tc_decode_small_windows(bool on);
bool tc_decode_small_windows_on();
// Whether that kernel, for one row (a launch of one row or expert tiles of one slot) of at most 8192 columns,
// splits the row into bf16 planes and tile sums itself, each block in shared memory (the split launch's
// values, bit for bit), leaving the split launch out. On by default; process-wide.
void tc_decode_one_row_in_block(bool on);
bool tc_decode_one_row_in_block_on();
// Whether those one-row launches (rows of codes a multiple of 16 bytes) take the one-row kernel (tc_row.cu,
// tcrow10: the same bits, checked; no work kept for the 7 B columns that hold no row, precomputed copy
// offsets, persistent blocks). A call sets it for both layouts. Without one, the first launch reads
// DS_CUDA_TC_ROW (1: on, 0: off; other values throw naming it), else kDefaultTcRowKernel, under both layouts
// (Columns since tc11, once its device checks had passed). Process-wide (set it before a model captures its
// graphs). tc_decode_row_kernel_on(): whether it is taken now.
constexpr bool kDefaultTcRowKernel = true;
void tc_decode_row_kernel(bool on);
bool tc_decode_row_kernel_on();
// The one-row kernel's launch variant now (DS_CUDA_TC_ROW_VARIANT, else the default; tc_decode_parts.cuh).
int tc_decode_row_variant();

// The column split, fixed by the matrix's shape (never by the row count), as the FMA products' column_slices:
// S = 4 slices of the matrix's 4-unit stages when it has at most 4096 outputs (256 groups of 16), 2 up to
// 8192, else 1, halved until every slice has kMinSliceStages stages (shorter slices measured slower: a
// 5-stage chain is already in flight at once, and the merge and 4x the blocks cost more than they save, e.g.
// the experts' down, 2560 x 640, in tiles). Each slice is its own chain (the arithmetic above over
// its columns, from zero); S warps of one block run the slices of 16 outputs and meet in shared memory as
// (s0 + s1) + (s2 + s3). Short matrices and the experts (160 and 80 warps a matrix unsplit) get S times the
// warps, each with an S times shorter chain. Both kernels take the same S, so the bits stay those of every
// row count and window.
constexpr int64_t kSplitMaxGroups4 = 256;
constexpr int64_t kSplitMaxGroups2 = 512;
constexpr int64_t kMinSliceStages = 5;
int tc_decode_column_slices(int64_t rows, int64_t cols);
// Forces S (1, 2 or 4, still halved to the stage count) for every matrix, or 0: the rule above. For the
// bench's before/after only (a process-wide switch; the bits change with it). Throws on other values.
void tc_decode_force_column_slices(int slices);
int tc_decode_forced_column_slices();  // 0: the rule

// Where a tile's three x planes meet: the family's arithmetic at every row count (process-wide, so no row's
// bits depend on a call's rows; the bits differ between the two, both within the bound below).
// - Chained (the default): per k step the three planes run as three MMAs into one accumulator, d = the
//   6-MMA chain of the unit (one row costs a fragment of 8 rows and the whole chain).
// - Columns: each plane its own 2-MMA chain d_p, then d = (d2 + d1) + d0 (worst err/bound measured 10x
//   smaller). Run as plane columns at 1-2 rows (B columns 4j .. 4j+3 hold row j's planes (x2, x1, x0, 0):
//   one MMA a k step for two rows, a lane pair meets the planes by one shuffle) and as plane accumulators
//   from 4 rows (B columns are 8 rows, each plane its own accumulator: the chained MMA count); an MMA's
//   D[i][n] depends only on A's row i, B's column n and C[i][n], so both give the same bits (checked).
//   Measured (docs/receipts/cuda-decode-streams.md, "Plane columns"): 1.06-1.17x chained at one row,
//   0.96-1.01x at 8, about 1x at 16 (0.92-1.15x), 1.02-1.07x at 64; the expert tiles 1.12x at one stream,
//   0.96x at 8-64.
enum class TcPlanes { Chained, Columns };
constexpr TcPlanes kDefaultTcPlanes = TcPlanes::Chained;
// Sets the layout for every later launch (process-wide: set it before a model captures its graphs, which
// keep the kernels they captured; the checks' and bench's before/after). Without a call, the first launch
// reads DS_CUDA_TC_PLANES (columns | chained; other values throw naming it), else kDefaultTcPlanes.
void tc_decode_set_planes(TcPlanes p);
TcPlanes tc_decode_planes();
const char* tc_planes_name(TcPlanes p);

// Scratch (device) for x split into bf16 planes: n_x rows of `cols` columns.
size_t tc_decode_scratch_bytes(int64_t cols, int64_t n_x);

// y[r*ldy + o] = sum_i W[o,i] x[r*ldx + i] for r < n_rows, one matrix (n_experts == 1). x 16-byte aligned,
// ldx a multiple of 4, and >= cols when more than one x row is read (every form below: ArgumentError naming
// ldx and cols). `scratch` holds tc_decode_scratch_bytes(cols, n_rows) bytes (caller-owned, so the
// launches allocate nothing and can be captured in a graph). Two launches: the split, then the product.
void tc_decode_wx(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
                  void* scratch, size_t scratch_bytes, cudaStream_t stream);

// Expert tiles (moe_expert_tiles' grouping: tiles of up to 64 slots of one expert): y rows first .. first +
// count - 1 of tile i are expert `expert` on x rows row_ids[first + j] (or first + j when row_ids is null) of
// the n_x_rows rows of x. `tile_rows` bounds every tile's count (at most 64; the launch's row tier). Each
// slot's bits equal tc_decode_wx of its expert on its row alone. scratch: tc_decode_scratch_bytes(cols,
// n_x_rows).
void tc_decode_experts(const TiledWeight& w, const ExpertWindow* tiles, int max_tiles, int tile_rows,
                       const int32_t* row_ids, const float* x, int64_t ldx, int n_x_rows, float* y,
                       int64_t ldy, void* scratch, size_t scratch_bytes, cudaStream_t stream);

// Expert tiles of gate|up (w: [2 half, cols] an expert, gate rows first) with the SwiGLU in the product's
// epilogue (session 12): h[slot * ldh + o] = silu(gate o) * (up o), silu_mul_halves' expression, for o <
// half, bit for bit tc_decode_experts into gu followed by silu_mul_halves (checked, memcmp). Taken where the
// tiles run the one-row kernel (tile_rows 1; tc_decode_row_kernel_on), the weight is MLX affine and half is
// a multiple of the launch's output block (tc_decode_column_slices), and the fold is on; returns false having
// launched nothing otherwise (the caller runs the two ops). Arguments as tc_decode_experts.
bool tc_decode_experts_swiglu(const TiledWeight& w, const ExpertWindow* tiles, int max_tiles, int tile_rows,
                              const int32_t* row_ids, const float* x, int64_t ldx, int n_x_rows, float* h,
                              int64_t ldh, void* scratch, size_t scratch_bytes, cudaStream_t stream);
// Whether tc_decode_experts_swiglu takes (w, tile_rows) now.
bool tc_decode_swiglu_takes(const TiledWeight& w, int tile_rows);
// The fold on or off for every later launch (process-wide; the bench's before/after). Without a call, the
// first use reads DS_CUDA_TC_SWIGLU (1: on, 0: off; other values throw naming it), else kDefaultTcSwiglu.
constexpr bool kDefaultTcSwiglu = true;
void tc_decode_fold_swiglu(bool on);
bool tc_decode_fold_swiglu_on();

// tc_decode_experts_swiglu for one row's routing with the tile grouping folded into the same launch (session
// 12): topk [k] expert ids (device) of the one x row (x: cols floats), the shared expert (n_experts - 1, or
// -1) after them; each block finds its own tile from topk, and the launch writes tiles [max_tiles], row_ids
// and slot_of [k] exactly as moe_expert_tiles(topk, 1, k, n_experts, ..., tile_rows 1, shared_expert) does
// (checked, memcmp, bad ids included), so the down products and the combine read them as before. Taken
// where tc_decode_swiglu_takes(w, 1) holds, k + (shared) <= 32 and this fold is on; returns false having
// launched nothing otherwise (the caller groups and runs tc_decode_experts_swiglu or the separate ops).
// route (kTcRoutedRoute, session 13): the routing folded in too: every block routes the row from the
// router's logits (E <= 512 of them) with moe_route's arithmetic, and the launch writes topk (then an output)
// and route->weights as moe_route(logits, 1, E, k, renormalise, ...) does (checked, memcmp).
struct TcRoute {
  const float* logits = nullptr;
  int E = 0;
  bool renormalise = false;
  float* weights = nullptr;
};
bool tc_decode_experts_swiglu_routed(const TiledWeight& w, const int32_t* topk, int k, int shared_expert,
                                     ExpertWindow* tiles, int max_tiles, int32_t* row_ids, int32_t* slot_of,
                                     const float* x, float* h, int64_t ldh, void* scratch,
                                     size_t scratch_bytes, cudaStream_t stream,
                                     const TcRoute* route = nullptr);
bool tc_decode_grouping_takes(const TiledWeight& w, int k, bool shared);
// The grouping fold on or off (process-wide; DS_CUDA_TC_GROUP 1 | 0 at first use, else kDefaultTcGroupFold).
constexpr bool kDefaultTcGroupFold = true;
void tc_decode_fold_grouping(bool on);
bool tc_decode_fold_grouping_on();

// The routed expert forms at one row (session 13), a mask read from DS_CUDA_TC_EXPERT_ROUTED (0..15) at
// every call, else kDefaultTcExpertRouted (in the model's graph key):
// - kTcRoutedDown: tc_decode_experts_swiglu_routed launches blocks for the k (+ 1) tiles a routing can have
//   (not max_tiles: the rest found no tile), and the down runs tc_decode_experts_routed;
// - kTcRoutedEarly: that down finds its tile and issues its first weight stages before
//   griddepcontrol.wait (its topk must have been written before the launch before it: the model's routing,
//   then the gate|up launch, then the down);
// - kTcRoutedCombine: the down also runs the combine (TcCombine) for its row;
// - kTcRoutedRoute: the routing itself folded into the gate|up launch (TcRoute; the model then runs no
//   moe_route, and the down reads the ids after its wait: they come from the launch before it).
constexpr int kTcRoutedDown = 1, kTcRoutedEarly = 2, kTcRoutedCombine = 4, kTcRoutedRoute = 8;
// Measured (moe13, one stream, real shape, 4-bit g32): 1 + 2 the round -2.8% (row variant 14) / -3.0% (30); 4
// (+5%) and 8 (+10%) slower, off.
constexpr int kDefaultTcExpertRouted = kTcRoutedDown | kTcRoutedEarly;
int tc_decode_expert_routed();

// Where tc_decode_experts_routed's combine writes: out [rows] = moe_combine(weights, slots, slot_of, 1, k,
// rows, slot k (the shared expert's), shared_gate) for the one row, bit for bit; counters [n_counters] zero
// at the launch (left zero), at least one per output block of the launch (rows / 16 is enough).
struct TcCombine {
  const float* weights = nullptr;      // [k], rank order (moe_route's)
  const int32_t* slot_of = nullptr;    // [k], the grouping's (the gate|up launch wrote it)
  const float* shared_gate = nullptr;  // the shared expert's gate logit
  float* out = nullptr;
  uint32_t* counters = nullptr;
  int64_t n_counters = 0;
};

// Expert tiles of one slot for one row's routing, each block finding its own tile from topk as
// tc_decode_experts_swiglu_routed does (nothing written but y): y rows (slots) of the tiles' experts on x
// rows by slot (x: the h rows of the gate|up launch, ldx apart), the bits of tc_decode_experts over
// moe_expert_tiles' tiles (checked, memcmp). With combine (and kTcRoutedCombine, a shared expert, rows a
// whole number of the launch's output blocks) also the combine. topk_settled: topk was written before the
// launch before this one (else never kTcRoutedEarly). Returns 0 having launched nothing (kTcRoutedDown off,
// k + shared past 32, not the one-row kernel's shape), 1: the product, 2: the product and the combine.
int tc_decode_experts_routed(const TiledWeight& w, const int32_t* topk, int k, int shared_expert,
                             const float* x, int64_t ldx, float* y, int64_t ldy, const TcCombine* combine,
                             void* scratch, size_t scratch_bytes, cudaStream_t stream,
                             bool topk_settled = true);

}  // namespace ds::cuda
