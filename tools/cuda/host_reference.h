#pragma once
// Host side of the CUDA weight-product checks: random MLX affine / bf16 weights, and the float64 reference.
#include <cstdint>
#include <random>
#include <vector>

namespace ds::cuda::wxcheck {

uint16_t float_to_bf16(float f);  // round to nearest even (inputs here are finite)
double bf16_to_double(uint16_t v);

// An MLX affine matrix on the host, in the checkpoint layout (backend/cuda/wx_products.h).
struct HostAffine {
  int64_t rows = 0, cols = 0;
  int bits = 4, group = 64;
  std::vector<uint32_t> codes;
  std::vector<uint16_t> scales, biases;
  int64_t words_per_row() const { return cols / 32 * bits; }
  int64_t groups_per_row() const { return cols / group; }
  uint32_t code(int64_t r, int64_t c) const;
  double value(int64_t r, int64_t c) const;  // scale*q + bias, exactly
};

// Random codes; scales ~ 0.01..0.03 with random sign, biases = -scale * 2^(bits-1) (+ noise), as a quantizer
// of zero-centred weights makes them, so values cancel as they do in real checkpoints.
HostAffine random_affine(int64_t rows, int64_t cols, int bits, int group, std::mt19937_64& rng);
std::vector<uint16_t> random_bf16(int64_t n, float scale, std::mt19937_64& rng);
// n floats from N(0, sd^2).
std::vector<float> random_normal(int64_t n, float sd, std::mt19937_64& rng);

// Weight value accessor for the reference: w(o, i) as double.
struct RefWeight {
  const HostAffine* affine = nullptr;
  const std::vector<uint16_t>* dense = nullptr;  // [rows, cols] bf16
  int64_t rows = 0, cols = 0;
  double scale_factor = 1.0;  // negative control: affine scales (or dense values) scaled by this
  double at(int64_t o, int64_t i) const;
};

// Reference product in float64 for one (row of x, output): value and sum |w x| (for the error bound).
struct RefValue {
  double y;
  double abs_sum;
};
RefValue reference(const RefWeight& w, const double* x_row, int64_t o);

// The rounding bound of the kernels' arithmetic for a weight of `cols` columns and unit width `unit_cols`:
// one FMA chain per lane of at most ceil(units/32)*unit_cols terms, a rounded dequantization, a 5-level
// butterfly and at most 2 adds over column slices (a sliced chain is shorter by more than those 2).
double bound_factor(int64_t cols, int unit_cols);

}  // namespace ds::cuda::wxcheck
