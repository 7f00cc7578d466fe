// The hyper-connection mix's tail for the tensor decode family (hc_kernels.h, hc_tensor_tail): the partials'
// sum + the activations, up on the tensor cores with tc_decode_wx's arithmetic, hc_combine's sum and the
// inject's store, in one launch.
//
// Block (b, y) owns the 16 values d0 = 16 b .. d0 + 15 of rows 8 y .. 8 y + 7: warp k runs the 16 up outputs
// k D + d0 .. (stream k), one A fragment, against the block's rows as the 8 columns of one B fragment, so the
// combine of the block's values meets in shared memory. Per (row, output) the arithmetic is
// decode_kernel<Bits, NF, PC>'s (tc_decode.cu) operation for operation: the lane <-> column map (lane (g, t)
// decodes columns 8t .. 8t+7 of each unit with tcd::unit_pairs into the same A registers), the x split into
// three exact bf16 planes in fragment order (tc::split3) and the tile sums in the split's order, per unit the
// MMA chain (chained: per k step the terms smallest first into one accumulator; columns: tcd::pr_mma, met by
// tcd::pr_combine) and the epilogue y = fma(bias, sum(x), fma(scale, d, y)) in unit order. An MMA's D[i][n]
// depends only on A's row i, B's column n and C[i][n], so the row's place among the block's 8 (or a tile's
// 64) changes no bits: up's outputs equal tc_decode_wx's at every row count (memcmp, tools/cuda/model/
// hc_checks.cpp). Unsliced matrices only (tc_decode_column_slices == 1).
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/model/device_math.cuh"
#include "backend/cuda/model/hc_kernels.h"
#include "backend/cuda/tc_common.cuh"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_decode_parts.cuh"

