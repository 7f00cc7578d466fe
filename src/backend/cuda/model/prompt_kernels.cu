#include "backend/cuda/cuda_error.h"
#include "backend/cuda/model/prompt_kernels.h"

namespace ds::cuda {

namespace {

__global__ void split_windows_kernel(const AttentionWindow* wins, int n, int threshold,
                                     AttentionWindow* prefix, AttentionWindow* suffix) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const AttentionWindow w = wins[i];
  const int keep = max(0, min(w.count, threshold - w.pos0));
  AttentionWindow p = w, s = w;
  p.count = keep;
  s.row0 += keep;
  s.pos0 += keep;
  s.count -= keep;
  prefix[i] = p;
  suffix[i] = s;
}

}  // namespace

void split_windows(const AttentionWindow* windows, int n_windows, int threshold, AttentionWindow* prefix,
                   AttentionWindow* suffix, cudaStream_t stream) {
  if (n_windows <= 0) return;
  split_windows_kernel<<<(n_windows + 127) / 128, 128, 0, stream>>>(windows, n_windows, threshold, prefix,
                                                                    suffix);
  check_launch("split_windows");
}

}  // namespace ds::cuda
