#pragma once
// Internal interface between the matmul driver and its kernels (AVX2 and portable), and the pieces of the
// reduction contract they share. See docs/backend-cpu.md for the contract itself.
#include <cstdint>

#include "formats/matrix_weight.h"

namespace ds::cpu {

constexpr int kLanes = 8;

// The AVX2/FMA kernels are built only where the compiler targets them; elsewhere the portable path runs.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DS_CPU_AVX2 1
#else
#define DS_CPU_AVX2 0
#endif

// The rows of one call, x already in the weight's lane order (permuted for 2/4-bit). xsum (affine only): per
// row the group sums of x, [n][ldxs] with ldxs a multiple of 8 and zeros past the last group.
struct MatmulRows {
  const float* x = nullptr;
  int64_t ldx = 0, n = 0;
  const float* xsum = nullptr;
  int64_t ldxs = 0;
};

// 2- and 4-bit codes are consumed in lane-permuted order: within each 8-byte span (8 * k codes, k = 8 /
// bits), chunk t of the span has in lane l the code of element k*l + t (one byte per lane, so unpacking is
// cheap).
template <int Bits>
constexpr bool kPermutedLanes = Bits == 2 || Bits == 4;
inline bool permuted_lanes(const MatrixWeight& w) {
  return w.encoding == MatrixEncoding::Affine && (w.bits == 2 || w.bits == 4);
}

// The column feeding lane l of chunk c of a row (8c + l unless the lanes are permuted).
inline int64_t lane_column(int bits, int64_t c, int l) {
  if (bits != 2 && bits != 4) return c * kLanes + l;
  const int k = 8 / bits;
  return (c / k) * (kLanes * k) + static_cast<int64_t>(k) * l + c % k;
}

inline int64_t padded_groups(int64_t ngroups) {
  return (ngroups + kLanes - 1) / kLanes * kLanes;
}

// The fixed horizontal sum of 8 lanes: ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), as the AVX2 shuffles do it.
inline float hsum8(const float* a) {
  float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
  return (t0 + t2) + (t1 + t3);
}

// Throws naming the tensor when the weight cannot be multiplied (bad encoding parameters or strides).
void validate_matmul(const MatrixWeight& w, int64_t n_rows, int64_t ldx, int64_t ldy);

// Group sums of each row (lane-wise adds over the group's chunks, then hsum8), zero-padded to ldxs.
void group_sums(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* xsum,
                int64_t ldxs);

void portable_outputs(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                      int64_t o1);

#if DS_CPU_AVX2
void dense_outputs_avx2(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                        int64_t o1);
void affine_outputs_avx2(const MatrixWeight& w, const MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                         int64_t o1);
// Copies rows into the weight's permuted lane order: out[r][8c + l] = x[r][lane_column(bits, c, l)].
void permute_rows(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* out);
// Row `row` dequantized with the reference's arithmetic (s * q then + b), vectorized.
void dequantize_row_avx2(const MatrixWeight& w, int64_t row, float* out);
#endif

}  // namespace ds::cpu
