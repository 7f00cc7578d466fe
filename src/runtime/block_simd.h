#pragma once
// 64-token block kernels in GCC vector extensions: the same IEEE operations, in the same order, as the scalar
// definitions (exp_nonpositive, mass_of), so the same bits, but SIMD whatever the autovectoriser decides.
// Vectors pass by reference only, so the code means the same with or without AVX (no psabi change).
#include <cstdint>
#include <cstring>

#include "runtime/softmax_mass.h"

namespace ds::simd {

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));
typedef int64_t v4i __attribute__((vector_size(32)));
typedef uint64_t v4u __attribute__((vector_size(32)));

inline constexpr int kBlock = 64;

template <typename V, typename T>
inline void load(V& v, const T* p) {
  std::memcpy(&v, p, sizeof(V));
}
template <typename V, typename T>
inline void store(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// Four floats widened to double (exact).
inline void widen(v4d& out, const float* p) {
  v4f f;
  load(f, p);
  out = __builtin_convertvector(f, v4d);
}

inline bool any(const v4i& m) {
  return (m[0] | m[1] | m[2] | m[3]) != 0;
}

// exp_nonpositive, lane by lane.
inline void exp_nonpositive(v4d& out, const v4d& x) {
  const v4i keep = x >= -708.0;
  const v4d zero = {0, 0, 0, 0};
  const v4d xc = keep ? x : zero;
  const double shifter = 0x1.8p52;
  const v4d t = xc * 1.4426950408889634 + shifter;
  const v4d n = t - shifter;
  const v4d r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  v4d p = zero + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const v4d scale = (v4d)(((v4u)t + 1023) << 52);
  out = keep ? p * scale : zero;
}

// mass[j] = x >= log_min_p ? mass_of(x) : 0 for x = z * inv_t - max_s; returns the block's total.
inline uint64_t mass_block(const float* z, double inv_t, double max_s, double log_min_p, uint64_t* mass) {
  v4u sum = {0, 0, 0, 0};
  for (int j = 0; j < kBlock; j += 4) {
    v4d x, e;
    widen(x, z + j);
    x = x * inv_t - max_s;
    exp_nonpositive(e, x);
    const v4d scaled = e * 0x1p44 + 0x1p52;
    const v4u m = ((v4u)scaled & ((uint64_t{1} << 52) - 1)) & (v4u)(x >= log_min_p);
    store(mass + j, m);
    sum += m;
  }
  return sum[0] + sum[1] + sum[2] + sum[3];
}

// The largest of 64 floats (none NaN).
inline float max_block(const float* z) {
  v8f m;
  load(m, z);
  for (int j = 8; j < kBlock; j += 8) {
    v8f v;
    load(v, z + j);
    m = v > m ? v : m;
  }
  float best = m[0];
  for (int l = 1; l < 8; ++l) best = m[l] > best ? m[l] : best;
  return best;
}

}  // namespace ds::simd
