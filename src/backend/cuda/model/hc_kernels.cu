// The hyper-connection mix in two launches (hc_kernels.h). The head's blocks each norm one stream of one row
// (the width the separate norm kernel runs at) and hold their weights in registers, loaded before waiting for
// the previous kernel; the tail sums the per-stream partials in a fixed order and stores the inject, so no
// block writes what another block of the same launch reads. No atomics anywhere.
#include <string>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/model/device_math.cuh"
#include "backend/cuda/model/hc_kernels.h"
#include "backend/cuda/model/norm_reduce.cuh"
#include "backend/cuda/wx_kernels.cuh"

namespace ds::cuda {

namespace {

using dev::kNormThreads;

constexpr int kStreams = 4;  // the tail gives each stream 2 warps; its partial sum is ((p0 + p1) + (p2 + p3))
// Head: one block of rms_norm_rows' 256 threads per (output tile, stream, row); each warp 1 or 2 outputs
// (hc_head's outputs_per_warp: each output's chain is the same either way), its lanes holding up to
// kLaneUnits 32-column units of the stream each (D <= 3072); at most 128 registers a thread, so two blocks
// fit an SM beside the previous kernel's.
constexpr int kHeadWarps = kNormThreads / 32;
constexpr int kLaneUnits = 3;
constexpr int kNormItems = 12;  // values of the stream a thread holds: kNormItems * 256 = 3072 >= D
constexpr int kMaxStreamWidth = 3072;
constexpr int kMaxRank = 1024;
// Tail: 8 warps, two a stream; a warp's lanes in groups of U = R / 32 (one unit each), a group per output.
constexpr int kTailWarps = 8;
constexpr int kTailThreads = kTailWarps * 32;
constexpr int kTailHalves = kTailWarps / kStreams;
constexpr int kTailMaxOutputs = 32 * kTailHalves;  // d values a block owns at most (R = 32: one lane each)
static_assert(kNormItems * kNormThreads == kMaxStreamWidth && kLaneUnits * 32 * 32 == kMaxStreamWidth);
static_assert(kStreams * kTailMaxOutputs <= kTailThreads, "a thread per stored inject value");

// The sum of a lane group's values at its lane u == 0 (the group: lanes base .. base + U - 1, u = lane -
// base): the 32-lane xor butterfly's value with lanes >= U holding 0 (no lane of the chains gives -0, so +0
// adds nothing): at each mask m, lane u < m adds lane u + m where that lane is in the group. The bits of the
// butterfly over a warp whose lanes 0 .. U - 1 hold the values.
__device__ __forceinline__ float group_sum(float v, int u, int U) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) {
    const float other = __shfl_down_sync(0xFFFFFFFFu, v, m);
    if (u < m && u + m < U) v = __fadd_rn(v, other);
  }
  return v;
}

// Activations staged in shared memory with kUnitPad floats after each 32-column unit: the lanes of a warp
// read different units' float4s at the same chunk, and unpadded every unit starts in bank 0 (ncu in the
// round: 86% of the shared wavefronts excess, the FMA chains stalled on them); padded, the 8 lanes of a
// wavefront fall in 8 different bank quads. The same values are read, so the bits do not change.
constexpr int kUnitPad = 4;
__host__ __device__ constexpr int padded_col(int col) {
  return col + (col >> 5) * kUnitPad;
}

