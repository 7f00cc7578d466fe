#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/model/device_math.cuh"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/model/norm_reduce.cuh"
#include "backend/cuda/moe_epilogues.cuh"

namespace ds::cuda {

namespace {

using dev::kWarp;

unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

using dev::block_inv_rms;
using dev::kNormThreads;

// One block per (row, group): thread-strided double sums, the warps' butterflies, then warp 0 adds the 8 warp
// sums in order. The order depends on the width alone; the many threads keep enough loads in flight.
// kAdd: first x += scale[r, g] * add[r, :] (scale null: x += add), written back, each value by the thread
// that then reads it (hc_inject / the residual add fused into the next norm).
template <bool kAdd>
__global__ void rms_norm_kernel(float* x, int64_t ldx, const float* add_scale, const float* add,
                                const float* mult, int width, float eps, float* y, int64_t ldy) {
  dev::grid_dependency_wait();
  const int r = blockIdx.x, g = blockIdx.y;
  float* xr = x + r * ldx + int64_t{g} * width;
  if constexpr (kAdd) {
    const float* ar = add + int64_t{r} * width;
    if (add_scale != nullptr) {
      const float a = add_scale[int64_t{r} * gridDim.y + g];
      for (int i = threadIdx.x; i < width; i += kNormThreads) xr[i] = __fadd_rn(xr[i], __fmul_rn(a, ar[i]));
    } else {
      for (int i = threadIdx.x; i < width; i += kNormThreads) xr[i] = __fadd_rn(xr[i], ar[i]);
    }
  }
  double ss = 0;
  for (int i = threadIdx.x; i < width; i += kNormThreads) ss = __dadd_rn(ss, __dmul_rn(xr[i], xr[i]));
  const float inv = block_inv_rms(ss, width, eps);
  float* yr = y + r * ldy + int64_t{g} * width;
  const float* m = mult + int64_t{g} * width;
  for (int i = threadIdx.x; i < width; i += kNormThreads) yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), m[i]);
}

// The same norm with a group's values held in registers (width <= kNormItems * kNormThreads): one round trip
// to memory instead of three, and the norm weights loaded before waiting for the previous kernel (they never
// change during a round). The same operations in the same order as rms_norm_kernel: the same bits.
constexpr int kNormItems = 16;

template <bool kAdd>
__global__ void rms_norm_reg_kernel(float* x, int64_t ldx, const float* add_scale, const float* add,
                                    const float* mult, int width, float eps, float* y, int64_t ldy) {
  const int r = blockIdx.x, g = blockIdx.y;
  const float* m = mult + int64_t{g} * width;
  float v[kNormItems], mv[kNormItems];
#pragma unroll
  for (int k = 0; k < kNormItems; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < width) mv[k] = m[i];
  }
  dev::grid_dependency_wait();
  float* xr = x + r * ldx + int64_t{g} * width;
#pragma unroll
  for (int k = 0; k < kNormItems; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < width) v[k] = xr[i];
  }
  if constexpr (kAdd) {
    const float* ar = add + int64_t{r} * width;
    const float a = add_scale != nullptr ? add_scale[int64_t{r} * gridDim.y + g] : 1.0f;
#pragma unroll
    for (int k = 0; k < kNormItems; ++k) {
      const int i = threadIdx.x + k * kNormThreads;
      if (i < width) {
        v[k] = add_scale != nullptr ? __fadd_rn(v[k], __fmul_rn(a, ar[i])) : __fadd_rn(v[k], ar[i]);
        xr[i] = v[k];
      }
    }
  }
  double ss = 0;
#pragma unroll
  for (int k = 0; k < kNormItems; ++k)
    if (threadIdx.x + k * kNormThreads < width) ss = __dadd_rn(ss, __dmul_rn(v[k], v[k]));
  const float inv = block_inv_rms(ss, width, eps);
  float* yr = y + r * ldy + int64_t{g} * width;
#pragma unroll
  for (int k = 0; k < kNormItems; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < width) yr[i] = __fmul_rn(__fmul_rn(v[k], inv), mv[k]);
  }
}

