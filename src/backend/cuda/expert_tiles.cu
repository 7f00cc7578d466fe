// Expert tiles for the routed experts of prompt passes and of the decode tensor products (tc_products.h,
// moe_expert_tiles): a routing (with, for decode, the shared expert) grouped by expert into tiles of up to
// tile_rows slots, deterministically.
#include <algorithm>
#include <string>

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
// The pairs: the routed ones (i < total: expert topk[i], row i / k), then with a shared expert one more per
// row (i = total + r: expert `shared`, row r). A routed id equal to the shared expert's is no routed expert
// (the routing's ids are below it): invalid (-1) like any other bad id, so it takes no slot (one_row_tile's
// rule too).
struct Pairs {
  const int32_t* topk;
  int total, k, all, shared;
  __device__ int expert(int i) const {
    if (i >= total) return shared;
    const int e = topk[i];
    return e == shared ? -1 : e;
  }
  __device__ int row(int i) const { return i < total ? i / k : i - total; }
};

__global__ void count_pairs_kernel(Pairs p, int32_t* counts) {
  dev::grid_dependency_wait();
  const int e = blockIdx.x;
  int c = 0;
  for (int i0 = 0; i0 < p.all; i0 += kGroupThreads) {
    const int i = i0 + threadIdx.x;
    c += __syncthreads_count(i < p.all && p.expert(i) == e);
  }
  if (threadIdx.x == 0) counts[e] = c;
}

