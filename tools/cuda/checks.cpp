// Correctness of the CUDA weight products against the float64 reference (docs/cuda-products.md).
#include "checks.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/wx_products.h"
#include "backend/cuda/wx_row_choice.h"
#include "host_reference.h"
#include "scoped_env.h"

namespace ds::cuda::wxcheck {

void Tally::expect(bool ok, const std::string& what) {
  if (ok) {
    ++passed;
  } else {
    ++failed;
    if (failures.size() < 50) failures.push_back(what);
    std::printf("FAIL %s\n", what.c_str());
  }
}

namespace {

constexpr int kRows = kMaxWindowRows;  // x holds 16 rows; windows take slices of it

template <class T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  b.upload(v.data(), b.bytes());
  return b;
}

// One HostAffine's device copy and the kernels' view of it.
struct DeviceAffine {
  DeviceBuffer codes, scales, biases;
  AffineWeight w;
  explicit DeviceAffine(const HostAffine& h)
      : codes(to_device(h.codes)),
        scales(to_device(h.scales)),
        biases(to_device(h.biases)),
        w{codes.as<uint32_t>(),
          scales.as<uint16_t>(),
          biases.as<uint16_t>(),
          h.rows,
          h.cols,
          h.bits,
          h.group,
          1} {}
};

// x rows on the host (both encodings, and the exact values as double) and on the device.
struct XRows {
  int64_t ld = 0;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  std::vector<double> exact_f32, exact_bf16;
  DeviceBuffer d_f32, d_bf16;

  XRows(int64_t cols, std::mt19937_64& rng) : ld((cols + 7) / 8 * 8 + 8) {  // padded ld: rows are not packed
    std::normal_distribution<float> d(0.0f, 1.0f);
    f32.assign(kRows * ld, 0.0f);
    bf16.assign(kRows * ld, 0);
    exact_f32.assign(kRows * ld, 0.0);
    exact_bf16.assign(kRows * ld, 0.0);
    for (int64_t i = 0; i < kRows * ld; ++i) {
      f32[i] = d(rng);
      bf16[i] = float_to_bf16(d(rng));
      exact_f32[i] = f32[i];
      exact_bf16[i] = bf16_to_double(bf16[i]);
    }
    d_f32 = to_device(f32);
    d_bf16 = to_device(bf16);
  }
  Activations view(ActType t, int row0) const {
    if (t == ActType::F32) return {d_f32.as<float>() + row0 * ld, t, ld};
    return {d_bf16.as<uint16_t>() + row0 * ld, t, ld};
  }
  const double* exact(ActType t, int row) const {
    return (t == ActType::F32 ? exact_f32.data() : exact_bf16.data()) + row * ld;
  }
};

const char* act_name(ActType t) {
  return t == ActType::F32 ? "f32" : "bf16";
}

// Runs `product(x_view, n_rows, y)` into a poisoned y and returns the host copy ([n_rows, n_out], ldy = n_out
// + 3).
template <class Product>
std::vector<float> run_product(const Product& product, const XRows& x, ActType t, int row0, int n_rows,
                               int64_t n_out, const Stream& stream) {
  const int64_t ldy = n_out + 3;
  DeviceBuffer y(n_rows * ldy * sizeof(float));
  y.fill_bytes(0xFF);  // NaN everywhere: an unwritten output fails every comparison
  product(x.view(t, row0), n_rows, y.as<float>(), ldy);
  stream.synchronize();
  std::vector<float> h(n_rows * ldy);
  y.download(h.data(), h.size() * sizeof(float));
  return h;
}

// Checks y ([16 rows] from one window of 16) against the reference; returns max err/bound, and whether the
// negative-control reference exceeded the bound somewhere.
struct Accuracy {
  double worst_ratio = 0.0;
  double control_ratio = 0.0;  // largest err/bound against the 1%-off reference
  bool all_finite = true;
};

Accuracy accuracy(const std::vector<float>& y, int64_t ldy, const RefWeight& w, const XRows& x, ActType t,
                  double factor) {
  Accuracy a;
  RefWeight off = w;
  off.scale_factor = 1.01;
  for (int r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < w.rows; ++o) {
      const double got = y[r * ldy + o];
      if (!std::isfinite(got)) a.all_finite = false;
      const RefValue ref = reference(w, x.exact(t, r), o);
      const RefValue neg = reference(off, x.exact(t, r), o);
      const double bound = factor * ref.abs_sum + 1e-300;
      a.worst_ratio = std::max(a.worst_ratio, std::fabs(got - ref.y) / bound);
      a.control_ratio = std::max(a.control_ratio, std::fabs(got - neg.y) / bound);
    }
  }
  return a;
}

