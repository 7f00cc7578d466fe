// Embedding lookup: whole rows dequantized with the reference's arithmetic, so out equals
// dequantize_row_reference bit for bit on every encoding.
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_kernels.h"
#include "core/error.h"

#if DS_CPU_AVX2
#include "backend/cpu/matmul_avx2.h"
#endif

namespace ds {

#if DS_CPU_AVX2
namespace cpu {

namespace {

// value = s * q then + b, two roundings as in the reference (no fused multiply-add here).
template <int Bits>
void dequantize_affine(const MatrixWeight& w, int64_t row, float* out) {
  const int64_t ngroups = w.cols / w.group, cpg = w.group / kLanes, nchunks = w.cols / kLanes;
  const uint8_t* codes = static_cast<const uint8_t*>(w.data) + row * w.row_bytes();
  const size_t es = dtype_size(w.scale_dtype);
  for (int64_t g = 0; g < ngroups; ++g) {
    float s, b;
    convert_to_f32(w.scale_dtype, static_cast<const uint8_t*>(w.scales) + (row * ngroups + g) * es, 1, &s);
    convert_to_f32(w.scale_dtype, static_cast<const uint8_t*>(w.biases) + (row * ngroups + g) * es, 1, &b);
    const __m256 sv = _mm256_set1_ps(s), bv = _mm256_set1_ps(b);
    for (int64_t c = g * cpg; c < (g + 1) * cpg; ++c) {
      const uint8_t* p = codes + c * Bits;
      uint8_t pad[16] = {};
      if (kOverread < Bits >> 0 && c == nchunks - 1)
        p = static_cast<const uint8_t*>(std::memcpy(pad, p, Bits));
      const __m256 q = _mm256_cvtepi32_ps(unpack8<Bits>(p));
      _mm256_storeu_ps(out + c * kLanes, _mm256_add_ps(_mm256_mul_ps(sv, q), bv));
    }
  }
}

}  // namespace

void dequantize_row_avx2(const MatrixWeight& w, int64_t row, float* out) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + row * w.row_bytes();
  switch (w.encoding) {
    case MatrixEncoding::F32:
      std::memcpy(out, base, static_cast<size_t>(w.cols) * 4);
      return;
    case MatrixEncoding::BF16:
      convert_to_f32(DType::BF16, base, w.cols, out);
      return;
    case MatrixEncoding::F16:
      convert_to_f32(DType::F16, base, w.cols, out);
      return;
    case MatrixEncoding::Affine:
      break;
  }
  switch (w.bits) {
    case 2:
      dequantize_affine<2>(w, row, out);
      break;
    case 3:
      dequantize_affine<3>(w, row, out);
      break;
    case 4:
      dequantize_affine<4>(w, row, out);
      break;
    case 5:
      dequantize_affine<5>(w, row, out);
      break;
    case 6:
      dequantize_affine<6>(w, row, out);
      break;
    default:
      dequantize_affine<8>(w, row, out);
      break;
  }
}

}  // namespace cpu
#endif

void gather_rows(const MatrixWeight& w, const int32_t* ids, int64_t n, float* out) {
  cpu::validate_matmul(w, 1, w.cols, w.rows);
  for (int64_t k = 0; k < n; ++k)
    if (ids[k] < 0 || ids[k] >= w.rows)
      fail("gather_rows: id {} (position {}) out of range for '{}' with {} rows", ids[k], k, w.name, w.rows);
  for (int64_t k = 0; k < n; ++k) {
#if DS_CPU_AVX2
    cpu::dequantize_row_avx2(w, ids[k], out + k * w.cols);
#else
    dequantize_row_reference(w, ids[k], out + k * w.cols);
#endif
  }
}

}  // namespace ds