__global__ void offsets_kernel(const int32_t* counts, int n_experts, int32_t* slot_start, int32_t* tile_start,
                               ExpertWindow* tiles, int max_tiles, int tile_rows, Pairs p) {
  dev::grid_dependency_wait();
  __shared__ int n_tiles;
  if (threadIdx.x == 0) {
    int slots = 0, ts = 0;
    for (int e = 0; e < n_experts; ++e) {
      if (e == p.shared) slots = p.total;  // its slots follow the routed pairs' even when some ids were bad
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

__global__ void fill_slots_kernel(Pairs p, int n_experts, const int32_t* counts, const int32_t* slot_start,
                                  const int32_t* tile_start, ExpertWindow* tiles, int max_tiles,
                                  int tile_rows, int32_t* row_ids, int32_t* slot_of) {
  dev::grid_dependency_wait();
  __shared__ int warp_total[kGroupThreads / 32];
  const int e = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int base = slot_start[e];
  int running = 0;
  for (int i0 = 0; i0 < p.all; i0 += kGroupThreads) {
    const int i = i0 + threadIdx.x;
    const int id = i < p.all ? p.expert(i) : -1;
    const bool mine = id == e;
    if (e == 0 && i < p.total && (id < 0 || id >= n_experts)) slot_of[i] = -1;
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, mine);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int before = running;
    for (int w = 0; w < warp; ++w) before += warp_total[w];
    if (mine) {
      const int slot = base + before + __popc(ballot & ((1u << lane) - 1u));
      row_ids[slot] = p.row(i);
      if (i < p.total) slot_of[i] = slot;
    }
    for (int w = 0; w < kGroupThreads / 32; ++w) running += warp_total[w];
    __syncthreads();
  }
  const int c = counts[e];
  for (int j = threadIdx.x; j * tile_rows < c; j += blockDim.x)
    if (tile_start[e] + j < max_tiles)
      tiles[tile_start[e] + j] = ExpertWindow{e, base + j * tile_rows, min(tile_rows, c - j * tile_rows)};
}

// The three kernels' grouping in one block (decode steps: few pairs, so the launches cost more than the
// work), the same tiles, row_ids and slot_of: counts (integer adds, in any order the same), an exclusive scan
// over the experts, then each pair's rank among its expert's pairs in pair order, chunk by chunk of 1024
// pairs: the pairs of its expert in earlier chunks (cursor), in earlier warps of this chunk (a per-warp count
// table, at most 32 each: bytes) and in earlier lanes of its warp (__match_any_sync).
constexpr int kOneBlockThreads = 1024, kOneBlockWarps = kOneBlockThreads / 32;
constexpr int kOneBlockMaxExperts = 1024, kOneBlockMaxPairs = 4096;

__device__ int block_exclusive_scan(int v, int* warp_sums, int& block_total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inc = v;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int o = __shfl_up_sync(0xFFFFFFFFu, inc, d);
    if (lane >= d) inc += o;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  int before = 0, total = 0;
  for (int w = 0; w < kOneBlockWarps; ++w) {
    before += w < warp ? warp_sums[w] : 0;
    total += warp_sums[w];
  }
  __syncthreads();  // warp_sums may be reused
  block_total = total;
  return before + inc - v;
}

__global__ void __launch_bounds__(kOneBlockThreads)
    group_one_block_kernel(Pairs p, int n_experts, ExpertWindow* tiles, int max_tiles, int tile_rows,
                           int32_t* row_ids, int32_t* slot_of) {
  dev::grid_dependency_wait();
  __shared__ int count[kOneBlockMaxExperts], slot_start[kOneBlockMaxExperts], cursor[kOneBlockMaxExperts];
  __shared__ uint8_t per_warp[kOneBlockWarps][kOneBlockMaxExperts];
  __shared__ int warp_sums[kOneBlockWarps];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int e = tid; e < n_experts; e += kOneBlockThreads) count[e] = 0, cursor[e] = 0;
  __syncthreads();
  for (int i = tid; i < p.all; i += kOneBlockThreads) {
    const int e = p.expert(i);
    if (e >= 0 && e < n_experts)
      atomicAdd(&count[e], 1);
    else if (i < p.total)
      slot_of[i] = -1;
  }
  __syncthreads();
  // Thread e (n_experts <= 1024: one each) scans its expert's slots and tiles, then writes its tiles.
  const int c = tid < n_experts ? count[tid] : 0, n_tiles_e = (c + tile_rows - 1) / tile_rows;
  int slots_total, tiles_total;
  int slot0 = block_exclusive_scan(c, warp_sums, slots_total);
  const int tile0 = block_exclusive_scan(n_tiles_e, warp_sums, tiles_total);
  if (tid == p.shared) slot0 = p.total;  // after the routed pairs' slots even when some ids were bad
  if (tid < n_experts) {
    slot_start[tid] = slot0;
    for (int j = 0; j < n_tiles_e; ++j)
      if (tile0 + j < max_tiles)
        tiles[tile0 + j] = ExpertWindow{tid, slot0 + j * tile_rows, min(tile_rows, c - j * tile_rows)};
  }
  for (int i = tiles_total + tid; i < max_tiles; i += kOneBlockThreads) tiles[i] = ExpertWindow{0, 0, 0};
  for (int i0 = 0; i0 < p.all; i0 += kOneBlockThreads) {
    for (int j = tid; j < kOneBlockWarps * n_experts; j += kOneBlockThreads)
      per_warp[j / n_experts][j % n_experts] = 0;
    __syncthreads();  // also: slot_start written, the previous chunk's cursor updated
    const int i = i0 + tid;
    const int e = i < p.all ? p.expert(i) : -1;
    const bool valid = e >= 0 && e < n_experts;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, valid ? e : -1);
    const unsigned lower = peers & ((1u << lane) - 1u);
    if (valid && lower == 0) per_warp[warp][e] = static_cast<uint8_t>(__popc(peers));
    __syncthreads();
    if (valid) {
      int rank = cursor[e] + __popc(lower);
      for (int w = 0; w < warp; ++w) rank += per_warp[w][e];
      const int slot = slot_start[e] + rank;
      row_ids[slot] = p.row(i);
      if (i < p.total) slot_of[i] = slot;
    }
    __syncthreads();
    for (int x = tid; x < n_experts; x += kOneBlockThreads) {
      int add = 0;
      for (int w = 0; w < kOneBlockWarps; ++w) add += per_warp[w][x];
      cursor[x] += add;
    }
    __syncthreads();  // the table is read before the next chunk clears it
  }
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
                      int tile_rows, int shared_expert) {
  if (n_experts < 1 || n_experts > 65536 || k < 1 || n_rows < 0)
    throw ArgumentError("moe_expert_tiles: n_experts must be 1..65536, k >= 1");
  if (tile_rows < 1 || tile_rows > kTileRows)
    throw ArgumentError("moe_expert_tiles: tile_rows must be 1..64");
  if (shared_expert != -1 && shared_expert != n_experts - 1)
    throw ArgumentError("moe_expert_tiles: shared_expert must be -1 or n_experts - 1 (got " +
                        std::to_string(shared_expert) + ")");
  const int with_shared = shared_expert >= 0 ? 1 : 0;
  if (max_tiles < max_expert_tiles(n_rows, k + with_shared, n_experts, tile_rows))
    throw ArgumentError(
        "moe_expert_tiles: max_tiles is below max_expert_tiles(n_rows, k (+ 1 with a shared expert), "
        "n_experts, tile_rows)");
  const int total = n_rows * k;
  if (total == 0) return;
  const Pairs p{topk, total, k, total + with_shared * n_rows, shared_expert};
  if (n_experts <= kOneBlockMaxExperts && p.all <= kOneBlockMaxPairs) {
    group_one_block_kernel<<<1, kOneBlockThreads, 0, stream>>>(p, n_experts, tiles, max_tiles, tile_rows,
                                                               row_ids, slot_of);
    check_launch("moe_expert_tiles: one block");
    return;
  }
  auto* counts = static_cast<int32_t*>(scratch);
  int32_t* slot_start = counts + n_experts;
  int32_t* tile_start = slot_start + n_experts;
  count_pairs_kernel<<<n_experts, kGroupThreads, 0, stream>>>(p, counts);
  check_launch("moe_expert_tiles: count");
  offsets_kernel<<<1, kGroupThreads, 0, stream>>>(counts, n_experts, slot_start, tile_start, tiles, max_tiles,
                                                  tile_rows, p);
  check_launch("moe_expert_tiles: offsets");
  fill_slots_kernel<<<n_experts, kGroupThreads, 0, stream>>>(p, n_experts, counts, slot_start, tile_start,
                                                             tiles, max_tiles, tile_rows, row_ids, slot_of);
  check_launch("moe_expert_tiles: slots");
}

}  // namespace ds::cuda
