#pragma once
// Device helpers of the model kernels: fixed-order warp sums and the elementwise functions, written with
// explicit roundings (the library builds with -fmad=false) so that a row's bits never depend on its
// neighbours.
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda::dev {

constexpr int kWarp = 32;

// Butterfly over the warp (masks 16..1): every lane ends with the same sum.
__device__ inline float warp_sum(float v) {
  for (int m = 16; m >= 1; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
__device__ inline double warp_sum(double v) {
  for (int m = 16; m >= 1; m >>= 1) v = __dadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}
__device__ inline float warp_max(float v) {
  for (int m = 16; m >= 1; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ inline float sigmoid(float x) {
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x)));
}
__device__ inline float silu(float x) {
  return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x)));
}
__device__ inline float softplus(float x) {
  return x > 20.0f ? x : log1pf(expf(x));
}

// 1 / sqrt(mean(x^2) + eps) from a warp-summed double sum of squares, rounded to f32 as the CPU does.
__device__ inline float inv_rms(double sum_squares, int width, float eps) {
  return static_cast<float>(1.0 / sqrt(sum_squares / static_cast<double>(width) + static_cast<double>(eps)));
}

// Rotate-half RoPE of x[0..rotary_dim) in place, x in shared memory, the warp's lanes over the pairs.
__device__ inline void rope_shared(float* x, int rotary_dim, int64_t pos, const float* inv_freq, int lane) {
  const int half = rotary_dim / 2;
  for (int i = lane; i < half; i += kWarp) {
    const float angle = __fmul_rn(static_cast<float>(pos), inv_freq[i]);
    const float c = cosf(angle), s = sinf(angle);
    const float a = x[i], b = x[i + half];
    x[i] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    x[i + half] = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
  }
  __syncwarp();
}

}  // namespace ds::cuda::dev