namespace ds::cuda {

namespace {

using tc::from_bf16;
using tc::kTerms;
using tc::mma_bf16;

constexpr int kStreams = 4;   // a warp a stream
constexpr int kOutputs = 16;  // d values a block (one A fragment a warp)
constexpr int kRows = 8;      // rows a block (one B fragment)
constexpr int kThreads = kStreams * 32;
constexpr int kMaxRank = 1024;  // R
static_assert(kRows * kOutputs == kThreads, "a thread per combined value");

// The shared memory of a block, in 4-byte words, by the shape (host and device agree).
struct Layout {
  int T, wpr, cstride, G,
      pstride;  // units, code words a row, their stride, groups a row, a plane row (uint4)
  __host__ __device__ Layout(int R, int bits, int group) {
    T = R / 32;
    wpr = T * bits;
    // 4 words of slack (unit_pairs may read a word past the unit), and the stride = 4 mod 8 words: lanes (g,
    // t) of a 4-bit unit read word g stride + t, 32 distinct banks.
    cstride = wpr + 4 + ((4 - (wpr + 4) % 8) + 8) % 8;
    G = R / group;
    // A plane row of T units of 4 uint4 (16 words each), padded to 4 mod 8 uint4: a quarter warp's 8 lanes
    // (rows g, g + 1; t = 0..3) read 8 distinct bank quads.
    pstride = 4 * T + (T % 2 == 0 ? 4 : 0);
  }
  __host__ __device__ int planes_words() const { return kTerms * kRows * pstride * 4; }  // uint4 first (16 B)
  __host__ __device__ int codes_words() const { return kStreams * kOutputs * cstride; }
  __host__ __device__ int sb_words() const { return kStreams * kOutputs * G * 2; }  // scales, biases (float)
  __host__ __device__ int pair_words() const { return kRows * T * 4; }
  __host__ __device__ int sums_words() const { return kRows * T; }
  __host__ __device__ int mix_words() const { return kStreams * kRows * kOutputs; }
  __host__ __device__ int total_words() const {
    return planes_words() + codes_words() + sb_words() + pair_words() + sums_words() + mix_words();
  }
};

struct Up {
  const uint32_t* codes;
  const uint16_t* scales;
  const uint16_t* biases;
  int group_shift;
  bool sb16;         // the fast kernel: scales and biases 16-byte aligned (their rows by cp.async)
  bool partial_vec;  // the fast kernel: the partials' rows 16-byte aligned (float4 loads)
};

template <int Bits, bool PC>
__global__ void __launch_bounds__(kThreads)
    hc_tc_tail_kernel(Up w, const float* partial, int64_t ld_partial, int R, int group, float inv_s,
                      const float* normed, int D, float* H, const float* pending, const float* iota_in,
                      float* x, float* iota_out, float* mix_out, int64_t ld_mix, int n) {
  extern __shared__ __align__(16) uint32_t smem[];
  const Layout L(R, Bits, group);
  uint4* planes = reinterpret_cast<uint4*>(smem);
  uint32_t* codes = smem + L.planes_words();
  float* sb = reinterpret_cast<float*>(codes + L.codes_words());
  float* pair_sums = sb + L.sb_words();
  float* sums = pair_sums + L.pair_words();
  float* mix = sums + L.sums_words();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int T = L.T;
  const int64_t d0 = int64_t{blockIdx.x} * kOutputs, r0 = int64_t{blockIdx.y} * kRows;
  const int nr = static_cast<int>(min(int64_t{kRows}, n - r0));
  const int64_t SD = int64_t{kStreams} * D;
  // Before the wait (up never changes during a round): the warp's 16 rows of codes by cp.async, their scales
  // and biases as floats.
  {
    const int64_t o0 = int64_t{warp} * D + d0;
    uint32_t* cw = codes + warp * kOutputs * L.cstride;
    if (L.wpr % 4 == 0) {
      const int cpr = L.wpr / 4;
      for (int c = lane; c < kOutputs * cpr; c += 32) {
        const int r = c / cpr, k = c % cpr;
        tc::cp_async16(cw + r * L.cstride + 4 * k, w.codes + (o0 + r) * L.wpr + 4 * k, 16);
      }
    } else {
      for (int c = lane; c < kOutputs * L.wpr; c += 32) {
        const int r = c / L.wpr, k = c % L.wpr;
        tc::cp_async4(cw + r * L.cstride + k, w.codes + (o0 + r) * L.wpr + k, 4);
      }
    }
    tc::cp_async_commit();
    float* sw = sb + warp * kOutputs * L.G * 2;
    for (int c = lane; c < kOutputs * L.G; c += 32) {
      const int r = c / L.G, q = c % L.G;
      sw[2 * c] = from_bf16(w.scales[(o0 + r) * L.G + q]);
      sw[2 * c + 1] = from_bf16(w.biases[(o0 + r) * L.G + q]);
    }
  }
  dev::grid_dependency_wait();
  // Every load of the block's inputs now: the partials (the split below), the inject's inputs and the
  // combine's normed values (thread: row threadIdx.x / 16, value d0 + threadIdx.x % 16, every stream).
  const int c_row = threadIdx.x / kOutputs, c_d = threadIdx.x % kOutputs;
  const bool mine = c_row < nr;
  const int64_t cr = r0 + c_row;
  float nv[kStreams] = {}, h_old[kStreams] = {}, h_scale[kStreams] = {}, h_add = 0;
  if (mine) {
#pragma unroll
    for (int k = 0; k < kStreams; ++k) nv[k] = normed[cr * SD + k * int64_t{D} + d0 + c_d];
    if (pending != nullptr) {
#pragma unroll
      for (int k = 0; k < kStreams; ++k) {
        h_old[k] = H[cr * SD + k * int64_t{D} + d0 + c_d];
        h_scale[k] = iota_in[cr * kStreams + k];
      }
      h_add = pending[cr * D + d0 + c_d];
    }
  }
  // The activations low = silu(((p0 + p1) + (p2 + p3)) inv_s) (hc_activations' bits on the joint values
  // hc_tail forms), split as decode_split_kernel splits them: 8 columns an item, three bf16 planes in
  // fragment order, the pair sums of the tile's tree; rows past n zeros (never stored).
  for (int i = threadIdx.x; i < kRows * T * 4; i += kThreads) {
    const int row = i / (T * 4), rem = i % (T * 4), unit = rem / 4, b = rem % 4;
    float v[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (row < nr) {
      const float* p = partial + (r0 + row) * kStreams * ld_partial + unit * 32 + 8 * b;
      float q[kStreams][8];
#pragma unroll
      for (int k = 0; k < kStreams; ++k)
#pragma unroll
        for (int e = 0; e < 8; ++e) q[k][e] = p[k * ld_partial + e];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] =
            dev::silu(__fmul_rn(__fadd_rn(__fadd_rn(q[0][e], q[1][e]), __fadd_rn(q[2][e], q[3][e])), inv_s));
    }
    uint4 plane[kTerms];
    tc::split3_planes(v, plane);
#pragma unroll
    for (int j = 0; j < kTerms; ++j) planes[(j * kRows + row) * L.pstride + unit * 4 + b] = plane[j];
    // q[2b] + q[2b+1] of the split kernel's tree8.
    pair_sums[i] = __fadd_rn(tc::sum4(v[0], v[1], v[2], v[3]), tc::sum4(v[4], v[5], v[6], v[7]));
  }
  // The new iota (block column 0): 2 sigmoid(((p0 + p1) + (p2 + p3)) inv_s) of outputs R .. R + 3.
  if (iota_out != nullptr && blockIdx.x == 0 && threadIdx.x < kStreams * nr) {
    const int row = threadIdx.x / kStreams, k = threadIdx.x % kStreams;
    const float* p = partial + (r0 + row) * kStreams * ld_partial + R + k;
    const float j =
        __fadd_rn(__fadd_rn(p[0], p[ld_partial]), __fadd_rn(p[2 * ld_partial], p[3 * ld_partial]));
    iota_out[(r0 + row) * kStreams + k] = __fmul_rn(2.0f, dev::sigmoid(__fmul_rn(j, inv_s)));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kRows * T; i += kThreads)
    sums[i] = __fadd_rn(__fadd_rn(pair_sums[4 * i], pair_sums[4 * i + 1]),
                        __fadd_rn(pair_sums[4 * i + 2], pair_sums[4 * i + 3]));
  tc::cp_async_wait<0>();
  __syncthreads();
  // The warp's 16 outputs on the block's 8 rows: D element e is output g + 8 (e >> 1), row 2t + (e & 1).
  const uint32_t* cw = codes + warp * kOutputs * L.cstride;
  const float* sw = sb + warp * kOutputs * L.G * 2;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int u = 0; u < T; ++u) {
    uint32_t P[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) tcd::unit_pairs<Bits>(cw + (g + 8 * h) * L.cstride + u * Bits, t, P[h]);
    const uint32_t a[2][4] = {{P[0][0], P[1][0], P[0][1], P[1][1]}, {P[0][2], P[1][2], P[0][3], P[1][3]}};
    const int q = (u * 32) >> w.group_shift;
    const float scale[2] = {sw[2 * (g * L.G + q)], sw[2 * ((g + 8) * L.G + q)]};
    const float bias[2] = {sw[2 * (g * L.G + q) + 1], sw[2 * ((g + 8) * L.G + q) + 1]};
    uint4 b[kTerms];
#pragma unroll
    for (int j = 0; j < kTerms; ++j) b[j] = planes[(j * kRows + g) * L.pstride + u * 4 + t];
    const float sx[2] = {sums[(2 * t) * T + u], sums[(2 * t + 1) * T + u]};
    if constexpr (PC) {
      float c[kTerms][4] = {};
      tcd::pr_mma(c, a, b);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[e] = __fmaf_rn(bias[e >> 1], sx[e & 1], __fmaf_rn(scale[e >> 1], tcd::pr_combine(c, e), acc[e]));
    } else {
      float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      tcd::unit_mma(part, a, b);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        acc[e] = __fmaf_rn(scale[e >> 1], part[e], acc[e]);
        acc[e] = __fmaf_rn(bias[e >> 1], sx[e & 1], acc[e]);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int o = g + 8 * (e >> 1), row = 2 * t + (e & 1);
    mix[(warp * kRows + row) * kOutputs + o] = acc[e];
    if (mix_out != nullptr && row < nr) mix_out[(r0 + row) * ld_mix + warp * int64_t{D} + d0 + o] = acc[e];
  }
  __syncthreads();
  if (!mine) return;
  // hc_combine's sum (streams in order), then the inject hc_head folded into its norm, now stored.
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kStreams; ++k)
    s = __fadd_rn(s, __fmul_rn(dev::sigmoid(mix[(k * kRows + c_row) * kOutputs + c_d]), nv[k]));
  x[cr * D + d0 + c_d] = __fmul_rn(s, __fdiv_rn(1.0f, static_cast<float>(kStreams)));
  if (pending != nullptr) {
#pragma unroll
    for (int k = 0; k < kStreams; ++k)
      H[cr * SD + k * int64_t{D} + d0 + c_d] = __fadd_rn(h_old[k], __fmul_rn(h_scale[k], h_add));
  }
}

// Variant 1 (hc_tensor_tail_variant; hctail13): hc_tc_tail_kernel's arithmetic operation for operation, with
// less latency at few rows. (1) Every global load of a block issued before any arithmetic that uses one: the
// variant-0 kernel's compiler sank each partial's loads to its silu (whose division has a call), so a thread
// waited on 8 L2 round trips in a row; here the partials of an item (float4 where aligned), the iota's and
// the combine's and inject's inputs go out together, a compiler barrier after them. Items only for the
// block's rows (the zero rows' planes and sums written before the wait). (2) The scales and biases staged as
// bf16 by cp.async before the wait (plain 16-bit loads where not 16-byte aligned), converted at use (the
// same floats). (3) Up's units in groups of up to 5: the groups' MMA chains are independent (each unit's
// chain as before), issued together, then the epilogue in unit order, so the warp no longer waits on one
// 6-MMA chain a unit.
template <int Bits, bool PC>
__global__ void __launch_bounds__(kThreads)
    hc_tc_tail_fast_kernel(Up w, const float* partial, int64_t ld_partial, int R, int group, float inv_s,
                           const float* normed, int D, float* H, const float* pending, const float* iota_in,
                           float* x, float* iota_out, float* mix_out, int64_t ld_mix, int n) {
  extern __shared__ __align__(16) uint32_t smem[];
  const Layout L(R, Bits, group);
  uint4* planes = reinterpret_cast<uint4*>(smem);
  uint32_t* codes = smem + L.planes_words();
  // A warp's scales then biases as bf16 (16 G each) in the place of its floats (64 G bf16 a warp).
  uint16_t* sbh = reinterpret_cast<uint16_t*>(codes + L.codes_words());
  float* pair_sums = reinterpret_cast<float*>(codes + L.codes_words() + L.sb_words());
  float* sums = pair_sums + L.pair_words();
  float* mix = sums + L.sums_words();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int T = L.T, G = L.G;
  const int64_t d0 = int64_t{blockIdx.x} * kOutputs, r0 = int64_t{blockIdx.y} * kRows;
  const int nr = static_cast<int>(min(int64_t{kRows}, n - r0));
  const int64_t SD = int64_t{kStreams} * D;
  uint16_t* ss = sbh + warp * kOutputs * G * 4;
  uint16_t* bs = ss + kOutputs * G;
  {
    const int64_t o0 = int64_t{warp} * D + d0;
    uint32_t* cw = codes + warp * kOutputs * L.cstride;
    if (L.wpr % 4 == 0) {
      const int cpr = L.wpr / 4;
      for (int c = lane; c < kOutputs * cpr; c += 32) {
        const int r = c / cpr, k = c % cpr;
        tc::cp_async16(cw + r * L.cstride + 4 * k, w.codes + (o0 + r) * L.wpr + 4 * k, 16);
      }
    } else {
      for (int c = lane; c < kOutputs * L.wpr; c += 32) {
        const int r = c / L.wpr, k = c % L.wpr;
        tc::cp_async4(cw + r * L.cstride + k, w.codes + (o0 + r) * L.wpr + k, 4);
      }
    }
    // The warp's 16 rows of scales (biases) are 16 G consecutive bf16 from o0 G: 2 G chunks of 16 bytes.
    if (w.sb16) {
      const int chunks = 2 * G;
      for (int c = lane; c < 2 * chunks; c += 32) {
        const bool bias = c >= chunks;
        const int k = bias ? c - chunks : c;
        tc::cp_async16((bias ? bs : ss) + 8 * k, (bias ? w.biases : w.scales) + o0 * G + 8 * k, 16);
      }
    } else {
      for (int c = lane; c < kOutputs * G; c += 32) {
        ss[c] = w.scales[o0 * G + c];
        bs[c] = w.biases[o0 * G + c];
      }
    }
    tc::cp_async_commit();
  }
  // Rows past n: zero planes and sums (their products are never stored).
  for (int i = threadIdx.x; i < kTerms * kRows * T * 4; i += kThreads) {
    const int j = i / (kRows * T * 4), rem = i % (kRows * T * 4), row = rem / (T * 4);
    if (row >= nr) planes[(j * kRows + row) * L.pstride + rem % (T * 4)] = make_uint4(0, 0, 0, 0);
  }
  for (int i = nr * T + threadIdx.x; i < kRows * T; i += kThreads) sums[i] = 0.0f;
  dev::grid_dependency_wait();
  const int c_row = threadIdx.x / kOutputs, c_d = threadIdx.x % kOutputs;
  const bool mine = c_row < nr;
  const int64_t cr = r0 + c_row;
  float nv[kStreams] = {}, h_old[kStreams] = {}, h_scale[kStreams] = {}, h_add = 0;
  if (mine) {
#pragma unroll
    for (int k = 0; k < kStreams; ++k) nv[k] = normed[cr * SD + k * int64_t{D} + d0 + c_d];
    if (pending != nullptr) {
#pragma unroll
      for (int k = 0; k < kStreams; ++k) {
        h_old[k] = H[cr * SD + k * int64_t{D} + d0 + c_d];
        h_scale[k] = iota_in[cr * kStreams + k];
      }
      h_add = pending[cr * D + d0 + c_d];
    }
  }
  const bool iotas = iota_out != nullptr && blockIdx.x == 0 && threadIdx.x < kStreams * nr;
  float pi[kStreams] = {};
  if (iotas) {
    const float* p =
        partial + (r0 + threadIdx.x / kStreams) * kStreams * ld_partial + R + threadIdx.x % kStreams;
#pragma unroll
    for (int k = 0; k < kStreams; ++k) pi[k] = p[k * ld_partial];
  }
  const int items = nr * T * 4;
  for (int i0 = 0; i0 < items; i0 += kThreads) {
    const int i = i0 + threadIdx.x;
    const bool has = i < items;
    const int row = i / (T * 4), rem = i % (T * 4), unit = rem / 4, b = rem % 4;
    float q[kStreams][8];
    if (has) {
      const float* p = partial + (r0 + row) * kStreams * ld_partial + unit * 32 + 8 * b;
#pragma unroll
      for (int k = 0; k < kStreams; ++k) {
        if (w.partial_vec) {
          const float4 lo = reinterpret_cast<const float4*>(p + k * ld_partial)[0];
          const float4 hi = reinterpret_cast<const float4*>(p + k * ld_partial)[1];
          q[k][0] = lo.x, q[k][1] = lo.y, q[k][2] = lo.z, q[k][3] = lo.w;
          q[k][4] = hi.x, q[k][5] = hi.y, q[k][6] = hi.z, q[k][7] = hi.w;
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) q[k][e] = p[k * ld_partial + e];
        }
      }
    }
    asm volatile("" ::: "memory");  // every load above issued before the arithmetic below
    if (has) {
      float v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] =
            dev::silu(__fmul_rn(__fadd_rn(__fadd_rn(q[0][e], q[1][e]), __fadd_rn(q[2][e], q[3][e])), inv_s));
      uint4 plane[kTerms];
      tc::split3_planes(v, plane);
#pragma unroll
      for (int j = 0; j < kTerms; ++j) planes[(j * kRows + row) * L.pstride + unit * 4 + b] = plane[j];
      pair_sums[i] = __fadd_rn(tc::sum4(v[0], v[1], v[2], v[3]), tc::sum4(v[4], v[5], v[6], v[7]));
    }
  }
  if (iotas) {
    const float j = __fadd_rn(__fadd_rn(pi[0], pi[1]), __fadd_rn(pi[2], pi[3]));
    iota_out[(r0 + threadIdx.x / kStreams) * kStreams + threadIdx.x % kStreams] =
        __fmul_rn(2.0f, dev::sigmoid(__fmul_rn(j, inv_s)));
  }
  __syncthreads();
  for (int i = threadIdx.x; i < nr * T; i += kThreads)
    sums[i] = __fadd_rn(__fadd_rn(pair_sums[4 * i], pair_sums[4 * i + 1]),
                        __fadd_rn(pair_sums[4 * i + 2], pair_sums[4 * i + 3]));
  tc::cp_async_wait<0>();
  __syncthreads();
  const uint32_t* cw = codes + warp * kOutputs * L.cstride;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // Units u0 .. u0 + N - 1: each unit's d (its MMA chain, or the plane accumulators met), then the epilogue
  // y = fma(bias, sum(x), fma(scale, d, y)) in unit order.
  auto units = [&](int u0, auto count) {
    constexpr int N = decltype(count)::value;
    float d[N][4];
#pragma unroll
    for (int m = 0; m < N; ++m) {
      const int u = u0 + m;
      uint32_t P[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) tcd::unit_pairs<Bits>(cw + (g + 8 * h) * L.cstride + u * Bits, t, P[h]);
      const uint32_t a[2][4] = {{P[0][0], P[1][0], P[0][1], P[1][1]}, {P[0][2], P[1][2], P[0][3], P[1][3]}};
      uint4 b[kTerms];
#pragma unroll
      for (int j = 0; j < kTerms; ++j) b[j] = planes[(j * kRows + g) * L.pstride + u * 4 + t];
      if constexpr (PC) {
        float c[kTerms][4] = {};
        tcd::pr_mma(c, a, b);
#pragma unroll
        for (int e = 0; e < 4; ++e) d[m][e] = tcd::pr_combine(c, e);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) d[m][e] = 0.0f;
        tcd::unit_mma(d[m], a, b);
      }
    }
