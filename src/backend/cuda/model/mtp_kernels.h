#pragma once
// Row moves of the MTP head on the GPU (CPU math: Model::mtp_forward in src/model/mtp.cpp): hidden rows
// handed over by device pointer (the main forward's H rows, a chained draft's previous output), and the
// head's input sum X_s = fc_hidden(n_s) + fc_embedding(e).
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

// dst_rows[r][0..width) = src[r * width ..] for r < n; dst_rows (device array) entries that are null skip
// their row.
void scatter_rows(const float* src, int n, int64_t width, float* const* dst_rows, cudaStream_t stream);
// dst[r * width ..] = src_rows[r][0..width) for r < n (src_rows a device array of device pointers).
void gather_rows_from(const float* const* src_rows, int n, int64_t width, float* dst, cudaStream_t stream);
// H[r, s, :] += e[r, :] for s < S (one rounding, as the CPU's +=).
void add_to_streams(float* H, const float* e, int n, int S, int D, cudaStream_t stream);

}  // namespace ds::cuda
