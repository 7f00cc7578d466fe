#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/model/device_math.cuh"
#include "backend/cuda/model/indexer_kernels.h"

namespace ds::cuda {

namespace {

using dev::kWarp;

__device__ inline bool window_ok(const IndexerWindow& w, int n_rows) {
  return w.count > 0 && w.row0 >= 0 && w.pos0 >= 0 && w.row0 + w.count <= n_rows &&
         int64_t{w.pos0} + w.count <= w.capacity;
}

// x (shared, head_dim) = rms_norm(src) * mult, then RoPE at pos; written to dst.
__device__ void norm_rope(const IndexerShape& s, const float* src, const float* mult, const float* inv_freq,
                          int64_t pos, float* x, float* dst, int lane) {
  double ss = 0;
  for (int i = lane; i < s.head_dim; i += kWarp) ss = __dadd_rn(ss, __dmul_rn(src[i], src[i]));
  const float inv = dev::inv_rms(dev::warp_sum(ss), s.head_dim, s.rms_eps);
  for (int i = lane; i < s.head_dim; i += kWarp) x[i] = __fmul_rn(__fmul_rn(src[i], inv), mult[i]);
  __syncwarp();
  dev::rope_shared(x, s.rotary_dim, pos, inv_freq, lane);
  for (int i = lane; i < s.head_dim; i += kWarp) dst[i] = x[i];
  __syncwarp();
}

// Per (window, token): warp h < heads normalises and rotates q head h; warp `heads` caches the raw key.
__global__ void prepare_kernel(IndexerShape s, const IndexerWindow* wins, float* idx, int n_rows,
                               const float* q_norm, const float* inv_freq) {
  dev::grid_dependency_wait();
  extern __shared__ float scratch[];
  const IndexerWindow win = wins[blockIdx.y];
  const int t = blockIdx.x;
  if (!window_ok(win, n_rows) || t >= win.count) return;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t row = win.row0 + t, pos = win.pos0 + t;
  float* r = idx + row * s.ld_idx();
  if (warp < s.heads) {
    float* q = r + int64_t{warp} * s.head_dim;
    norm_rope(s, q, q_norm, inv_freq, pos, scratch + warp * s.head_dim, q, lane);
  } else {
    const float* raw = r + int64_t{s.heads} * s.head_dim;
    for (int i = lane; i < s.head_dim; i += kWarp) win.index_keys[pos * s.head_dim + i] = raw[i];
  }
}

// One warp per window: the blocks whose last token the window cached, pooled in token order.
__global__ void blocks_kernel(IndexerShape s, const IndexerWindow* wins, int n_rows, const float* k_norm,
                              const float* inv_freq) {
  dev::grid_dependency_wait();
  extern __shared__ float scratch[];
  const IndexerWindow win = wins[blockIdx.x];
  if (!window_ok(win, n_rows)) return;
  const int lane = threadIdx.x;
  const int64_t first = win.pos0 / s.ratio, end = (int64_t{win.pos0} + win.count) / s.ratio;
  for (int64_t b = first; b < end; ++b) {
    for (int i = lane; i < s.head_dim; i += kWarp) {
      float sum = 0.0f;
      for (int t = 0; t < s.ratio; ++t)
        sum = __fadd_rn(sum, win.index_keys[(b * s.ratio + t) * s.head_dim + i]);
      scratch[s.head_dim + i] = __fdiv_rn(sum, static_cast<float>(s.ratio));
    }
    __syncwarp();
    norm_rope(s, scratch + s.head_dim, k_norm, inv_freq, b * s.ratio, scratch,
              win.index_blocks + b * s.head_dim, lane);
  }
}

// One block per row: scores of the complete blocks, then each block's rank under "higher score, then earlier
// block"; the top budget/ratio are chosen.
__global__ void select_kernel(IndexerShape s, const IndexerWindow* wins, const float* idx, int n_rows,
                              int max_blocks, int32_t* select_mode, float* scores, uint8_t* chosen) {
  dev::grid_dependency_wait();
  const IndexerWindow win = wins[blockIdx.y];
  const int t = blockIdx.x;
  if (!window_ok(win, n_rows) || t >= win.count) return;
  const int64_t row = win.row0 + t, pos = win.pos0 + t;
  const int64_t complete = (pos + 1) / s.ratio, top = s.budget / s.ratio;
  if (complete <= top || complete > max_blocks) {
    if (threadIdx.x == 0) select_mode[row] = complete <= top ? -1 : -2;  // -2: past the scratch (refused)
    return;
  }
  const float* q = idx + row * s.ld_idx();
  float* sc = scores + row * max_blocks;
  const double root = sqrt(static_cast<double>(s.head_dim));
  for (int64_t b = threadIdx.x; b < complete; b += blockDim.x) {
    const float* blk = win.index_blocks + b * s.head_dim;
    double sum = 0;
    for (int h = 0; h < s.heads; ++h) {
      double d = 0;
      for (int i = 0; i < s.head_dim; ++i) d = __dadd_rn(d, __dmul_rn(q[h * s.head_dim + i], blk[i]));
      sum = __dadd_rn(sum, static_cast<double>(fmaxf(0.0f, static_cast<float>(d))));
    }
    sc[b] = static_cast<float>(sum / root);
  }
  __syncthreads();
  uint8_t* ch = chosen + row * max_blocks;
  for (int64_t b = threadIdx.x; b < complete; b += blockDim.x) {
    const float v = sc[b];
    int64_t rank = 0;
    for (int64_t c = 0; c < complete; ++c) rank += (sc[c] > v || (sc[c] == v && c < b)) ? 1 : 0;
    ch[b] = rank < top ? 1 : 0;
  }
  if (threadIdx.x == 0) select_mode[row] = static_cast<int32_t>(complete);
}

}  // namespace

void indexer_decode(const IndexerShape& s, const float* q_norm, const float* k_norm, const float* inv_freq,
                    const IndexerWindow* windows, int n_windows, int max_count, float* idx, int n_rows,
                    int max_blocks, int32_t* select_mode, float* scores, uint8_t* chosen,
                    cudaStream_t stream) {
  if (s.head_dim > 1024 || s.heads < 1 || s.heads > 31 || s.ratio < 1 || s.rotary_dim > s.head_dim)
    throw ArgumentError("indexer_decode: heads must be 1..31, head_dim at most 1024, rotary_dim <= head_dim");
  if (n_windows <= 0 || n_rows <= 0 || max_count <= 0) return;
  const size_t shared = sizeof(float) * static_cast<size_t>(s.heads + 1) * s.head_dim;
  prepare_kernel<<<dim3(max_count, n_windows), (s.heads + 1) * kWarp, shared, stream>>>(
      s, windows, idx, n_rows, q_norm, inv_freq);
  check_launch("indexer_decode: prepare");
  blocks_kernel<<<n_windows, kWarp, 2 * sizeof(float) * s.head_dim, stream>>>(s, windows, n_rows, k_norm,
                                                                              inv_freq);
  check_launch("indexer_decode: blocks");
  select_kernel<<<dim3(max_count, n_windows), 256, 0, stream>>>(s, windows, idx, n_rows, max_blocks,
                                                                select_mode, scores, chosen);
  check_launch("indexer_decode: select");
}

}  // namespace ds::cuda
