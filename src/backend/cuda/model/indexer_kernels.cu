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

constexpr int kSelectThreads = 256;

// The top `top` of sc[0..n) under "higher score, then earlier block" (the CPU's rank < top), without ranking
// every block against every other: the scores are >= 0, so their bits order as unsigned integers; an
// MSB-first radix select (4 passes of 8 bits, integer counts in shared memory: exact whatever their order)
// finds the top-th largest value T and how many of the blocks equal to T are taken; those are the earliest
// ones, found by an ordered block-wide prefix count.
__device__ void select_top(const float* sc, int64_t n, int64_t top, uint8_t* ch) {
  __shared__ int hist[256];
  __shared__ uint32_t prefix_s, mask_s;
  __shared__ int64_t need_s;
  __shared__ int warp_total[kSelectThreads / 32];
  if (threadIdx.x == 0) prefix_s = 0, mask_s = 0, need_s = top;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
    __syncthreads();
    const uint32_t prefix = prefix_s, mask = mask_s;
    for (int64_t b = threadIdx.x; b < n; b += blockDim.x) {
      const uint32_t u = __float_as_uint(sc[b]);
      if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0, need = need_s;
      int d = 255;
      for (; d > 0 && above + hist[d] < need; --d) above += hist[d];
      need_s = need - above;
      prefix_s = prefix | (uint32_t(d) << shift);
      mask_s = mask | (255u << shift);
    }
    __syncthreads();
  }
  const uint32_t T = prefix_s;
  const int64_t take_equal = need_s;  // of the blocks equal to T, the earliest take_equal are chosen
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int64_t equal_before = 0;
  for (int64_t b0 = 0; b0 < n; b0 += blockDim.x) {
    const int64_t b = b0 + threadIdx.x;
    const uint32_t u = b < n ? __float_as_uint(sc[b]) : 0u;
    const bool eq = b < n && u == T;
    const unsigned ballot = __ballot_sync(0xFFFFFFFFu, eq);
    if (lane == 0) warp_total[warp] = __popc(ballot);
    __syncthreads();
    int64_t rank = equal_before + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) rank += warp_total[w];
    if (b < n) ch[b] = (u > T || (eq && rank < take_equal)) ? 1 : 0;
    for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) equal_before += warp_total[w];
    __syncthreads();
  }
}

// One block per row: scores of the complete blocks, then the top budget/ratio by select_top.
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
  select_top(sc, complete, top, chosen + row * max_blocks);
  if (threadIdx.x == 0) select_mode[row] = static_cast<int32_t>(complete);
}

}  // namespace

void indexer_decode(const IndexerShape& s, const float* q_norm, const float* k_norm, const float* inv_freq,
                    const IndexerWindow* windows, int n_windows, int max_count, float* idx, int n_rows,
                    int max_blocks, int32_t* select_mode, float* scores, uint8_t* chosen, cudaStream_t stream,
                    bool select) {
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
  if (!select) return;
  select_kernel<<<dim3(max_count, n_windows), kSelectThreads, 0, stream>>>(
      s, windows, idx, n_rows, max_blocks, select_mode, scores, chosen);
  check_launch("indexer_decode: select");
}

}  // namespace ds::cuda
