#pragma once
// Per-row elementwise math shared by the layers. Every function reduces one row in a fixed order, so a row's
// bits never depend on the other rows of a call.
#include <cmath>
#include <cstdint>

namespace ds::rowmath {

inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// Sum of squares in double: rows are short (a head or a hidden vector), and double keeps the f32 result exact
// enough that the order of terms does not matter for agreement with the reference.
inline double sum_squares(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// y = x / sqrt(mean(x^2) + eps) * mult, per group of `width` values (mult holds the effective weight).
inline void rms_norm(const float* x, const float* mult, int64_t width, float eps, float* y) {
  float inv = static_cast<float>(1.0 / std::sqrt(sum_squares(x, width) / static_cast<double>(width) + eps));
  for (int64_t i = 0; i < width; ++i) y[i] = x[i] * inv * mult[i];
}

// A vector of `groups * width` values normalised per `width`-wide group; mult has groups * width entries.
inline void grouped_rms_norm(const float* x, const float* mult, int64_t groups, int64_t width, float eps,
                             float* y) {
  for (int64_t g = 0; g < groups; ++g) rms_norm(x + g * width, mult + g * width, width, eps, y + g * width);
}

// x / sqrt(sum(x^2) + eps), as FLA's l2norm.
inline void l2_normalize(float* x, int64_t n, float eps) {
  float inv = static_cast<float>(1.0 / std::sqrt(sum_squares(x, n) + eps));
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

inline float dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(s);
}

}  // namespace ds::rowmath
