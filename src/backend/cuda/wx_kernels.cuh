#pragma once
// Device-side pieces of the weight products: weight decoders, activation loaders and the per-warp product.
// Row invariance: every (row, output) result is one fp32 FMA chain per lane, in an order fixed by the
// weight's shape (lane l takes units l, l+32, ...; a unit's columns in order), then a fixed xor butterfly
// over the 32 lanes. Rows only ever share the decoded weights, never an accumulator; the window size only
// decides how many rows ride along.
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/grid_dependency.cuh"

namespace ds::cuda::detail {

constexpr int kWarpsPerBlock = 4;
constexpr int kOutputsPerWarp = 4;

__device__ __forceinline__ float bf16_bits_to_float(uint32_t v) {
  return __uint_as_float(v << 16);
}

// (a & Mask) | c in one LOP3: written as C++, the two constants make the compiler emit an AND and an OR.
template <uint32_t Mask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t c) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(Mask), "r"(c));  // 0xEA: (a & b) | c
  return d;
}

// Integer code (< 2^23) to float, exactly, without the quarter-rate I2F unit.
__device__ __forceinline__ float code_to_float(uint32_t q) {
  return __fsub_rn(__uint_as_float(q | 0x4B000000u), 8388608.0f);
}

// Loads `Words` consecutive 32-bit words at p (aligned to their natural vector) with the streaming hint:
// weights are read once per product and should not push activations out of L1.
template <int Words>
__device__ __forceinline__ void load_words_streaming(const uint32_t* p, uint32_t (&w)[Words]) {
  if constexpr (Words % 4 == 0) {
#pragma unroll
    for (int k = 0; k < Words / 4; ++k) {
      const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p) + k);
      w[4 * k] = v.x;
      w[4 * k + 1] = v.y;
      w[4 * k + 2] = v.z;
      w[4 * k + 3] = v.w;
    }
  } else if constexpr (Words % 2 == 0) {
#pragma unroll
    for (int k = 0; k < Words / 2; ++k) {
      const uint2 v = __ldcs(reinterpret_cast<const uint2*>(p) + k);
      w[2 * k] = v.x;
      w[2 * k + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < Words; ++k) w[k] = __ldcs(p + k);
  }
}

template <class F, int... I>
__device__ __forceinline__ void static_for_each(F&& f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}
// Calls f(std::integral_constant<int, I>{}) for I = 0 .. N-1, in order.
template <int N, class F>
__device__ __forceinline__ void static_for(F&& f) {
  static_for_each(f, std::make_integer_sequence<int, N>{});
}

// An MLX affine matrix as the kernels see it (one expert).
struct AffineMatrix {
  const uint32_t* codes;
  const uint16_t* scales;
  const uint16_t* biases;
  int64_t cols;
  int group_shift;          // log2(group)
  uint32_t words_per_row;   // cols / 32 * Bits
  uint32_t groups_per_row;  // cols / group
};

// MLX affine: a unit is 32 codes = Bits words, always inside one group (groups are 32, 64 or 128 wide).
//
// Decoding with the code masked in place: a *view* is 32 bits of the unit's bit stream starting at bit S; a
// code at offset k of its view with k + Bits <= 23 becomes, with one LOP3 ((view & (mask << k)) | magic_k),
// the float 2^(23-k) + q: its bits are the mantissa of a float whose exponent is 23 - k. Minus 2^(23-k) (an
// FADD with an immediate) it is q exactly, and w = fma(scale, q, bias). The views of a chunk of 8 codes are
// fixed at compile time, so a chunk costs 1-3 shifts instead of one per code.
//
// kFoldedScales (v3, main until fmarow; kept for the one-row kernel of RowKernel::Lockstep, which checks and
// benches compare against): one magic 2^23 for every offset, so the FADD gives q * 2^k and the scale is
// folded instead, fma(scale * 2^-k, q * 2^k, bias), one FMUL per offset and unit; bit for bit the same w
// (both FMAs round the same exact scale * q + bias) while |scale| >= 2^-122, as every bf16 scale of a real
// model is.
template <int Bits, bool kFoldedScales = false>
struct AffineUnit {
  static constexpr int kCols = 32;
  static constexpr int kChunks = 4;             // chunks of 8 columns
  static constexpr int kMaxOffset = 23 - Bits;  // largest in-view offset whose code stays below 2^23
  static constexpr uint32_t kMask = (1u << Bits) - 1u;
  using Matrix = AffineMatrix;