// Rows alone == the same rows inside every window of 1..16 rows at every offset, bit for bit.
template <class Product>
bool windows_match(const Product& product, const XRows& x, ActType t, int64_t n_out, const Stream& stream) {
  const int64_t ldy = n_out + 3;
  std::vector<std::vector<float>> alone(kRows);
  for (int r = 0; r < kRows; ++r) alone[r] = run_product(product, x, t, r, 1, n_out, stream);
  for (int n = 1; n <= kRows; ++n) {
    for (int row0 = 0; row0 + n <= kRows; ++row0) {
      const std::vector<float> y = run_product(product, x, t, row0, n, n_out, stream);
      for (int r = 0; r < n; ++r)
        if (std::memcmp(&y[r * ldy], alone[row0 + r].data(), n_out * sizeof(float)) != 0) return false;
    }
  }
  return true;
}

void report(Tally& tally, const std::string& name, const Accuracy& a, bool windows_ok, double& worst_seen,
            double& weakest_control) {
  tally.expect(a.all_finite, name + ": every output written and finite");
  tally.expect(a.worst_ratio <= 1.0,
               name + ": within bound (err/bound " + std::to_string(a.worst_ratio) + ")");
  tally.expect(a.control_ratio > 1.0,
               name + ": negative control exceeds bound (" + std::to_string(a.control_ratio) + ")");
  tally.expect(windows_ok, name + ": rows alone == rows in windows 1..16");
  worst_seen = std::max(worst_seen, a.worst_ratio);
  weakest_control = std::min(weakest_control, a.control_ratio);
}

void check_affine(Tally& tally, bool quick, std::mt19937_64& rng, const Stream& stream) {
  double worst = 0.0, weakest_control = 1e300;
  // Odd output counts; unit counts not a multiple of 32; one pass, two passes, and column slices (>= 64
  // units).
  const int64_t shapes[][2] = {{37, 640}, {70, 1792}, {40, 4736}};
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (const auto& shape : shapes) {
        if (quick && shape[0] == 70) continue;
        const HostAffine h = random_affine(shape[0], shape[1], bits, group, rng);
        const DeviceAffine device(h);
        const AffineWeight& w = device.w;
        const RefWeight ref{&h, nullptr, h.rows, h.cols, 1.0};
        const XRows x(h.cols, rng);
        for (ActType t : {ActType::F32, ActType::BF16}) {
          auto product = [&](const Activations& xv, int n, float* y, int64_t ldy) {
            affine_wx(w, xv, n, y, ldy, stream.get());
          };
          const std::string name = "affine " + std::to_string(bits) + "-bit g" + std::to_string(group) + " " +
                                   std::to_string(h.rows) + "x" + std::to_string(h.cols) + " x " +
                                   act_name(t);
          const std::vector<float> y = run_product(product, x, t, 0, kRows, h.rows, stream);
          const Accuracy a = accuracy(y, h.rows + 3, ref, x, t, bound_factor(h.cols, 32));
          report(tally, name, a, windows_match(product, x, t, h.rows, stream), worst, weakest_control);
        }
      }
    }
  }
  std::printf("affine: worst err/bound %.3g, weakest negative control err/bound %.3g\n", worst,
              weakest_control);
}

