#include "convert/affine_quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/thread_pool.h"

namespace ds {

MatrixWeight AffineQuantized::view(const std::string& name) const {
  MatrixWeight m;
  m.encoding = MatrixEncoding::Affine;
  m.rows = rows;
  m.cols = cols;
  m.data = words.data();
  m.bits = params.bits;
  m.group = params.group;
  m.scale_dtype = DType::BF16;
  m.scales = scales.data();
  m.biases = biases.data();
  m.name = name;
  return m;
}

namespace {

// One row: its groups' scales and biases and its packed codes (row_bytes bytes at `packed`).
void quantize_row(const float* w, int64_t cols, AffineParams p, MlxRounding rounding, uint8_t* packed,
                  uint16_t* scales, uint16_t* biases) {
  const bool metal = rounding == MlxRounding::Metal;
  auto round = [metal](float x) { return metal ? std::round(x) : std::rint(x); };
  const float n_bins = static_cast<float>((1 << p.bits) - 1);
  const float eps = 1e-7f;
  std::memset(packed, 0, static_cast<size_t>(cols * p.bits / 8));
  for (int64_t g = 0; g < cols / p.group; ++g) {
    const float* x = w + g * p.group;
    // mlx's Metal kernel (what mlx-lm convert runs on Apple GPUs) starts the maximum at 0, so an all-negative
    // group's range reaches up to 0.
    float lo = std::numeric_limits<float>::max(), hi = metal ? 0.0f : -std::numeric_limits<float>::infinity();
    for (int j = 0; j < p.group; ++j) {
      lo = std::min(lo, x[j]);
      hi = std::max(hi, x[j]);
    }
    // The edge of larger magnitude becomes an exact code, so zero-centred groups lose nothing at that end.
    const bool low_edge = std::fabs(lo) > std::fabs(hi);
    float scale = std::max((hi - lo) / n_bins, eps);
    scale = low_edge ? scale : -scale;
    const float edge = low_edge ? lo : hi;
    const float q0 = round(edge / scale);
    float bias = 0;
    if (q0 != 0) {
      scale = edge / q0;
      bias = edge;
    }
    for (int j = 0; j < p.group; ++j) {
      float q = round((x[j] - bias) / scale);
      q = std::min(std::max(q, 0.0f), n_bins);
      const uint64_t code = static_cast<uint64_t>(q);
      const int64_t bit = (g * p.group + j) * p.bits;
      // A code spans at most two bytes (bits <= 8).
      const uint32_t shifted = static_cast<uint32_t>(code << (bit % 8));
      packed[bit / 8] |= static_cast<uint8_t>(shifted & 0xff);
      if ((bit % 8) + p.bits > 8) packed[bit / 8 + 1] |= static_cast<uint8_t>(shifted >> 8);
    }
    scales[g] = f32_to_bf16(scale);
    biases[g] = f32_to_bf16(bias);
  }
}

}  // namespace

AffineQuantized affine_quantize(const float* w, int64_t rows, int64_t cols, AffineParams p,
                                MlxRounding rounding) {
  if (!affine_params_supported(p) || cols % p.group != 0)
    fail("affine_quantize: {}-bit g{} cannot encode a matrix of {} columns", p.bits, p.group, cols);
  AffineQuantized q;
  q.rows = rows;
  q.cols = cols;
  q.params = p;
  const int64_t words_per_row = cols * p.bits / 32;
  const int64_t groups = cols / p.group;
  q.words.assign(static_cast<size_t>(rows * words_per_row), 0);
  q.scales.assign(static_cast<size_t>(rows * groups), 0);
  q.biases.assign(static_cast<size_t>(rows * groups), 0);
  // Rows are independent, so the result does not depend on how they are split over threads.
  ThreadPool::global().parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> packed(static_cast<size_t>(words_per_row * 4));
    for (int64_t r = begin; r < end; ++r) {
      quantize_row(w + r * cols, cols, p, rounding, packed.data(), q.scales.data() + r * groups,
                   q.biases.data() + r * groups);
      std::memcpy(q.words.data() + r * words_per_row, packed.data(), packed.size());  // little-endian host
    }
  });
  return q;
}

QuantizationError quantization_error(const AffineQuantized& q, const float* original) {
  const MatrixWeight m = q.view("quantization_error");
  std::vector<float> row(static_cast<size_t>(q.cols));
  double err2 = 0, ref2 = 0, max_abs = 0;
  for (int64_t r = 0; r < q.rows; ++r) {
    dequantize_row_reference(m, r, row.data());
    for (int64_t c = 0; c < q.cols; ++c) {
      const double ref = original[r * q.cols + c];
      const double d = static_cast<double>(row[c]) - ref;
      err2 += d * d;
      ref2 += ref * ref;
      max_abs = std::max(max_abs, std::fabs(d));
    }
  }
  QuantizationError e;
  e.max_abs = max_abs;
  e.rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return e;
}

}  // namespace ds
