#pragma once
// Probability mass as exact integers (exp(s - max) with 44 fractional bits): integer sums do not depend on
// order, so a partial top-p over a few candidates keeps the same set as a full sort.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace ds {

inline constexpr int kMassBits = 44;
// 2^44 per token and at most 2^19 tokens keep every sum below 2^63.
inline constexpr int32_t kMaxSampledVocab = 1 << 19;

// exp(x) for x <= 0 from IEEE adds and multiplies only (Cody-Waite reduction, degree-12 Taylor), so scalar
// and vectorised code give the same bits on every x86-64 host; relative error below 5e-16; 0 below -708 and
// for -inf.
DS_HOST_DEVICE inline double exp_nonpositive(double x) {
  const bool zero = !(x >= -708.0);
  const double xc = zero ? 0.0 : x;
  const double shifter = 0x1.8p52;  // adding it rounds to an integer held in the low mantissa bits
  const double t = xc * 1.4426950408889634 + shifter;
  const double n = t - shifter;
  const double r = (xc - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  double p = 1.0 / 479001600.0;
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
  uint64_t bits;
  std::memcpy(&bits, &t, 8);
  const uint64_t scale_bits = (bits + 1023) << 52;  // (n + 1023) << 52, n in [-1022, 0]
  double scale;
  std::memcpy(&scale, &scale_bits, 8);
  return zero ? 0.0 : p * scale;
}

// round(exp(x) * 2^44), ties to even, for x = s - max <= 0; 0 once x < -31.2.
DS_HOST_DEVICE inline uint64_t mass_of(double x) {
  const double scaled = exp_nonpositive(x) * 0x1p44 + 0x1p52;  // <= 2^44, so the add rounds to an integer
  uint64_t bits;
  std::memcpy(&bits, &scaled, 8);
  return bits & ((uint64_t{1} << 52) - 1);
}

// Below this x = s - max every token's mass is 0 (exp(-32) * 2^44 < 0.23).
inline constexpr double kMassFloor = -32.0;

// ceil(p * total) exactly, for a float p in (0, 1].
DS_HOST_DEVICE inline uint64_t ceil_fraction(float p, uint64_t total) {
  // p = mantissa * 2^-shift with a 24-bit integer mantissa (subnormals included), so the product is exact in
  // 128 bits.
  int exponent = 0;
  const double fraction = std::frexp(static_cast<double>(p), &exponent);
  const auto mantissa = static_cast<uint64_t>(std::ldexp(fraction, 24));
  const int shift = 24 - exponent;
  const unsigned __int128 product = static_cast<unsigned __int128>(mantissa) * total;
  if (shift >= 100) return product == 0 ? 0 : 1;  // product < 2^87 < 2^shift
  const unsigned __int128 one = 1;
  return static_cast<uint64_t>((product + (one << shift) - 1) >> shift);
}

}  // namespace ds
