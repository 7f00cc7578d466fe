#include "runtime/keyed_noise.h"

#include <array>

namespace ds {
namespace {

// Far above portable_log's error in -log(-log u) (< 1e-15 here), so the bounds hold with room to spare.
constexpr double kBoundMargin = 1e-9;

struct BucketBounds {
  std::array<double, kNoiseBuckets> bound;
  BucketBounds() {
    for (int b = 0; b < kNoiseBuckets; ++b) {
      const uint64_t top = (static_cast<uint64_t>(b) << 52) | ((uint64_t{1} << 52) - 1);
      bound[b] =
          gumbel_of_bits(top) + kBoundMargin;  // gumbel is increasing in u, so the bucket's top is its max
    }
  }
};

const BucketBounds& bucket_bounds() {
  static const BucketBounds bounds;
  return bounds;
}

}  // namespace

const double* gumbel_bucket_bounds() {
  return bucket_bounds().bound.data();
}
double gumbel_max() {
  return bucket_bounds().bound[kNoiseBuckets - 1];
}
double gumbel_max_below_top_bucket() {
  return bucket_bounds().bound[kNoiseBuckets - 2];
}

}  // namespace ds
