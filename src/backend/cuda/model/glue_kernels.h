#pragma once
// The model's elementwise and per-row ops on the GPU (norms, hyper-connection mix, MoE glue, greedy pick) and
// the plain weight product used where the fast kernels do not take a shape. CPU math: src/model/model.cpp,
// src/model/layers/{hyper_connection,moe}.cpp, row_math.h. Every op reduces a row in a fixed order.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/wx_products.h"

namespace ds::cuda {

// y = x / sqrt(mean(x^2) + eps) * mult per group of `width` values, `groups` groups a row (mult has
// groups * width entries). In place allowed.
void rms_norm_rows(const float* x, int64_t ldx, const float* mult, int groups, int width, float eps, float* y,
                   int64_t ldy, int n_rows, cudaStream_t stream);

// x[r, g, :] += add_scale[r, g] * add[r, :] (add_scale null: += add[r, :]; add rows `width` floats), then
// rms_norm_rows of the sums, in one launch: hc_inject (or the residual add) and the norm that reads it next.
// The sums' bits equal the separate add's.
void add_rms_norm_rows(float* x, int64_t ldx, const float* add_scale, const float* add, const float* mult,
                       int groups, int width, float eps, float* y, int64_t ldy, int n_rows,
                       cudaStream_t stream);

// H[r, s, :] = e[r, :] for s < S.
void hc_expand(const float* e, int n_rows, int S, int D, float* H, cudaStream_t stream);
// x[r, d] = (sum_k sigmoid(mix[r, k, d]) * normed[r, k, d]) * inv_s, k in order.
void hc_combine(const float* mix, const float* normed, int n_rows, int S, int D, float* x,
                cudaStream_t stream);
// From a joint product's rows [n_rows, width] (the hc down product's R values, then the inject's S):
// low[r, :] = silu(joint[r, 0..R) * inv_s) and iota[r, :] = 2 * sigmoid(joint[r, R..R+S) * inv_s), in one
// launch (iota null: low only).
void hc_activations(const float* joint, int n_rows, int64_t width, int R, int S, float inv_s, float* low,
                    float* iota, cudaStream_t stream);
// h[r, i] = silu(gu[r, i]) * gu[r, I + i] for i < I: the halves of a joined gate|up product, row r of gu at
// gu + r * ld_gu (0: 2I).
void silu_mul_halves(const float* gu, int n_rows, int I, float* h, cudaStream_t stream, int64_t ld_gu = 0);

// out[r, d] = sum_i weights[r, i] * slots[p(r, i), d] (+ sigmoid(shared_gate[r]) * shared[r, d]), in rank
// order; p(r, i) = slot_of[r*K + i] (moe_expert_windows' order; -1 gives NaN), or r*K + i when slot_of is
// null. shared and shared_gate may be null; row r's gate is shared_gate[r * ld_gate].
void moe_combine(const float* weights, const float* slots, const int32_t* slot_of, int n_rows, int K, int D,
                 const float* shared, const float* shared_gate, float* out, cudaStream_t stream,
                 int64_t ld_gate = 1);

// dst[j, :] = src[rows[j], :] for j < n (rows in device memory), width floats a row.
void copy_rows(const float* src, int64_t ld_src, const int32_t* rows, int n, int width, float* dst,
               cudaStream_t stream);
// ids[r] = the first index of the largest value of logits[r, 0..V) (NaN never, -inf never picked; 0 when
// nothing is). With part_v and part_i (argmax_slices(V) entries a row each): split, a block per row and
// kArgmaxSlice-entry slice, then a warp per row over the slices' bests; else one block a row. The same ids
// either way (the rule's result does not depend on the partition); the slices depend on V alone.
constexpr int kArgmaxSlice = 2048;
int argmax_slices(int64_t V);
void argmax_rows(const float* logits, int n_rows, int64_t V, int32_t* ids, cudaStream_t stream,
                 float* part_v = nullptr, int32_t* part_i = nullptr);

// Plain weight product y[p, o] = sum_i W_e[o, i] * x[row, i] with W fp32 or bf16 (`bf16`), rows x cols per
// expert, experts `expert_stride` elements apart; (e, row) = pairs[p] when pairs is set, else (0, p). One
// warp per output: lane-strided FMA chain, then the butterfly. Any cols; x rows fp32.
void plain_wx(const void* w, bool bf16, int64_t rows, int64_t cols, int64_t expert_stride, int n_experts,
              const ExpertRow* pairs, int n_out_rows, const float* x, int64_t ldx, float* y, int64_t ldy,
              cudaStream_t stream);

// Deterministic pseudo-random fills (dummy weights): words uniform over all bits; bf16/f32 uniform in
// [lo, hi). Values depend only on (seed, index).
void fill_random_words(uint32_t* p, int64_t n, uint64_t seed, cudaStream_t stream);
void fill_random_bf16(uint16_t* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
void fill_random_f32(float* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

}  // namespace ds::cuda
