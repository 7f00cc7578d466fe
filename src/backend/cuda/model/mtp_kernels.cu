#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/model/mtp_kernels.h"

namespace ds::cuda {

namespace {

constexpr int kThreads = 256;

// One block row (blockIdx.y) per hidden row, threads striding over its floats.
__global__ void scatter_rows_kernel(const float* src, int64_t width, float* const* dst_rows) {
  dev::grid_dependency_wait();
  float* dst = dst_rows[blockIdx.y];
  if (dst == nullptr) return;
  const float* row = src + blockIdx.y * width;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < width;
       i += int64_t{gridDim.x} * blockDim.x)
    dst[i] = row[i];
}

__global__ void gather_rows_from_kernel(const float* const* src_rows, int64_t width, float* dst) {
  dev::grid_dependency_wait();
  const float* row = src_rows[blockIdx.y];
  float* out = dst + blockIdx.y * width;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < width;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = row[i];
}

__global__ void add_to_streams_kernel(float* H, const float* e, int n, int S, int D) {
  dev::grid_dependency_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{n} * S * D) return;
  const int64_t d = i % D, r = i / (int64_t{S} * D);
  H[i] = __fadd_rn(H[i], e[r * D + d]);
}

dim3 row_grid(int n, int64_t width) {
  return dim3(static_cast<unsigned>((width + kThreads - 1) / kThreads), static_cast<unsigned>(n));
}

}  // namespace

void scatter_rows(const float* src, int n, int64_t width, float* const* dst_rows, cudaStream_t stream) {
  if (n == 0) return;
  scatter_rows_kernel<<<row_grid(n, width), kThreads, 0, stream>>>(src, width, dst_rows);
  check_launch("scatter_rows");
}

void gather_rows_from(const float* const* src_rows, int n, int64_t width, float* dst, cudaStream_t stream) {
  if (n == 0) return;
  gather_rows_from_kernel<<<row_grid(n, width), kThreads, 0, stream>>>(src_rows, width, dst);
  check_launch("gather_rows_from");
}

void add_to_streams(float* H, const float* e, int n, int S, int D, cudaStream_t stream) {
  const int64_t total = int64_t{n} * S * D;
  if (total == 0) return;
  add_to_streams_kernel<<<static_cast<unsigned>((total + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      H, e, n, S, D);
  check_launch("add_to_streams");
}

}  // namespace ds::cuda
