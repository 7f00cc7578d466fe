#include "backend/cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/matmul_kernels.h"
#include "core/error.h"

namespace ds {

namespace cpu {

void validate_matmul(const MatrixWeight& w, int64_t n_rows, int64_t ldx, int64_t ldy) {
  if (!w.valid()) fail("matmul: weight '{}' has no data", w.name);
  if (w.rows < 0 || w.cols <= 0) fail("matmul: weight '{}' has shape [{}, {}]", w.name, w.rows, w.cols);
  if (n_rows < 0) fail("matmul: negative row count {} for '{}'", n_rows, w.name);
  if (n_rows > 1 && ldx < w.cols) fail("matmul: ldx {} < cols {} for '{}'", ldx, w.cols, w.name);
  if (n_rows > 1 && ldy < w.rows) fail("matmul: ldy {} < rows {} for '{}'", ldy, w.rows, w.name);
  if (w.encoding != MatrixEncoding::Affine) return;
  if (w.bits != 2 && w.bits != 3 && w.bits != 4 && w.bits != 5 && w.bits != 6 && w.bits != 8)
    fail("matmul: '{}' has unsupported affine bits {}", w.name, w.bits);
  if ((w.group != 32 && w.group != 64 && w.group != 128) || w.cols % w.group != 0)
    fail("matmul: '{}' has affine group {} (want 32, 64 or 128 dividing cols {})", w.name, w.group, w.cols);
  if (w.scales == nullptr || w.biases == nullptr) fail("matmul: '{}' lacks scales or biases", w.name);
  if (w.scale_dtype != DType::BF16 && w.scale_dtype != DType::F16 && w.scale_dtype != DType::F32)
    fail("matmul: '{}' has unsupported scale dtype {}", w.name, dtype_name(w.scale_dtype));
}

void group_sums(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* xsum,
                int64_t ldxs) {
  const int64_t ngroups = w.cols / w.group;
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * ldx;
    float* out = xsum + r * ldxs;
    for (int64_t g = 0; g < ngroups; ++g) {
      float s[kLanes] = {};
      for (int64_t i = g * w.group; i < (g + 1) * w.group; i += kLanes)
        for (int l = 0; l < kLanes; ++l) s[l] = s[l] + xr[i + l];
      out[g] = hsum8(s);
    }
    std::fill(out + ngroups, out + ldxs, 0.0f);
  }
}

}  // namespace cpu

namespace {

// Rows in the weight's lane order, with group sums for affine weights; the buffers outlive the kernels.
cpu::MatmulRows prepare_rows(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx,
                             std::vector<float>& xsum, std::vector<float>& xperm, bool permute) {
  cpu::MatmulRows in{x, ldx, n_rows, nullptr, 0};
#if DS_CPU_AVX2
  if (permute && cpu::permuted_lanes(w)) {
    xperm.resize(static_cast<size_t>(n_rows * w.cols));
    cpu::permute_rows(w, x, n_rows, ldx, xperm.data());
    in.x = xperm.data(), in.ldx = w.cols;
  }
#endif
  if (w.encoding == MatrixEncoding::Affine) {
    in.ldxs = cpu::padded_groups(w.cols / w.group);
    xsum.resize(static_cast<size_t>(n_rows * in.ldxs));
    cpu::group_sums(w, x, n_rows, ldx, xsum.data(), in.ldxs);
    in.xsum = xsum.data();
  }
  return in;
}

void run_outputs(const MatrixWeight& w, const cpu::MatmulRows& in, float* y, int64_t ldy, int64_t o0,
                 int64_t o1) {
  if (o1 <= o0 || in.n == 0) return;
#if DS_CPU_AVX2
  if (w.encoding == MatrixEncoding::Affine)
    cpu::affine_outputs_avx2(w, in, y, ldy, o0, o1);
  else
    cpu::dense_outputs_avx2(w, in, y, ldy, o0, o1);
#else
  cpu::portable_outputs(w, in, y, ldy, o0, o1);
#endif
}

void check_range(const MatrixWeight& w, int64_t o_begin, int64_t o_end) {
  if (o_begin < 0 || o_end > w.rows || o_begin > o_end)
    fail("matmul: outputs [{}, {}) out of range for '{}' with {} rows", o_begin, o_end, w.name, w.rows);
}

}  // namespace

void matmul_many(std::span<const MatmulTask> tasks, ThreadPool& pool) {
  // Threads split output features only, in units of 16; each output's arithmetic is the same in any split.
  constexpr int64_t kUnit = 16, kMinMacsPerPiece = int64_t{1} << 17;
  const size_t nt = tasks.size();
  std::vector<std::vector<float>> xsum(nt), xperm(nt);
  std::vector<cpu::MatmulRows> in(nt);
  std::vector<int64_t> first_unit(nt + 1, 0);
  int64_t macs = 0;
  for (size_t t = 0; t < nt; ++t) {
    const MatmulTask& k = tasks[t];
    if (k.w == nullptr) fail("matmul: task {} has no weight", t);
    cpu::validate_matmul(*k.w, k.n_rows, k.ldx, k.ldy);
    const bool empty = k.n_rows == 0 || k.w->rows == 0;
    if (!empty) in[t] = prepare_rows(*k.w, k.x, k.n_rows, k.ldx, xsum[t], xperm[t], DS_CPU_AVX2);
    first_unit[t + 1] = first_unit[t] + (empty ? 0 : (k.w->rows + kUnit - 1) / kUnit);
    if (!empty) macs += k.w->rows * k.w->cols * k.n_rows;
  }
  const int64_t units = first_unit[nt];
  if (units == 0) return;
  const int64_t grain = std::max<int64_t>(1, kMinMacsPerPiece * units / std::max<int64_t>(1, macs));
  pool.parallel_for(units, grain, [&](int64_t b, int64_t e) {
    for (size_t t = 0; t < nt; ++t) {
      const int64_t lo = std::max(b, first_unit[t]), hi = std::min(e, first_unit[t + 1]);
      if (lo >= hi) continue;
      const MatmulTask& k = tasks[t];
      const int64_t o0 = (lo - first_unit[t]) * kUnit, o1 = std::min((hi - first_unit[t]) * kUnit, k.w->rows);
      run_outputs(*k.w, in[t], k.y, k.ldy, o0, o1);
    }
  });
}

void matmul(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* y, int64_t ldy,
            ThreadPool& pool) {
  const MatmulTask task{&w, x, n_rows, ldx, y, ldy};
  matmul_many(std::span<const MatmulTask>(&task, 1), pool);
}

void matmul_outputs(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* y, int64_t ldy,
                    int64_t o_begin, int64_t o_end) {
  cpu::validate_matmul(w, n_rows, ldx, ldy);
  check_range(w, o_begin, o_end);
  std::vector<float> xsum, xperm;
  run_outputs(w, prepare_rows(w, x, n_rows, ldx, xsum, xperm, DS_CPU_AVX2), y, ldy, o_begin, o_end);
}

void matmul_outputs_portable(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* y,
                             int64_t ldy, int64_t o_begin, int64_t o_end) {
  cpu::validate_matmul(w, n_rows, ldx, ldy);
  check_range(w, o_begin, o_end);
  if (n_rows == 0) return;
  std::vector<float> xsum, xperm;
  cpu::portable_outputs(w, prepare_rows(w, x, n_rows, ldx, xsum, xperm, false), y, ldy, o_begin, o_end);
}

}  // namespace ds
