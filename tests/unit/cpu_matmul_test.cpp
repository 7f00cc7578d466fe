// CPU weight products: accuracy against a float64 reference (with a negative control), bit equality with the
// portable contract, and row invariance across windows, prompt sizes, positions, threads and output splits.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/weight_tiles.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ds {
namespace {

// |y - ref| <= kRelBound * sum_i |W[o,i] * x[r,i]| for every (r, o); W as dequantize_row_reference gives it.
constexpr double kRelBound = 2e-6;

struct Spec {
  MatrixEncoding enc;
  int bits = 0, group = 0;
  DType sd = DType::BF16;
  std::string label() const {
    switch (enc) {
      case MatrixEncoding::F32:
        return "f32";
      case MatrixEncoding::BF16:
        return "bf16";
      case MatrixEncoding::F16:
        return "f16";
      case MatrixEncoding::Affine:
        break;
    }
    return "q" + std::to_string(bits) + "g" + std::to_string(group) + "_" + std::string(dtype_name(sd));
  }
};

void PrintTo(const Spec& s, std::ostream* os) {
  *os << s.label();
}

std::vector<Spec> all_specs() {
  std::vector<Spec> s = {{MatrixEncoding::F32}, {MatrixEncoding::BF16}, {MatrixEncoding::F16}};
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) s.push_back({MatrixEncoding::Affine, bits, group, DType::BF16});
  for (DType sd : {DType::F16, DType::F32})
    for (int bits : {3, 4, 8}) s.push_back({MatrixEncoding::Affine, bits, 64, sd});
  return s;
}

// A weight with owned storage (exactly sized, so ASan sees any read past the end) and its raw scales.
struct TestWeight {
  std::vector<uint8_t> data, scales, biases;
  std::vector<float> scale_f;  // affine: scales as floats, [rows, cols / group]
  MatrixWeight w;
};

void put_scalar(DType t, float v, std::vector<uint8_t>& out, size_t i) {
  if (t == DType::F32) {
    std::memcpy(out.data() + i * 4, &v, 4);
  } else {
    uint16_t h = t == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
    std::memcpy(out.data() + i * 2, &h, 2);
  }
}

float get_scalar(DType t, const std::vector<uint8_t>& in, size_t i) {
  if (t == DType::F32) {
    float v;
    std::memcpy(&v, in.data() + i * 4, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, in.data() + i * 2, 2);
  return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

TestWeight make_weight(const Spec& spec, int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.5f, 1.5f);
  TestWeight t;
  MatrixWeight& w = t.w;
  w.encoding = spec.enc, w.rows = rows, w.cols = cols, w.name = "test." + spec.label();
  if (spec.enc == MatrixEncoding::Affine) {
    w.bits = spec.bits, w.group = spec.group, w.scale_dtype = spec.sd;
    const int64_t ngroups = cols / spec.group;
    const float range = static_cast<float>((1 << spec.bits) - 1);
    t.scales.resize(static_cast<size_t>(rows * ngroups) * dtype_size(spec.sd));
    t.biases.resize(t.scales.size());
    t.scale_f.resize(static_cast<size_t>(rows * ngroups));
    for (int64_t g = 0; g < rows * ngroups; ++g) {
      const float s =
          0.02f * uni(rng) / range;  // MLX-like: codes span a group's range, bias near its minimum
      put_scalar(spec.sd, s, t.scales, g);
      put_scalar(spec.sd, -s * range * 0.5f * uni(rng), t.biases, g);
      t.scale_f[g] = get_scalar(spec.sd, t.scales, g);
    }
  }
  w.data = nullptr;
  t.data.resize(static_cast<size_t>(rows * w.row_bytes()));
  for (size_t i = 0; i < t.data.size(); ++i) {
    if (spec.enc == MatrixEncoding::Affine) {
      t.data[i] = static_cast<uint8_t>(rng());
    } else if (spec.enc == MatrixEncoding::F32) {
      if (i % 4 == 0) put_scalar(DType::F32, normal(rng), t.data, i / 4);
    } else if (i % 2 == 0) {
      put_scalar(spec.enc == MatrixEncoding::BF16 ? DType::BF16 : DType::F16, 0.05f * normal(rng), t.data,
                 i / 2);
    }
  }
  w.data = t.data.data();
  w.scales = t.scales.empty() ? nullptr : t.scales.data();
  w.biases = t.biases.empty() ? nullptr : t.biases.data();
  return t;
}

std::vector<float> random_rows(int64_t n, int64_t ld, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * ld));
  for (auto& v : x) v = normal(rng);
  return x;
}