void check_dense(Tally& tally, std::mt19937_64& rng, const Stream& stream) {
  double worst = 0.0, weakest_control = 1e300;
  const int64_t shapes[][2] = {{37, 256}, {37, 480}, {70, 2560 + 8}};
  for (const auto& shape : shapes) {
    const std::vector<uint16_t> values = random_bf16(shape[0] * shape[1], 0.05f, rng);
    DeviceBuffer d = to_device(values);
    const DenseBf16Weight w{d.as<uint16_t>(), shape[0], shape[1]};
    const RefWeight ref{nullptr, &values, shape[0], shape[1], 1.0};
    const XRows x(shape[1], rng);
    for (ActType t : {ActType::F32, ActType::BF16}) {
      auto product = [&](const Activations& xv, int n, float* y, int64_t ldy) {
        dense_wx(w, xv, n, y, ldy, stream.get());
      };
      const std::string name =
          "dense bf16 " + std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + " x " + act_name(t);
      const std::vector<float> y = run_product(product, x, t, 0, kRows, shape[0], stream);
      const Accuracy a = accuracy(y, shape[0] + 3, ref, x, t, bound_factor(shape[1], 8));
      report(tally, name, a, windows_match(product, x, t, shape[0], stream), worst, weakest_control);
    }
  }
  std::printf("dense: worst err/bound %.3g, weakest negative control err/bound %.3g\n", worst,
              weakest_control);
}

// Grouped == each pair's expert applied to its row alone (bit for bit); a bad pair gives NaN, not a crash.
void check_grouped(Tally& tally, std::mt19937_64& rng, const Stream& stream) {
  const int64_t n_experts = 6, rows = 70, cols = 2560;  // 80 units: column slices
  for (int bits : {3, 4, 6}) {
    const HostAffine h = random_affine(n_experts * rows, cols, bits, 64, rng);
    DeviceBuffer codes = to_device(h.codes), scales = to_device(h.scales), biases = to_device(h.biases);
    const AffineWeight all{
        codes.as<uint32_t>(), scales.as<uint16_t>(), biases.as<uint16_t>(), rows, cols, bits, 64, n_experts};
    const XRows x(cols, rng);
    std::vector<ExpertRow> pairs;
    for (int p = 0; p < 23; ++p) pairs.push_back({int32_t(rng() % n_experts), int32_t(rng() % kRows)});
    pairs.push_back({int32_t(n_experts), 0});  // out of range: NaN outputs
    DeviceBuffer d_pairs = to_device(pairs);
    for (ActType t : {ActType::F32, ActType::BF16}) {
      const int64_t ldy = rows + 1;
      DeviceBuffer y(pairs.size() * ldy * sizeof(float));
      y.fill_bytes(0x7F);
      affine_wx_grouped(all, d_pairs.as<ExpertRow>(), int(pairs.size()), x.view(t, 0), kRows, y.as<float>(),
                        ldy, stream.get());
      stream.synchronize();
      std::vector<float> got(pairs.size() * ldy);
      y.download(got.data(), got.size() * sizeof(float));
      bool same = true;
      for (size_t p = 0; p + 1 < pairs.size(); ++p) {
        AffineWeight one = all;
        one.n_experts = 1;
        one.codes += pairs[p].expert * rows * h.words_per_row();
        one.scales += pairs[p].expert * rows * h.groups_per_row();
        one.biases += pairs[p].expert * rows * h.groups_per_row();
        DeviceBuffer y1(rows * sizeof(float));
        affine_wx(one, x.view(t, pairs[p].row), 1, y1.as<float>(), rows, stream.get());
        stream.synchronize();
        std::vector<float> alone(rows);
        y1.download(alone.data(), rows * sizeof(float));
        same = same && std::memcmp(alone.data(), &got[p * ldy], rows * sizeof(float)) == 0;
      }
      bool nan_row = true;
      for (int64_t o = 0; o < rows; ++o) nan_row = nan_row && std::isnan(got[(pairs.size() - 1) * ldy + o]);
      // pairs_ready (the pairs and first weights read before the programmatic wait): the same bits.
      DeviceBuffer y2(pairs.size() * ldy * sizeof(float));
      y2.fill_bytes(0x7F);
      affine_wx_grouped(all, d_pairs.as<ExpertRow>(), int(pairs.size()), x.view(t, 0), kRows, y2.as<float>(),
                        ldy, stream.get(), /*pairs_ready=*/true);
      stream.synchronize();
      std::vector<float> early(pairs.size() * ldy);
      y2.download(early.data(), early.size() * sizeof(float));
      const std::string name = "grouped " + std::to_string(bits) + "-bit x " + act_name(t);
      tally.expect(std::memcmp(early.data(), got.data(), got.size() * sizeof(float)) == 0,
                   name + ": pairs read before the programmatic wait == after (bits)");
      tally.expect(same, name + ": each pair == its expert on its row alone");
      tally.expect(nan_row, name + ": an out-of-range pair gives NaN outputs");
    }
  }
}