#pragma unroll
    for (int m = 0; m < N; ++m) {
      const int u = u0 + m, q = (u * 32) >> w.group_shift;
      const float scale[2] = {from_bf16(ss[g * G + q]), from_bf16(ss[(g + 8) * G + q])};
      const float bias[2] = {from_bf16(bs[g * G + q]), from_bf16(bs[(g + 8) * G + q])};
      const float sx[2] = {sums[(2 * t) * T + u], sums[(2 * t + 1) * T + u]};
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[e] = __fmaf_rn(bias[e >> 1], sx[e & 1], __fmaf_rn(scale[e >> 1], d[m][e], acc[e]));
    }
  };
  int u0 = 0;
  for (; u0 + 5 <= T; u0 += 5) units(u0, std::integral_constant<int, 5>{});
  if (T - u0 == 4) {
    units(u0, std::integral_constant<int, 4>{});
  } else {
    if (T - u0 >= 2) units(u0, std::integral_constant<int, 2>{}), u0 += 2;
    if (T - u0 == 1) units(u0, std::integral_constant<int, 1>{});
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int o = g + 8 * (e >> 1), row = 2 * t + (e & 1);
    mix[(warp * kRows + row) * kOutputs + o] = acc[e];
    if (mix_out != nullptr && row < nr) mix_out[(r0 + row) * ld_mix + warp * int64_t{D} + d0 + o] = acc[e];
  }
  __syncthreads();
  if (!mine) return;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kStreams; ++k)
    s = __fadd_rn(s, __fmul_rn(dev::sigmoid(mix[(k * kRows + c_row) * kOutputs + c_d]), nv[k]));
  x[cr * D + d0 + c_d] = __fmul_rn(s, __fdiv_rn(1.0f, static_cast<float>(kStreams)));
  if (pending != nullptr) {
#pragma unroll
    for (int k = 0; k < kStreams; ++k)
      H[cr * SD + k * int64_t{D} + d0 + c_d] = __fadd_rn(h_old[k], __fmul_rn(h_scale[k], h_add));
  }
}