// The reference: float64 accumulation over dequantize_row_reference. scale_error perturbs the scales (affine)
// or the values (dense) by that factor, for the negative control.
struct Reference {
  std::vector<double> y, magnitude;  // [n, rows]; magnitude = sum_i |W x|
};

Reference reference(const TestWeight& t, const float* x, int64_t n, int64_t ldx, double scale_error) {
  const MatrixWeight& w = t.w;
  Reference ref{std::vector<double>(static_cast<size_t>(n * w.rows)),
                std::vector<double>(static_cast<size_t>(n * w.rows))};
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t o = 0; o < w.rows; ++o) {
    dequantize_row_reference(w, o, row.data());
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < w.cols; ++i) {
        double wi = row[i];
        if (w.encoding == MatrixEncoding::Affine) {
          const int64_t g = o * (w.cols / w.group) + i / w.group;
          const double bias = get_scalar(w.scale_dtype, t.biases, static_cast<size_t>(g));
          wi += scale_error * (wi - bias);  // (1 + e) * s * q + b
        } else {
          wi *= 1.0 + scale_error;
        }
        acc += wi * x[r * ldx + i];
        mag += std::fabs(static_cast<double>(row[i]) * x[r * ldx + i]);
      }
      ref.y[r * w.rows + o] = acc;
      ref.magnitude[r * w.rows + o] = mag;
    }
  }
  return ref;
}

double max_rel_error(const std::vector<float>& y, int64_t ldy, const Reference& ref, int64_t n,
                     int64_t rows) {
  double worst = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t o = 0; o < rows; ++o)
      worst = std::max(worst, std::fabs(y[r * ldy + o] - ref.y[r * rows + o]) / ref.magnitude[r * rows + o]);
  return worst;
}

class CpuMatmul : public ::testing::TestWithParam<Spec> {};

TEST_P(CpuMatmul, WithinBoundOfFloat64ReferenceAndBoundIsNotVacuous) {
  const Spec spec = GetParam();
  const int64_t cols_list[] = {spec.enc == MatrixEncoding::Affine ? int64_t{spec.group} : 5, 128, 2560};
  for (int64_t cols : cols_list) {
    for (int64_t n : {1, 3, 9}) {
      const int64_t rows = 45;
      TestWeight t = make_weight(spec, rows, cols, 1000 + cols);
      std::vector<float> x = random_rows(n, cols, 7 + n), y(static_cast<size_t>(n * rows));
      ThreadPool pool(2);
      matmul(t.w, x.data(), n, cols, y.data(), rows, pool);
      const double err = max_rel_error(y, rows, reference(t, x.data(), n, cols, 0.0), n, rows);
      const double bad = max_rel_error(y, rows, reference(t, x.data(), n, cols, 0.01), n, rows);
      EXPECT_LE(err, kRelBound) << spec.label() << " cols " << cols << " n " << n;
      EXPECT_GT(bad, kRelBound) << spec.label() << " cols " << cols << " n " << n << ": bound is vacuous";
      RecordProperty(spec.label() + "_c" + std::to_string(cols) + "_n" + std::to_string(n),
                     fmt::format("{:.3g} / {:.3g}", err, bad));
    }
  }
}

TEST_P(CpuMatmul, MatchesPortableContractBitForBit) {
  const Spec spec = GetParam();
  for (int64_t cols :
       {spec.enc == MatrixEncoding::Affine ? int64_t{spec.group} : 13, int64_t{640}, int64_t{1152}}) {
    const int64_t rows = 37;
    TestWeight t = make_weight(spec, rows, cols, 2000 + cols);
    for (int64_t n : {1, 2, 3, 4, 5, 8, 67}) {
      std::vector<float> x = random_rows(n, cols, 11 + n);
      std::vector<float> fast(static_cast<size_t>(n * rows)), model(fast.size());
      ThreadPool pool(2);
      matmul(t.w, x.data(), n, cols, fast.data(), rows, pool);
      matmul_outputs_portable(t.w, x.data(), n, cols, model.data(), rows, 0, rows);
      EXPECT_EQ(0, std::memcmp(fast.data(), model.data(), fast.size() * 4))
          << spec.label() << " cols " << cols << " n " << n;
    }
  }
}

