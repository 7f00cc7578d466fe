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

// R rows x O outputs over groups [0, ngroups) (pointers already at the first group); A lives in
// acc[r*acc_ld + o*8 ..] between calls. D stays in registers; so does A when the tile is small enough.
template <class Src, int R, int O, int G>
void affine_tile(const uint8_t* const* qrow, const float* const* sc, const float* const* xr, int64_t ngroups,
                 float* acc, int64_t acc_ld) {
  constexpr bool kARegs = R * O <= 4;
  constexpr int64_t cpg = G / kLanes;
  __m256 a[kARegs ? R : 1][kARegs ? O : 1];
  if constexpr (kARegs)
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) a[r][o] = _mm256_loadu_ps(acc + r * acc_ld + o * kLanes);
  for (int64_t g = 0; g < ngroups; ++g) {
    __m256 d[R][O];
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) d[r][o] = _mm256_setzero_ps();
    for (int64_t sp = g * cpg / Src::kSub; sp < (g + 1) * cpg / Src::kSub; ++sp) {
      decltype(Src::span(qrow[0], 0)) v[O];
      for (int o = 0; o < O; ++o) v[o] = in_reg(Src::span(qrow[o], sp));
      unroll<Src::kSub>([&]<int T>() {
        const int64_t cc = sp * Src::kSub + T;
        __m256 x[R];
        for (int r = 0; r < R; ++r) x[r] = in_reg(_mm256_loadu_ps(xr[r] + cc * kLanes));
        for (int o = 0; o < O; ++o) {
          const __m256 q = Src::template sub<T>(v[o]);
          for (int r = 0; r < R; ++r) d[r][o] = _mm256_fmadd_ps(x[r], q, d[r][o]);
        }
      });
    }
    for (int o = 0; o < O; ++o) {
      const __m256 s = _mm256_broadcast_ss(sc[o] + g);
      for (int r = 0; r < R; ++r) {
        if constexpr (kARegs) {
          a[r][o] = _mm256_fmadd_ps(s, d[r][o], a[r][o]);
        } else {
          float* p = acc + r * acc_ld + o * kLanes;
          _mm256_storeu_ps(p, _mm256_fmadd_ps(s, d[r][o], _mm256_loadu_ps(p)));
        }
      }
    }
  }
  if constexpr (kARegs)
    for (int r = 0; r < R; ++r)
      for (int o = 0; o < O; ++o) _mm256_storeu_ps(acc + r * acc_ld + o * kLanes, a[r][o]);
}

// Outputs per tile: 1 row x 4 keeps D and A in registers (unpacking, not FMA latency, bounds it); more rows
// use 6-8 D chains with A in memory.
constexpr int affine_tile_outputs(int rows) {
  return rows == 1 ? 4 : rows == 3 ? 2 : tile_outputs(rows);
}

template <class Src, int R, int G>
void affine_fixed_rows(int no, const uint8_t* const* qrow, const float* const* sc, const float* const* xr,
                       int64_t ngroups, float* acc, int64_t acc_ld) {
  constexpr int O = affine_tile_outputs(R);
  int k = 0;
  for (; k + O <= no; k += O)
    affine_tile<Src, R, O, G>(qrow + k, sc + k, xr, ngroups, acc + k * kLanes, acc_ld);
  for (; k < no; ++k) affine_tile<Src, R, 1, G>(qrow + k, sc + k, xr, ngroups, acc + k * kLanes, acc_ld);
}

template <class Src, int G>
void affine_rows_group(int rows, int no, const uint8_t* const* qrow, const float* const* sc,
                       const float* const* xr, int64_t ngroups, float* acc, int64_t acc_ld) {
  switch (rows) {
    case 1:
      affine_fixed_rows<Src, 1, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    case 2:
      affine_fixed_rows<Src, 2, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    case 3:
      affine_fixed_rows<Src, 3, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    default:
      affine_fixed_rows<Src, 4, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
  }
}

