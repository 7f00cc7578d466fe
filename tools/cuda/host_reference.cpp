// Float64 reference for the CUDA weight products (see host_reference.h).
#include "host_reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ds::cuda::wxcheck {

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

double bf16_to_double(uint16_t v) {
  const uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t HostAffine::code(int64_t r, int64_t c) const {
  const uint32_t* row = codes.data() + r * words_per_row();
  const int64_t bit = c * bits;
  const uint64_t lo = row[bit / 32];
  const uint64_t hi = (bit / 32 + 1 < words_per_row()) ? row[bit / 32 + 1] : 0;
  return static_cast<uint32_t>(((lo | (hi << 32)) >> (bit % 32)) & ((1u << bits) - 1u));
}

double HostAffine::value(int64_t r, int64_t c) const {
  const int64_t g = r * groups_per_row() + c / group;
  return bf16_to_double(scales[g]) * code(r, c) + bf16_to_double(biases[g]);
}

HostAffine random_affine(int64_t rows, int64_t cols, int bits, int group, std::mt19937_64& rng) {
  HostAffine a;
  a.rows = rows, a.cols = cols, a.bits = bits, a.group = group;
  a.codes.resize(rows * a.words_per_row());
  for (auto& w : a.codes) w = static_cast<uint32_t>(rng());
  std::uniform_real_distribution<float> mag(0.01f, 0.03f), noise(-0.002f, 0.002f);
  a.scales.resize(rows * a.groups_per_row());
  a.biases.resize(a.scales.size());
  for (size_t g = 0; g < a.scales.size(); ++g) {
    const float s = (rng() & 1) ? mag(rng) : -mag(rng);
    a.scales[g] = float_to_bf16(s);
    a.biases[g] = float_to_bf16(-s * float(1 << (bits - 1)) + noise(rng));
  }
  return a;
}

std::vector<float> random_normal(int64_t n, float sd, std::mt19937_64& rng) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<uint16_t> random_bf16(int64_t n, float scale, std::mt19937_64& rng) {
  const std::vector<float> f = random_normal(n, scale, rng);  // the same draws, rounded to bf16
  std::vector<uint16_t> v(n);
  std::transform(f.begin(), f.end(), v.begin(), float_to_bf16);
  return v;
}

double RefWeight::at(int64_t o, int64_t i) const {
  if (affine != nullptr) {
    const int64_t g = o * affine->groups_per_row() + i / affine->group;
    return bf16_to_double(affine->scales[g]) * scale_factor * affine->code(o, i) +
           bf16_to_double(affine->biases[g]);
  }
  return bf16_to_double((*dense)[o * cols + i]) * scale_factor;
}

RefValue reference(const RefWeight& w, const double* x_row, int64_t o) {
  RefValue v{0.0, 0.0};
  for (int64_t i = 0; i < w.cols; ++i) {
    const double p = w.at(o, i) * x_row[i];
    v.y += p;
    v.abs_sum += std::fabs(p);
  }
  return v;
}

double bound_factor(int64_t cols, int unit_cols) {
  const int64_t units = cols / unit_cols;
  const int64_t chain = (units + 31) / 32 * unit_cols;
  return double(chain + 7) * std::ldexp(1.0, -24);
}

}  // namespace ds::cuda::wxcheck
