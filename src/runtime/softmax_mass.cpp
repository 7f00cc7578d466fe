#include "runtime/softmax_mass.h"

#include <cmath>

namespace ds {

uint64_t ceil_fraction(float p, uint64_t total) {
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
