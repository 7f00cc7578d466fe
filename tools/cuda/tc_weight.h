#pragma once
// Host weights for the tensor-core product checks (tc_checks.cpp, tc_decode_checks.cpp): an affine or dense
// bf16 weight (experts stacked) with its device copy, exact values and the bound's magnitude terms.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
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

// Expert 0 of `t` on x rows 0..n-1 (xh, `cols` floats each) against the float64 reference: every output of y
// ([n, rows]) finite and within tc_bound_factor(cols) times the products' magnitude, and the negative control
// (scales or values 1% off) past that bound. Folds the worst err/bound and the weakest control into the
// totals.
inline void expect_within_bound(Tally& tally, const std::string& name, const TcWeight& t,
                                const std::vector<float>& xh, int64_t cols, int n,
                                const std::vector<float>& y, int64_t rows, double& worst, double& weakest) {
  bool finite = true;
  double ratio = 0, control = 0;
  for (int r = 0; r < n; ++r)
    for (int64_t o = 0; o < rows; ++o) {
      double ref = 0, neg = 0, mag = 0;
      for (int64_t i = 0; i < cols; ++i) {
        const double xv = xh[r * cols + i];
        ref += t.value(0, o, i, 1.0) * xv;
        neg += t.value(0, o, i, 1.01) * xv;
        mag += t.magnitude(0, o, i) * std::fabs(xv);
      }
      const double got = y[r * rows + o], bound = tc_bound_factor(cols) * mag + 1e-300;
      if (!std::isfinite(got)) finite = false;
      ratio = std::max(ratio, std::fabs(got - ref) / bound);
      control = std::max(control, std::fabs(got - neg) / bound);
    }
  tally.expect(finite, name + ": every output written and finite");
  tally.expect(ratio <= 1.0, name + ": within bound (err/bound " + std::to_string(ratio) + ")");
  tally.expect(control > 1.0, name + ": negative control exceeds bound (" + std::to_string(control) + ")");
  worst = std::max(worst, ratio);
  weakest = std::min(weakest, control);
}

}  // namespace ds::cuda::wxcheck
