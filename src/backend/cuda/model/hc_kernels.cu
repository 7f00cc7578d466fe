// The hyper-connection mix in two launches (hc_kernels.h): each block recomputes its row's grouped norm (the
// row sits in L2) instead of a norm launch, and the inject is stored by the tail, so no block writes what
// another block of the same launch reads.
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/model/device_math.cuh"
#include "backend/cuda/model/hc_kernels.h"
#include "backend/cuda/wx_kernels.cuh"

namespace ds::cuda {

namespace {

using detail::kOutputsPerWarp;
using detail::kWarpsPerBlock;

constexpr int kThreads = kWarpsPerBlock * 32;
constexpr int kStreams = 4;        // the tail's warps are the streams
constexpr int kNormThreads = 256;  // rms_norm_rows' threads per group: the order the head reproduces
// S*D floats of the row in shared memory: with the static part, under the 48 KB a block gets without opt-in.
constexpr int kMaxStreamWidth = 11264;
constexpr int kMaxRank = 1024;
constexpr int kChunk = 10;  // float4 loads a thread keeps in flight (a 10240-float row: two chunks)
static_assert(kNormThreads == 2 * kThreads, "a head thread plays two of rms_norm_rows' threads");

template <int Bits>
using Matrix = typename detail::AffineUnit<Bits>::Matrix;

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// The codes, scales and biases of output rows o0 .. o0+count-1 into L2. Weights never change during a round,
// so this goes out before waiting for the previous kernel (programmatic launch).
template <int Bits>
__device__ __forceinline__ void prefetch_rows(const Matrix<Bits>& m, int64_t o0, int count, int64_t n_out) {
  for (int o = 0; o < count && o0 + o < n_out; ++o) {
    const int64_t row = o0 + o;
    const auto* codes = reinterpret_cast<const char*>(m.codes + row * m.words_per_row);
    const auto* scales = reinterpret_cast<const char*>(m.scales + row * m.groups_per_row);
    const auto* biases = reinterpret_cast<const char*>(m.biases + row * m.groups_per_row);
    const int64_t code_bytes = int64_t{m.words_per_row} * 4, group_bytes = int64_t{m.groups_per_row} * 2;
    for (int64_t b = int64_t{threadIdx.x} * 128; b < code_bytes; b += kThreads * 128) prefetch_l2(codes + b);
    for (int64_t b = int64_t{threadIdx.x} * 128; b < group_bytes; b += kThreads * 128) {
      prefetch_l2(scales + b);
      prefetch_l2(biases + b);
    }
  }
}

// Block (b, r): row r's stream row (with the inject) in shared memory, its grouped norm in rms_norm_rows'
// order (256 threads a group, thread-strided double sums, the warps' butterflies, the 8 warp sums in order;
// head thread j plays that kernel's threads j and j + 128, i.e. warps w and w + 4), then block_product's
// outputs for block b over the normed row: affine_wx's chain for this shape.
template <int Bits>
__global__ void __launch_bounds__(kThreads)
    hc_head_kernel(Matrix<Bits> m, int64_t n_out, const float* H, const float* pending, const float* iota_in,
                   const float* norm_w, int D, float eps, float* normed, float* joint, int64_t ld_joint) {
  using Unit = detail::AffineUnit<Bits>;
  extern __shared__ float4 shared_row[];
  float* xs = reinterpret_cast<float*>(shared_row);
  __shared__ double part[kStreams][kNormThreads / 32];
  __shared__ float inv[kStreams];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int slices = detail::column_slices<Unit>(n_out, m.cols);
  const int per_block = kWarpsPerBlock / slices * kOutputsPerWarp;
  prefetch_rows<Bits>(m, int64_t{blockIdx.x} * per_block, per_block, n_out);
  for (int b = threadIdx.x * 32; b < kStreams * D; b += kThreads * 32) prefetch_l2(norm_w + b);
  dev::grid_dependency_wait();
  const int r = blockIdx.y, SD = kStreams * D;
  // Chunks of kChunk float4 a thread, every load of a chunk in flight at once (a loop of one load at a time
  // waits one L2 round trip per value).
  const int SD4 = SD / 4;
  const auto* h4 = reinterpret_cast<const float4*>(H + int64_t{r} * SD);
  const auto* p4 = pending != nullptr ? reinterpret_cast<const float4*>(pending + int64_t{r} * D) : nullptr;
  auto* x4 = reinterpret_cast<float4*>(xs);
  for (int c0 = 0; c0 < SD4; c0 += kChunk * kThreads) {
    float4 v[kChunk], a[kChunk];
    float scale[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int i4 = c0 + k * kThreads + threadIdx.x;
      if (i4 < SD4) {
        v[k] = h4[i4];
        if (pending != nullptr) {
          const int g = i4 * 4 / D;
          a[k] = p4[i4 - g * (D / 4)];
          scale[k] = iota_in[int64_t{r} * kStreams + g];
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int i4 = c0 + k * kThreads + threadIdx.x;
      if (i4 < SD4) {
        if (pending != nullptr) {
          v[k].x = __fadd_rn(v[k].x, __fmul_rn(scale[k], a[k].x));
          v[k].y = __fadd_rn(v[k].y, __fmul_rn(scale[k], a[k].y));
          v[k].z = __fadd_rn(v[k].z, __fmul_rn(scale[k], a[k].z));
          v[k].w = __fadd_rn(v[k].w, __fmul_rn(scale[k], a[k].w));
        }
        x4[i4] = v[k];
      }
    }
  }
  __syncthreads();
  // 2 x kStreams independent chains, each in its own order (the groups interleaved only for latency).
  double a[kStreams] = {}, b[kStreams] = {};
  for (int i = threadIdx.x; i < D; i += kNormThreads) {
    const bool second = i + kThreads < D;
#pragma unroll
    for (int g = 0; g < kStreams; ++g) {
      const float x = xs[g * D + i];
      a[g] = __dadd_rn(a[g], __dmul_rn(x, x));
      if (second) {
        const float y = xs[g * D + i + kThreads];
        b[g] = __dadd_rn(b[g], __dmul_rn(y, y));
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kStreams; ++g) {
    const double sa = dev::warp_sum(a[g]), sb = dev::warp_sum(b[g]);
    if (lane == 0) part[g][warp] = sa, part[g][warp + kWarpsPerBlock] = sb;
  }
  __syncthreads();
  if (threadIdx.x < kStreams) {
    double total = 0;
    for (int w = 0; w < kNormThreads / 32; ++w) total = __dadd_rn(total, part[threadIdx.x][w]);
    inv[threadIdx.x] = dev::inv_rms(total, D, eps);
  }
  __syncthreads();
  auto* n4 = reinterpret_cast<float4*>(normed + int64_t{r} * SD);
  const auto* w4 = reinterpret_cast<const float4*>(norm_w);
  for (int c0 = 0; c0 < SD4; c0 += kChunk * kThreads) {
    float4 w[kChunk];
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int i4 = c0 + k * kThreads + threadIdx.x;
      if (i4 < SD4) w[k] = w4[i4];
    }
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      const int i4 = c0 + k * kThreads + threadIdx.x;
      if (i4 < SD4) {
        const float g_inv = inv[i4 * 4 / D];
        float4 v = x4[i4];
        v.x = __fmul_rn(__fmul_rn(v.x, g_inv), w[k].x);
        v.y = __fmul_rn(__fmul_rn(v.y, g_inv), w[k].y);
        v.z = __fmul_rn(__fmul_rn(v.z, g_inv), w[k].z);
        v.w = __fmul_rn(__fmul_rn(v.w, g_inv), w[k].w);
        x4[i4] = v;
        if (blockIdx.x == 0) n4[i4] = v;  // for the tail's combine
      }
    }
  }
  __syncthreads();
  detail::block_product<Unit, detail::F32Rows, 1>(m, n_out, detail::F32Rows{xs, 0}, 0, 1,
                                                  joint + int64_t{r} * ld_joint, ld_joint);
}

// Block (b, r) owns d = 4b .. 4b+3 of row r: warp k computes the up outputs k*D + d (stream k) with
// slice_product's chain (affine_wx's: up is not sliced), over silu(joint * inv_s) staged in shared memory;
// then hc_combine's sum, streams in order. It stores the inject hc_head folded into its norm for these d.
template <int Bits>
__global__ void __launch_bounds__(kThreads)
    hc_tail_kernel(Matrix<Bits> m, const float* joint, int64_t ld_joint, int R, float inv_s,
                   const float* normed, int D, float* H, const float* pending, const float* iota_in, float* x,
                   float* iota_out) {
  __shared__ __align__(16) float low[kMaxRank];
  __shared__ float mix[kWarpsPerBlock][kOutputsPerWarp];
  using Unit = detail::AffineUnit<Bits>;
  constexpr int NO = kOutputsPerWarp;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t d0 = int64_t{blockIdx.x} * NO, o0 = warp * int64_t{D} + d0;
  // R <= 1024 columns are at most 32 units: slice_product (one slice) gives lane l unit l alone, so the
  // lane's weights are loaded here, before waiting (they never change during a round), and its chain below
  // is slice_product's: one unit_product from zero, then the butterfly.
  const bool has_unit = lane < m.cols / Unit::kCols;
  Unit cur[NO];
  if (has_unit) {
#pragma unroll
    for (int o = 0; o < NO; ++o) cur[o].load(m, o0 + o, lane);
  }
  dev::grid_dependency_wait();
  const int r = blockIdx.y;
  const int64_t SD = int64_t{kStreams} * D;
  const float* jr = joint + int64_t{r} * ld_joint;
  {
    float v[kMaxRank / kThreads];  // every load in flight at once
#pragma unroll
    for (int k = 0; k < kMaxRank / kThreads; ++k)
      if (k * kThreads + threadIdx.x < R) v[k] = jr[k * kThreads + threadIdx.x];
#pragma unroll
    for (int k = 0; k < kMaxRank / kThreads; ++k)
      if (k * kThreads + threadIdx.x < R) low[k * kThreads + threadIdx.x] = dev::silu(__fmul_rn(v[k], inv_s));
  }
  if (iota_out != nullptr && blockIdx.x == 0 && threadIdx.x < kStreams)
    iota_out[int64_t{r} * kStreams + threadIdx.x] =
        __fmul_rn(2.0f, dev::sigmoid(__fmul_rn(jr[R + threadIdx.x], inv_s)));
  // The inject's inputs load now; the sum is stored at the end, off the product's path.
  const bool injects = pending != nullptr && threadIdx.x < kStreams * kOutputsPerWarp;
  float* h = H + r * SD + threadIdx.x / kOutputsPerWarp * int64_t{D} + d0 + threadIdx.x % kOutputsPerWarp;
  float h_old = 0, h_scale = 0, h_add = 0;
  if (injects) {
    h_old = *h;
    h_scale = iota_in[int64_t{r} * kStreams + threadIdx.x / kOutputsPerWarp];
    h_add = pending[int64_t{r} * D + d0 + threadIdx.x % kOutputsPerWarp];
  }
  // The combine's normed values, loaded before the product too.
  float nv[kStreams] = {};
  if (threadIdx.x < kOutputsPerWarp)
#pragma unroll
    for (int k = 0; k < kStreams; ++k) nv[k] = normed[r * SD + k * int64_t{D} + d0 + threadIdx.x];
  __syncthreads();
  float acc[1][NO];
#pragma unroll
  for (int o = 0; o < NO; ++o) acc[0][o] = 0.0f;
  if (has_unit)
    detail::unit_product<Unit, detail::F32Rows, 1, NO>(cur, lane, detail::F32Rows{low, 0}, 0, 1, acc);
#pragma unroll
  for (int o = 0; o < NO; ++o)
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1)
      acc[0][o] = __fadd_rn(acc[0][o], __shfl_xor_sync(0xFFFFFFFFu, acc[0][o], mask));
  if (lane == 0) {
#pragma unroll
    for (int o = 0; o < kOutputsPerWarp; ++o) mix[warp][o] = acc[0][o];
  }
  __syncthreads();
  if (threadIdx.x < kOutputsPerWarp) {
    const int64_t d = d0 + threadIdx.x;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kStreams; ++k) s = __fadd_rn(s, __fmul_rn(dev::sigmoid(mix[k][threadIdx.x]), nv[k]));
    x[int64_t{r} * D + d] = __fmul_rn(s, __fdiv_rn(1.0f, static_cast<float>(kStreams)));
  }
  if (injects) *h = __fadd_rn(h_old, __fmul_rn(h_scale, h_add));
}

int log2_group(int group) {
  return group == 32 ? 5 : group == 64 ? 6 : 7;
}

// The kernels' view of an MLX affine matrix (as wx_products.cu builds it for affine_wx).
template <int Bits>
Matrix<Bits> matrix_of(const AffineWeight& w) {
  return {w.codes,
          w.scales,
          w.biases,
          w.cols,
          log2_group(w.group),
          static_cast<uint32_t>(w.cols / 32 * Bits),
          static_cast<uint32_t>(w.cols / w.group)};
}

template <class Fn>
bool with_bits(int bits, Fn&& fn) {
  switch (bits) {
    case 2:
      fn(std::integral_constant<int, 2>{});
      return true;
    case 3:
      fn(std::integral_constant<int, 3>{});
      return true;
    case 4:
      fn(std::integral_constant<int, 4>{});
      return true;
    case 5:
      fn(std::integral_constant<int, 5>{});
      return true;
    case 6:
      fn(std::integral_constant<int, 6>{});
      return true;
    case 8:
      fn(std::integral_constant<int, 8>{});
      return true;
    default:
      return false;
  }
}

bool affine_ok(const AffineWeight& w) {
  return w.codes != nullptr && w.scales != nullptr && w.biases != nullptr && w.n_experts == 1 &&
         (w.group == 32 || w.group == 64 || w.group == 128) && w.cols % w.group == 0 &&
         w.rows * (w.cols / 32 * w.bits) < (int64_t{1} << 32) &&
         (w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8);
}

}  // namespace

bool hc_fused_takes(const AffineWeight& down_inject, const AffineWeight& up, int S, int D, int R) {
  if (S != kStreams || D % kOutputsPerWarp != 0 || R % 8 != 0 || R > kMaxRank || S * D > kMaxStreamWidth)
    return false;
  if (!affine_ok(down_inject) || !affine_ok(up)) return false;
  if (down_inject.cols != int64_t{S} * D || (down_inject.rows != R && down_inject.rows != R + S))
    return false;
  if (up.rows != int64_t{S} * D || up.cols != R) return false;
  bool unsliced = false;
  with_bits(up.bits, [&](auto bits) {
    unsliced = detail::column_slices<detail::AffineUnit<decltype(bits)::value>>(up.rows, up.cols) == 1;
  });
  return unsliced;
}

void hc_head(const AffineWeight& down_inject, const float* H, const float* pending, const float* iota_in,
             const float* norm_w, int S, int D, float eps, float* normed, float* joint, int64_t ld_joint,
             int n, cudaStream_t stream) {
  constexpr const char* op = "hc_head";
  if (S != kStreams || n < 1 || n > 65535 || int64_t{S} * D > kMaxStreamWidth || down_inject.cols != S * D)
    throw ArgumentError(std::string(op) + ": shape not taken (check hc_fused_takes first): S " +
                        std::to_string(S) + ", D " + std::to_string(D) + ", rows " + std::to_string(n));
  with_bits(down_inject.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    using Unit = detail::AffineUnit<B>;
    const int64_t per_block =
        int64_t{kWarpsPerBlock / detail::column_slices<Unit>(down_inject.rows, down_inject.cols)} *
        kOutputsPerWarp;
    const dim3 grid(static_cast<unsigned>((down_inject.rows + per_block - 1) / per_block),
                    static_cast<unsigned>(n));
    const size_t shared = static_cast<size_t>(S) * D * sizeof(float);
    hc_head_kernel<B><<<grid, kThreads, shared, stream>>>(matrix_of<B>(down_inject), down_inject.rows, H,
                                                          pending, iota_in, norm_w, D, eps, normed, joint,
                                                          ld_joint);
  });
  check_launch(op);
}

void hc_tail(const AffineWeight& up, const float* joint, int64_t ld_joint, int R, float inv_s,
             const float* normed, int S, int D, float* H, const float* pending, const float* iota_in,
             float* x, float* iota_out, int n, cudaStream_t stream) {
  constexpr const char* op = "hc_tail";
  if (S != kStreams || n < 1 || n > 65535 || R > kMaxRank || up.cols != R || up.rows != int64_t{S} * D)
    throw ArgumentError(std::string(op) + ": shape not taken (check hc_fused_takes first): S " +
                        std::to_string(S) + ", D " + std::to_string(D) + ", R " + std::to_string(R));
  if (pending != nullptr && iota_in == iota_out)
    throw ArgumentError(std::string(op) +
                        ": iota_in and iota_out must differ (blocks read the one and write the other)");
  with_bits(up.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    const dim3 grid(static_cast<unsigned>(D / kOutputsPerWarp), static_cast<unsigned>(n));
    hc_tail_kernel<B><<<grid, kThreads, 0, stream>>>(matrix_of<B>(up), joint, ld_joint, R, inv_s, normed, D,
                                                     H, pending, iota_in, x, iota_out);
  });
  check_launch(op);
}

}  // namespace ds::cuda
