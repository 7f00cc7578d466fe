#pragma once
// AVX2/FMA building blocks shared by the dense and affine kernels: 8-wide loads of every weight encoding and
// the unpacking of MLX affine codes. Included only where DS_CPU_AVX2 is set.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cpu/matmul_kernels.h"
#include "core/dtype.h"

namespace ds::cpu {

inline __m256 load_bf16x8(const uint16_t* p) {
  __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

inline __m256 load_f16x8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Bytes an unpack of 8 codes reads past its own `Bits` bytes; nonzero widths need a padded copy at a row's
// end.
template <int Bits>
constexpr int kOverread = Bits == 3   ? 1
                          : Bits == 5 ? 3
                          : Bits == 6 ? 2
                                      : 0;

// The 8 codes whose bit stream starts at p (8 codes always fill exactly Bits bytes), one per 32-bit lane.
template <int Bits>
inline __m256i unpack8(const uint8_t* p) {
  const __m256i mask = _mm256_set1_epi32((1 << Bits) - 1);
  if constexpr (Bits == 8) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  } else if constexpr (Bits <= 4) {
    // All 8 codes sit in one 32-bit word: broadcast it and shift each lane to its own code.
    uint32_t v = 0;
    std::memcpy(&v, p, Bits == 2 ? 2 : 4);
    const __m256i shifts =
        _mm256_setr_epi32(0, Bits, 2 * Bits, 3 * Bits, 4 * Bits, 5 * Bits, 6 * Bits, 7 * Bits);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(v)), shifts), mask);
  } else {
    // 5 and 6 bits: each lane gathers the two bytes holding its code, then shifts it down.
    uint64_t v;
    std::memcpy(&v, p, 8);
    constexpr auto k = [](int j) { return static_cast<char>(j * Bits / 8); };
    constexpr char z = static_cast<char>(0x80);
    const __m256i pick = _mm256_setr_epi8(k(0), k(0) + 1, z, z, k(1), k(1) + 1, z, z, k(2), k(2) + 1, z, z,
                                          k(3), k(3) + 1, z, z, k(4), k(4) + 1, z, z, k(5), k(5) + 1, z, z,
                                          k(6), k(6) + 1, z, z, k(7), k(7) + 1, z, z);
    const __m256i shifts = _mm256_setr_epi32(0, Bits % 8, 2 * Bits % 8, 3 * Bits % 8, 4 * Bits % 8,
                                             5 * Bits % 8, 6 * Bits % 8, 7 * Bits % 8);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi64x(static_cast<int64_t>(v)), pick);
    return _mm256_and_si256(_mm256_srlv_epi32(bytes, shifts), mask);
  }
}

// Pins v to a register: stops GCC from folding one load into several FMAs as repeated memory operands.
template <class V>
inline V in_reg(V v) {
  asm("" : "+x"(v));
  return v;
}

// Weight sources: chunk c (8 values) of a row as floats, every conversion exact. Affine code sources read a
// span of kSub chunks at once (span) and yield its chunks in order (sub<t>).
struct F32Src {
  static constexpr int kUnitBytes = 32;
  static __m256 load(const uint8_t* row, int64_t c) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c * kLanes);
  }
};
struct BF16Src {
  static constexpr int kUnitBytes = 16;
  static __m256 load(const uint8_t* row, int64_t c) {
    return load_bf16x8(reinterpret_cast<const uint16_t*>(row) + c * kLanes);
  }
};
struct F16Src {
  static constexpr int kUnitBytes = 16;
  static __m256 load(const uint8_t* row, int64_t c) {
    return load_f16x8(reinterpret_cast<const uint16_t*>(row) + c * kLanes);
  }
};

// 3/5/6/8-bit codes in natural order: chunk c is codes 8c..8c+7.
template <int Bits>
struct CodeSrc {
  static constexpr int kSub = 1;
  static constexpr int kUnitBytes = Bits;  // one span = one chunk of 8 codes
  static __m256 span(const uint8_t* row, int64_t s) {
    return _mm256_cvtepi32_ps(unpack8<Bits>(row + s * Bits));
  }
  template <int T>
  static __m256 sub(__m256 v) {
    return v;
  }
};