__global__ void hc_expand_kernel(const float* e, int n_rows, int S, int D, float* H) {
  dev::grid_dependency_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{n_rows} * S * D) return;
  const int64_t d = i % D, r = i / (int64_t{S} * D);
  H[i] = e[r * D + d];
}

__global__ void hc_combine_kernel(const float* mix, const float* normed, int n_rows, int S, int D, float* x) {
  dev::grid_dependency_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{n_rows} * D) return;
  const int64_t r = i / D, d = i % D, SD = int64_t{S} * D;
  float s = 0.0f;
  for (int k = 0; k < S; ++k)
    s = __fadd_rn(s, __fmul_rn(dev::sigmoid(mix[r * SD + k * D + d]), normed[r * SD + k * D + d]));
  x[i] = __fmul_rn(s, __fdiv_rn(1.0f, static_cast<float>(S)));
}

__global__ void hc_activations_kernel(const float* joint, int n_rows, int64_t width, int R, int S,
                                      float inv_s, float* low, float* iota) {
  dev::grid_dependency_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{n_rows} * (R + S)) return;
  const int64_t r = i / (R + S), c = i % (R + S);
  const float v = __fmul_rn(joint[r * width + c], inv_s);
  if (c < R)
    low[r * R + c] = dev::silu(v);
  else
    iota[r * S + c - R] = __fmul_rn(2.0f, dev::sigmoid(v));
}

__global__ void silu_mul_halves_kernel(const float* gu, int64_t ld, int n_rows, int I, float* h) {
  dev::grid_dependency_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{n_rows} * I) return;
  const int64_t r = i / I, c = i % I;
  h[i] = __fmul_rn(dev::silu(gu[r * ld + c]), gu[r * ld + I + c]);
}

// Every rank's slot id, weight and value load goes out at once (a loop over the ranks waits one memory round
// trip per rank); the sum is dev::moe_combine_sum's (ranks in order), which the down products' combine
// (affine_wx_grouped_combine) shares.
template <int kMaxK>
__global__ void moe_combine_kernel(const float* weights, const float* slots, const int32_t* slot_of,
                                   int n_rows, int K, int D, const float* shared, const float* shared_gate,
                                   int64_t ld_gate, float* out) {
  dev::grid_dependency_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= int64_t{n_rows} * D) return;
  const int64_t r = i / D, d = i % D;
  const float nan = __int_as_float(0x7FC00000);
  int64_t p[kMaxK];
  float w[kMaxK], v[kMaxK];
#pragma unroll
  for (int k = 0; k < kMaxK; ++k)
    if (k < K) p[k] = slot_of != nullptr ? slot_of[r * K + k] : r * K + k, w[k] = weights[r * K + k];
#pragma unroll
  for (int k = 0; k < kMaxK; ++k)
    if (k < K) v[k] = p[k] < 0 ? nan : slots[p[k] * D + d];
  const bool has_shared = shared != nullptr;
  out[i] = dev::moe_combine_sum<kMaxK>([&](int k) { return w[k]; }, [&](int k) { return v[k]; }, K,
                                       has_shared, has_shared ? shared_gate[r * ld_gate] : 0.0f,
                                       has_shared ? shared[i] : 0.0f);
}

__global__ void copy_rows_kernel(const float* src, int64_t ld, const int32_t* rows, int width, float* dst) {
  dev::grid_dependency_wait();
  const int j = blockIdx.y;
  const float* s = src + int64_t{rows[j]} * ld;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < width; i += gridDim.x * blockDim.x)
    dst[int64_t{j} * width + i] = s[i];
}

__global__ void argmax_kernel(const float* logits, int64_t V, int32_t* ids) {
  dev::grid_dependency_wait();
  __shared__ float best_v[256];
  __shared__ int64_t best_i[256];
  const float* row = logits + int64_t{blockIdx.x} * V;
  float bv = -INFINITY;
  int64_t bi = V;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x)
    if (row[i] > bv) bv = row[i], bi = i;  // ascending per thread: the first of equals stays
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = best_v[threadIdx.x + s];
      const int64_t oi = best_i[threadIdx.x + s];
      if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x]))
        best_v[threadIdx.x] = ov, best_i[threadIdx.x] = oi;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = static_cast<int32_t>(best_i[0] == V ? 0 : best_i[0]);
}