// The CPU's tiled copy (weight_tiles.h) changes where the kernels read, never what they compute: tiled ==
// row-major bit for bit, for partial last tiles, dense column tails, every window size and output sub-ranges.
TEST_P(CpuMatmul, TiledCopyEqualsRowMajorBitForBit) {
  const Spec spec = GetParam();
  for (int64_t rows : {1, 8, 37}) {
    for (int64_t cols :
         {spec.enc == MatrixEncoding::Affine ? int64_t{spec.group} : 13, int64_t{640}, int64_t{1152}}) {
      TestWeight t = make_weight(spec, rows, cols, 6000 + cols + rows);
      MatrixWeight tiled_w = t.w;
      MatrixWeight* one[] = {&tiled_w};
      cpu::WeightTiles tiles(one);
      ASSERT_NE(tiled_w.tiled, nullptr) << spec.label();
      ASSERT_EQ(tiles.bytes() % 64, 0u);
      for (int64_t n : {1, 2, 3, 4, 5, 8, 67}) {
        std::vector<float> x = random_rows(n, cols, 21 + n);
        std::vector<float> plain(static_cast<size_t>(n * rows)), tiled(plain.size());
        ThreadPool pool(2);
        matmul(t.w, x.data(), n, cols, plain.data(), rows, pool);
        matmul(tiled_w, x.data(), n, cols, tiled.data(), rows, pool);
        EXPECT_EQ(0, std::memcmp(plain.data(), tiled.data(), plain.size() * 4))
            << spec.label() << " rows " << rows << " cols " << cols << " n " << n;
        if (rows < 30) continue;
        std::fill(tiled.begin(), tiled.end(), 0.0f);
        matmul_outputs(tiled_w, x.data(), n, cols, tiled.data(), rows, 3, 29);  // starts and ends mid-tile
        for (int64_t r = 0; r < n; ++r)
          EXPECT_EQ(0, std::memcmp(plain.data() + r * rows + 3, tiled.data() + r * rows + 3, 26 * 4))
              << spec.label() << " outputs [3, 29) row " << r;
      }
    }
  }
}

// Every row computed alone is the truth; every other way of computing it must give the same bits.
void check_row_invariance(const Spec& spec, int64_t rows, int64_t cols) {
  const int64_t n = 65, ldx = cols + 3, ldy = rows + 5;
  TestWeight t = make_weight(spec, rows, cols, 3000);
  std::vector<float> x = random_rows(n, ldx, 99);
  ThreadPool p1(1), p2(2), p3(3);
  std::vector<float> alone(static_cast<size_t>(n * ldy), 0.0f);
  for (int64_t r = 0; r < n; ++r) matmul(t.w, x.data() + r * ldx, 1, ldx, alone.data() + r * ldy, ldy, p1);
  auto same = [&](const std::vector<float>& y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      if (std::memcmp(y.data() + r * ldy, alone.data() + r * ldy, rows * 4) != 0) return false;
    return true;
  };
  // Windows of every size 1..16, starting at every offset, so each row takes every position in a window.
  for (int64_t k = 1; k <= 16; ++k)
    for (int64_t start = 0; start < k; ++start) {
      std::vector<float> y(alone.size(), 0.0f);
      for (int64_t r = start; r < n; r += k)
        matmul(t.w, x.data() + r * ldx, std::min(k, n - r), ldx, y.data() + r * ldy, ldy, k % 2 ? p2 : p3);
      EXPECT_TRUE(same(y, start, n)) << spec.label() << " cols " << cols << " window " << k << " start "
                                     << start;
    }
  // Prompts of every size up to 65 in one call, at two starting positions.
  for (int64_t start : {0, 1})
    for (int64_t m = 1; m + start <= n; ++m) {
      std::vector<float> y(alone.size(), 0.0f);
      matmul(t.w, x.data() + start * ldx, m, ldx, y.data() + start * ldy, ldy, p2);
      EXPECT_TRUE(same(y, start, start + m))
          << spec.label() << " cols " << cols << " prompt " << m << " start " << start;
    }
  // Thread counts, and every output computed on its own.
  for (int64_t m : {1, 4, 16, 65}) {
    std::vector<float> y1(alone.size()), y2(alone.size()), y3(alone.size()), ys(alone.size());
    matmul(t.w, x.data(), m, ldx, y1.data(), ldy, p1);
    matmul(t.w, x.data(), m, ldx, y2.data(), ldy, p2);
    matmul(t.w, x.data(), m, ldx, y3.data(), ldy, p3);
    for (int64_t o = 0; o < rows; ++o) matmul_outputs(t.w, x.data(), m, ldx, ys.data(), ldy, o, o + 1);
    EXPECT_TRUE(same(y1, 0, m) && same(y2, 0, m) && same(y3, 0, m) && same(ys, 0, m))
        << spec.label() << " cols " << cols << " m " << m;
  }
}