struct PaddedRows {
  const float* p;
  __device__ __forceinline__ void load8(int64_t, int64_t col, float (&out)[8]) const {
    const float4* q = reinterpret_cast<const float4*>(p + padded_col(static_cast<int>(col)));
    const float4 a = q[0];
    const float4 b = q[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

template <int Bits>
using Matrix = typename detail::AffineUnit<Bits>::Matrix;

// Block (tile, g, r). Before the wait: the warp's weight units of stream g and the norm weights (never
// written during a round). After it: stream g of row r with the inject added, its 1 / rms in rms_norm_rows'
// order (thread t sums values t, t + 256, ... in double; block_inv_rms), the normed stream in shared memory
// (and, by tile 0, in normed), then each output's partial over the stream: lane l's chain over units l,
// l + 32, ... (unit_product, columns in order), the xor butterfly.
//
// LoadsFirst (sass13, the same operations on the same values): the pending row and its iota are loaded into
// registers right after H's, before any of the inject's arithmetic, with a compiler barrier after them.
// Without it the SASS reuses one register for the pending values, each load issued after the previous value's
// multiply-add: about 6 dependent L2 round trips after the wait instead of 1.
template <int Bits, int NO, bool LoadsFirst>
__global__ void __launch_bounds__(kNormThreads, 2)
    hc_head_kernel(Matrix<Bits> m, int64_t n_out, const float* H, const float* pending, const float* iota_in,
                   const float* norm_w, int D, float eps, float* normed, float* partial) {
  using Unit = detail::AffineUnit<Bits>;
  __shared__ __align__(16) float xs[padded_col(kMaxStreamWidth)];
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int g = blockIdx.y, r = blockIdx.z, S = gridDim.y;
  const int64_t o0 = (int64_t{blockIdx.x} * kHeadWarps + warp) * NO;
  const int units = D / Unit::kCols;
  const bool has_outputs = o0 < n_out;
  Unit cur[kLaneUnits][NO];
#pragma unroll
  for (int j = 0; j < kLaneUnits; ++j) {
    if (has_outputs && lane + 32 * j < units) {
#pragma unroll
      for (int o = 0; o < NO; ++o)
        cur[j][o].load(m, o0 + o < n_out ? o0 + o : n_out - 1, int64_t{g} * units + lane + 32 * j);
    }
  }
  const float* mw = norm_w + int64_t{g} * D;
  float mv[kNormItems];
#pragma unroll
  for (int k = 0; k < kNormItems; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < D) mv[k] = mw[i];
  }
  dev::grid_dependency_wait();
  const int64_t row_g = int64_t{r} * S + g;
  const float* hr = H + row_g * D;
  float v[kNormItems];
#pragma unroll
  for (int k = 0; k < kNormItems; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < D) v[k] = hr[i];
  }
  if constexpr (LoadsFirst) {
    float pv[kNormItems];
    float a = 0.0f;
    if (pending != nullptr) {
      const float* pr = pending + int64_t{r} * D;
      a = iota_in[row_g];
#pragma unroll
      for (int k = 0; k < kNormItems; ++k) {
        const int i = threadIdx.x + k * kNormThreads;
        if (i < D) pv[k] = pr[i];
      }
    }
    asm volatile("" ::: "memory");  // every load above issued before the arithmetic below
    if (pending != nullptr) {
#pragma unroll
      for (int k = 0; k < kNormItems; ++k) {
        const int i = threadIdx.x + k * kNormThreads;
        if (i < D) v[k] = __fadd_rn(v[k], __fmul_rn(a, pv[k]));
      }
    }
  } else if (pending != nullptr) {  // add_rms_norm_rows' inject: v + iota * y, not written back (the tail
                                    // stores it)
    const float* pr = pending + int64_t{r} * D;
    const float a = iota_in[row_g];
#pragma unroll
    for (int k = 0; k < kNormItems; ++k) {
      const int i = threadIdx.x + k * kNormThreads;
      if (i < D) v[k] = __fadd_rn(v[k], __fmul_rn(a, pr[i]));
    }
  }
  double ss = 0;
#pragma unroll
  for (int k = 0; k < kNormItems; ++k)
    if (threadIdx.x + k * kNormThreads < D) ss = __dadd_rn(ss, __dmul_rn(v[k], v[k]));
  const float inv = dev::block_inv_rms(ss, D, eps);
  float* nr = normed + row_g * D;
#pragma unroll
  for (int k = 0; k < kNormItems; ++k) {
    const int i = threadIdx.x + k * kNormThreads;
    if (i < D) {
      const float y = __fmul_rn(__fmul_rn(v[k], inv), mv[k]);
      xs[padded_col(i)] = y;
      if (blockIdx.x == 0) nr[i] = y;  // for the tail's combine
    }
  }
  __syncthreads();
  if (!has_outputs) return;  // uniform over the warp; no barrier follows
  float acc[1][NO];
#pragma unroll
  for (int o = 0; o < NO; ++o) acc[0][o] = 0.0f;
#pragma unroll
  for (int j = 0; j < kLaneUnits; ++j)
    if (lane + 32 * j < units)
      detail::unit_product<Unit, PaddedRows, 1, NO>(cur[j], lane + 32 * j, PaddedRows{xs}, 0, 1, acc);
#pragma unroll
  for (int o = 0; o < NO; ++o)
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1)
      acc[0][o] = __fadd_rn(acc[0][o], __shfl_xor_sync(0xFFFFFFFFu, acc[0][o], mask));
  float* pr = partial + row_g * n_out;
#pragma unroll
  for (int o = 0; o < NO; ++o)
    if (lane == o && o0 + o < n_out) pr[o0 + o] = acc[0][o];
}

