#pragma once
// The hyper-connection mix of a decode call in two launches per mix (docs/backend-cuda.md "Hyper-connection
// mix"): hc_head = the pending inject + the grouped RMS norm + the down|inject product, hc_tail = the
// activations + the up product + the combine + the inject written back to H. Each row of a call runs in its
// own blocks, so a row's bits never depend on the row count; the arithmetic is that of add_rms_norm_rows,
// affine_wx (one row), hc_activations and hc_combine run apart, in the same order: the same bits. Used with
// CudaModelOptions::fused_hc (off by default: slower on the H200 at 1 and 8 streams, see the receipt).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/wx_products.h"

namespace ds::cuda {

// Whether hc_head/hc_tail take the mix: MLX affine down|inject [R (+ S), S*D] and up [S*D, R] of one encoding
// each, S == 4 streams, D % 4 == 0, R % 8 == 0, R <= 1024, S*D <= 11264 (the normed row in shared memory), up
// not split into column slices. False: run the separate ops.
bool hc_fused_takes(const AffineWeight& down_inject, const AffineWeight& up, int S, int D, int R);

// Per row r < n: v = H[r] (+ iota_in[r, g] * pending[r] on group g when pending is set; H is NOT written),
// normed = v / rms(group) * norm_w (add_rms_norm_rows' order and bits), written to normed[r] by one block;
// joint[r * ld_joint + o] = down_inject[o] . normed for every o (affine_wx's chain for that shape).
void hc_head(const AffineWeight& down_inject, const float* H, const float* pending, const float* iota_in,
             const float* norm_w, int S, int D, float eps, float* normed, float* joint, int64_t ld_joint,
             int n, cudaStream_t stream);

// Per row r < n: low = silu(joint[r, 0..R) * inv_s), mix = up low, x[r, d] = (sum_k sigmoid(mix[k D + d]) *
// normed[r, k D + d]) * (1/S), k in order; with iota_out set iota_out[r, k] = 2 sigmoid(joint[r, R + k] *
// inv_s); with pending set H[r, k, d] += iota_in[r, k] * pending[r, d] (the inject hc_head computed for its
// norm, now stored). iota_in and iota_out must differ.
void hc_tail(const AffineWeight& up, const float* joint, int64_t ld_joint, int R, float inv_s,
             const float* normed, int S, int D, float* H, const float* pending, const float* iota_in,
             float* x, float* iota_out, int n, cudaStream_t stream);

}  // namespace ds::cuda