bool affine_up_ok(const AffineWeight& w) {
  return w.codes != nullptr && w.scales != nullptr && w.biases != nullptr && w.n_experts == 1 &&
         (w.group == 32 || w.group == 64 || w.group == 128) && w.cols % w.group == 0 &&
         (w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8) &&
         reinterpret_cast<uintptr_t>(w.codes) % 16 == 0;
}

// The kernels' dynamic shared memory limit, set once each per device (hc_tensor_tail_takes bounds every
// layout by it).
constexpr int kMaxSmemBytes = 200 * 1024;
template <int Bits, bool PC>
void set_smem_limit() {
  opt_in_dynamic_smem(hc_tc_tail_kernel<Bits, PC>, kMaxSmemBytes, "hc_tensor_tail: cudaFuncSetAttribute");
  opt_in_dynamic_smem(hc_tc_tail_fast_kernel<Bits, PC>, kMaxSmemBytes,
                      "hc_tensor_tail: cudaFuncSetAttribute");
}

int hc_tensor_env = -1;  // hc_tensor_tail_on: 1 on, 0 off; -1 not yet read

}  // namespace

bool hc_tensor_tail_takes(const AffineWeight& up, int S, int D, int R) {
  if (S != kStreams || D % kOutputs != 0 || R % 32 != 0 || R < 32 || R > kMaxRank) return false;
  if (!affine_up_ok(up) || up.rows != int64_t{S} * D || up.cols != R) return false;
  TiledWeight t;
  t.affine = up, t.rows = up.rows, t.cols = up.cols;
  if (!tc_decode_supported(t) || tc_decode_column_slices(up.rows, up.cols) != 1) return false;
  return Layout(R, up.bits, up.group).total_words() * 4 <= kMaxSmemBytes;
}