// Block (b, r) owns P = 32 / U values d (U = R / 32 units, P = 3 at R = 320) per half h of its range of
// kTailHalves * P: warp w computes the up outputs k D + d of stream k = w / kTailHalves for its half h = w %
// kTailHalves, lane group q = lane / U (q < P) output d = d0 + h P + q, lane u = lane % U unit u. Each lane's
// chain is slice_product's for unit u (affine_wx's: up is not sliced), and the group's sum is the 32-lane
// xor butterfly's at lane 0 with lanes >= U holding 0 (group_sum): so every output has the bits it had with
// one warp of 4 outputs and 10 busy lanes, now with 30 of 32 lanes busy. Every load of the block goes out
// right after the wait (the partials, the inject's inputs, the combine's normed values: one L2 round trip);
// then the activations in shared memory, the products, hc_combine's sum (streams in order), the new iota, and
// the stores of the inject hc_head folded into its norm.
template <int Bits>
__global__ void __launch_bounds__(kTailThreads)
    hc_tail_kernel(Matrix<Bits> m, const float* partial, int64_t ld_partial, int R, float inv_s,
                   const float* normed, int D, float* H, const float* pending, const float* iota_in, float* x,
                   float* iota_out) {
  __shared__ __align__(16) float low[padded_col(kMaxRank)];
  __shared__ float mix[kStreams][kTailMaxOutputs];
  using Unit = detail::AffineUnit<Bits>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int U = R / Unit::kCols, P = 32 / U, span = kTailHalves * P;
  const int k_w = warp / kTailHalves, q = lane / U, u = lane % U, dd_w = warp % kTailHalves * P + q;
  const int64_t d0 = int64_t{blockIdx.x} * span;
  const bool has_unit = q < P && d0 + dd_w < D;
  // The lane's weights, before waiting (never written during a round).
  Unit cur[1];
  if (has_unit) cur[0].load(m, int64_t{k_w} * D + d0 + dd_w, u);
  dev::grid_dependency_wait();
  const int r = blockIdx.y;
  const int64_t SD = int64_t{kStreams} * D;
  const float* pr = partial + int64_t{r} * kStreams * ld_partial;
  // Every load first: the stream partials of this thread's joint values (and of the iota's, block 0) ...
  constexpr int kJ = kMaxRank / kTailThreads;
  float p4[kJ][kStreams];
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int c = j * kTailThreads + threadIdx.x;
    if (c < R)
#pragma unroll
      for (int g = 0; g < kStreams; ++g) p4[j][g] = pr[g * ld_partial + c];
  }
  const bool iotas = iota_out != nullptr && blockIdx.x == 0 && threadIdx.x < kStreams;
  float pi[kStreams] = {};
  if (iotas) {
#pragma unroll
    for (int g = 0; g < kStreams; ++g) pi[g] = pr[g * ld_partial + R + threadIdx.x];
  }
  // ... the inject's inputs (thread t: stream t / span, value d0 + t % span) ...
  const int k_t = threadIdx.x / span, dd_t = threadIdx.x % span;
  const bool injects = pending != nullptr && k_t < kStreams && d0 + dd_t < D;
  float* h = H + r * SD + k_t * int64_t{D} + d0 + dd_t;
  float h_old = 0, h_scale = 0, h_add = 0;
  if (injects) {
    h_old = *h;
    h_scale = iota_in[int64_t{r} * kStreams + k_t];
    h_add = pending[int64_t{r} * D + d0 + dd_t];
  }
  // ... and the combine's normed values (thread t < span: value d0 + t).
  const bool combines = threadIdx.x < span && d0 + threadIdx.x < D;
  float nv[kStreams] = {};
  if (combines) {
#pragma unroll
    for (int g = 0; g < kStreams; ++g) nv[g] = normed[r * SD + g * int64_t{D} + d0 + threadIdx.x];
  }
  // The stream partials' fixed-order sum (hc_kernels.h), then the activations.
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    const int c = j * kTailThreads + threadIdx.x;
    if (c < R)
      low[padded_col(c)] = dev::silu(
          __fmul_rn(__fadd_rn(__fadd_rn(p4[j][0], p4[j][1]), __fadd_rn(p4[j][2], p4[j][3])), inv_s));
  }
  if (iotas)
    iota_out[int64_t{r} * kStreams + threadIdx.x] = __fmul_rn(
        2.0f, dev::sigmoid(__fmul_rn(__fadd_rn(__fadd_rn(pi[0], pi[1]), __fadd_rn(pi[2], pi[3])), inv_s)));
  __syncthreads();
  float acc[1][1] = {{0.0f}};
  if (has_unit) detail::unit_product<Unit, PaddedRows, 1, 1>(cur, u, PaddedRows{low}, 0, 1, acc);
  const float sum = group_sum(acc[0][0], u, U);
  if (has_unit && u == 0) mix[k_w][dd_w] = sum;
  __syncthreads();
  if (combines) {
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < kStreams; ++g) s = __fadd_rn(s, __fmul_rn(dev::sigmoid(mix[g][threadIdx.x]), nv[g]));
    x[int64_t{r} * D + d0 + threadIdx.x] = __fmul_rn(s, __fdiv_rn(1.0f, static_cast<float>(kStreams)));
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

