#pragma once
// Host weights for the tensor-core product checks (tc_checks.cpp, tc_decode_checks.cpp): an affine or dense
// bf16 weight (experts stacked) with its device copy, exact values and the bound's magnitude terms.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cuda/tc_products.h"
#include "checks.h"
#include "host_reference.h"

namespace ds::cuda::wxcheck {

// A host weight (affine or dense bf16, n_experts stacked) and its device copy.
struct TcWeight {
  std::vector<HostAffine> experts;           // affine
  std::vector<std::vector<uint16_t>> dense;  // dense bf16
  int64_t rows = 0, cols = 0;
  DeviceBuffer d_codes, d_scales, d_biases, d_dense;
  TiledWeight w;

  bool is_dense() const { return !dense.empty(); }
  // w(o, i) of expert e, exactly; the magnitude terms of the bound (|s q x| + |b x| per column, or |w x|).
  double value(int e, int64_t o, int64_t i, double mult) const {
    if (is_dense()) return bf16_to_double(dense[e][o * cols + i]) * mult;
    const HostAffine& a = experts[e];
    const int64_t g = o * a.groups_per_row() + i / a.group;
    return bf16_to_double(a.scales[g]) * mult * a.code(o, i) + bf16_to_double(a.biases[g]);
  }
  double magnitude(int e, int64_t o, int64_t i) const {
    if (is_dense()) return std::fabs(bf16_to_double(dense[e][o * cols + i]));
    const HostAffine& a = experts[e];
    const int64_t g = o * a.groups_per_row() + i / a.group;
    return std::fabs(bf16_to_double(a.scales[g]) * a.code(o, i)) + std::fabs(bf16_to_double(a.biases[g]));
  }
};

inline TcWeight make_weight(int64_t rows, int64_t cols, int bits, int group, int n_experts,
                            std::mt19937_64& rng) {
  TcWeight t;
  t.rows = rows, t.cols = cols;
  t.w.rows = rows, t.w.cols = cols, t.w.n_experts = n_experts;
  if (bits == 0) {
    std::vector<uint16_t> all;
    for (int e = 0; e < n_experts; ++e) {
      t.dense.push_back(random_bf16(rows * cols, 0.05f, rng));
      all.insert(all.end(), t.dense.back().begin(), t.dense.back().end());
    }
    t.d_dense = upload(all);
    t.w.dense = t.d_dense.as<uint16_t>();
    return t;
  }
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales, biases;
  for (int e = 0; e < n_experts; ++e) {
    t.experts.push_back(random_affine(rows, cols, bits, group, rng));
    const HostAffine& a = t.experts.back();
    codes.insert(codes.end(), a.codes.begin(), a.codes.end());
    scales.insert(scales.end(), a.scales.begin(), a.scales.end());
    biases.insert(biases.end(), a.biases.begin(), a.biases.end());
  }
  t.d_codes = upload(codes), t.d_scales = upload(scales), t.d_biases = upload(biases);
  t.w.affine = AffineWeight{t.d_codes.as<uint32_t>(),
                            t.d_scales.as<uint16_t>(),
                            t.d_biases.as<uint16_t>(),
                            rows,
                            cols,
                            bits,
                            group,
                            n_experts};
  return t;
}

// The bound of the tiled arithmetic per (row, output): per 32-column tile an fp32 sum of 32 exact products
// inside the MMAs (at most 32 roundings of partial sums, 3 terms), two FMAs of the epilogue, then one add per
// tile into the total: (cols/32 + 40) * 2^-24 * sum_i (|s q x| + |b x|) (affine) or sum |w x| (dense).
inline double tc_bound_factor(int64_t cols) {
  return (static_cast<double>(cols) / 32.0 + 40.0) * std::ldexp(1.0, -24);
}

}  // namespace ds::cuda::wxcheck
