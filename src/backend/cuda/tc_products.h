#pragma once
// Tensor-core weight products for prompt passes (docs/cuda-model.md, "Prompt path"): y = x W^T for many
// rows of fp32 x, W MLX affine (bits 2-8, group 32/64/128, bf16 scales/biases) or dense bf16, on fixed tiles
// of 64 rows (expert tiles: 16, 32 or 64) x 64 outputs x 32 columns with `mma.sync` m16n8k16 (bf16 in, fp32
// accumulate). Row invariant by construction: a row's result is the same sequence of MMAs over its own x row
// whatever the other rows of the tile (rows past the count are zeros) and whatever the tile's row count, and
// the column order (with a k split, its ranges and their sum) is fixed by the weight's shape.
//
// Arithmetic per (row r, output o), tile by tile of 32 columns (a tile lies inside one affine group):
// x is split exactly into three bf16 terms (x = x0 + x1 + x2), the codes q (integers < 256) are exact in
// bf16, so each MMA product is exact and the tile's dot d = x . q is an fp32 sum of exact products; then y =
// fma(bias, sum(x), fma(scale, d, y)) with sum(x) of the tile's 32 values in a fixed order (the CPU's scale *
// (x . q) + bias * sum(x) form). Dense bf16 weights: the same MMAs on the values, summed over the row. A
// weight with few output tiles and many k tiles (tiled_fixed_splits) is summed in k ranges, each as above
// from zero, their results added in range order.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/wx_products.h"

namespace ds::cuda {

constexpr int kTileRows = 64;     // rows of x per tile (padded with zeros)
constexpr int kTileOutputs = 64;  // outputs per tile (TiledConfig: 64 or 128; the k split's rule counts 64)
constexpr int kTileCols = 32;     // columns per k step

// The k split of short, wide weights (hyper-connection down 320 x 10240, inject 4 x 10240): fewer than
// kSplitMaxOutputTiles output tiles and at least kSplitMinKTiles k tiles are cut into ranges of at least
// kSplitMinKTiles / 2 k tiles, enough for about kSplitTargetTiles (output tile, range) blocks per row tile.
constexpr int kSplitMaxOutputTiles = 16, kSplitMinKTiles = 64, kSplitTargetTiles = 32;

// A weight the tiled products take: MLX affine (affine.codes set) or dense bf16 (dense set), possibly stacked
// experts ([n_experts, rows, cols]).
struct TiledWeight {
  AffineWeight affine;              // used when dense == nullptr
  const uint16_t* dense = nullptr;  // bf16 [n_experts, rows, cols]
  int64_t rows = 0, cols = 0, n_experts = 1;
};

// Whether the tiled products take this shape/encoding (cols a multiple of 32; affine bits 2-6 or 8, group 32,
// 64 or 128; the code words, or dense values, of all experts under 2^31: the kernels index them by 32-bit
// offsets). Callers use the decode products otherwise (a function of the weight alone).
bool tiled_supported(const TiledWeight& w);

// The kernel's output tiles: 64 outputs (blocks of 128 threads, registers fitted to 4 or 3 blocks an SM) or
// 128 (256 threads, 2 blocks an SM: x read from L2 half as often). Every choice gives the same bits (an
// output's MMAs do not depend on its tile); process-wide, for measuring: DS_CUDA_TILED_OUTPUTS ("64/4",
// "64/3", "128/2") sets it at first use, set_tiled_config before launching.
struct TiledConfig {
  int tile_outputs = 128;
  int min_blocks = 2;
};
TiledConfig tiled_config();
void set_tiled_config(const TiledConfig& c);  // 64/4, 64/3 or 128/2, else ArgumentError

// How many k ranges tiled_wx sums a weight in: a function of its shape alone (rows, cols), never of the rows
// of x, so a row's bits stay those of the row alone. 1 for most weights.
int tiled_fixed_splits(const TiledWeight& w);

// The expert tiles' row count for a prompt pass of n_rows routed top-k over n_experts: 16, 32 or 64 by the
// mean rows an expert. Any choice gives every slot the same bits (the tile's row count changes no row's
// MMAs); the rule only trades empty tile rows against decoding an expert's codes once per tile.
int prompt_expert_tile_rows(int n_rows, int k, int n_experts);

// y[r*ldy + o] = sum_i W[o,i] x[r*ldx + i] for r < n_rows (any count), one expert (n_experts == 1).
// x 16-byte aligned, ldx a multiple of 4, and >= cols when more than one x row is read (here, in
// tiled_wx_split_k and tiled_wx_experts: ArgumentError naming ldx and cols). x is first split into bf16
// planes in scratch from the stream-ordered pool (cudaMallocAsync: not inside a graph capture); n_rows * cols
// under 2^31.
void tiled_wx(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
              cudaStream_t stream);

// The same tiles with the k tiles cut into exactly `splits` ranges run by separate blocks, their partial sums
// added after in range order (workspace: splits * n_rows * rows floats); splits 1: no split. For measuring
// the cost of row invariance: a caller choosing splits by the row count makes a row's bits depend on the
// launch's size.
void tiled_wx_split_k(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
                      int splits, float* workspace, cudaStream_t stream);

// Expert tiles: tile i computes y rows first .. first+count-1 (count 0..tile_rows; 0: unused, skipped) with
// expert `expert` on x rows row_ids[first + j] (or x row first + j when row_ids is null) of the n_x_rows rows
// of x. The same ExpertWindow struct as the decode expert windows; tile_rows (1..64: the grouping's) picks
// kernel tiles of 16, 32 or 64 rows. Each row's bits equal tiled_wx of that expert on that row alone when
// that weight takes no k split (tiled_fixed_splits == 1: every expert shape of the Flash Next models).
void tiled_wx_experts(const TiledWeight& w, const ExpertWindow* tiles, int max_tiles, const int32_t* row_ids,
                      const float* x, int64_t ldx, int n_x_rows, float* y, int64_t ldy, cudaStream_t stream,
                      int tile_rows = kTileRows);

// Expert tiles (expert_tiles.cu). The most expert tiles a routing of n_rows x k can need with n_experts
// experts and tiles of at most tile_rows slots.
int max_expert_tiles(int n_rows, int k, int n_experts, int tile_rows = kTileRows);
// Bytes of scratch moe_expert_tiles needs.
size_t expert_tiles_scratch_bytes(int n_experts);

// Groups a routing (topk [n_rows, k] expert ids, device) into expert tiles, deterministically (no atomics on
// the order): slots are experts ascending, each expert's (row, rank) pairs in ascending row order; tiles of
// up to tile_rows (1..kTileRows) slots of one expert; unused tiles up to max_tiles get count 0. row_ids
// [n_rows*k] (x row of each slot), slot_of [n_rows*k] (slot of pair (row, rank); -1 for an id out of range).
// n_experts <= 65536. shared_expert (n_experts - 1, or -1: none): an expert every row also takes (the shared
// expert stacked after the routed ones), one more pair per row after the n_rows*k routed pairs; its slots
// are n_rows*k + r for row r (after the routed slots), not listed in slot_of; max_tiles then counts k + 1
// pairs a row.
void moe_expert_tiles(const int32_t* topk, int n_rows, int k, int n_experts, ExpertWindow* tiles,
                      int max_tiles, int32_t* row_ids, int32_t* slot_of, void* scratch, cudaStream_t stream,
                      int tile_rows = kTileRows, int shared_expert = -1);

}  // namespace ds::cuda
