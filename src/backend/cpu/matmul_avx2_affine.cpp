// MLX affine weight products with AVX2/FMA, computed as MLX does: scale * (x . q) + bias * sum(x) per group.
// Per (row, output): per group D = fma(x_c, q_c, D) from zero and A = fma(s_g, D, A); then B = fma(b_h, X_h,
// B) over the groups in chunks of 8; y = hsum8(A + B). The codes are never dequantized to a buffer of
// weights.
#include "backend/cpu/matmul_kernels.h"

#if DS_CPU_AVX2
#include <algorithm>

#include "backend/cpu/matmul_avx2.h"
#include "backend/cpu/weight_tiles.h"

namespace ds::cpu {

namespace {

// R rows x O outputs over groups [0, ngroups) (pointers already at the first group); A lives in
// acc[r*acc_ld + o*8 ..] between calls. D stays in registers; so does A when the tile is small enough.
// Span sp of output o is span sp * Stride from qrow[o] (Stride kRowTile in a tiled copy, else 1).
template <class Src, int Stride, int R, int O, int G>
void affine_tile(const uint8_t* const* qrow, const float* const* sc, const float* const* xr, int64_t ngroups,
                 float* acc, int64_t acc_ld) {
  constexpr bool kARegs = R * O <= 2;  // 1x4 with A in registers spills in the inner loop (GCC 12)
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
      if constexpr (Stride > 1)  // the tile's span sp (all its rows) is Stride * kUnitBytes contiguous bytes
        prefetch_lines(qrow[0] + sp * Stride * Src::kUnitBytes + kTiledPrefetchBytes,
                       Stride * Src::kUnitBytes);
      decltype(Src::span(qrow[0], 0)) v[O];
      for (int o = 0; o < O; ++o) v[o] = in_reg(Src::span(qrow[o], sp * Stride));
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

// Outputs per tile: 1 row x 4 (unpacking, not FMA latency, bounds it); more rows use 6-8 D chains. A stays
// in registers only for tiles of 1-2 accumulators (see affine_tile).
constexpr int affine_tile_outputs(int rows) {
  return rows == 1 ? 4 : rows == 3 ? 2 : tile_outputs(rows);
}

template <class Src, int Stride, int R, int G>
void affine_fixed_rows(int no, const uint8_t* const* qrow, const float* const* sc, const float* const* xr,
                       int64_t ngroups, float* acc, int64_t acc_ld) {
  constexpr int O = affine_tile_outputs(R);
  int k = 0;
  for (; k + O <= no; k += O)
    affine_tile<Src, Stride, R, O, G>(qrow + k, sc + k, xr, ngroups, acc + k * kLanes, acc_ld);
  for (; k < no; ++k)
    affine_tile<Src, Stride, R, 1, G>(qrow + k, sc + k, xr, ngroups, acc + k * kLanes, acc_ld);
}

template <class Src, int Stride, int G>
void affine_rows_group(int rows, int no, const uint8_t* const* qrow, const float* const* sc,
                       const float* const* xr, int64_t ngroups, float* acc, int64_t acc_ld) {
  switch (rows) {
    case 1:
      affine_fixed_rows<Src, Stride, 1, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    case 2:
      affine_fixed_rows<Src, Stride, 2, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    case 3:
      affine_fixed_rows<Src, Stride, 3, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    default:
      affine_fixed_rows<Src, Stride, 4, G>(no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
  }
}

// rows (1..4) x no outputs, in tiles that keep every D accumulator in a register; the group size is a
// compile-time constant so each group's chunks unroll.
template <class Src, int Stride>
void affine_block(int rows, int no, const uint8_t* const* qrow, const float* const* sc,
                  const float* const* xr, int64_t ngroups, int group, float* acc, int64_t acc_ld) {
  switch (group) {
    case 32:
      affine_rows_group<Src, Stride, 32>(rows, no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    case 64:
      affine_rows_group<Src, Stride, 64>(rows, no, qrow, sc, xr, ngroups, acc, acc_ld);
      break;
    default:
      affine_rows_group<Src, Stride, 128>(rows, no, qrow, sc, xr, ngroups, acc, acc_ld);
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

thread_local std::vector<float> t_scales, t_acc;

// Scales [no, ngroups] and biases [no, ldxs] (zero-padded) of outputs [o, o + no), as floats. The outputs'
// scales are contiguous, and so are their biases when no padding is needed: one conversion each.
void load_scales(const MatrixWeight& w, int64_t o, int no, int64_t ldxs, float* s, float* b) {
  const int64_t ngroups = w.cols / w.group;
  const size_t es = dtype_size(w.scale_dtype);
  const auto* scales = static_cast<const uint8_t*>(w.scales) + o * ngroups * es;
  const auto* biases = static_cast<const uint8_t*>(w.biases) + o * ngroups * es;
  convert_to_f32(w.scale_dtype, scales, no * ngroups, s);
  if (ldxs == ngroups) {
    convert_to_f32(w.scale_dtype, biases, no * ngroups, b);
    return;
  }
  for (int k = 0; k < no; ++k) {
    convert_to_f32(w.scale_dtype, biases + k * ngroups * es, ngroups, b + k * ldxs);
    std::fill(b + k * ldxs + ngroups, b + (k + 1) * ldxs, 0.0f);
  }
}

// Outputs [o, o + no) for a block of rows, in quads; the step's weight rows stay in cache between quads.
template <int Bits, int Stride>
void affine_step(const MatrixWeight& w, const float* const* xr, int rows, int64_t o, int no, const float* s,
                 float* acc) {
  constexpr bool kTiled = Stride > 1;
  const int64_t ngroups = w.cols / w.group, gbytes = w.group * Bits / 8;
  const uint8_t* qrow[kStep];
  const float* sc[kStep];
  const auto* codes = static_cast<const uint8_t*>(w.data) + o * (w.cols * Bits / 8);
  const int64_t unit = kTiled ? tile_unit_bytes(w) : 0, tb = kTiled ? tile_bytes(w) : 0;
  for (int k = 0; k < no; ++k) {
    qrow[k] = kTiled ? tiled_unit(w, o + k, 0, unit, tb) : codes + k * (w.cols * Bits / 8);
    sc[k] = s + k * ngroups;
  }
  auto run = [&](const float* const* x, int64_t groups) {
    for (int q0 = 0; q0 < rows; q0 += 4)
      affine_block<CodeSrc<Bits>, Stride>(std::min(4, rows - q0), no, qrow, sc, x + q0, groups, w.group,
                                          acc + q0 * kStep * kLanes, kStep * kLanes);
  };
  // Unpacking reads a few bytes past a chunk, so a row's last group is unpacked from a padded copy (a tiled
  // copy is padded at its end, and past a row's last unit lies another row's).
  const int64_t main = kOverread<Bits> > 0 && !kTiled ? ngroups - 1 : ngroups;
  run(xr, main);
  if (main == ngroups) return;
  uint8_t tail[kStep][128 * Bits / 8 + 8];
  for (int k = 0; k < no; ++k) {
    std::memcpy(tail[k], qrow[k] + main * gbytes, static_cast<size_t>(gbytes));
    std::memset(tail[k] + gbytes, 0, 8);
    qrow[k] = tail[k], sc[k] += main;
  }
  const float* xt[kMaxRowBlock];
  for (int r = 0; r < rows; ++r) xt[r] = xr[r] + main * w.group;
  run(xt, 1);
}

// Unpacks each weight row's codes in registers once per block of rows and uses them for every row of the
// block; blocks are sized so their rows stay in L2.
template <int Bits, int Stride>
void affine_outputs(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                    int64_t o1) {
  constexpr bool kTiled = Stride > 1;
  const int64_t ngroups = w.cols / w.group, block = row_block(w.cols);
  float* s = scratch(t_scales, kStep * (ngroups + in.ldxs));
  float* b = s + kStep * ngroups;
  float* acc = scratch(t_acc, block * kStep * kLanes);
  const float* xr[kMaxRowBlock];
  const int64_t row_bytes = w.row_bytes(), scale_bytes = ngroups * dtype_size(w.scale_dtype);
  const int64_t ahead = prefetch_rows_ahead(row_bytes);
  // The first steps' rows too: their misses then overlap instead of stalling one after another. (Tiled codes
  // are one stream, prefetched inside the tile loop; scales and biases stay row-major.)
  if constexpr (!kTiled) prefetch_rows(w.data, row_bytes, o0, std::min(ahead, o1 - o0), w.rows);
  prefetch_rows(w.scales, scale_bytes, o0, std::min(ahead, o1 - o0), w.rows);
  prefetch_rows(w.biases, scale_bytes, o0, std::min(ahead, o1 - o0), w.rows);
  for (int64_t r0 = 0; r0 < in.n; r0 += block) {
    const int rows = static_cast<int>(std::min(block, in.n - r0));
    for (int r = 0; r < rows; ++r) xr[r] = in.x + (r0 + r) * in.ldx;
    const int step = rows > 4 ? kStep : affine_tile_outputs(rows) * (kStep / affine_tile_outputs(rows));
    for (int64_t o = o0; o < o1; o += step) {
      const int no = static_cast<int>(std::min<int64_t>(step, o1 - o));
      if constexpr (!kTiled) prefetch_rows(w.data, row_bytes, o + ahead, no, w.rows);
      prefetch_rows(w.scales, scale_bytes, o + ahead, no, w.rows);
      prefetch_rows(w.biases, scale_bytes, o + ahead, no, w.rows);
      load_scales(w, o, no, in.ldxs, s, b);
      std::fill(acc, acc + rows * kStep * kLanes, 0.0f);
      affine_step<Bits, Stride>(w, xr, rows, o, no, s, acc);
      for (int r = 0; r < rows; ++r)
        for (int k = 0; k < no; ++k)
          y[(r0 + r) * ldy + o + k] = affine_finish(acc + (r * kStep + k) * kLanes, b + k * in.ldxs,
                                                    in.xsum + (r0 + r) * in.ldxs, in.ldxs);
    }
  }
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

namespace {

template <int Stride>
void affine_outputs_by_bits(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                            int64_t o1) {
  switch (w.bits) {
    case 2:
      affine_outputs<2, Stride>(w, in, y, ldy, o0, o1);
      break;
    case 3:
      affine_outputs<3, Stride>(w, in, y, ldy, o0, o1);
      break;
    case 4:
      affine_outputs<4, Stride>(w, in, y, ldy, o0, o1);
      break;
    case 5:
      affine_outputs<5, Stride>(w, in, y, ldy, o0, o1);
      break;
    case 6:
      affine_outputs<6, Stride>(w, in, y, ldy, o0, o1);
      break;
    default:
      affine_outputs<8, Stride>(w, in, y, ldy, o0, o1);
      break;
  }
}

}  // namespace

void affine_outputs_avx2(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                         int64_t o1) {
  if (w.tiled != nullptr)
    affine_outputs_by_bits<kRowTile>(w, in, y, ldy, o0, o1);
  else
    affine_outputs_by_bits<1>(w, in, y, ldy, o0, o1);
}

}  // namespace ds::cpu
#endif
