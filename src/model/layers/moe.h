#pragma once
// Mixture of experts with a shared expert (and the plain SwiGLU MLP used by dense layers).
#include <cstdint>
#include <span>

#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

void moe_forward(const ModelConfig& cfg, const MoeWeights& w, const float* x, int64_t n, float* out);
// out = down(silu(gate x) * up x) for n rows.
void mlp_forward(const MlpWeights& w, const float* x, int64_t n, float* out);

// One SwiGLU MLP of a batch: out = down(silu(gate x) * up x) for n rows of x (row stride = gate.cols).
struct MlpJob {
  const MlpWeights* w = nullptr;
  const float* x = nullptr;
  int64_t n = 0;
  float* out = nullptr;  // n rows of down.rows
};
// Every job's MLP with all gate/up products in one parallel region and all down products in another; each
// job's bits equal mlp_forward's.
void mlps_forward(std::span<const MlpJob> jobs);
// Top-k experts of one row's router logits: softmax in double, highest first, ties to the lower expert id;
// weights renormalised when `renormalise`.
void route_row(const float* logits, int64_t experts, int64_t k, bool renormalise, int32_t* ids,
               float* weights);

}  // namespace ds