// rows (1..4) x no outputs, in tiles that keep every D accumulator in a register; the group size is a
// compile-time constant so each group's chunks unroll.
template <class Src>
void affine_block(int rows, int no, const uint8_t* const* qrow, const float* const* sc,
                  const float* const* xr, int64_t ngroups, int group, float* acc, int64_t acc_ld) {
  switch (group) {
    case 32:
      affine_rows_group<Src, 32>(rows, no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    case 64:
      affine_rows_group<Src, 64>(rows, no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    default:
      affine_rows_group<Src, 128>(rows, no, qrow, sc, xr, ngroups, acc, acc_ld);
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

constexpr int kStep = 8;  // outputs per step of the small path

// Few rows: unpack each weight row's codes in registers once and reuse them for every row of x.
template <int Bits>
void affine_small_step(const MatrixWeight& w, const MatmulRows& in, int64_t o, int no, const float* s,
                       float* acc) {
  const int rows = static_cast<int>(in.n);
  const int64_t ngroups = w.cols / w.group, gbytes = w.group * Bits / 8;
  const uint8_t* qrow[kStep];
  const float* sc[kStep];
  const float* xr[kSmallRows] = {};
  for (int k = 0; k < no; ++k) qrow[k] = code_row(w, o + k), sc[k] = s + k * ngroups;
  for (int r = 0; r < rows; ++r) xr[r] = in.x + r * in.ldx;
  // Unpacking reads a few bytes past a chunk, so a row's last group is unpacked from a padded copy.
  const int64_t main = kOverread<Bits> > 0 ? ngroups - 1 : ngroups;
  affine_block<CodeSrc<Bits>>(rows, no, qrow, sc, xr, main, w.group, acc, kStep * kLanes);
  if (main == ngroups) return;
  uint8_t tail[kStep][128 * Bits / 8 + 8];
  for (int k = 0; k < no; ++k) {
    std::memcpy(tail[k], qrow[k] + main * gbytes, static_cast<size_t>(gbytes));
    std::memset(tail[k] + gbytes, 0, 8);
    qrow[k] = tail[k], sc[k] += main;
  }
  for (int r = 0; r < rows; ++r) xr[r] += main * w.group;
  affine_block<CodeSrc<Bits>>(rows, no, qrow, sc, xr, 1, w.group, acc, kStep * kLanes);
}

template <int Bits>
void affine_small(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                  int64_t o1) {
  const int rows = static_cast<int>(in.n);
  const int64_t ngroups = w.cols / w.group;
  const int step = affine_tile_outputs(rows) * (kStep / affine_tile_outputs(rows));
  float* s = scratch(t_scales, kStep * (ngroups + in.ldxs));
  float* b = s + kStep * ngroups;
  float acc[kSmallRows * kStep * kLanes];
  for (int64_t o = o0; o < o1; o += step) {
    const int no = static_cast<int>(std::min<int64_t>(step, o1 - o));
    load_scales(w, o, no, in.ldxs, s, b);
    std::fill(acc, acc + rows * kStep * kLanes, 0.0f);
    affine_small_step<Bits>(w, in, o, no, s, acc);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < no; ++k)
        y[r * ldy + o + k] =
            affine_finish(acc + (r * kStep + k) * kLanes, b + k * in.ldxs, in.xsum + r * in.ldxs, in.ldxs);
  }
}

// Codes of columns [k0, k0 + kc) of one row as floats, chunk by chunk in the kernel's lane order; with
// natural lanes the row's last chunk comes from a padded copy.
template <int Bits>
void unpack_span(const MatrixWeight& w, const uint8_t* row, int64_t k0, int64_t kc, float* dst) {
  const int64_t c0 = k0 / kLanes, c1 = (k0 + kc) / kLanes;
  if constexpr (kPermutedLanes<Bits>) {
    using Src = CodeSrc<Bits>;
    for (int64_t sp = c0 / Src::kSub; sp < c1 / Src::kSub; ++sp) {
      const __m256i v = Src::span(row, sp);
      unroll<Src::kSub>([&]<int T>() {
        _mm256_storeu_ps(dst + (sp * Src::kSub + T - c0) * kLanes, Src::template sub<T>(v));
      });
    }
  } else {
    const int64_t fast_end = kOverread<Bits> > 0 && c1 == w.cols / kLanes ? c1 - 1 : c1;
    for (int64_t c = c0; c < fast_end; ++c)
      _mm256_storeu_ps(dst + (c - c0) * kLanes, _mm256_cvtepi32_ps(unpack8<Bits>(row + c * Bits)));
    if (fast_end == c1) return;
    uint8_t pad[16] = {};
    std::memcpy(pad, row + fast_end * Bits, Bits);
    _mm256_storeu_ps(dst + (fast_end - c0) * kLanes, _mm256_cvtepi32_ps(unpack8<Bits>(pad)));
  }
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
        const uint8_t* qrow[kOutTile];
        const float* sc[kOutTile];
        for (int k = 0; k < no; ++k) {
          unpack_span<Bits>(w, code_row(w, ob + k), k0, kc, qbuf + k * kc);
          qrow[k] = reinterpret_cast<const uint8_t*>(qbuf + k * kc), sc[k] = s + k * ngroups + k0 / w.group;
        }
        for (int64_t rq = 0; rq < nr; rq += 4) {
          const int rows = static_cast<int>(std::min<int64_t>(4, nr - rq));
          const float* xr[4] = {};
          for (int r = 0; r < rows; ++r) xr[r] = in.x + (r0 + rq + r) * in.ldx + k0;
          affine_block<F32Src>(rows, no, qrow, sc, xr, kc / w.group, w.group, acc + rq * acc_ld, acc_ld);
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

void permute_rows(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * ldx;
    float* o = out + r * w.cols;
    if (w.bits == 4) {
      // Spans of 16: the even columns, then the odd ones.
      for (int64_t e0 = 0; e0 < w.cols; e0 += 16) {
        const __m256 a = _mm256_loadu_ps(xr + e0), b = _mm256_loadu_ps(xr + e0 + 8);
        const __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
        _mm256_storeu_ps(o + e0, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xD8)));
        _mm256_storeu_ps(o + e0 + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xD8)));
      }
    } else {
      for (int64_t e0 = 0; e0 < w.cols; e0 += 32)
        for (int t = 0; t < 4; ++t)
          for (int l = 0; l < kLanes; ++l) o[e0 + t * kLanes + l] = xr[e0 + 4 * l + t];
    }
  }
}

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