// The split argmax. The candidate rule of argmax_kernel: a value enters only by `>` (NaN and -inf never do),
// equal values keep the lower index. Its result is the lowest index of the row's largest non-NaN value
// (0 when every value is NaN or -inf), whatever the partition: so slices first, then their bests, give the
// one-block kernel's ids.
__device__ inline void argmax_offer(float& bv, int32_t& bi, float v, int32_t i) {
  if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

// Block (p, r): row r's best over entries [p * kArgmaxSlice, (p + 1) * kArgmaxSlice) ∩ [0, V); a thread
// loads its kArgmaxItems values first (all in flight), then offers them in ascending order.
constexpr int kArgmaxThreads = 256, kArgmaxItems = kArgmaxSlice / kArgmaxThreads;
static_assert(kArgmaxItems * kArgmaxThreads == kArgmaxSlice);

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_parts_kernel(const float* logits, int64_t V, int parts, float* part_v, int32_t* part_i) {
  dev::grid_dependency_wait();
  __shared__ float warp_v[kArgmaxThreads / kWarp];
  __shared__ int32_t warp_i[kArgmaxThreads / kWarp];
  const int64_t begin = int64_t{blockIdx.x} * kArgmaxSlice;
  const float* row = logits + int64_t{blockIdx.y} * V;
  float v[kArgmaxItems];
#pragma unroll
  for (int k = 0; k < kArgmaxItems; ++k) {
    const int64_t i = begin + threadIdx.x + k * kArgmaxThreads;
    v[k] = i < V ? row[i] : -INFINITY;  // -inf never enters
  }
  float bv = -INFINITY;
  auto bi = static_cast<int32_t>(V);
#pragma unroll
  for (int k = 0; k < kArgmaxItems; ++k)
    if (v[k] > bv) bv = v[k], bi = static_cast<int32_t>(begin + threadIdx.x + k * kArgmaxThreads);
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    argmax_offer(bv, bi, ov, oi);
  }
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) warp_v[warp] = bv, warp_i[warp] = bi;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / kWarp; ++w) argmax_offer(bv, bi, warp_v[w], warp_i[w]);
    part_v[int64_t{blockIdx.y} * parts + blockIdx.x] = bv;
    part_i[int64_t{blockIdx.y} * parts + blockIdx.x] = bi;
  }
}

// One warp a row: the slices' bests, lane-strided in order, then the butterfly.
__global__ void argmax_finish_kernel(const float* part_v, const int32_t* part_i, int parts, int64_t V,
                                     int32_t* ids) {
  dev::grid_dependency_wait();
  const int64_t at = int64_t{blockIdx.x} * parts;
  float bv = -INFINITY;
  auto bi = static_cast<int32_t>(V);
  for (int p = threadIdx.x; p < parts; p += kWarp) argmax_offer(bv, bi, part_v[at + p], part_i[at + p]);
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    argmax_offer(bv, bi, ov, oi);
  }
  if (threadIdx.x == 0) ids[blockIdx.x] = bi == V ? 0 : bi;
}

__device__ inline float load_weight(const void* w, bool bf16, int64_t i) {
  if (bf16) return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(w)[i]) << 16);
  return static_cast<const float*>(w)[i];
}

__global__ void plain_wx_kernel(const void* w, bool bf16, int64_t rows, int64_t cols, int64_t stride,
                                int n_experts, const ExpertRow* pairs, const float* x, int64_t ldx, float* y,
                                int64_t ldy) {
  dev::grid_dependency_wait();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t o = int64_t{blockIdx.x} * (blockDim.x / kWarp) + warp;
  const int p = blockIdx.y;
  if (o >= rows) return;
  int e = 0, xr = p;
  if (pairs != nullptr) e = pairs[p].expert, xr = pairs[p].row;
  if (e < 0 || e >= n_experts) {
    if (lane == 0) y[int64_t{p} * ldy + o] = NAN;  // a bad pair shows, as affine_wx_grouped does
    return;
  }
  const int64_t base = int64_t{e} * stride + o * cols;
  const float* xrow = x + int64_t{xr} * ldx;
  float acc = 0.0f;
  for (int64_t i = lane; i < cols; i += kWarp) acc = __fmaf_rn(load_weight(w, bf16, base + i), xrow[i], acc);
  acc = dev::warp_sum(acc);
  if (lane == 0) y[int64_t{p} * ldy + o] = acc;
}

