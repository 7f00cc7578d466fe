#include "formats/matrix_weight.h"

#include <cstring>

#include "core/error.h"

namespace ds {

namespace {

float scale_at(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::F32: return static_cast<const float*>(p)[i];
    default: fail("unsupported scale dtype {}", dtype_name(t));
  }
}

}  // namespace

int64_t MatrixWeight::row_bytes() const {
  switch (encoding) {
    case MatrixEncoding::F32: return cols * 4;
    case MatrixEncoding::BF16:
    case MatrixEncoding::F16: return cols * 2;
    case MatrixEncoding::Affine: return cols * bits / 8;
  }
  return 0;
}

MatrixWeight MatrixWeight::row_slice(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first + count > rows)
    fail("rows [{}, {}) out of range for '{}' with {} rows", first, first + count, name, rows);
  MatrixWeight s = *this;
  s.rows = count;
  s.data = static_cast<const uint8_t*>(data) + first * row_bytes();
  s.tiled = nullptr;  // tiles are made for whole bound matrices (after slicing), never cut
  if (encoding == MatrixEncoding::Affine) {
    int64_t ngroups = cols / group;
    size_t es = dtype_size(scale_dtype);
    s.scales = static_cast<const uint8_t*>(scales) + first * ngroups * es;
    s.biases = static_cast<const uint8_t*>(biases) + first * ngroups * es;
  }
  return s;
}

void dequantize_row_reference(const MatrixWeight& w, int64_t row, float* out) {
  const uint8_t* base = static_cast<const uint8_t*>(w.data) + row * w.row_bytes();
  switch (w.encoding) {
    case MatrixEncoding::F32: std::memcpy(out, base, w.cols * 4); return;
    case MatrixEncoding::BF16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = bf16_to_f32(reinterpret_cast<const uint16_t*>(base)[i]);
      return;
    case MatrixEncoding::F16:
      for (int64_t i = 0; i < w.cols; ++i) out[i] = f16_to_f32(reinterpret_cast<const uint16_t*>(base)[i]);
      return;
    case MatrixEncoding::Affine: {
      int64_t ngroups = w.cols / w.group;
      const uint32_t mask = (1u << w.bits) - 1u;
      for (int64_t i = 0; i < w.cols; ++i) {
        // Code i occupies bits [i*bits, (i+1)*bits) of the row's little-endian bit stream.
        int64_t bit = i * w.bits;
        uint64_t window = 0;
        int64_t byte = bit / 8;
        int64_t avail = w.row_bytes() - byte;
        std::memcpy(&window, base + byte, static_cast<size_t>(avail < 8 ? avail : 8));
        uint32_t code = static_cast<uint32_t>(window >> (bit % 8)) & mask;
        int64_t g = row * ngroups + i / w.group;
        float s = scale_at(w.scale_dtype, w.scales, g);
        float b = scale_at(w.scale_dtype, w.biases, g);
        out[i] = s * static_cast<float>(code) + b;
      }
      return;
    }
  }
}

}  // namespace ds
