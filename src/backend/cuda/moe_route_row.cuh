#pragma once
// One row's MoE routing by one warp (moe_routing.h): softmax over the E router logits in fp32, the top k by a
// fixed per-lane order then an xor butterfly over a total order, the weights in rank order. Shared by
// moe_route's kernel and the router product that routes in its last warp (router_route.cu), so both give the
// same bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/wx_products.h"

namespace ds::cuda::dev {

// Where one routing writes: ids/weights [n_rows, k]; with up_pairs/down_pairs the grouped products' pairs
// (moe_routing.h); shared_expert >= 0 adds the stacked shared expert's pair per row.
struct RouteOutputs {
  int E = 0, k = 0;
  bool renormalise = false;
  int32_t* ids = nullptr;
  float* weights = nullptr;
  ExpertRow* up_pairs = nullptr;
  ExpertRow* down_pairs = nullptr;
  int shared_expert = -1;
  bool fast = false;  // route_lanes' redux form (moe_route_fast())
};

// (value, id) with the higher value first and, on equal values, the lower id: a total order on distinct ids.
__device__ __forceinline__ bool route_better(float v, int id, float best, int best_id) {
  return best_id < 0 || v > best || (v == best && id < best_id);
}

// One row's routing from its logits l (read through L2: they may come from other blocks of this launch),
// by the warp: lane r < k gets rank r's expert id and weight. kSlots: experts per lane, 32 * kSlots >= E (the
// slots past E are skipped, so the bits do not depend on it).
// A float's place in the order of route_better's values as an unsigned key (larger = better), -0 taken as
// +0 (they compare equal); 0 is below every float's key (-inf's is 0x007FFFFF). NaN is never keyed.
__device__ __forceinline__ uint32_t route_key(float v) {
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float route_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? (key & 0x7FFFFFFFu) : ~key);
}

// The top k of the lanes' slots in route_better's order (lane r gets rank r's id and value), by redux: each
// rank takes the warp's largest key (the lanes' maxima over their slots by a tree, then one redux.sync), the
// lowest id among the slots holding it (a second redux), and its owner clears that slot. The same ids in the
// same order as the butterfly form below whenever no value is NaN (route_better is then a total order: value
// first, ties to the lower id); 2 reduxes a rank instead of 5 dependent shuffle pairs and a 16-slot chain.
template <int kSlots>
__device__ __forceinline__ void top_k_redux(const float (&v)[kSlots], int E, int k, int& my_id,
                                            float& my_best) {
  constexpr int kW = 32;
  const int lane = threadIdx.x % kW;
  uint32_t key[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) key[i] = lane + i * kW < E ? route_key(v[i]) : 0u;
  for (int r = 0; r < k; ++r) {
    uint32_t mine[kSlots];  // a max tree over the slots (independent levels, not a chain)
#pragma unroll
    for (int i = 0; i < kSlots; ++i) mine[i] = key[i];
#pragma unroll
    for (int w = 1; w < kSlots; w *= 2)
#pragma unroll
      for (int i = 0; i + w < kSlots; i += 2 * w) mine[i] = max(mine[i], mine[i + w]);
    const uint32_t top = __reduce_max_sync(0xffffffffu, mine[0]);
    uint32_t slot = 0xffffffffu;  // this lane's lowest slot holding top (ids rise with the slot)
#pragma unroll
    for (int i = kSlots - 1; i >= 0; --i)
      if (key[i] == top) slot = static_cast<uint32_t>(i);
    const uint32_t cand = slot != 0xffffffffu ? static_cast<uint32_t>(lane) + slot * kW : 0xffffffffu;
    const int best_id = static_cast<int>(__reduce_min_sync(0xffffffffu, cand));
    if (best_id % kW == lane) {
#pragma unroll
      for (int i = 0; i < kSlots; ++i)
        if (i == best_id / kW) key[i] = 0u;
    }
    if (lane == r) {
      my_id = best_id;
      my_best = route_value(top);
    }
  }
}

template <int kSlots>
__device__ __forceinline__ void route_lanes(const float* l, int E, int k, bool renormalise, int& id,
                                            float& weight, bool fast = false) {
  constexpr int kW = 32;
  const int lane = threadIdx.x % kW;
  float v[kSlots];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + i * kW;
    v[i] = e < E ? __ldcg(l + e) : -INFINITY;
    if (e < E) mx = fmaxf(mx, v[i]);
  }
  for (int m = 16; m >= 1; m >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, m));
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kSlots; ++i)
    if (lane + i * kW < E) sum = __fadd_rn(sum, expf(__fsub_rn(v[i], mx)));
  for (int m = 16; m >= 1; m >>= 1) sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, m));

  int my_id = -1;
  float my_p = 0.0f;
  bool nan = false;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) nan = nan || (lane + i * kW < E && v[i] != v[i]);
  if (fast && !__any_sync(0xffffffffu, nan)) {
    float best = 0.0f;
    top_k_redux<kSlots>(v, E, k, my_id, best);
    if (lane < k) my_p = expf(__fsub_rn(best, mx));
  } else {
    uint32_t taken = 0;
    for (int r = 0; r < k; ++r) {
      float best = -INFINITY;
      int best_id = -1;
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        const int e = lane + i * kW;
        if (e < E && !(taken >> i & 1u) && route_better(v[i], e, best, best_id)) {
          best = v[i];
          best_id = e;
        }
      }
      for (int m = 16; m >= 1; m >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, m);
        const int oid = __shfl_xor_sync(0xffffffffu, best_id, m);
        if (oid >= 0 && route_better(ob, oid, best, best_id)) {
          best = ob;
          best_id = oid;
        }
      }
      if (best_id % kW == lane) taken |= 1u << (best_id / kW);
      if (lane == r) {
        my_id = best_id;
        my_p = expf(__fsub_rn(best, mx));
      }
    }
  }
  float top = 0.0f;  // in rank order
  for (int r = 0; r < k; ++r) top = __fadd_rn(top, __shfl_sync(0xffffffffu, my_p, r));
  id = my_id;
  weight = __fdiv_rn(my_p, renormalise ? top : sum);
}

// Row `row` of n_rows from its logits l (route_lanes), written to o.
template <int kSlots>
__device__ __forceinline__ void route_row(const float* l, int row, int n_rows, const RouteOutputs& o) {
  const int lane = threadIdx.x % 32, k = o.k;
  int my_id;
  float my_w;
  route_lanes<kSlots>(l, o.E, k, o.renormalise, my_id, my_w, o.fast);
  if (lane < k) {
    o.ids[int64_t{row} * k + lane] = my_id;
    o.weights[int64_t{row} * k + lane] = my_w;
    if (o.up_pairs != nullptr) {
      o.up_pairs[int64_t{row} * k + lane] = ExpertRow{my_id, row};
      o.down_pairs[int64_t{row} * k + lane] = ExpertRow{my_id, row * k + lane};
      if (o.shared_expert >= 0 && lane == 0) {
        o.up_pairs[int64_t{n_rows} * k + row] = ExpertRow{o.shared_expert, row};
        o.down_pairs[int64_t{n_rows} * k + row] = ExpertRow{o.shared_expert, n_rows * k + row};
      }
    }
  }
}

}  // namespace ds::cuda::dev