bool affine_ok(const AffineWeight& w) {
  return w.codes != nullptr && w.scales != nullptr && w.biases != nullptr && w.n_experts == 1 &&
         (w.group == 32 || w.group == 64 || w.group == 128) && w.cols % w.group == 0 &&
         w.rows * (w.cols / 32 * w.bits) < (int64_t{1} << 32) &&
         (w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8);
}

}  // namespace

bool hc_head_takes(const AffineWeight& down_inject, int S, int D, int R) {
  if (S != kStreams || D % 32 != 0 || D > kMaxStreamWidth || R % 32 != 0 || R > kMaxRank) return false;
  return affine_ok(down_inject) && down_inject.cols == int64_t{S} * D &&
         (down_inject.rows == R || down_inject.rows == R + S);
}

bool hc_fused_takes(const AffineWeight& down_inject, const AffineWeight& up, int S, int D, int R) {
  if (!hc_head_takes(down_inject, S, D, R) || !affine_ok(up)) return false;
  if (up.rows != int64_t{S} * D || up.cols != R) return false;
  bool unsliced = false;
  with_bits(up.bits, [&](auto bits) {
    unsliced = detail::column_slices<detail::AffineUnit<decltype(bits)::value>>(up.rows, up.cols) == 1;
  });
  return unsliced;
}

int hc_head_outputs_for_rows(int n, bool tensor_tail) {
  return n == 1 && !tensor_tail ? 1 : 2;
}

int64_t hc_partial_floats(const AffineWeight& down_inject, int S, int n) {
  return int64_t{n} * S * down_inject.rows;
}

void hc_head(const AffineWeight& down_inject, const float* H, const float* pending, const float* iota_in,
             const float* norm_w, int S, int D, float eps, float* normed, float* partial, int n,
             cudaStream_t stream, int outputs_per_warp, bool loads_first) {
  constexpr const char* op = "hc_head";
  if (outputs_per_warp != 1 && outputs_per_warp != 2)
    throw ArgumentError(std::string(op) + ": outputs_per_warp must be 1 or 2, got " +
                        std::to_string(outputs_per_warp));
  if (S != kStreams || n < 1 || n > 65535 || D % 32 != 0 || D > kMaxStreamWidth ||
      down_inject.cols != int64_t{S} * D || (pending != nullptr && iota_in == nullptr))
    throw ArgumentError(std::string(op) + ": shape not taken (check hc_fused_takes first): S " +
                        std::to_string(S) + ", D " + std::to_string(D) + ", rows " + std::to_string(n));
  with_bits(down_inject.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    const int tile = kHeadWarps * outputs_per_warp;
    const dim3 grid(static_cast<unsigned>((down_inject.rows + tile - 1) / tile), static_cast<unsigned>(S),
                    static_cast<unsigned>(n));
    auto kernel = loads_first
                      ? (outputs_per_warp == 1 ? hc_head_kernel<B, 1, true> : hc_head_kernel<B, 2, true>)
                      : (outputs_per_warp == 1 ? hc_head_kernel<B, 1, false> : hc_head_kernel<B, 2, false>);
    kernel<<<grid, kNormThreads, 0, stream>>>(matrix_of<B>(down_inject), down_inject.rows, H, pending,
                                              iota_in, norm_w, D, eps, normed, partial);
  });
  check_launch(op);
}

void hc_tail(const AffineWeight& up, const float* partial, int64_t ld_partial, int R, float inv_s,
             const float* normed, int S, int D, float* H, const float* pending, const float* iota_in,
             float* x, float* iota_out, int n, cudaStream_t stream) {
  constexpr const char* op = "hc_tail";
  if (S != kStreams || n < 1 || n > 65535 || R < 32 || R % 32 != 0 || R > kMaxRank || up.cols != R ||
      up.rows != int64_t{S} * D || ld_partial < R + (iota_out != nullptr ? S : 0))
    throw ArgumentError(std::string(op) + ": shape not taken (check hc_fused_takes first): S " +
                        std::to_string(S) + ", D " + std::to_string(D) + ", R " + std::to_string(R));
  if (pending != nullptr && iota_in == iota_out)
    throw ArgumentError(std::string(op) +
                        ": iota_in and iota_out must differ (blocks read the one and write the other)");
  with_bits(up.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    const int span = kTailHalves * (32 / (R / 32));
    const dim3 grid(static_cast<unsigned>((D + span - 1) / span), static_cast<unsigned>(n));
    hc_tail_kernel<B><<<grid, kTailThreads, 0, stream>>>(matrix_of<B>(up), partial, ld_partial, R, inv_s,
                                                         normed, D, H, pending, iota_in, x, iota_out);
  });
  check_launch(op);
}

}  // namespace ds::cuda
