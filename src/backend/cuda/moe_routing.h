#pragma once
// MoE routing on the GPU (docs/backend-cuda.md): per row, softmax over the E router logits in fp32, the top k
// experts (higher logit first, ties to the lower id), weights renormalised over the k (or divided by the full
// sum). The CPU reference is route_row in src/model/layers/moe.cpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/wx_products.h"

namespace ds::cuda {

constexpr int kMaxRoutingExperts = 1024;
constexpr int kMaxRoutingTopK = 32;

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

}  // namespace ds::cuda