TEST_P(CpuMatmul, RowsAloneEqualWindowsPromptsThreadsAndSplits) {
  const Spec spec = GetParam();
  const bool affine = spec.enc == MatrixEncoding::Affine;
  // Output steps and the dense tail cut unevenly; 65 rows cross a row block (64 rows at these widths, 16 at
  // 4096 columns); then a single group (or a row shorter than one chunk).
  check_row_invariance(spec, 37, affine ? 640 : 643);
  check_row_invariance(spec, 11, affine ? 4096 : 4099);
  check_row_invariance(spec, 13, affine ? spec.group : 7);
}

TEST_P(CpuMatmul, ThreadCountsAgreeOnALargeMatrix) {
  const Spec spec = GetParam();
  const int64_t rows = 1000, cols = 1024;
  TestWeight t = make_weight(spec, rows, cols, 4000);
  ThreadPool p1(1), p2(2), p3(3);
  for (int64_t n : {1, 5, 70}) {
    std::vector<float> x = random_rows(n, cols, 5);
    std::vector<float> y1(static_cast<size_t>(n * rows)), y2(y1.size()), y3(y1.size());
    matmul(t.w, x.data(), n, cols, y1.data(), rows, p1);
    matmul(t.w, x.data(), n, cols, y2.data(), rows, p2);
    matmul(t.w, x.data(), n, cols, y3.data(), rows, p3);
    EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * 4)) << spec.label() << " n " << n;
    EXPECT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * 4)) << spec.label() << " n " << n;
  }
}

TEST_P(CpuMatmul, GatherRowsEqualsReferenceDequantization) {
  const Spec spec = GetParam();
  const int64_t rows = 9, cols = spec.enc == MatrixEncoding::Affine ? 384 : 45;
  TestWeight t = make_weight(spec, rows, cols, 5000);
  const std::vector<int32_t> ids = {8, 0, 3, 3, 7};
  std::vector<float> out(ids.size() * cols), ref(cols);
  gather_rows(t.w, ids.data(), static_cast<int64_t>(ids.size()), out.data());
  for (size_t k = 0; k < ids.size(); ++k) {
    dequantize_row_reference(t.w, ids[k], ref.data());
    EXPECT_EQ(0, std::memcmp(out.data() + k * cols, ref.data(), cols * 4))
        << spec.label() << " id " << ids[k];
  }
}

INSTANTIATE_TEST_SUITE_P(Encodings, CpuMatmul, ::testing::ValuesIn(all_specs()),
                         [](const ::testing::TestParamInfo<Spec>& info) { return info.param.label(); });

TEST(CpuMatmulErrors, GatherRejectsOutOfRangeIdsNamingTensorAndId) {
  TestWeight t = make_weight({MatrixEncoding::BF16}, 4, 16, 1);
  t.w.name = "model.embed_tokens.weight";
  std::vector<float> out(32);
  for (int32_t bad : {4, -1, 1000}) {
    const int32_t ids[2] = {1, bad};
    try {
      gather_rows(t.w, ids, 2, out.data());
      ADD_FAILURE() << "no error for id " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.embed_tokens.weight"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(CpuMatmulErrors, RejectsBadAffineParameters) {
  TestWeight t = make_weight({MatrixEncoding::Affine, 4, 64, DType::BF16}, 4, 128, 1);
  std::vector<float> x(128), y(4);
  t.w.bits = 7;
  EXPECT_THROW(matmul(t.w, x.data(), 1, 128, y.data(), 4), Error);
  t.w.bits = 4, t.w.group = 48;
  EXPECT_THROW(matmul(t.w, x.data(), 1, 128, y.data(), 4), Error);
  t.w.group = 64;
  EXPECT_THROW(matmul(t.w, x.data(), 2, 100, y.data(), 4), Error);  // ldx < cols
}

}  // namespace
}  // namespace ds
