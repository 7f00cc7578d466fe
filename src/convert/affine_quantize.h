#pragma once
// MLX affine quantization of a float matrix, as mlx's Metal affine_quantize kernel computes it (the one
// mlx-lm convert runs on Apple GPUs): per group of `group` columns, in f32, with max starting at 0, the
// extreme of larger magnitude ("edge") is made exactly representable (scale = edge / round(edge / ((max -
// min) / (2^bits - 1))), bias = edge), codes are clamp(round((w - bias) / scale), 0, 2^bits - 1) with halves
// rounded away from zero, and scale and bias are then rounded to bf16. Snapping the scale to the edge can
// clip the far end of a group by up to about one step, so an element's error is half a step, or its distance
// past the group's last code.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/affine_quantization.h"
#include "formats/matrix_weight.h"

namespace ds {

// Which mlx kernel to reproduce. They differ only in ties and all-negative groups: Metal rounds halves away
// from zero and starts the group maximum at 0; the CPU path (mlx/backend/cpu/quantized.cpp) uses rint (ties
// to even) and a maximum from -inf.
enum class MlxRounding { Metal, Cpu };

struct AffineQuantized {
  int64_t rows = 0, cols = 0;
  AffineParams params;
  std::vector<uint32_t> words;   // [rows, cols * bits / 32], a little-endian bit stream of codes per row
  std::vector<uint16_t> scales;  // bf16 [rows, cols / group]
  std::vector<uint16_t> biases;  // bf16 [rows, cols / group]

  // A view for dequantize_row_reference and the kernels; valid while this object lives.
  MatrixWeight view(const std::string& name) const;
};

// `w` is row-major [rows, cols]; cols must be a multiple of the group (callers check and name the tensor).
AffineQuantized affine_quantize(const float* w, int64_t rows, int64_t cols, AffineParams params,
                                MlxRounding rounding = MlxRounding::Metal);

// How far the dequantized matrix is from the original, computed in f64.
struct QuantizationError {
  double rel_rms = 0;  // sqrt(sum (deq - w)^2 / sum w^2); 0 when w is all zeros and deq matches
  double max_abs = 0;  // max |deq - w|
};
QuantizationError quantization_error(const AffineQuantized& q, const float* original);

}  // namespace ds
