// portable_log: within a few ulp of libm's log everywhere the sampler uses it, and built from exact steps.
#include "core/portable_log.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "runtime/keyed_noise.h"

namespace ds {
namespace {

// |a - b| in units of b's last place.
double ulps(double a, double b) {
  return std::fabs(a - b) /
         (std::nextafter(std::fabs(b), std::numeric_limits<double>::infinity()) - std::fabs(b));
}

TEST(PortableLog, WithinFourUlpOfLibmOverTheSamplersRange) {
  double worst = 0;
  uint64_t z = 12345;
  for (int i = 0; i < 200000; ++i) {
    z = mix64(z + kGolden);
    const double u = uniform_open(z);  // exactly what the sampler feeds it
    worst = std::max(worst, ulps(portable_log(u), std::log(u)));
    const double v = -std::log(u);  // the second log's argument
    worst = std::max(worst, ulps(portable_log(v), std::log(v)));
  }
  EXPECT_LT(worst, 4.0);
}

TEST(PortableLog, EdgesOfTheUniformAndPowersOfTwo) {
  for (double x : {0x1p-53, 0.5 * 0x1p-52, 1.0 - 0x1p-53, 1.0 - 0x1p-52, 0.5, 2.0, 1e-300, 1e300,
                   0.7071067811865476, 1.4142135623730951, 36.7368005696771}) {
    EXPECT_LT(ulps(portable_log(x), std::log(x)), 4.0) << x;
  }
  EXPECT_EQ(portable_log(1.0), 0.0);
  for (int e = -1000; e <= 1000; e += 37)
    EXPECT_NEAR(portable_log(std::ldexp(1.0, e)), e * std::log(2.0), 1e-12 * (1 + std::abs(e)));
}

TEST(PortableLog, GumbelNoiseIsMonotoneInItsBits) {
  // The sampler's bucket bounds rely on gumbel increasing with u.
  double prev = -std::numeric_limits<double>::infinity();
  for (uint64_t k = 0; k < (uint64_t{1} << 52); k += (uint64_t{1} << 40) + 12345) {
    const double g = gumbel(uniform_open(k << 12));
    EXPECT_GE(g, prev);
    prev = g;
  }
}

}  // namespace
}  // namespace ds