// splitmix64 of (seed, index): the same value wherever and however often it is computed.
__device__ inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ inline float uniform(uint64_t seed, int64_t i, float lo, float hi) {
  const float u = static_cast<float>(mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i)) >> 40) *
                  (1.0f / 16777216.0f);
  return lo + (hi - lo) * u;
}

__global__ void fill_words_kernel(uint32_t* p, int64_t n, uint64_t seed) {
  dev::grid_dependency_wait();
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint32_t>(mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i)));
}
__global__ void fill_bf16_kernel(uint16_t* p, int64_t n, uint64_t seed, float lo, float hi) {
  dev::grid_dependency_wait();
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint16_t>(__float_as_uint(uniform(seed, i, lo, hi)) >> 16);
}
__global__ void fill_f32_kernel(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  dev::grid_dependency_wait();
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    p[i] = uniform(seed, i, lo, hi);
}

constexpr int kThreads = 256;

}  // namespace

void rms_norm_rows(const float* x, int64_t ldx, const float* mult, int groups, int width, float eps, float* y,
                   int64_t ldy, int n_rows, cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (width <= kNormItems * kNormThreads)
    rms_norm_reg_kernel<false><<<dim3(n_rows, groups), kNormThreads, 0, stream>>>(
        const_cast<float*>(x), ldx, nullptr, nullptr, mult, width, eps, y, ldy);
  else
    rms_norm_kernel<false><<<dim3(n_rows, groups), kNormThreads, 0, stream>>>(
        const_cast<float*>(x), ldx, nullptr, nullptr, mult, width, eps, y, ldy);
  check_launch("rms_norm_rows");
}

void add_rms_norm_rows(float* x, int64_t ldx, const float* add_scale, const float* add, const float* mult,
                       int groups, int width, float eps, float* y, int64_t ldy, int n_rows,
                       cudaStream_t stream) {
  if (n_rows <= 0) return;
  if (width <= kNormItems * kNormThreads)
    rms_norm_reg_kernel<true>
        <<<dim3(n_rows, groups), kNormThreads, 0, stream>>>(x, ldx, add_scale, add, mult, width, eps, y, ldy);
  else
    rms_norm_kernel<true>
        <<<dim3(n_rows, groups), kNormThreads, 0, stream>>>(x, ldx, add_scale, add, mult, width, eps, y, ldy);
  check_launch("add_rms_norm_rows");
}

void hc_expand(const float* e, int n_rows, int S, int D, float* H, cudaStream_t stream) {
  const int64_t n = int64_t{n_rows} * S * D;
  hc_expand_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(e, n_rows, S, D, H);
  check_launch("hc_expand");
}

void hc_combine(const float* mix, const float* normed, int n_rows, int S, int D, float* x,
                cudaStream_t stream) {
  hc_combine_kernel<<<blocks_for(int64_t{n_rows} * D, kThreads), kThreads, 0, stream>>>(mix, normed, n_rows,
                                                                                        S, D, x);
  check_launch("hc_combine");
}

void hc_activations(const float* joint, int n_rows, int64_t width, int R, int S, float inv_s, float* low,
                    float* iota, cudaStream_t stream) {
  if (iota == nullptr) S = 0;
  const int64_t n = int64_t{n_rows} * (R + S);
  hc_activations_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(joint, n_rows, width, R, S, inv_s,
                                                                          low, iota);
  check_launch("hc_activations");
}

void silu_mul_halves(const float* gu, int n_rows, int I, float* h, cudaStream_t stream, int64_t ld_gu) {
  if (n_rows <= 0) return;
  if (ld_gu == 0) ld_gu = 2 * int64_t{I};
  silu_mul_halves_kernel<<<blocks_for(int64_t{n_rows} * I, kThreads), kThreads, 0, stream>>>(gu, ld_gu,
                                                                                             n_rows, I, h);
  check_launch("silu_mul_halves");
}

