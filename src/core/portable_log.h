#pragma once
// A natural logarithm built from frexp and IEEE +, *, / only, so its bits are the same on every host and
// compiler (libm's log may differ in the last bit between glibc versions, or on a GPU). The keyed sampler's
// noise goes through it, which makes a seeded reply replayable across machines, not just within one binary.
// Needs -ffp-contract=off (the project's default), since a fused multiply-add would round differently.
#include <cmath>

#include "core/host_device.h"

namespace ds {

// log(x) for finite x > 0, within a few ulp of the true value: x = m * 2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.1716, summed to s^27 (the next term is < 2^-70).
DS_HOST_DEVICE inline double portable_log(double x) {
  // ln 2 split so that e * kLn2Hi is exact for every exponent (fdlibm's constants).
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kSqrtHalf = 0.70710678118654752440;
  int e = 0;
  double m = std::frexp(x, &e);  // exact: m in [1/2, 1)
  if (m < kSqrtHalf) {
    m *= 2.0;  // exact
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
  double p = 1.0 / 27.0;
  for (int k = 25; k >= 3; k -= 2) p = p * s2 + 1.0 / k;
  const double tail = 2.0 * s * (s2 * p);  // 2 (s^3/3 + s^5/5 + ...)
  const double de = static_cast<double>(e);
  return de * kLn2Hi + ((2.0 * s + tail) + de * kLn2Lo);
}

}  // namespace ds