  // A chunk of 8 codes is read from kViews views (as few as fit: at most kFit codes each), kPer codes apiece,
  // so the in-view offsets are k = i*Bits for i < kPer: 4-bit {0, 4, 8, 12} from 2 views, 6-bit {0, 6, 12}
  // from 3.
  static constexpr int kFit = kMaxOffset / Bits + 1;
  static constexpr int kViews = (8 + kFit - 1) / kFit;
  static constexpr int kPer = (8 + kViews - 1) / kViews;

  uint32_t w[Bits];
  float scale;
  float bias;

  // kFoldedScales: scale * 2^-k for each offset k, computed once per unit (exact: a power-of-two factor).
  struct Folded {
    float s[kFoldedScales ? kPer : 1];
  };

  // 32-bit offsets (the launch checks that one matrix has fewer than 2^32 words and groups): one IMAD and one
  // wide IMAD per address instead of 64-bit multiplies.
  __device__ __forceinline__ void load(const Matrix& m, int64_t out_row, int64_t unit) {
    const uint32_t row = static_cast<uint32_t>(out_row), u = static_cast<uint32_t>(unit);
    load_words_streaming<Bits>(m.codes + (row * m.words_per_row + u * Bits), w);
    const uint32_t g = row * m.groups_per_row + ((u * 32u) >> m.group_shift);
    scale = bf16_bits_to_float(m.scales[g]);
    bias = bf16_bits_to_float(m.biases[g]);
  }

  __device__ __forceinline__ Folded fold() const {
    Folded f;
    f.s[0] = scale;
    if constexpr (kFoldedScales) {
#pragma unroll
      for (int i = 1; i < kPer; ++i)
        f.s[i] = __fmul_rn(scale, __uint_as_float(uint32_t(127 - i * Bits) << 23));
    }
    return f;
  }

  // The 32 bits of the stream from bit S (only bits up to S + 23 are ever used).
  template <int S>
  __device__ __forceinline__ uint32_t view() const {
    constexpr int wi = S / 32, sh = S % 32;
    if constexpr (sh == 0)
      return w[wi];
    else if constexpr (sh + 23 <= 32 || wi + 1 >= Bits)
      return w[wi] >> sh;
    else
      return __funnelshift_r(w[wi], w[wi + 1], sh);
  }

  // Values of the unit's columns C*8 .. C*8+7: fma(scale, q, bias), one rounding of the exact value.
  template <int C>
  __device__ __forceinline__ void decode(const Folded& f, float (&out)[8]) const {
    uint32_t v[kViews];
    static_for<kViews>([&](auto vi) {
      constexpr int i = decltype(vi)::value;
      v[i] = view<(C * 8 + i * kPer) * Bits>();
    });
    static_for<8>([&](auto tc) {
      constexpr int t = decltype(tc)::value, i = t % kPer, k = i * Bits;
      if constexpr (kFoldedScales) {
        const float qk =
            __fsub_rn(__uint_as_float(and_or<(kMask << k)>(v[t / kPer], 0x4B000000u)), 8388608.0f);
        out[t] = __fmaf_rn(f.s[i], qk, bias);  // q * 2^k times scale * 2^-k
      } else {
        constexpr uint32_t kMagic = uint32_t(150 - k) << 23;  // the exponent of 2^(23-k)
        constexpr float kBase = float(1u << (23 - k));
        const float q = __fsub_rn(__uint_as_float(and_or<(kMask << k)>(v[t / kPer], kMagic)), kBase);
        out[t] = __fmaf_rn(scale, q, bias);
      }
    });
  }
};

