// MLX affine weight products with AVX2/FMA, computed as MLX does: scale * (x . q) + bias * sum(x) per group.
// Per (row, output): per group D = fma(x_c, q_c, D) from zero and A = fma(s_g, D, A); then B = fma(b_h, X_h,
// B) over the groups in chunks of 8; y = hsum8(A + B). The codes are never dequantized to a buffer of
// weights.
#include "backend/cpu/matmul_kernels.h"

#if DS_CPU_AVX2
#include <algorithm>

#include "backend/cpu/matmul_avx2.h"

namespace ds::cpu {

namespace {

// R rows x O outputs over groups [0, ngroups) (pointers already at the first group); accumulators A live in
// acc[r*acc_ld + o*8 ..] between calls. Src yields chunk c of a row's codes as floats.
template <class Src, int R, int O>
void affine_tile(const uint8_t* const* qrow, const float* const* sc, const float* const* xr, int64_t ngroups,
                 int group, float* acc, int64_t acc_ld) {
  __m256 a[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) a[r][o] = _mm256_loadu_ps(acc + r * acc_ld + o * kLanes);
  const int cpg = group / kLanes;
  for (int64_t g = 0; g < ngroups; ++g) {
    __m256 d[R][O];
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) d[r][o] = _mm256_setzero_ps();
    for (int c = 0; c < cpg; ++c) {
      const int64_t cc = g * cpg + c;
      for (int o = 0; o < O; ++o) {
        const __m256 q = Src::load(qrow[o], cc);
        for (int r = 0; r < R; ++r)
          d[r][o] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[r] + cc * kLanes), q, d[r][o]);
      }
    }
    for (int o = 0; o < O; ++o) {
      const __m256 s = _mm256_broadcast_ss(sc[o] + g);
      for (int r = 0; r < R; ++r) a[r][o] = _mm256_fmadd_ps(s, d[r][o], a[r][o]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) _mm256_storeu_ps(acc + r * acc_ld + o * kLanes, a[r][o]);
}

template <class Src, int O>
void affine_rows(int rows, const uint8_t* const* qrow, const float* const* sc, const float* const* xr,
                 int64_t ngroups, int group, float* acc, int64_t acc_ld) {
  switch (rows) {
    case 1:
      affine_tile<Src, 1, O>(qrow, sc, xr, ngroups, group, acc, acc_ld);
      break;
    case 2:
      affine_tile<Src, 2, O>(qrow, sc, xr, ngroups, group, acc, acc_ld);
      break;
    case 3:
      affine_tile<Src, 3, O>(qrow, sc, xr, ngroups, group, acc, acc_ld);
      break;
    default:
      affine_tile<Src, 4, O>(qrow, sc, xr, ngroups, group, acc, acc_ld);
      break;
  }
}

// y = hsum8(A + B) with B = fma(bias_h, X_h, B) over zero-padded chunks of 8 groups.
float affine_finish(const float* a, const float* bias, const float* xsum, int64_t ldxs) {
  __m256 b = _mm256_setzero_ps();
  for (int64_t h = 0; h < ldxs; h += kLanes)
    b = _mm256_fmadd_ps(_mm256_loadu_ps(bias + h), _mm256_loadu_ps(xsum + h), b);
  alignas(32) float s[kLanes];
  _mm256_store_ps(s, _mm256_add_ps(_mm256_loadu_ps(a), b));
  return hsum8(s);
}

thread_local std::vector<float> t_scales, t_qbuf, t_acc;

// Scales [no, ngroups] and biases [no, ldxs] (zero-padded) of outputs [o, o + no), as floats.
void load_scales(const MatrixWeight& w, int64_t o, int no, int64_t ldxs, float* s, float* b) {
  const int64_t ngroups = w.cols / w.group;
  const size_t es = dtype_size(w.scale_dtype);
  for (int k = 0; k < no; ++k) {
    const int64_t at = (o + k) * ngroups;
    convert_to_f32(w.scale_dtype, static_cast<const uint8_t*>(w.scales) + at * es, ngroups, s + k * ngroups);
    convert_to_f32(w.scale_dtype, static_cast<const uint8_t*>(w.biases) + at * es, ngroups, b + k * ldxs);
    std::fill(b + k * ldxs + ngroups, b + (k + 1) * ldxs, 0.0f);
  }
}

const uint8_t* code_row(const MatrixWeight& w, int64_t o) {
  return static_cast<const uint8_t*>(w.data) + o * w.row_bytes();
}

// Few rows: unpack each weight row's codes in registers once and reuse them for every row of x.
template <int Bits, int O>
void affine_small_tile(const MatrixWeight& w, const MatmulRows& in, int64_t o, const float* s, float* acc) {
  const int rows = static_cast<int>(in.n);
  const int64_t ngroups = w.cols / w.group, gbytes = w.group * Bits / 8;
  const uint8_t* qrow[O];
  const float* sc[O];
  const float* xr[kSmallRows] = {};
  for (int k = 0; k < O; ++k) qrow[k] = code_row(w, o + k), sc[k] = s + k * ngroups;
  for (int r = 0; r < rows; ++r) xr[r] = in.x + r * in.ldx;
  // Unpacking reads a few bytes past a chunk, so a row's last group is unpacked from a padded copy.
  const int64_t main = kOverread<Bits> > 0 ? ngroups - 1 : ngroups;
  affine_rows<CodeSrc<Bits>, O>(rows, qrow, sc, xr, main, w.group, acc, O * kLanes);
  if (main == ngroups) return;
  uint8_t tail[O][128 * Bits / 8 + 8];
  for (int k = 0; k < O; ++k) {
    std::memcpy(tail[k], qrow[k] + main * gbytes, static_cast<size_t>(gbytes));
    std::memset(tail[k] + gbytes, 0, 8);
    qrow[k] = tail[k], sc[k] += main;
  }
  for (int r = 0; r < rows; ++r) xr[r] += main * w.group;
  affine_rows<CodeSrc<Bits>, O>(rows, qrow, sc, xr, 1, w.group, acc, O * kLanes);
}

template <int Bits>
void affine_small(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                  int64_t o1) {
  const int rows = static_cast<int>(in.n);
  const int64_t ngroups = w.cols / w.group;
  // 1 row x 4 outputs or 2 x 2 keep 8 D/A accumulator pairs in registers; 3 or 4 rows go one output at a
  // time.
  const int o_step = rows == 1 ? 4 : rows == 2 ? 2 : 1;
  float* s = scratch(t_scales, 4 * (ngroups + in.ldxs));
  float* b = s + 4 * ngroups;
  float acc[kSmallRows * 4 * kLanes];
  for (int64_t o = o0; o < o1;) {
    const int no = static_cast<int>(std::min<int64_t>(o_step, o1 - o));
    load_scales(w, o, no, in.ldxs, s, b);
    std::fill(acc, acc + rows * no * kLanes, 0.0f);
    if (no == 4)
      affine_small_tile<Bits, 4>(w, in, o, s, acc);
    else if (no == 2)
      affine_small_tile<Bits, 2>(w, in, o, s, acc);
    else if (no == 1)
      affine_small_tile<Bits, 1>(w, in, o, s, acc);
    else
      for (int k = 0; k < no; ++k) {
        float tile[kSmallRows * kLanes] = {};
        affine_small_tile<Bits, 1>(w, in, o + k, s + k * ngroups, tile);
        for (int r = 0; r < rows; ++r)
          std::copy(tile + r * kLanes, tile + (r + 1) * kLanes, acc + (r * no + k) * kLanes);
      }
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < no; ++k)
        y[r * ldy + o + k] =
            affine_finish(acc + (r * no + k) * kLanes, b + k * in.ldxs, in.xsum + r * in.ldxs, in.ldxs);
    o += no;
  }
}

