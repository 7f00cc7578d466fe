// MoE routing (moe_routing.h): one warp per row. Lane l holds experts l, l+32, ...; every reduction is a
// fixed per-lane order then an xor butterfly over a commutative, associative combine, so all lanes agree bit
// for bit.
#include <climits>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/moe_routing.h"

namespace ds::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;

// (value, id) with the higher value first and, on equal values, the lower id: a total order on distinct ids.
__device__ __forceinline__ bool better(float v, int id, float best, int best_id) {
  return best_id < 0 || v > best || (v == best && id < best_id);
}

// kSlots: experts per lane, 32 * kSlots >= E (16 for 512 experts: the slots past E would only be skipped, so
// the bits do not depend on it).
template <int kSlots>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    route_kernel(const float* logits, int64_t ld, int n_rows, int E, int k, bool renormalise, int32_t* ids,
                 float* weights, ExpertRow* up_pairs, ExpertRow* down_pairs, int shared_expert) {
  dev::grid_dependency_wait();
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (row >= n_rows) return;
  const float* l = logits + int64_t{row} * ld;
  float v[kSlots];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kWarp;
    v[i] = e < E ? l[e] : -INFINITY;
    if (e < E) mx = fmaxf(mx, v[i]);
  }
  for (int m = 16; m >= 1; m >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kSlots; ++i)
    if (lane + i * kWarp < E) sum = __fadd_rn(sum, expf(__fsub_rn(v[i], mx)));
  for (int m = 16; m >= 1; m >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, m));

  uint32_t taken = 0;
  int my_id = -1;
  float my_p = 0.0f;
  for (int r = 0; r < k; ++r) {
    float best = -INFINITY;
    int best_id = -1;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int e = lane + i * kWarp;
      if (e < E && !(taken >> i & 1u) && better(v[i], e, best, best_id)) {
        best = v[i];
        best_id = e;
      }
    }
    for (int m = 16; m >= 1; m >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, m);
      const int oid = __shfl_xor_sync(0xffffffffu, best_id, m);
      if (oid >= 0 && better(ob, oid, best, best_id)) {
        best = ob;
        best_id = oid;
      }
    }
    if (best_id % kWarp == lane) taken |= 1u << (best_id / kWarp);
    if (lane == r) {
      my_id = best_id;
      my_p = expf(__fsub_rn(best, mx));
    }
  }
  float top = 0.0f;  // in rank order
  for (int r = 0; r < k; ++r) top = __fadd_rn(top, __shfl_sync(0xffffffffu, my_p, r));
  if (lane < k) {
    ids[int64_t{row} * k + lane] = my_id;
    weights[int64_t{row} * k + lane] = __fdiv_rn(my_p, renormalise ? top : sum);
    if (up_pairs != nullptr) {
      up_pairs[int64_t{row} * k + lane] = ExpertRow{my_id, row};
      down_pairs[int64_t{row} * k + lane] = ExpertRow{my_id, row * k + lane};
      if (shared_expert >= 0 && lane == 0) {
        up_pairs[int64_t{n_rows} * k + row] = ExpertRow{shared_expert, row};
        down_pairs[int64_t{n_rows} * k + row] = ExpertRow{shared_expert, n_rows * k + row};
      }
    }
  }
}

}  // namespace

void moe_route(const float* logits, int n_rows, int E, int k, bool renormalise, int32_t* ids, float* weights,
               cudaStream_t stream, int64_t ld_logits, ExpertRow* up_pairs, ExpertRow* down_pairs,
               int shared_expert) {
  if (E < 1 || E > kMaxRoutingExperts)
    throw ArgumentError("moe_route: E must be in 1..1024 (got " + std::to_string(E) + ")");
  if (k < 1 || k > E || k > kMaxRoutingTopK)
    throw ArgumentError("moe_route: k must be in 1..min(E, 32) (got " + std::to_string(k) + ")");
  if (n_rows < 1) throw ArgumentError("moe_route: n_rows must be positive");
  if (!logits || !ids || !weights) throw ArgumentError("moe_route: a buffer pointer is null");
  if ((up_pairs == nullptr) != (down_pairs == nullptr))
    throw ArgumentError("moe_route: up_pairs and down_pairs go together");
  if (shared_expert >= 0 && up_pairs == nullptr)
    throw ArgumentError("moe_route: a shared expert's pairs need up_pairs and down_pairs");
  if (ld_logits == 0) ld_logits = E;
  if (ld_logits < E) throw ArgumentError("moe_route: ld_logits must be at least E");
  const int blocks = (n_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const auto launch = [&](auto slots) {
    route_kernel<decltype(slots)::value><<<blocks, kRowsPerBlock * kWarp, 0, stream>>>(
        logits, ld_logits, n_rows, E, k, renormalise, ids, weights, up_pairs, down_pairs, shared_expert);
  };
  if (E <= 8 * kWarp)
    launch(std::integral_constant<int, 8>{});
  else if (E <= 16 * kWarp)
    launch(std::integral_constant<int, 16>{});
  else
    launch(std::integral_constant<int, kMaxRoutingExperts / kWarp>{});
  check_launch("moe_route");
}

}  // namespace ds::cuda
