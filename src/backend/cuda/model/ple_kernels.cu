#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/model/device_math.cuh"
#include "backend/cuda/model/ple_kernels.h"

namespace ds::cuda {

namespace {

using dev::kWarp;

__global__ void gate_kernel(const float* key, const float* query, const float* value, int S, int D,
                            float* gated) {
  dev::grid_dependency_wait();
  const int r = blockIdx.x, s = blockIdx.y, lane = threadIdx.x;
  const int64_t SD = int64_t{S} * D, off = r * SD + int64_t{s} * D;
  double d = 0;
  for (int i = lane; i < D; i += kWarp) d = __dadd_rn(d, __dmul_rn(key[off + i], query[off + i]));
  const double g = static_cast<double>(static_cast<float>(dev::warp_sum(d))) / sqrt(static_cast<double>(D));
  const double mag = sqrt(fmax(fabs(g), 1e-6));
  const float gate = dev::sigmoid(static_cast<float>(g > 0 ? mag : (g < 0 ? -mag : 0.0)));
  for (int i = lane; i < D; i += kWarp) gated[off + i] = __fmul_rn(gate, value[int64_t{r} * D + i]);
}

__global__ void conv_kernel(const PleWindow* wins, const float* normed, const float* gated, const float* taps,
                            int K, int dil, int64_t SD, float* H) {
  dev::grid_dependency_wait();
  const PleWindow win = wins[blockIdx.y];
  const int64_t ch = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (ch >= SD || win.count <= 0) return;
  const int64_t hist = int64_t{K - 1} * dil;
  auto at = [&](int64_t i) {  // row i of (history, then the window's normed rows)
    return i < hist ? win.state[i * SD + ch] : normed[(win.row0 + i - hist) * SD + ch];
  };
  for (int t = 0; t < win.count; ++t) {
    float acc = 0.0f;
    for (int k = 0; k < K; ++k) acc = __fadd_rn(acc, __fmul_rn(taps[ch * K + k], at(t + int64_t{k} * dil)));
    const int64_t i = (win.row0 + t) * SD + ch;
    H[i] = __fadd_rn(H[i], __fadd_rn(gated[i], dev::silu(acc)));
  }
  // Ascending: row j reads row j + count, not yet overwritten.
  for (int64_t j = 0; j < hist; ++j) win.state[j * SD + ch] = at(j + win.count);
}

}  // namespace

void ple_gate(const float* key, const float* query, const float* value, int n_rows, int S, int D,
              float* gated, cudaStream_t stream) {
  if (n_rows <= 0) return;
  gate_kernel<<<dim3(n_rows, S), kWarp, 0, stream>>>(key, query, value, S, D, gated);
  check_launch("ple_gate");
}

void ple_conv(const PleWindow* windows, int n_windows, const float* normed, const float* gated,
              const float* taps, int K, int dilation, int64_t SD, float* H, cudaStream_t stream) {
  if (n_windows <= 0) return;
  conv_kernel<<<dim3(static_cast<unsigned>((SD + 127) / 128), n_windows), 128, 0, stream>>>(
      windows, normed, gated, taps, K, dilation, SD, H);
  check_launch("ple_conv");
}

}  // namespace ds::cuda
