// The reduction contract in plain scalar C++. std::fma rounds once, exactly like one lane of vfmadd, so the
// AVX2 kernels must reproduce these bits; tests check that they do.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul_kernels.h"

namespace ds::cpu {

namespace {

float dense_at(const MatrixWeight& w, const uint8_t* row, int64_t i) {
  switch (w.encoding) {
    case MatrixEncoding::F32: {
      float v;
      std::memcpy(&v, row + i * 4, 4);
      return v;
    }
    case MatrixEncoding::BF16: {
      uint16_t h;
      std::memcpy(&h, row + i * 2, 2);
      return bf16_to_f32(h);
    }
    case MatrixEncoding::F16: {
      uint16_t h;
      std::memcpy(&h, row + i * 2, 2);
      return f16_to_f32(h);
    }
    case MatrixEncoding::Affine:
      break;
  }
  return 0.0f;
}

float scale_at(DType t, const void* p, int64_t i) {
  uint16_t h;
  switch (t) {
    case DType::BF16:
      std::memcpy(&h, static_cast<const uint8_t*>(p) + i * 2, 2);
      return bf16_to_f32(h);
    case DType::F16:
      std::memcpy(&h, static_cast<const uint8_t*>(p) + i * 2, 2);
      return f16_to_f32(h);
    default: {
      float v;
      std::memcpy(&v, static_cast<const uint8_t*>(p) + i * 4, 4);
      return v;
    }
  }
}

// Code i of a row: bits [i*bits, (i+1)*bits) of the row's little-endian bit stream.
float code_at(const uint8_t* row, int64_t i, int bits) {
  uint32_t v = 0;
  for (int b = 0; b < bits; ++b) {
    int64_t bit = i * bits + b;
    v |= static_cast<uint32_t>((row[bit / 8] >> (bit % 8)) & 1u) << b;
  }
  return static_cast<float>(v);
}

// Dense: A = fma(x_c, w_c, A) over 8-column chunks in order, the last chunk zero-padded; y = hsum8(A).
float dense_dot(const MatrixWeight& w, const uint8_t* row, const float* x) {
  float a[kLanes] = {};
  for (int64_t i0 = 0; i0 < w.cols; i0 += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const bool in = i0 + l < w.cols;
      a[l] = std::fma(in ? x[i0 + l] : 0.0f, in ? dense_at(w, row, i0 + l) : 0.0f, a[l]);
    }
  return hsum8(a);
}

// Affine: per group D = fma(x_c, q_c, D) from zero (chunk lanes as lane_column says), A = fma(s_g, D, A); B =
// fma(b_h, X_h, B) over groups in chunks of 8 (zero-padded); y = hsum8(A + B).
float affine_dot(const MatrixWeight& w, int64_t o, const uint8_t* row, const float* x, const float* xsum) {
  const int64_t ngroups = w.cols / w.group;
  float a[kLanes] = {};
  for (int64_t g = 0; g < ngroups; ++g) {
    float d[kLanes] = {};
    for (int64_t c = g * w.group / kLanes; c < (g + 1) * w.group / kLanes; ++c)
      for (int l = 0; l < kLanes; ++l) {
        const int64_t i = lane_column(w.bits, c, l);
        d[l] = std::fma(x[i], code_at(row, i, w.bits), d[l]);
      }
    const float s = scale_at(w.scale_dtype, w.scales, o * ngroups + g);
    for (int l = 0; l < kLanes; ++l) a[l] = std::fma(s, d[l], a[l]);
  }
  float b[kLanes] = {};
  for (int64_t g0 = 0; g0 < ngroups; g0 += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const bool in = g0 + l < ngroups;
      b[l] = std::fma(in ? scale_at(w.scale_dtype, w.biases, o * ngroups + g0 + l) : 0.0f,
                      in ? xsum[g0 + l] : 0.0f, b[l]);
    }
  for (int l = 0; l < kLanes; ++l) a[l] = a[l] + b[l];
  return hsum8(a);
}

}  // namespace

void portable_outputs(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                      int64_t o1) {
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + o * w.row_bytes();
    for (int64_t r = 0; r < in.n; ++r) {
      const float* x = in.x + r * in.ldx;
      y[r * ldy + o] = w.encoding == MatrixEncoding::Affine ? affine_dot(w, o, row, x, in.xsum + r * in.ldxs)
                                                            : dense_dot(w, row, x);
    }
  }
}

}  // namespace ds::cpu
