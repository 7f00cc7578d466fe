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

using detail::kOutputsPerWarp;
using detail::kWarpsPerBlock;
using dev::kNormThreads;

constexpr int kStreams = 4;  // the tail's warps are the streams; its partial sum is ((p0 + p1) + (p2 + p3))
// Head: one block of rms_norm_rows' 256 threads per (output tile, stream, row); each warp kHeadOutputs
// outputs, its lanes holding up to kLaneUnits 32-column units of the stream each (D <= 3072); at most 128
// registers a thread, so two blocks fit an SM beside the previous kernel's.
constexpr int kHeadWarps = kNormThreads / 32;
constexpr int kHeadOutputs = 2;
constexpr int kHeadTile = kHeadWarps * kHeadOutputs;
constexpr int kLaneUnits = 3;
constexpr int kNormItems = 12;  // values of the stream a thread holds: kNormItems * 256 = 3072 >= D
constexpr int kMaxStreamWidth = 3072;
constexpr int kMaxRank = 1024;
constexpr int kTailThreads = kWarpsPerBlock * 32;
static_assert(kNormItems * kNormThreads == kMaxStreamWidth && kLaneUnits * 32 * 32 == kMaxStreamWidth);

template <int Bits>
using Matrix = typename detail::AffineUnit<Bits>::Matrix;

// Block (tile, g, r). Before the wait: the warp's weight units of stream g and the norm weights (never
// written during a round). After it: stream g of row r with the inject added, its 1 / rms in rms_norm_rows'
// order (thread t sums values t, t + 256, ... in double; block_inv_rms), the normed stream in shared memory
// (and, by tile 0, in normed), then each output's partial over the stream: lane l's chain over units l,
// l + 32, ... (unit_product, columns in order), the xor butterfly.
template <int Bits>
__global__ void __launch_bounds__(kNormThreads, 2)
    hc_head_kernel(Matrix<Bits> m, int64_t n_out, const float* H, const float* pending, const float* iota_in,
                   const float* norm_w, int D, float eps, float* normed, float* partial) {
  using Unit = detail::AffineUnit<Bits>;
  constexpr int NO = kHeadOutputs;
  __shared__ __align__(16) float xs[kMaxStreamWidth];
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
  if (pending != nullptr) {  // add_rms_norm_rows' inject: v + iota * y, not written back (the tail stores it)
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
      xs[i] = y;
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
      detail::unit_product<Unit, detail::F32Rows, 1, NO>(cur[j], lane + 32 * j, detail::F32Rows{xs, 0}, 0, 1,
                                                         acc);
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

// Block (b, r) owns d = 4b .. 4b+3 of row r: the joint values summed from the head's partials, warp k
// computes the up outputs k*D + d (stream k) with slice_product's chain (affine_wx's: up is not sliced), over
// silu(joint * inv_s) staged in shared memory; then hc_combine's sum, streams in order. It stores the inject
// hc_head folded into its norm for these d.
template <int Bits>
__global__ void __launch_bounds__(kTailThreads)
    hc_tail_kernel(Matrix<Bits> m, const float* partial, int64_t ld_partial, int R, float inv_s,
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
  const float* pr = partial + int64_t{r} * kStreams * ld_partial;
  // The stream partials' fixed-order sum (hc_kernels.h).
  auto joint = [&](int j) {
    return __fadd_rn(__fadd_rn(pr[j], pr[ld_partial + j]),
                     __fadd_rn(pr[2 * ld_partial + j], pr[3 * ld_partial + j]));
  };
  {
    float v[kMaxRank / kTailThreads];  // every load in flight at once
#pragma unroll
    for (int k = 0; k < kMaxRank / kTailThreads; ++k)
      if (k * kTailThreads + threadIdx.x < R) v[k] = joint(k * kTailThreads + threadIdx.x);
#pragma unroll
    for (int k = 0; k < kMaxRank / kTailThreads; ++k)
      if (k * kTailThreads + threadIdx.x < R)
        low[k * kTailThreads + threadIdx.x] = dev::silu(__fmul_rn(v[k], inv_s));
  }
  if (iota_out != nullptr && blockIdx.x == 0 && threadIdx.x < kStreams)
    iota_out[int64_t{r} * kStreams + threadIdx.x] =
        __fmul_rn(2.0f, dev::sigmoid(__fmul_rn(joint(R + threadIdx.x), inv_s)));
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

bool affine_ok(const AffineWeight& w) {
  return w.codes != nullptr && w.scales != nullptr && w.biases != nullptr && w.n_experts == 1 &&
         (w.group == 32 || w.group == 64 || w.group == 128) && w.cols % w.group == 0 &&
         w.rows * (w.cols / 32 * w.bits) < (int64_t{1} << 32) &&
         (w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8);
}

}  // namespace

bool hc_fused_takes(const AffineWeight& down_inject, const AffineWeight& up, int S, int D, int R) {
  if (S != kStreams || D % 32 != 0 || D > kMaxStreamWidth || R % 8 != 0 || R > kMaxRank) return false;
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

int64_t hc_partial_floats(const AffineWeight& down_inject, int S, int n) {
  return int64_t{n} * S * down_inject.rows;
}

void hc_head(const AffineWeight& down_inject, const float* H, const float* pending, const float* iota_in,
             const float* norm_w, int S, int D, float eps, float* normed, float* partial, int n,
             cudaStream_t stream) {
  constexpr const char* op = "hc_head";
  if (S != kStreams || n < 1 || n > 65535 || D % 32 != 0 || D > kMaxStreamWidth ||
      down_inject.cols != int64_t{S} * D || (pending != nullptr && iota_in == nullptr))
    throw ArgumentError(std::string(op) + ": shape not taken (check hc_fused_takes first): S " +
                        std::to_string(S) + ", D " + std::to_string(D) + ", rows " + std::to_string(n));
  with_bits(down_inject.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    const dim3 grid(static_cast<unsigned>((down_inject.rows + kHeadTile - 1) / kHeadTile),
                    static_cast<unsigned>(S), static_cast<unsigned>(n));
    hc_head_kernel<B><<<grid, kNormThreads, 0, stream>>>(matrix_of<B>(down_inject), down_inject.rows, H,
                                                         pending, iota_in, norm_w, D, eps, normed, partial);
  });
  check_launch(op);
}

void hc_tail(const AffineWeight& up, const float* partial, int64_t ld_partial, int R, float inv_s,
             const float* normed, int S, int D, float* H, const float* pending, const float* iota_in,
             float* x, float* iota_out, int n, cudaStream_t stream) {
  constexpr const char* op = "hc_tail";
  if (S != kStreams || n < 1 || n > 65535 || R > kMaxRank || up.cols != R || up.rows != int64_t{S} * D ||
      ld_partial < R + (iota_out != nullptr ? S : 0))
    throw ArgumentError(std::string(op) + ": shape not taken (check hc_fused_takes first): S " +
                        std::to_string(S) + ", D " + std::to_string(D) + ", R " + std::to_string(R));
  if (pending != nullptr && iota_in == iota_out)
    throw ArgumentError(std::string(op) +
                        ": iota_in and iota_out must differ (blocks read the one and write the other)");
  with_bits(up.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    const dim3 grid(static_cast<unsigned>(D / kOutputsPerWarp), static_cast<unsigned>(n));
    hc_tail_kernel<B><<<grid, kTailThreads, 0, stream>>>(matrix_of<B>(up), partial, ld_partial, R, inv_s,
                                                         normed, D, H, pending, iota_in, x, iota_out);
  });
  check_launch(op);
}

}  // namespace ds::cuda