// Codes of columns [k0, k0 + kc) of one row as floats; the row's last chunk comes from a padded copy.
template <int Bits>
void unpack_span(const MatrixWeight& w, const uint8_t* row, int64_t k0, int64_t kc, float* dst) {
  const int64_t c0 = k0 / kLanes, c1 = (k0 + kc) / kLanes;
  const int64_t fast_end = kOverread<Bits> > 0 && c1 == w.cols / kLanes ? c1 - 1 : c1;
  for (int64_t c = c0; c < fast_end; ++c)
    _mm256_storeu_ps(dst + (c - c0) * kLanes, _mm256_cvtepi32_ps(unpack8<Bits>(row + c * Bits)));
  if (fast_end == c1) return;
  uint8_t pad[16] = {};
  std::memcpy(pad, row + fast_end * Bits, Bits);
  _mm256_storeu_ps(dst + (fast_end - c0) * kLanes, _mm256_cvtepi32_ps(unpack8<Bits>(pad)));
}

// Many rows: per block of rows and tile of outputs, walk K in blocks (whole groups); each block's codes are
// unpacked to floats once and reused by every row. D and A follow the same sequence as the small path.
template <int Bits>
void affine_blocked(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                    int64_t o1) {
  const int64_t ngroups = w.cols / w.group;
  const int64_t kb = std::max<int64_t>(1, kColBlock / w.group) * w.group;
  float* s = scratch(t_scales, kOutTile * (ngroups + in.ldxs));
  float* b = s + kOutTile * ngroups;
  float* qbuf = scratch(t_qbuf, kOutTile * kb);
  float* acc = scratch(t_acc, kRowBlock * kOutTile * kLanes);
  const int64_t acc_ld = kOutTile * kLanes;
  for (int64_t r0 = 0; r0 < in.n; r0 += kRowBlock) {
    const int64_t nr = std::min(kRowBlock, in.n - r0);
    for (int64_t ob = o0; ob < o1; ob += kOutTile) {
      const int no = static_cast<int>(std::min(kOutTile, o1 - ob));
      load_scales(w, ob, no, in.ldxs, s, b);
      std::fill(acc, acc + nr * acc_ld, 0.0f);
      for (int64_t k0 = 0; k0 < w.cols; k0 += kb) {
        const int64_t kc = std::min(kb, w.cols - k0);
        for (int k = 0; k < no; ++k) unpack_span<Bits>(w, code_row(w, ob + k), k0, kc, qbuf + k * kc);
        for (int64_t rq = 0; rq < nr; rq += 4) {
          const int rows = static_cast<int>(std::min<int64_t>(4, nr - rq));
          const float* xr[4] = {};
          for (int r = 0; r < rows; ++r) xr[r] = in.x + (r0 + rq + r) * in.ldx + k0;
          for (int k = 0; k < no; ++k) {
            const uint8_t* q = reinterpret_cast<const uint8_t*>(qbuf + k * kc);
            const float* sc = s + k * ngroups + k0 / w.group;
            affine_rows<F32Src, 1>(rows, &q, &sc, xr, kc / w.group, w.group, acc + rq * acc_ld + k * kLanes,
                                   acc_ld);
          }
        }
      }
      for (int64_t r = 0; r < nr; ++r)
        for (int k = 0; k < no; ++k)
          y[(r0 + r) * ldy + ob + k] = affine_finish(acc + r * acc_ld + k * kLanes, b + k * in.ldxs,
                                                     in.xsum + (r0 + r) * in.ldxs, in.ldxs);
    }
  }
}

template <int Bits>
void affine_outputs(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                    int64_t o1) {
  if (in.n <= kSmallRows)
    affine_small<Bits>(w, in, y, ldy, o0, o1);
  else
    affine_blocked<Bits>(w, in, y, ldy, o0, o1);
}

}  // namespace

void affine_outputs_avx2(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                         int64_t o1) {
  switch (w.bits) {
    case 2:
      affine_outputs<2>(w, in, y, ldy, o0, o1);
      break;
    case 3:
      affine_outputs<3>(w, in, y, ldy, o0, o1);
      break;
    case 4:
      affine_outputs<4>(w, in, y, ldy, o0, o1);
      break;
    case 5:
      affine_outputs<5>(w, in, y, ldy, o0, o1);
      break;
    case 6:
      affine_outputs<6>(w, in, y, ldy, o0, o1);
      break;
    default:
      affine_outputs<8>(w, in, y, ldy, o0, o1);
      break;
  }
}

}  // namespace ds::cpu
#endif
