// The product entry points' launch arguments (launch checks): x rows that would overlap (a row stride under
// the weight's cols with more than one row) refused by every public product that reads several strided rows,
// each naming itself and the stride; the shared memory opt-in's failure (kernel_limits.h); and, on a machine
// with two GPUs or more, the products on every device with device 0's bits (the opt-in is per device).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_products.h"
#include "checks.h"
#include "host_reference.h"
#include "tc_weight.h"

namespace ds::cuda::wxcheck {

namespace {

// `call` throws an ArgumentError that starts with "op: " and names `needle`.
void expect_refused(Tally& tally, const std::string& op, const std::string& needle,
                    const std::function<void()>& call) {
  std::string got = "no exception";
  try {
    call();
  } catch (const ArgumentError& e) {
    got = e.what();
  }
  tally.expect(got.rfind(op + ": ", 0) == 0 && got.find(needle) != std::string::npos,
               "launch: " + op + " refuses 2 x rows with a stride under cols naming it (got: " + got + ")");
}

void expect_taken(Tally& tally, const std::string& what, const std::function<void()>& call) {
  std::string got = "ok";
  try {
    call();
  } catch (const std::exception& e) {
    got = e.what();
  }
  tally.expect(got == "ok", "launch: " + what + " (got: " + got + ")");
}

// Every refusal is thrown before a launch. All pointers are real (zeroed device memory), so that a missing
// refusal would run a small harmless product and fail here, not corrupt the context for later sections.
void check_x_strides(Tally& tally) {
  constexpr int64_t kRows = 64, kCols = 64, kShort = 32;  // kShort: a stride under cols (a multiple of 8)
  DeviceBuffer buf(1 << 20), out(1 << 20), scratch(1 << 20);
  buf.fill_bytes(0);
  auto at = [&](size_t offset) { return static_cast<uint8_t*>(buf.data()) + offset; };
  const AffineWeight aw{reinterpret_cast<const uint32_t*>(at(0)),
                        reinterpret_cast<const uint16_t*>(at(64 << 10)),
                        reinterpret_cast<const uint16_t*>(at(128 << 10)),
                        kRows,
                        kCols,
                        4,
                        32,
                        1};
  TiledWeight tw;
  tw.affine = aw, tw.rows = kRows, tw.cols = kCols;
  const float* x = reinterpret_cast<const float*>(at(256 << 10));
  void* ids = at(512 << 10);  // zeros: expert 0, row 0 (pairs, topk), count 0 (windows: skipped)
  float* y = out.as<float>();
  Stream s;
  const std::string ldx = "ldx must be >= the weight's cols", ld = "x.ld must be >= cols";
  const size_t sb = scratch.bytes();

  // The decode tensor-core products (tc_decode.cu's dispatch, and the folds before they decide to take w).
  expect_refused(tally, "tc_decode_wx", ldx,
                 [&] { tc_decode_wx(tw, x, kShort, 2, y, kRows, scratch.data(), sb, s.get()); });
  expect_refused(tally, "tc_decode_experts", ldx, [&] {
    tc_decode_experts(tw, nullptr, 0, 1, nullptr, x, kShort, 2, y, kRows, scratch.data(), sb, s.get());
  });
  expect_refused(tally, "tc_decode_experts_swiglu", ldx, [&] {
    tc_decode_experts_swiglu(tw, nullptr, 0, 1, nullptr, x, kShort, 2, y, kRows / 2, scratch.data(), sb,
                             s.get());
  });
  expect_refused(tally, "tc_decode_experts_routed", ldx, [&] {
    tc_decode_experts_routed(tw, static_cast<const int32_t*>(ids), 2, -1, x, kShort, y, kRows, nullptr,
                             scratch.data(), sb, s.get());
  });
  // The prompt tensor-core products (tc_products.cu's dispatch).
  expect_refused(tally, "tiled_wx", ldx, [&] { tiled_wx(tw, x, kShort, 2, y, kRows, s.get()); });
  expect_refused(tally, "tiled_wx_experts", ldx,
                 [&] { tiled_wx_experts(tw, nullptr, 0, nullptr, x, kShort, 2, y, kRows, s.get(), 16); });
  expect_refused(tally, "tiled_wx_split_k", ldx,
                 [&] { tiled_wx_split_k(tw, x, kShort, 2, y, kRows, 1, nullptr, s.get()); });
  // The FMA products (wx_products.cu's check_common: x.ld, for any row count).
  const Activations xs{x, ActType::F32, kShort};
  const auto* pairs = static_cast<const ExpertRow*>(ids);
  expect_refused(tally, "affine_wx", ld, [&] { affine_wx(aw, xs, 2, y, kRows, s.get()); });
  expect_refused(tally, "dense_wx", ld, [&] {
    dense_wx(DenseBf16Weight{reinterpret_cast<const uint16_t*>(at(0)), kRows, kCols}, xs, 2, y, kRows,
             s.get());
  });
  expect_refused(tally, "affine_wx_grouped", ld,
                 [&] { affine_wx_grouped(aw, pairs, 2, xs, 2, y, kRows, s.get()); });
  expect_refused(tally, "affine_wx_grouped_swiglu", ld,
                 [&] { affine_wx_grouped_swiglu(aw, pairs, 2, xs, 2, y, kRows / 2, s.get()); });
  MoeCombineArgs c;
  c.weights = y, c.out = y, c.counters = reinterpret_cast<uint32_t*>(at(768 << 10)), c.n_rows = 1, c.K = 2;
  expect_refused(tally, "affine_wx_grouped_combine", ld,
                 [&] { affine_wx_grouped_combine(aw, pairs, 2, xs, 2, y, kRows, c, s.get()); });
  expect_refused(tally, "affine_wx_expert_windows", ld, [&] {
    affine_wx_expert_windows(aw, static_cast<const ExpertWindow*>(ids), 1, nullptr, xs, 2, y, kRows, s.get());
  });

  // The controls: one row never reads a stride (taken), two rows cols apart are taken.
  expect_taken(tally, "tc_decode_wx takes 1 row with a stride under cols",
               [&] { tc_decode_wx(tw, x, kShort, 1, y, kRows, scratch.data(), sb, s.get()); });
  expect_taken(tally, "tc_decode_wx takes 2 rows cols apart",
               [&] { tc_decode_wx(tw, x, kCols, 2, y, kRows, scratch.data(), sb, s.get()); });
  expect_taken(tally, "tiled_wx takes 1 row with a stride under cols",
               [&] { tiled_wx(tw, x, kShort, 1, y, kRows, s.get()); });
  expect_taken(tally, "tiled_wx takes 2 rows cols apart",
               [&] { tiled_wx(tw, x, kCols, 2, y, kRows, s.get()); });
  s.synchronize();
}

// opt_in_dynamic_smem's failure: a CudaError naming the op, no last error left behind, and not remembered
// (a second call fails again rather than passing as done).
void check_opt_in_failure(Tally& tally) {
  for (int attempt = 1; attempt <= 2; ++attempt) {
    std::string got = "no exception";
    try {
      opt_in_dynamic_smem(static_cast<const void*>(nullptr), 64 << 10, "launch: opt-in probe");
    } catch (const CudaError& e) {
      got = e.what();
    }
    tally.expect(got.rfind("launch: opt-in probe: ", 0) == 0,
                 "launch: an opt-in for no kernel throws CudaError naming the op, attempt " +
                     std::to_string(attempt) + " (got: " + got + ")");
    tally.expect(cudaPeekAtLastError() == cudaSuccess, "launch: a failed opt-in leaves no last error");
  }
}

// One device's products: the decode one-row kernel (1 row), small-window kernel (8 rows) and general kernel
// (64 rows), and the prompt tiles (64 rows), each opting in to its shared memory; the same seed on every
// device. The outputs written (1 + 8 + 64 + 64 rows), the rest of y left NaN.
constexpr int64_t kRows = 512, kCols = 2560;
std::vector<float> products_on_current_device() {
  std::mt19937_64 rng(4242);
  TcWeight t = make_weight(kRows, kCols, 4, 32, 1, rng);
  const std::vector<float> xh = random_normal(64 * kCols, 1.0f, rng);
  const DeviceBuffer x = upload(xh);
  Stream s;
  DeviceBuffer y(4 * 64 * kRows * sizeof(float)), scratch(tc_decode_scratch_bytes(kCols, 64));
  y.fill_bytes(0xFF);  // NaN: an unwritten output differs from every device's
  float* yp = y.as<float>();
  tc_decode_wx(t.w, x.as<float>(), kCols, 1, yp, kRows, scratch.data(), scratch.bytes(), s.get());
  tc_decode_wx(t.w, x.as<float>(), kCols, 8, yp + 64 * kRows, kRows, scratch.data(), scratch.bytes(),
               s.get());
  tc_decode_wx(t.w, x.as<float>(), kCols, 64, yp + 2 * 64 * kRows, kRows, scratch.data(), scratch.bytes(),
               s.get());
  tiled_wx(t.w, x.as<float>(), kCols, 64, yp + 3 * 64 * kRows, kRows, s.get());
  s.synchronize();
  return download<float>(y, 4 * 64 * kRows);
}

void check_devices(Tally& tally) {
  int n = 0, first = 0;
  check(cudaGetDeviceCount(&n), "launch: cudaGetDeviceCount");
  check(cudaGetDevice(&first), "launch: cudaGetDevice");
  if (n < 2) {
    std::printf("launch: 1 device, the per-device opt-in's check needs two (not run)\n");
    return;
  }
  std::vector<float> base;
  try {
    for (int d = 0; d < n; ++d) {
      check(cudaSetDevice(d), "launch: cudaSetDevice");
      const std::vector<float> y = products_on_current_device();
      if (d == 0) {
        base = y;
        size_t finite = 0;
        for (const float v : y) finite += std::isfinite(v) ? 1 : 0;
        tally.expect(
            finite == (1 + 8 + 64 + 64) * kRows,
            "launch: device 0's products wrote every output, finite (" + std::to_string(finite) + " finite)");
        continue;
      }
      tally.expect(y.size() == base.size() && std::memcmp(y.data(), base.data(), y.size() * 4) == 0,
                   "launch: device " + std::to_string(d) +
                       ": decode (1, 8, 64 rows) and tiled (64 rows) products == device 0's bits");
    }
  } catch (...) {
    cudaSetDevice(first);
    throw;
  }
  check(cudaSetDevice(first), "launch: cudaSetDevice");
  std::printf("launch: products on %d devices, each opting in on its own\n", n);
}

}  // namespace

void run_launch_checks(Tally& tally) {
  check_x_strides(tally);
  check_opt_in_failure(tally);
  check_devices(tally);
}

}  // namespace ds::cuda::wxcheck
