#pragma once
// PLE (hashed n-gram embedding) on the GPU after the gathered rows are uploaded and projected (CPU math:
// ple_forward in src/model/layers/ple.cpp): the per-stream-copy gate and the dilated causal conv that adds
// into the hidden streams.
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

// gated[r, s, :] = sigmoid(ssqrt(key[r, s] . query[r, s] / sqrt(D))) * value[r, :], where ssqrt is the signed
// square root sign(g) * sqrt(max(|g|, 1e-6)); key and query are the normed rows [n_rows, S*D].
void ple_gate(const float* key, const float* query, const float* value, int n_rows, int S, int D,
              float* gated, cudaStream_t stream);

// One stream's window of rows and its conv history [(K-1)*dilation, S*D] (oldest first, updated in place).
struct PleWindow {
  int32_t row0 = 0, count = 0;
  float* state = nullptr;
};

// H[r] += gated[r] + silu(conv(normed)[r]) with taps [S*D, K] over the window's history and rows at dilation
// `dilation`.
void ple_conv(const PleWindow* windows, int n_windows, const float* normed, const float* gated,
              const float* taps, int K, int dilation, int64_t SD, float* H, cudaStream_t stream);

}  // namespace ds::cuda