// Dense bf16: a unit is 8 columns (16 bytes); bf16 -> float is exact.
struct DenseBf16Unit {
  static constexpr int kCols = 8;
  static constexpr int kChunks = 1;
  struct Matrix {
    const uint16_t* values;
    int64_t cols;
  };

  uint4 v;
  struct Folded {};

  __device__ __forceinline__ Folded fold() const { return {}; }
  __device__ __forceinline__ void load(const Matrix& m, int64_t out_row, int64_t unit) {
    v = __ldcs(reinterpret_cast<const uint4*>(m.values + out_row * m.cols) + unit);
  }
  template <int C>
  __device__ __forceinline__ void decode(const Folded&, float (&out)[8]) const {
    const uint32_t p[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = __uint_as_float(p[k] << 16);
      out[2 * k + 1] = __uint_as_float(p[k] & 0xFFFF0000u);
    }
  }
};

struct F32Rows {
  const float* p;
  int64_t ld;
  __device__ __forceinline__ void load8(int64_t row, int64_t col, float (&out)[8]) const {
    const float4* q = reinterpret_cast<const float4*>(p + row * ld + col);
    const float4 a = q[0];
    const float4 b = q[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

struct Bf16Rows {
  const uint16_t* p;
  int64_t ld;
  __device__ __forceinline__ void load8(int64_t row, int64_t col, float (&out)[8]) const {
    const uint4 v = *reinterpret_cast<const uint4*>(p + row * ld + col);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[2 * k] = __uint_as_float(w[k] << 16);
      out[2 * k + 1] = __uint_as_float(w[k] & 0xFFFF0000u);
    }
  }
};

// Rows picked by index: window row r is x row ids[r] (an expert's rows among the step's rows).
template <class Rows>
struct GatherRows {
  Rows base;
  const int32_t* ids;
  __device__ __forceinline__ void load8(int64_t row, int64_t col, float (&out)[8]) const {
    base.load8(ids[row], col, out);
  }
};

// Column slices of one product: 1, or kWarpsPerBlock when the weight has many columns and few rows (then the
// block's warps split the columns and a product that would leave the GPU idle gets 4x the warps). From 64 to
// 127 units a slice leaves lanes idle (80 units: warp 3 idle, warp 2 half), so there only short weights (at
// most 1024 rows) are sliced. A function of the weight's shape alone, so it never depends on the window.
template <class Unit>
__host__ __device__ __forceinline__ int column_slices(int64_t rows, int64_t cols) {
  const int64_t units = cols / Unit::kCols;
  return rows <= 32768 && (units >= 128 || (units >= 64 && rows <= 1024)) ? kWarpsPerBlock : 1;
}

// One row's NO sums from each lane's partials: the xor butterfly over the warp, then with column slices the
// four warps' sums as (w0 + w1) + (w2 + w3) through `part` (every lane ends with the block's sums).
template <int NO>
__device__ __forceinline__ void sum_warp_slices(float (&acc)[1][NO], float (&part)[kWarpsPerBlock][NO],
                                                int slices, int warp, int lane) {
#pragma unroll
  for (int o = 0; o < NO; ++o)
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1)
      acc[0][o] = __fadd_rn(acc[0][o], __shfl_xor_sync(0xFFFFFFFFu, acc[0][o], mask));
  if (slices > 1) {
    if (lane == 0) {
#pragma unroll
      for (int o = 0; o < NO; ++o) part[warp][o] = acc[0][o];
    }
    __syncthreads();
#pragma unroll
    for (int o = 0; o < NO; ++o)
      acc[0][o] = __fadd_rn(__fadd_rn(part[0][o], part[1][o]), __fadd_rn(part[2][o], part[3][o]));
    __syncthreads();  // part is rewritten by the next task
  }
}

// Products of one unit of each of the warp's outputs with rows 0..n_rows-1, added to acc in column order.
template <class Unit, class Rows, int R, int NO>
__device__ __forceinline__ void unit_product(const Unit (&cur)[NO], int64_t u, const Rows& rows,
                                             int64_t x_row0, int n_rows, float (&acc)[R][NO]) {
  typename Unit::Folded f[NO];
#pragma unroll
  for (int o = 0; o < NO; ++o) f[o] = cur[o].fold();
  static_for<Unit::kChunks>([&](auto c) {
    float w[NO][8];
#pragma unroll
    for (int o = 0; o < NO; ++o) cur[o].template decode<decltype(c)::value>(f[o], w[o]);
    const int64_t col = u * Unit::kCols + decltype(c)::value * 8;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < n_rows) {
        float xv[8];
        rows.load8(x_row0 + r, col, xv);
#pragma unroll
        for (int o = 0; o < NO; ++o)
#pragma unroll
          for (int t = 0; t < 8; ++t) acc[r][o] = __fmaf_rn(xv[t], w[o][t], acc[r][o]);
      }
    }
  });
}