// Every one-row kernel == the lockstep kernel of v3 (folded scales: main before fmarow), bit for bit: 80-unit
// rows on one slice (over 1024 rows) and on four, unit counts not a multiple of 16, a row too wide to stage.
void check_row_kernels(Tally& tally, bool quick, std::mt19937_64& rng, const Stream& stream) {
  const RowKernel chosen = one_row_kernel();
  const int64_t shapes[][2] = {{37, 640}, {70, 1792}, {40, 4736}, {1100, 2560}, {300, 2560}, {24, 12288}};
  auto run_all = [&](auto&& product, int64_t rows, const XRows& x, ActType t) {
    std::vector<std::vector<float>> y;
    for (RowKernel k :
         {RowKernel::Lockstep, RowKernel::LockstepExact, RowKernel::Paired, RowKernel::PairedStaged}) {
      set_one_row_kernel(k);
      y.push_back(run_product(product, x, t, 3, 1, rows, stream));
    }
    // The paired-staged kernel staging x with its loads grouped (row_loads_first, sass13) and not: the same
    // bits (the loop above ran the default form). DS_CUDA_LOADS_FIRST would override both settings, so it is
    // unset here and restored after.
    set_one_row_kernel(RowKernel::PairedStaged);
    {
      const ScopedEnv loads_first("DS_CUDA_LOADS_FIRST");
      loads_first.unset();
      for (bool grouped : {true, false}) {
        set_row_loads_first(grouped);
        y.push_back(run_product(product, x, t, 3, 1, rows, stream));
      }
    }
    set_row_loads_first(kDefaultRowLoadsFirst);
    set_one_row_kernel(chosen);
    bool same = true;
    for (size_t k = 1; k < y.size(); ++k) same = same && std::memcmp(y[0].data(), y[k].data(), rows * 4) == 0;
    return same;
  };
  int n = 0, same = 0;
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (const auto& shape : shapes) {
        if (shape[1] == 12288 && (bits != 4 || group != 64)) continue;
        if (quick && group == 128 && shape[0] == 1100) continue;
        const HostAffine h = random_affine(shape[0], shape[1], bits, group, rng);
        const DeviceAffine device(h);
        const AffineWeight& w = device.w;
        const XRows x(h.cols, rng);
        for (ActType t : {ActType::F32, ActType::BF16}) {
          auto product = [&](const Activations& xv, int nr, float* y, int64_t ldy) {
            affine_wx(w, xv, nr, y, ldy, stream.get());
          };
          const bool ok = run_all(product, h.rows, x, t);
          ++n, same += ok;
          tally.expect(ok, "one-row kernels == lockstep: affine " + std::to_string(bits) + "-bit g" +
                               std::to_string(group) + " " + std::to_string(h.rows) + "x" +
                               std::to_string(h.cols) + " x " + act_name(t));
        }
      }
    }
  }
  for (const auto& shape : shapes) {
    const std::vector<uint16_t> values = random_bf16(shape[0] * shape[1], 0.05f, rng);
    DeviceBuffer d = to_device(values);
    const DenseBf16Weight w{d.as<uint16_t>(), shape[0], shape[1]};
    const XRows x(shape[1], rng);
    for (ActType t : {ActType::F32, ActType::BF16}) {
      auto product = [&](const Activations& xv, int nr, float* y, int64_t ldy) {
        dense_wx(w, xv, nr, y, ldy, stream.get());
      };
      const bool ok = run_all(product, shape[0], x, t);
      ++n, same += ok;
      tally.expect(ok, "one-row kernels == lockstep: dense " + std::to_string(shape[0]) + "x" +
                           std::to_string(shape[1]) + " x " + act_name(t));
    }
  }
  std::printf(
      "one-row kernels (lockstep-exact, paired, paired-staged, paired-staged with grouped staging loads) == "
      "lockstep: %d of %d products\n",
      same, n);
}

