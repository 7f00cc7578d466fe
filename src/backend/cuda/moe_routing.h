#pragma once
// MoE routing on the GPU (docs/backend-cuda.md): per row, softmax over the E router logits in fp32, the top k
// experts (higher logit first, ties to the lower id), weights renormalised over the k (or divided by the full
// sum). The CPU reference is route_row in src/model/layers/moe.cpp.
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

constexpr int kMaxRoutingExperts = 1024;
constexpr int kMaxRoutingTopK = 32;

// logits [n_rows, E] fp32 (device); ids [n_rows, k] int32 and weights [n_rows, k] fp32 (device) receive the
// experts in rank order. E in 1..1024, k in 1..min(E, 32). A row's results depend on its logits alone.
void moe_route(const float* logits, int n_rows, int E, int k, bool renormalise, int32_t* ids, float* weights,
               cudaStream_t stream);

}  // namespace ds::cuda
