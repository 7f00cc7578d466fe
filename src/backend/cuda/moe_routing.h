#pragma once
// MoE routing on the GPU (docs/cuda-ops.md): per row, softmax over the E router logits in fp32, the top k
// experts (higher logit first, ties to the lower id), weights renormalised over the k (or divided by the full
// sum). The CPU reference is route_row in src/model/layers/moe.cpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/wx_products.h"

namespace ds::cuda {

constexpr int kMaxRoutingExperts = 1024;
constexpr int kMaxRoutingTopK = 32;

// Whether the routings (moe_route, affine_wx_route, the tensor experts' folded routing) pick the top k by
// redux.sync (dev::top_k_redux: 2 reduxes a rank) instead of xor butterflies: the same ids, order and
// weights (the butterflies run whenever a logit is NaN). DS_CUDA_ROUTE_FAST=1|0, read at every call (in the
// graphs' key), else kDefaultRouteFast: on since session 14 (one process A/B: fma one stream 4.481 / 4.512
// -> 4.417 / 4.424 ms a round, tensor 5.254 / 5.251 -> 5.157 / 5.164; docs/receipts/cuda-decode-merged.md).
constexpr bool kDefaultRouteFast = true;
bool moe_route_fast();

// logits [n_rows, E] fp32 (device; row r at logits + r * ld_logits, ld_logits 0 meaning E); ids [n_rows, k]
// int32 and weights [n_rows, k] fp32 (device) receive the experts in rank order. E in 1..1024, k in
// 1..min(E, 32). A row's results depend on its logits alone. With up_pairs/down_pairs (device, [n_rows, k]
// each, both or neither) the same launch also writes the grouped products' pairs: up_pairs[r*k + i] =
// (ids[r*k + i], r) (the expert on the token's row), down_pairs[r*k + i] = (ids[r*k + i], r*k + i); with
// shared_expert >= 0 (an always-on expert stacked after the routed ones) also, after the n_rows*k routed
// pairs, up_pairs[n_rows*k + r] = (shared_expert, r), down_pairs[n_rows*k + r] = (shared_expert,
// n_rows*k + r) (the arrays then hold n_rows*(k+1) pairs).
void moe_route(const float* logits, int n_rows, int E, int k, bool renormalise, int32_t* ids, float* weights,
               cudaStream_t stream, int64_t ld_logits = 0, ExpertRow* up_pairs = nullptr,
               ExpertRow* down_pairs = nullptr, int shared_expert = -1);

// The router product of ONE row and its routing in one launch, the bits of affine_wx then moe_route:
// y[0..w.rows) = W x (x f32, 16-byte aligned); the warp that finishes last (an integer completion counter:
// `counter`, one device uint32, zero at the call and left zero) routes y[0..E) as moe_route does (its
// arguments as there, ld_logits w.rows). False, with nothing enqueued, where it does not apply (E > 512, w
// with fewer than E rows or stacked).
bool affine_wx_route(const AffineWeight& w, const float* x, float* y, int E, int k, bool renormalise,
                     int32_t* ids, float* weights, ExpertRow* up_pairs, ExpertRow* down_pairs,
                     int shared_expert, uint32_t* counter, cudaStream_t stream);

}  // namespace ds::cuda
