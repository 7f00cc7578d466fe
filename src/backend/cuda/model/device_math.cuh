#pragma once
// Device helpers of the model kernels on top of the shared ones (backend/cuda/device_math.cuh: warp sums,
// sigmoid, SiLU, softplus), with the same explicit roundings.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/device_math.cuh"

namespace ds::cuda::dev {

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