// Rows x[row0 .. row0+n_rows-1] (n_rows <= R) times outputs o0 .. o0+kOutputsPerWarp-1 (those < n_out), over
// the columns of slice `slice` of `slices`: lane l of the slice takes units slice*32 + l, then every
// 32*slices-th unit. Returns each (row, output) sum over the slice in acc (every lane holds the same bits).
// One-row windows issue the next unit's loads before this unit's arithmetic (two units in flight); larger
// windows are bound by FMA issue and keep the registers for more resident warps instead. Either way each
// accumulator sees the same values in the same order.
template <class Unit, class Rows, int R>
__device__ __forceinline__ void slice_product(const typename Unit::Matrix& m, int64_t n_out, int64_t o0,
                                              const Rows& rows, int64_t x_row0, int n_rows, int slice,
                                              int slices, float (&acc)[R][kOutputsPerWarp]) {
  constexpr int NO = kOutputsPerWarp;
  constexpr bool kPrefetch = R == 1;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int o = 0; o < NO; ++o) acc[r][o] = 0.0f;

  const int64_t units = m.cols / Unit::kCols;
  const int64_t stride = 32 * slices;
  int64_t u = slice * 32 + lane;
  if constexpr (kPrefetch) {
    Unit cur[NO];
    if (u < units) {
#pragma unroll
      for (int o = 0; o < NO; ++o) cur[o].load(m, o0 + o < n_out ? o0 + o : n_out - 1, u);
    }
    for (; u < units; u += stride) {
      Unit next[NO];
      if (u + stride < units) {
#pragma unroll
        for (int o = 0; o < NO; ++o) next[o].load(m, o0 + o < n_out ? o0 + o : n_out - 1, u + stride);
      }
      unit_product<Unit, Rows, R, NO>(cur, u, rows, x_row0, n_rows, acc);
#pragma unroll
      for (int o = 0; o < NO; ++o) cur[o] = next[o];
    }
  } else {
    for (; u < units; u += stride) {
      Unit cur[NO];
#pragma unroll
      for (int o = 0; o < NO; ++o) cur[o].load(m, o0 + o < n_out ? o0 + o : n_out - 1, u);
      unit_product<Unit, Rows, R, NO>(cur, u, rows, x_row0, n_rows, acc);
    }
  }
  // Fixed xor butterfly: a + b == b + a, so every lane ends with the same bits.
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int o = 0; o < NO; ++o)
#pragma unroll
      for (int mask = 16; mask > 0; mask >>= 1)
        acc[r][o] = __fadd_rn(acc[r][o], __shfl_xor_sync(0xFFFFFFFFu, acc[r][o], mask));
}