// 2/4-bit codes in lane-permuted order (kPermutedLanes): one 8-byte span holds kSub chunks; lane j of every
// chunk comes from byte j, chunk t from bits [t*Bits, (t+1)*Bits) of it. x is permuted to match.
template <int Bits>
requires(kPermutedLanes<Bits>) struct CodeSrc<Bits> {
  static constexpr int kSub = 8 / Bits;
  static constexpr int kUnitBytes = 8;
  static __m256i span(const uint8_t* row, int64_t s) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + s * 8)));
  }
  template <int T>
  static __m256 sub(__m256i v) {
    if constexpr (T > 0) v = _mm256_srli_epi32(v, T * Bits);
    if constexpr (T < kSub - 1) v = _mm256_and_si256(v, _mm256_set1_epi32((1 << Bits) - 1));
    return _mm256_cvtepi32_ps(v);
  }
};

// Calls f.template operator()<T>() for T = 0..N-1, unrolled.
template <int N, class F>
inline void unroll(F&& f) {
  [&]<int... T>(std::integer_sequence<int, T...>) {
    (f.template operator()<T>(), ...);
  }
  (std::make_integer_sequence<int, N>{});
}

// Outputs per tile for R rows: 8 independent FMA chains (latency 4 x 2 ports) within 16 registers.
constexpr int tile_outputs(int rows) {
  return rows == 1 ? 8 : rows == 2 ? 4 : rows == 3 ? 3 : 2;
}

// Converts n scales or biases of dtype t to float (exact).
inline void convert_to_f32(DType t, const void* src, int64_t n, float* out) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  if (t == DType::F32) {
    std::memcpy(out, src, static_cast<size_t>(n) * 4);
  } else if (t == DType::BF16) {
    for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(out + i, load_bf16x8(h + i));
    for (; i < n; ++i) out[i] = bf16_to_f32(h[i]);
  } else {
    for (; i + kLanes <= n; i += kLanes) _mm256_storeu_ps(out + i, load_f16x8(h + i));
    for (; i < n; ++i) out[i] = f16_to_f32(h[i]);
  }
}

// Per-thread scratch that grows as needed and is reused across calls.
inline float* scratch(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// Outputs per step of the drivers (one weight row each, reused by every row of a block).
constexpr int kStep = 8;

// Rows per block: as many as keep the block's x rows within 256 KB (L2), in quads, 4 to 64.
constexpr int kMaxRowBlock = 64;
inline int64_t row_block(int64_t cols) {
  return std::clamp<int64_t>((int64_t{256} * 1024 / (cols * 4)) / 4 * 4, 4, kMaxRowBlock);
}

// A tiled copy is one stream: the tile loops prefetch it this far ahead, a few lines per step of the loop
// (spread out, so the prefetches never fill the miss buffers at once as a burst per step would).
constexpr int64_t kTiledPrefetchBytes = 4096;
inline void prefetch_lines(const void* p, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += 64) _mm_prefetch(static_cast<const char*>(p) + at, _MM_HINT_T0);
}

// Decode reads short weight rows several at a time (and their scales from another array), which the
// hardware prefetchers do not follow far enough ahead; a step over rows [o, o + no) also fetches the rows
// that come about kPrefetchBytes later (rows are contiguous, so each array is one linear region).
constexpr int64_t kPrefetchBytes = 8192;
inline int64_t prefetch_rows_ahead(int64_t row_bytes) {
  return std::max<int64_t>(1, kPrefetchBytes / std::max<int64_t>(1, row_bytes));
}
// Prefetches rows [first, first + count) of an array of `rows` rows of row_bytes bytes (clamped to it).
inline void prefetch_rows(const void* data, int64_t row_bytes, int64_t first, int64_t count, int64_t rows) {
  const char* base = static_cast<const char*>(data);
  const int64_t end = std::min(first + count, rows) * row_bytes;
  for (int64_t at = first * row_bytes; at < end; at += 64) _mm_prefetch(base + at, _MM_HINT_T0);
}

}  // namespace ds::cpu