// Read at every launch (not cached), so the checks and the bench can switch it with setenv between launches.
int hc_tensor_tail_variant() {
  const char* v = std::getenv("DS_CUDA_HC_TAIL_VARIANT");
  const std::string name = v != nullptr ? v : "";
  if (name.empty()) return kDefaultHcTailVariant;
  if (name != "0" && name != "1")
    throw ArgumentError("DS_CUDA_HC_TAIL_VARIANT must be 0 or 1 (got '" + name + "')");
  return name == "1" ? 1 : 0;
}

bool hc_tensor_tail_on() {
  if (hc_tensor_env < 0) {
    hc_tensor_env = env_on_off("DS_CUDA_HC_TENSOR", true) ? 1 : 0;
  }
  return hc_tensor_env == 1;
}

void hc_tensor_tail(const AffineWeight& up, const float* partial, int64_t ld_partial, int R, float inv_s,
                    const float* normed, int S, int D, float* H, const float* pending, const float* iota_in,
                    float* x, float* iota_out, int n, cudaStream_t stream, float* mix_out, int64_t ld_mix) {
  constexpr const char* op = "hc_tensor_tail";
  if (!hc_tensor_tail_takes(up, S, D, R) || n < 1 || n > 65535 * kRows ||
      ld_partial < R + (iota_out != nullptr ? S : 0) || (pending != nullptr && iota_in == nullptr) ||
      (mix_out != nullptr && ld_mix < int64_t{S} * D))
    throw ArgumentError(std::string(op) + ": shape not taken (check hc_tensor_tail_takes first): S " +
                        std::to_string(S) + ", D " + std::to_string(D) + ", R " + std::to_string(R) +
                        ", rows " + std::to_string(n));
  if (pending != nullptr && iota_in == iota_out)
    throw ArgumentError(std::string(op) +
                        ": iota_in and iota_out must differ (blocks read the one and write the other)");
  const Layout L(R, up.bits, up.group);
  const size_t bytes = static_cast<size_t>(L.total_words()) * 4;
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const Up w{up.codes,
             up.scales,
             up.biases,
             up.group == 32   ? 5
             : up.group == 64 ? 6
                              : 7,
             aligned16(up.scales) && aligned16(up.biases),
             aligned16(partial) && ld_partial % 4 == 0};
  const bool fast = hc_tensor_tail_variant() == 1;
  const dim3 grid(static_cast<unsigned>(D / kOutputs), static_cast<unsigned>((n + kRows - 1) / kRows));
  auto launch = [&](auto bits, auto pc) {
    constexpr int B = decltype(bits)::value;
    constexpr bool PC = decltype(pc)::value;
    set_smem_limit<B, PC>();
    auto kernel = fast ? hc_tc_tail_fast_kernel<B, PC> : hc_tc_tail_kernel<B, PC>;
    kernel<<<grid, kThreads, bytes, stream>>>(w, partial, ld_partial, R, up.group, inv_s, normed, D, H,
                                              pending, iota_in, x, iota_out, mix_out, ld_mix, n);
  };
  const bool pc = tc_decode_planes() == TcPlanes::Columns;
  with_bits(up.bits, [&](auto bits) {
    if (pc)
      launch(bits, std::true_type{});
    else
      launch(bits, std::false_type{});
  });
  check_launch(op);
}

}  // namespace ds::cuda