// One block of kWarpsPerBlock warps: with one slice each warp owns its own outputs; with kWarpsPerBlock
// slices the warps share outputs and their sums meet in shared memory as (s0 + s1) + (s2 + s3).
template <class Unit, class Rows, int R>
__device__ __forceinline__ void block_product(const typename Unit::Matrix& m, int64_t n_out, const Rows& rows,
                                              int64_t x_row0, int n_rows, float* y, int64_t ldy) {
  constexpr int NO = kOutputsPerWarp;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  const int slices = column_slices<Unit>(n_out, m.cols);
  const int64_t o0 =
      slices == 1 ? (int64_t(blockIdx.x) * kWarpsPerBlock + warp) * NO : int64_t(blockIdx.x) * NO;
  if (o0 >= n_out) return;  // uniform over the warp, and over the block when it shares outputs
  float acc[R][NO];
  slice_product<Unit, Rows, R>(m, n_out, o0, rows, x_row0, n_rows, slices == 1 ? 0 : warp, slices, acc);
  if (slices > 1) {
    __shared__ float part[kWarpsPerBlock][R][NO];
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int o = 0; o < NO; ++o) part[warp][r][o] = acc[r][o];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int o = 0; o < NO; ++o)
        acc[r][o] =
            __fadd_rn(__fadd_rn(part[0][r][o], part[1][r][o]), __fadd_rn(part[2][r][o], part[3][r][o]));
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int o = 0; o < NO; ++o)
      if (r < n_rows && o0 + o < n_out && lane == ((r * NO + o) & 31)) y[r * ldy + o0 + o] = acc[r][o];
}

// One-row products with persistent blocks: block b takes the tasks (the outputs a block of block_product
// would own) b, b + gridDim.x, ...; the last unit of a task is computed while the first unit of the warp's
// next task is loading, so a warp's loads never drain between tasks. Each output's chain, butterfly and slice
// merge are block_product's, so the bits are those of every window tier.
template <class Unit, class Rows>
__device__ __forceinline__ void persistent_row_product(const typename Unit::Matrix& m, int64_t n_out,
                                                       const Rows& rows, float* y) {
  constexpr int NO = kOutputsPerWarp;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  const int slices = column_slices<Unit>(n_out, m.cols);
  const int slice = slices == 1 ? 0 : warp;
  const int64_t units = m.cols / Unit::kCols, stride = 32 * slices, u_first = slice * 32 + lane;
  auto first_output = [&](int64_t task) {
    return slices == 1 ? (task * kWarpsPerBlock + warp) * NO : task * NO;
  };
  auto load_all = [&](Unit(&dst)[NO], int64_t o0, int64_t u) {
#pragma unroll
    for (int o = 0; o < NO; ++o) dst[o].load(m, o0 + o < n_out ? o0 + o : n_out - 1, u);
  };
  __shared__ float part[kWarpsPerBlock][NO];
  int64_t task = blockIdx.x, o0 = first_output(task);
  Unit cur[NO];
  if (o0 < n_out && u_first < units) load_all(cur, o0, u_first);
  // Weights never change during a round: their first loads go out before waiting for the previous kernel
  // (programmatic launch, grid_dependency.cuh); x is read only after it.
  dev::grid_dependency_wait();
  while (o0 < n_out) {  // uniform over the warp, and over the block when it shares outputs
    const int64_t next_o0 = first_output(task + gridDim.x);
    float acc[1][NO];
#pragma unroll
    for (int o = 0; o < NO; ++o) acc[0][o] = 0.0f;
    for (int64_t u = u_first; u < units; u += stride) {
      Unit next[NO];
      if (u + stride < units)
        load_all(next, o0, u + stride);
      else if (next_o0 < n_out)
        load_all(next, next_o0, u_first);
      unit_product<Unit, Rows, 1, NO>(cur, u, rows, 0, 1, acc);
#pragma unroll
      for (int o = 0; o < NO; ++o) cur[o] = next[o];
    }
    sum_warp_slices(acc, part, slices, warp, lane);
    if (slices == 1 || warp == 0) {
#pragma unroll
      for (int o = 0; o < NO; ++o)
        if (o0 + o < n_out && lane == o) y[o0 + o] = acc[0][o];
    }
    task += gridDim.x;
    o0 = next_o0;
  }
}

}  // namespace ds::cuda::detail