void moe_combine(const float* weights, const float* slots, const int32_t* slot_of, int n_rows, int K, int D,
                 const float* shared, const float* shared_gate, float* out, cudaStream_t stream,
                 int64_t ld_gate) {
  const unsigned blocks = blocks_for(int64_t{n_rows} * D, kThreads);
  if (K < 1 || K > 32) throw ArgumentError("moe_combine: K must be 1..32 (got " + std::to_string(K) + ")");
  if (K <= 16)
    moe_combine_kernel<16><<<blocks, kThreads, 0, stream>>>(weights, slots, slot_of, n_rows, K, D, shared,
                                                            shared_gate, ld_gate, out);
  else
    moe_combine_kernel<32><<<blocks, kThreads, 0, stream>>>(weights, slots, slot_of, n_rows, K, D, shared,
                                                            shared_gate, ld_gate, out);
  check_launch("moe_combine");
}

void copy_rows(const float* src, int64_t ld_src, const int32_t* rows, int n, int width, float* dst,
               cudaStream_t stream) {
  if (n <= 0) return;
  copy_rows_kernel<<<dim3(blocks_for(width, kThreads), n), kThreads, 0, stream>>>(src, ld_src, rows, width,
                                                                                  dst);
  check_launch("copy_rows");
}

int argmax_slices(int64_t V) {
  return static_cast<int>((V + kArgmaxSlice - 1) / kArgmaxSlice);
}

void argmax_rows(const float* logits, int n_rows, int64_t V, int32_t* ids, cudaStream_t stream, float* part_v,
                 int32_t* part_i) {
  if (n_rows <= 0) return;
  if (part_v == nullptr || part_i == nullptr) {
    argmax_kernel<<<n_rows, 256, 0, stream>>>(logits, V, ids);
    check_launch("argmax_rows");
    return;
  }
  if (V >= INT32_MAX) throw ArgumentError("argmax_rows: a split row holds fewer than 2^31 - 1 entries");
  if (n_rows > 65535) throw ArgumentError("argmax_rows: at most 65535 rows a split launch");
  const int parts = argmax_slices(V);
  argmax_parts_kernel<<<dim3(static_cast<unsigned>(parts), static_cast<unsigned>(n_rows)), kArgmaxThreads, 0,
                        stream>>>(logits, V, parts, part_v, part_i);
  check_launch("argmax_rows: slices");
  argmax_finish_kernel<<<n_rows, kWarp, 0, stream>>>(part_v, part_i, parts, V, ids);
  check_launch("argmax_rows: finish");
}

void plain_wx(const void* w, bool bf16, int64_t rows, int64_t cols, int64_t expert_stride, int n_experts,
              const ExpertRow* pairs, int n_out_rows, const float* x, int64_t ldx, float* y, int64_t ldy,
              cudaStream_t stream) {
  if (n_out_rows <= 0) return;
  if (n_out_rows > 65535) throw ArgumentError("plain_wx: at most 65535 output rows a launch");
  constexpr int kWarps = 4;
  plain_wx_kernel<<<dim3(blocks_for(rows, kWarps), n_out_rows), kWarps * kWarp, 0, stream>>>(
      w, bf16, rows, cols, expert_stride, n_experts, pairs, x, ldx, y, ldy);
  check_launch("plain_wx");
}

void fill_random_words(uint32_t* p, int64_t n, uint64_t seed, cudaStream_t stream) {
  fill_words_kernel<<<4096, kThreads, 0, stream>>>(p, n, seed);
  check_launch("fill_random_words");
}
void fill_random_bf16(uint16_t* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  fill_bf16_kernel<<<4096, kThreads, 0, stream>>>(p, n, seed, lo, hi);
  check_launch("fill_random_bf16");
}
void fill_random_f32(float* p, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  fill_f32_kernel<<<4096, kThreads, 0, stream>>>(p, n, seed, lo, hi);
  check_launch("fill_random_f32");
}

}  // namespace ds::cuda
