// The CUDA checks' float64 reference reads MLX affine weights exactly as the project's own definition does
// (dequantize_row_reference in src/formats/), so a GPU result that passes cuda_wx_check computes the
// checkpoint's weights, not a private reading of the layout.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../../tools/cuda/host_reference.h"
#include "formats/matrix_weight.h"

namespace {

using ds::cuda::wxcheck::bf16_to_double;
using ds::cuda::wxcheck::HostAffine;
using ds::cuda::wxcheck::random_affine;

TEST(CudaReference, AffineCodesAndValuesMatchDequantizeRowReference) {
  std::mt19937_64 rng(11);
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      const HostAffine h = random_affine(5, 384, bits, group, rng);
      ds::MatrixWeight w;
      w.encoding = ds::MatrixEncoding::Affine;
      w.rows = h.rows;
      w.cols = h.cols;
      w.data = h.codes.data();
      w.bits = bits;
      w.group = group;
      w.scale_dtype = ds::DType::BF16;
      w.scales = h.scales.data();
      w.biases = h.biases.data();
      w.name = "test.weight";
      std::vector<float> row(h.cols);
      for (int64_t r = 0; r < h.rows; ++r) {
        ds::dequantize_row_reference(w, r, row.data());
        for (int64_t c = 0; c < h.cols; ++c) {
          const int64_t g = r * h.groups_per_row() + c / group;
          const float s = static_cast<float>(bf16_to_double(h.scales[g]));
          const float b = static_cast<float>(bf16_to_double(h.biases[g]));
          // The same two roundings as the CPU definition, from this reference's code: equal bits.
          const float expect = s * static_cast<float>(h.code(r, c)) + b;
          ASSERT_EQ(std::memcmp(&expect, &row[c], 4), 0)
              << bits << "-bit g" << group << " r" << r << " c" << c;
          // The exact value differs from the CPU's float only by its two roundings.
          EXPECT_NEAR(h.value(r, c), row[c], 1e-6) << bits << "-bit g" << group << " r" << r << " c" << c;
        }
      }
    }
  }
}

TEST(CudaReference, Bf16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 3.140625f, 1e-3f}) {
    const uint16_t b = ds::cuda::wxcheck::float_to_bf16(f);
    EXPECT_NEAR(bf16_to_double(b), f, std::abs(f) / 128.0) << f;
  }
  EXPECT_EQ(ds::cuda::wxcheck::float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(ds::cuda::wxcheck::float_to_bf16(1.00390625f), 0x3F80);  // halfway: ties to even
}

}  // namespace
