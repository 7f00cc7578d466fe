#pragma once
// Device helpers shared by the CUDA kernels: fixed-order warp reductions and the elementwise functions, written
// with explicit roundings (the library builds with -fmad=false) so that a row's bits never depend on its
// neighbours.
#include <cuda_runtime.h>

namespace ds::cuda::dev {

constexpr int kWarp = 32;

// Butterfly over the warp (masks 16..1): every lane ends with the same sum (a + b == b + a).
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

}  // namespace ds::cuda::dev
