// Expert tiles for the prompt path's routed experts (tc_products.h, moe_expert_tiles): a routing grouped by
// expert into tiles of up to kTileRows slots, deterministically.
#include <algorithm>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/tc_products.h"

namespace ds::cuda {

namespace {

// Expert grouping: one block per expert counts its (row, rank) pairs; one thread turns the counts into slot
// and tile offsets; one block per expert writes its slots (in pair order, by a block-wide prefix) and tiles.
constexpr int kGroupThreads = 256;

// Each kernel waits for the one before it first: the decode tensor products run them inside a round's graph
// with programmatic edges (grid_dependency.cuh).
__global__ void count_pairs_kernel(const int32_t* topk, int total, int32_t* counts) {
  dev::grid_dependency_wait();
  const int e = blockIdx.x;
  int c = 0;
  for (int i0 = 0; i0 < total; i0 += kGroupThreads) {
    const int i = i0 + threadIdx.x;
    c += __syncthreads_count(i < total && topk[i] == e);
  }
  if (threadIdx.x == 0) counts[e] = c;
}

__global__ void offsets_kernel(const int32_t* counts, int n_experts, int32_t* slot_start, int32_t* tile_start,
                               ExpertWindow* tiles, int max_tiles, int tile_rows) {
  dev::grid_dependency_wait();
  __shared__ int n_tiles;
  if (threadIdx.x == 0) {
    int slots = 0, ts = 0;
    for (int e = 0; e < n_experts; ++e) {
      slot_start[e] = slots;
      tile_start[e] = ts;
      slots += counts[e];
      ts += (counts[e] + tile_rows - 1) / tile_rows;
    }
    n_tiles = ts;
  }
  __syncthreads();
  for (int i = n_tiles + threadIdx.x; i < max_tiles; i += blockDim.x) tiles[i] = ExpertWindow{0, 0, 0};
}

__global__ void fill_slots_kernel(const int32_t* topk, int total, int k, int n_experts, const int32_t* counts,
                                  const int32_t* slot_start, const int32_t* tile_start, ExpertWindow* tiles,
                                  int max_tiles, int tile_rows, int32_t* row_ids, int32_t* slot_of) {
  dev::grid_dependency_wait();
  __shared__ int warp_total[kGroupThreads / 32];
  const int e = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int base = slot_start[e];
  int running = 0;
  for (int i0 = 0; i0 < total; i0 += kGroupThreads) {
    const int i = i0 + threadIdx.x;
    const int id = i < total ? topk[i] : -1;
    const bool mine = id == e;
    if (e == 0 && i < total && (id < 0 || id >= n_experts)) slot_of[i] = -1;
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, mine);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int before = running;
    for (int w = 0; w < warp; ++w) before += warp_total[w];
    if (mine) {
      const int slot = base + before + __popc(ballot & ((1u << lane) - 1u));
      row_ids[slot] = i / k;
      slot_of[i] = slot;
    }
    for (int w = 0; w < kGroupThreads / 32; ++w) running += warp_total[w];
    __syncthreads();
  }
  const int c = counts[e];
  for (int j = threadIdx.x; j * tile_rows < c; j += blockDim.x)
    if (tile_start[e] + j < max_tiles)
      tiles[tile_start[e] + j] = ExpertWindow{e, base + j * tile_rows, min(tile_rows, c - j * tile_rows)};
}

}  // namespace

int max_expert_tiles(int n_rows, int k, int n_experts, int tile_rows) {
  const int total = n_rows * k;
  return (total + tile_rows - 1) / tile_rows + std::min(n_experts, total);
}

size_t expert_tiles_scratch_bytes(int n_experts) {
  return sizeof(int32_t) * 3 * static_cast<size_t>(n_experts);
}

void moe_expert_tiles(const int32_t* topk, int n_rows, int k, int n_experts, ExpertWindow* tiles,
                      int max_tiles, int32_t* row_ids, int32_t* slot_of, void* scratch, cudaStream_t stream,
                      int tile_rows) {
  if (n_experts < 1 || n_experts > 65536 || k < 1 || n_rows < 0)
    throw ArgumentError("moe_expert_tiles: n_experts must be 1..65536, k >= 1");
  if (tile_rows < 1 || tile_rows > kTileRows)
    throw ArgumentError("moe_expert_tiles: tile_rows must be 1..64");
  if (max_tiles < max_expert_tiles(n_rows, k, n_experts, tile_rows))
    throw ArgumentError(
        "moe_expert_tiles: max_tiles is below max_expert_tiles(n_rows, k, n_experts, tile_rows)");
  const int total = n_rows * k;
  if (total == 0) return;
  auto* counts = static_cast<int32_t*>(scratch);
  int32_t* slot_start = counts + n_experts;
  int32_t* tile_start = slot_start + n_experts;
  count_pairs_kernel<<<n_experts, kGroupThreads, 0, stream>>>(topk, total, counts);
  check_launch("moe_expert_tiles: count");
  offsets_kernel<<<1, kGroupThreads, 0, stream>>>(counts, n_experts, slot_start, tile_start, tiles, max_tiles,
                                                  tile_rows);
  check_launch("moe_expert_tiles: offsets");
  fill_slots_kernel<<<n_experts, kGroupThreads, 0, stream>>>(topk, total, k, n_experts, counts, slot_start,
                                                             tile_start, tiles, max_tiles, tile_rows, row_ids,
                                                             slot_of);
  check_launch("moe_expert_tiles: slots");
}

}  // namespace ds::cuda
