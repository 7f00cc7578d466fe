// Dense (F32/BF16/F16) weight products with AVX2/FMA. Per (row, output): A = fma(x_c, w_c, A) over 8-column
// chunks in order, then the zero-padded tail chunk, then hsum8 -- whatever the row count or blocking.
#include "backend/cpu/matmul_kernels.h"

#if DS_CPU_AVX2
#include <algorithm>
#include <cmath>

#include "backend/cpu/matmul_avx2.h"
#include "backend/cpu/weight_tiles.h"

namespace ds::cpu {

namespace {

// R rows x O outputs over chunks [0, nchunks); accumulators live in acc[r*acc_ld + o*8 ..] between calls.
// Chunk c of output o is chunk c * Stride from wrow[o] (Stride kRowTile in a tiled copy, else 1).
template <class Src, int Stride, int R, int O>
void dense_tile(const uint8_t* const* wrow, const float* const* xr, int64_t nchunks, float* acc,
                int64_t acc_ld) {
  __m256 a[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) a[r][o] = _mm256_loadu_ps(acc + r * acc_ld + o * kLanes);
  for (int64_t c = 0; c < nchunks; ++c) {
    if constexpr (Stride > 1)  // the tile's chunk c (all its rows) is Stride * kUnitBytes contiguous bytes
      prefetch_lines(wrow[0] + c * Stride * Src::kUnitBytes + kTiledPrefetchBytes, Stride * Src::kUnitBytes);
    __m256 x[R];
    for (int r = 0; r < R; ++r) x[r] = in_reg(_mm256_loadu_ps(xr[r] + c * kLanes));
    for (int o = 0; o < O; ++o) {
      const __m256 wv = in_reg(Src::load(wrow[o], c * Stride));
      for (int r = 0; r < R; ++r) a[r][o] = _mm256_fmadd_ps(x[r], wv, a[r][o]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) _mm256_storeu_ps(acc + r * acc_ld + o * kLanes, a[r][o]);
}

template <class Src, int Stride, int R>
void dense_fixed_rows(int no, const uint8_t* const* wrow, const float* const* xr, int64_t nchunks, float* acc,
                      int64_t acc_ld) {
  constexpr int O = tile_outputs(R);
  int k = 0;
  for (; k + O <= no; k += O) dense_tile<Src, Stride, R, O>(wrow + k, xr, nchunks, acc + k * kLanes, acc_ld);
  for (; k < no; ++k) dense_tile<Src, Stride, R, 1>(wrow + k, xr, nchunks, acc + k * kLanes, acc_ld);
}

// rows (1..4) x no outputs, in tiles that keep every accumulator in a register.
template <class Src, int Stride>
void dense_block(int rows, int no, const uint8_t* const* wrow, const float* const* xr, int64_t nchunks,
                 float* acc, int64_t acc_ld) {
  switch (rows) {
    case 1:
      dense_fixed_rows<Src, Stride, 1>(no, wrow, xr, nchunks, acc, acc_ld);
      break;
    case 2:
      dense_fixed_rows<Src, Stride, 2>(no, wrow, xr, nchunks, acc, acc_ld);
      break;
    case 3:
      dense_fixed_rows<Src, Stride, 3>(no, wrow, xr, nchunks, acc, acc_ld);
      break;
    default:
      dense_fixed_rows<Src, Stride, 4>(no, wrow, xr, nchunks, acc, acc_ld);
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
template <class Src, int Stride>
void dense_outputs(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                   int64_t o1) {
  constexpr bool kTiled = Stride > 1;
  const int64_t nchunks = w.cols / kLanes, block = row_block(w.cols);
  float* acc = scratch(t_acc, block * kStep * kLanes);
  const float* xr[kMaxRowBlock];
  const int64_t row_bytes = w.row_bytes(), ahead = prefetch_rows_ahead(row_bytes);
  const int64_t unit = kTiled ? tile_unit_bytes(w) : 0, tb = kTiled ? tile_bytes(w) : 0;
  // Row-major: the first steps' rows too, so their misses overlap instead of stalling one after another.
  // (A tiled copy is one stream, prefetched inside the tile loop.)
  if constexpr (!kTiled) prefetch_rows(w.data, row_bytes, o0, std::min(ahead, o1 - o0), w.rows);
  for (int64_t r0 = 0; r0 < in.n; r0 += block) {
    const int rows = static_cast<int>(std::min(block, in.n - r0));
    for (int r = 0; r < rows; ++r) xr[r] = in.x + (r0 + r) * in.ldx;
    const int step = rows > 4 ? kStep : tile_outputs(rows) * (kStep / tile_outputs(rows));
    for (int64_t o = o0; o < o1; o += step) {
      const int no = static_cast<int>(std::min<int64_t>(step, o1 - o));
      const uint8_t* wrow[kStep];
      for (int k = 0; k < no; ++k)
        wrow[k] = kTiled ? tiled_unit(w, o + k, 0, unit, tb)
                         : static_cast<const uint8_t*>(w.data) + (o + k) * row_bytes;
      if constexpr (!kTiled) prefetch_rows(w.data, row_bytes, o + ahead, no, w.rows);
      std::fill(acc, acc + rows * kStep * kLanes, 0.0f);
      for (int q0 = 0; q0 < rows; q0 += 4)
        dense_block<Src, Stride>(std::min(4, rows - q0), no, wrow, xr + q0, nchunks,
                                 acc + q0 * kStep * kLanes, kStep * kLanes);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < no; ++k) {
          float* a = acc + (r * kStep + k) * kLanes;
          // The cols % 8 tail (absent when cols is a multiple of 8, as in the portable contract) is not
          // tiled: it comes from the checkpoint rows.
          if (w.cols % kLanes != 0)
            dense_tail(w, static_cast<const uint8_t*>(w.data) + (o + k) * row_bytes, xr[r], a);
          y[(r0 + r) * ldy + o + k] = hsum8(a);
        }
    }
  }
}

template <int Stride>
void dense_outputs_by_encoding(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                               int64_t o1) {
  switch (w.encoding) {
    case MatrixEncoding::F32:
      dense_outputs<F32Src, Stride>(w, in, y, ldy, o0, o1);
      break;
    case MatrixEncoding::BF16:
      dense_outputs<BF16Src, Stride>(w, in, y, ldy, o0, o1);
      break;
    case MatrixEncoding::F16:
      dense_outputs<F16Src, Stride>(w, in, y, ldy, o0, o1);
      break;
    case MatrixEncoding::Affine:
      break;
  }
}

}  // namespace

void dense_outputs_avx2(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                        int64_t o1) {
  if (w.tiled != nullptr)
    dense_outputs_by_encoding<kRowTile>(w, in, y, ldy, o0, o1);
  else
    dense_outputs_by_encoding<1>(w, in, y, ldy, o0, o1);
}

}  // namespace ds::cpu
#endif
