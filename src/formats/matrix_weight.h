#pragma once
// A 2-D weight [rows = out features, cols = in features] kept in its checkpoint encoding; products
// dequantize it on the fly.
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace ds {

enum class MatrixEncoding { F32, BF16, F16, Affine };

struct MatrixWeight {
  MatrixEncoding encoding = MatrixEncoding::F32;
  int64_t rows = 0, cols = 0;
  // Dense: row-major [rows, cols] of F32/BF16/F16. Affine (MLX): uint32 words [rows, cols * bits / 32]
  // holding a little-endian bit stream of `bits`-wide codes per row.
  const void* data = nullptr;
  int bits = 0, group = 0;                // Affine only: value = scale * code + bias per group of `group` columns
  DType scale_dtype = DType::F32;         // Affine only: dtype of scales and biases (BF16, F16 or F32)
  const void* scales = nullptr;           // Affine only: [rows, cols / group]
  const void* biases = nullptr;           // Affine only: [rows, cols / group]
  std::string name;                       // the checkpoint tensor name, for error messages
  // Optional copy of `data` in the CPU kernels' tiled order (backend/cpu/weight_tiles.h): rows in tiles of 8,
  // interleaved unit by unit so a product streams one sequential region. `data` stays the checkpoint layout.
  const void* tiled = nullptr;

  bool valid() const { return data != nullptr; }
  // Bytes of one row of codes/values; for Affine rows are cols * bits / 8 bytes.
  int64_t row_bytes() const;
  // A view of rows [first, first + count) of this matrix (used for stacked experts and fused projections).
  MatrixWeight row_slice(int64_t first, int64_t count) const;
};

// The plain reference: dequantizes row `row` into out[0..cols). Fast kernels are tested against it.
void dequantize_row_reference(const MatrixWeight& w, int64_t row, float* out);

}  // namespace ds
