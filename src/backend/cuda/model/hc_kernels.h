#pragma once
// The hyper-connection mix of a decode call in two launches per mix (docs/cuda-model.md "Whole model"),
// with the down|inject product split by stream: hc_head block (tile, g, r) norms stream g of row r (the
// pending inject added, rms_norm_rows' order and bits) and writes its outputs' partial products over that
// stream's D columns; hc_tail sums the S partials in a fixed order, then the activations + the up product +
// the combine + the inject written back to H. The split is fixed by the weight's shape and each row runs in
// its own blocks, so a row's bits never depend on the row count, the window split or the launch path. The
// down|inject sums differ from affine_wx's (another fixed order, checked against float64), so the mix is
// used at EVERY decode row count or at none (CudaModelOptions::fused_hc); prompt passes keep the tiled ops.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/wx_products.h"

namespace ds::cuda {

// Whether hc_head/hc_tail take the mix: MLX affine down|inject [R (+ S), S*D] and up [S*D, R] of one encoding
// each, S == 4 streams, D % 32 == 0, D <= 3072, R % 32 == 0, R <= 1024, up not split into column slices.
// False: run the separate ops.
bool hc_fused_takes(const AffineWeight& down_inject, const AffineWeight& up, int S, int D, int R);
// hc_head's part of that: down|inject [R (+ S), S*D], S == 4, D % 32 == 0, D <= 3072, R % 32 == 0, R <= 1024.
bool hc_head_takes(const AffineWeight& down_inject, int S, int D, int R);

// Floats of hc_head's partials for n rows (the caller's scratch): n * S * down_inject.rows.
int64_t hc_partial_floats(const AffineWeight& down_inject, int S, int n);

// Per row r < n and stream g < S: v = H[r, g] (+ iota_in[r, g] * pending[r] when pending is set; H is NOT
// written), normed[r, g] = v / rms(v) * norm_w[g] (add_rms_norm_rows' bits); partial[(r S + g) rows + o] =
// down_inject[o, g D .. g D + D) . normed[r, g] for every output o: lane l of the output's warp takes the
// stream's 32-column units l, l + 32, ... in order (a fused-multiply-add chain), then the xor butterfly.
// outputs_per_warp (1 or 2) sets only how many blocks share the work (2: 16 outputs a block, 1: 8, twice
// the blocks, each norming its stream again); every output's bits are the same either way. loads_first:
// the kernel that issues the pending row's loads together right after the wait (the same bits; sass13,
// docs/receipts/cuda-decode-batch1.md; CudaModel::loads_first).
void hc_head(const AffineWeight& down_inject, const float* H, const float* pending, const float* iota_in,
             const float* norm_w, int S, int D, float eps, float* normed, float* partial, int n,
             cudaStream_t stream, int outputs_per_warp = 2, bool loads_first = false);

// hc_head's outputs a warp for a call of n rows: 1 at one row (twice the blocks: on the H200 a batch-1
// round 0.6% faster at 4-bit, 1.4% at 6-bit), 2 from two rows (1 cost 1.4% at 8 streams);
// docs/receipts/cuda-decode-batch1.md, "hcfast". Either gives the same bits. Before hc_tensor_tail
// (tensor_tail), 2 at every row count: at one stream on the H200 a round 6.480 ms with 1, 6.237 with 2
// (docs/receipts/cuda-tc-row.md, "session 12").
int hc_head_outputs_for_rows(int n, bool tensor_tail = false);

// Per row r < n: joint[o] = (p0[o] + p1[o]) + (p2[o] + p3[o]) over hc_head's partials (rows ld_partial),
// low = silu(joint[0..R) * inv_s), mix = up low (affine_wx's chain and butterfly, each output's on a lane
// group of R / 32 lanes), x[r, d] = (sum_k sigmoid(mix[k D + d]) * normed[r, k D + d]) * (1/S), k in order;
// with iota_out set iota_out[r, k] = 2 sigmoid(joint[R + k] * inv_s); with pending set H[r, k, d] +=
// iota_in[r, k] * pending[r, d] (the inject hc_head added for its norm, now stored). iota_in and iota_out
// must differ.
void hc_tail(const AffineWeight& up, const float* partial, int64_t ld_partial, int R, float inv_s,
             const float* normed, int S, int D, float* H, const float* pending, const float* iota_in,
             float* x, float* iota_out, int n, cudaStream_t stream);

// The tail for the tensor decode family (hc_tensor_tail.cu): hc_tail's work (the partials' sum, the
// activations, up, hc_combine's sum, the new iota, the inject's store) with up on the tensor cores in
// tc_decode_wx's arithmetic (tc_decode.h): up's outputs are tc_decode_wx's of hc_activations' low values,
// bit for bit at every row count, and x, iota and H those of hc_combine, hc_activations and the separate norm
// on hc_head's outputs. Block (b, y): values 16 b .. 16 b + 15 of rows 8 y .. 8 y + 7, a warp a stream.
// Takes: S == 4, D % 16 == 0, R % 32 == 0, 32 <= R <= 1024, up MLX affine [S*D, R] that tc_decode_wx takes,
// unsliced (tc_decode_column_slices == 1). Under the planes layout of the launch (tc_decode_planes()).
bool hc_tensor_tail_takes(const AffineWeight& up, int S, int D, int R);
// Whether the model takes it (DS_CUDA_HC_TENSOR: 1 or unset on, 0 off, read once: the bench's before/after).
bool hc_tensor_tail_on();
// Its kernel (the same bits): 0 session 12's, 1 hctail13's (every load of a block before the arithmetic, the
// scales by cp.async, up's units' MMA chains in groups; docs/receipts/cuda-tc-row.md, "session 13,
// hctail13"). DS_CUDA_HC_TAIL_VARIANT (0 or 1) read at every launch, else kDefaultHcTailVariant; in the
// graphs' key.
constexpr int kDefaultHcTailVariant = 1;
int hc_tensor_tail_variant();
// mix_out (optional, ld_mix >= S*D): up's outputs as well, for the checks.
void hc_tensor_tail(const AffineWeight& up, const float* partial, int64_t ld_partial, int R, float inv_s,
                    const float* normed, int S, int D, float* H, const float* pending, const float* iota_in,
                    float* x, float* iota_out, int n, cudaStream_t stream, float* mix_out = nullptr,
                    int64_t ld_mix = 0);

}  // namespace ds::cuda