template <class Fn>
void expect_argument_error(Tally& tally, const std::string& name, const std::string& needle, Fn&& fn) {
  try {
    fn();
    tally.expect(false, name + ": expected an ArgumentError");
  } catch (const ArgumentError& e) {
    tally.expect(std::string(e.what()).find(needle) != std::string::npos,
                 name + ": message names " + needle + " (got: " + e.what() + ")");
  }
}

void check_arguments(Tally& tally, const Stream& stream) {
  DeviceBuffer buf(1 << 20), out(1 << 16);
  const AffineWeight good{buf.as<uint32_t>(), buf.as<uint16_t>(), buf.as<uint16_t>(), 8, 128, 4, 64, 1};
  const Activations x{buf.data(), ActType::F32, 128};
  auto run = [&](AffineWeight w, Activations xv, int n) {
    affine_wx(w, xv, n, out.as<float>(), 8, stream.get());
  };
  AffineWeight bad = good;
  bad.bits = 7;
  expect_argument_error(tally, "bits 7", "bits", [&] { run(bad, x, 1); });
  bad = good;
  bad.group = 48;
  expect_argument_error(tally, "group 48", "group", [&] { run(bad, x, 1); });
  bad = good;
  bad.cols = 96;
  expect_argument_error(tally, "cols 96 with group 64", "cols", [&] { run(bad, x, 1); });
  expect_argument_error(tally, "17 rows", "n_rows", [&] { run(good, x, 17); });
  bad = good;
  bad.codes += 1;
  expect_argument_error(tally, "misaligned codes", "codes", [&] { run(bad, x, 1); });
  bad = good;
  bad.rows = int64_t{1} << 28;  // 2^28 rows x 16 words: the 32-bit offsets would wrap
  bad.bits = 8;
  expect_argument_error(tally, "2^32 code words", "2^32", [&] { run(bad, x, 1); });
  bad = good;
  bad.n_experts = 2;
  expect_argument_error(tally, "affine_wx with 2 experts", "n_experts", [&] { run(bad, x, 1); });
  expect_argument_error(tally, "ld 100", "x.ld", [&] {
    run(good, Activations{buf.data(), ActType::F32, 100}, 1);
  });
  expect_argument_error(tally, "dense cols 12", "cols", [&] {
    dense_wx(DenseBf16Weight{buf.as<uint16_t>(), 8, 12}, x, 1, out.as<float>(), 8, stream.get());
  });
  // A CUDA failure surfaces as CudaError naming the call.
  try {
    DeviceBuffer huge(size_t(1) << 50);
    tally.expect(false, "1 PiB cudaMalloc: expected a CudaError");
  } catch (const CudaError& e) {
    cudaGetLastError();  // the failed allocation is also the thread's last error: clear it for later launches
    tally.expect(std::string(e.what()).find("cudaMalloc") != std::string::npos,
                 std::string("CudaError names cudaMalloc (got: ") + e.what() + ")");
  }
}

}  // namespace

void run_checks(Tally& tally, bool quick) {
  std::mt19937_64 rng(20261130);
  Stream stream;
  check_arguments(tally, stream);
  check_affine(tally, quick, rng, stream);
  check_row_kernels(tally, quick, rng, stream);
  check_dense(tally, rng, stream);
  check_grouped(tally, rng, stream);
}

}  // namespace ds::cuda::wxcheck
