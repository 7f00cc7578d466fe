// Dense (F32/BF16/F16) weight products with AVX2/FMA. Per (row, output): A = fma(x_c, w_c, A) over 8-column
// chunks in order, then the zero-padded tail chunk, then hsum8 -- whatever the row count or blocking.
#include "backend/cpu/matmul_kernels.h"

#if DS_CPU_AVX2
#include <algorithm>
#include <cmath>

#include "backend/cpu/matmul_avx2.h"

namespace ds::cpu {

namespace {

// R rows x O outputs over chunks [0, nchunks); accumulators live in acc[r*acc_ld + o*8 ..] between calls.
template <class Src, int R, int O>
void dense_tile(const uint8_t* const* wrow, const float* const* xr, int64_t nchunks, float* acc,
                int64_t acc_ld) {
  __m256 a[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) a[r][o] = _mm256_loadu_ps(acc + r * acc_ld + o * kLanes);
  for (int64_t c = 0; c < nchunks; ++c) {
    __m256 x[R];
    for (int r = 0; r < R; ++r) x[r] = in_reg(_mm256_loadu_ps(xr[r] + c * kLanes));
    for (int o = 0; o < O; ++o) {
      const __m256 wv = in_reg(Src::load(wrow[o], c));
      for (int r = 0; r < R; ++r) a[r][o] = _mm256_fmadd_ps(x[r], wv, a[r][o]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) _mm256_storeu_ps(acc + r * acc_ld + o * kLanes, a[r][o]);
}

template <class Src, int R>
void dense_fixed_rows(int no, const uint8_t* const* wrow, const float* const* xr, int64_t nchunks, float* acc,
                      int64_t acc_ld) {
  constexpr int O = tile_outputs(R);
  int k = 0;
  for (; k + O <= no; k += O) dense_tile<Src, R, O>(wrow + k, xr, nchunks, acc + k * kLanes, acc_ld);
  for (; k < no; ++k) dense_tile<Src, R, 1>(wrow + k, xr, nchunks, acc + k * kLanes, acc_ld);
}

// rows (1..4) x no outputs, in tiles that keep every accumulator in a register.
template <class Src>
void dense_block(int rows, int no, const uint8_t* const* wrow, const float* const* xr, int64_t nchunks,
                 float* acc, int64_t acc_ld) {
  switch (rows) {
    case 1:
      dense_fixed_rows<Src, 1>(no, wrow, xr, nchunks, acc, acc_ld);
      break;
    case 2:
      dense_fixed_rows<Src, 2>(no, wrow, xr, nchunks, acc, acc_ld);
      break;
    case 3:
      dense_fixed_rows<Src, 3>(no, wrow, xr, nchunks, acc, acc_ld);
      break;
    default:
      dense_fixed_rows<Src, 4>(no, wrow, xr, nchunks, acc, acc_ld);
      break;
  }
}

float dense_value(const MatrixWeight& w, const uint8_t* row, int64_t i) {
  if (w.encoding == MatrixEncoding::F32) return reinterpret_cast<const float*>(row)[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(row)[i];
  return w.encoding == MatrixEncoding::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// The tail chunk (cols % 8 columns) lane by lane; std::fma rounds exactly like one lane of vfmadd.
void dense_tail(const MatrixWeight& w, const uint8_t* row, const float* x, float* a) {
  const int64_t i0 = w.cols / kLanes * kLanes;
  for (int l = 0; l < kLanes; ++l) {
    const bool in = i0 + l < w.cols;
    a[l] = std::fma(in ? x[i0 + l] : 0.0f, in ? dense_value(w, row, i0 + l) : 0.0f, a[l]);
  }
}

thread_local std::vector<float> t_acc;

// Streams each weight row once per block of rows, converting in registers, and uses it for every row of the
// block (in quads, while the step's weight rows stay in cache); blocks are sized so their rows stay in L2.
template <class Src>
void dense_outputs(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                   int64_t o1) {
  const int64_t nchunks = w.cols / kLanes, block = row_block(w.cols);
  float* acc = scratch(t_acc, block * kStep * kLanes);
  const float* xr[kMaxRowBlock];
  const int64_t row_bytes = w.row_bytes(), ahead = prefetch_rows_ahead(row_bytes);
  // The first steps' rows too: their misses then overlap instead of stalling one after another.
  prefetch_rows(w.data, row_bytes, o0, std::min(ahead, o1 - o0), w.rows);
  for (int64_t r0 = 0; r0 < in.n; r0 += block) {
    const int rows = static_cast<int>(std::min(block, in.n - r0));
    for (int r = 0; r < rows; ++r) xr[r] = in.x + (r0 + r) * in.ldx;
    const int step = rows > 4 ? kStep : tile_outputs(rows) * (kStep / tile_outputs(rows));
    for (int64_t o = o0; o < o1; o += step) {
      const int no = static_cast<int>(std::min<int64_t>(step, o1 - o));
      const uint8_t* wrow[kStep];
      for (int k = 0; k < no; ++k) wrow[k] = static_cast<const uint8_t*>(w.data) + (o + k) * row_bytes;
      prefetch_rows(w.data, row_bytes, o + ahead, no, w.rows);
      std::fill(acc, acc + rows * kStep * kLanes, 0.0f);
      for (int q0 = 0; q0 < rows; q0 += 4)
        dense_block<Src>(std::min(4, rows - q0), no, wrow, xr + q0, nchunks, acc + q0 * kStep * kLanes,
                         kStep * kLanes);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < no; ++k) {
          float* a = acc + (r * kStep + k) * kLanes;
          dense_tail(w, wrow[k], xr[r], a);
          y[(r0 + r) * ldy + o + k] = hsum8(a);
        }
    }
  }
}

}  // namespace

void dense_outputs_avx2(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                        int64_t o1) {
  switch (w.encoding) {
    case MatrixEncoding::F32:
      dense_outputs<F32Src>(w, in, y, ldy, o0, o1);
      break;
    case MatrixEncoding::BF16:
      dense_outputs<BF16Src>(w, in, y, ldy, o0, o1);
      break;
    case MatrixEncoding::F16:
      dense_outputs<F16Src>(w, in, y, ldy, o0, o1);
      break;
    case MatrixEncoding::Affine:
      break;
  }
}

}  // namespace ds::cpu
#endif
