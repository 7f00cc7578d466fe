#pragma once
// The grouped RMS norm's block reduction (rms_norm_rows' order), shared by the norm kernels and the
// hyper-connection head, which must give the same 1 / rms bits.
#include "backend/cuda/model/device_math.cuh"

namespace ds::cuda::dev {

constexpr int kNormThreads = 256;  // threads per group: their order is the norm's

// Each warp's butterfly of its threads' double sums, then thread 0 adds the kNormThreads / 32 warp sums in
// order; returns 1 / rms to every thread. Called by all kNormThreads threads of the block.
__device__ __forceinline__ float block_inv_rms(double ss, int width, float eps) {
  __shared__ double part[kNormThreads / kWarp];
  __shared__ float inv_shared;
  ss = warp_sum(ss);
  if (threadIdx.x % kWarp == 0) part[threadIdx.x / kWarp] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kNormThreads / kWarp; ++w) total = __dadd_rn(total, part[w]);
    inv_shared = inv_rms(total, width, eps);
  }
  __syncthreads();
  return inv_shared;
}

}  // namespace ds::cuda::dev
