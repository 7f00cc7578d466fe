// One-row products (R = 1, x f32 as the model runs them) on each RowKernel, the round's shapes at 4-bit g32
// and 6-bit g64: the before/after table of docs/receipts/cuda-kernels.md "One-row kernel v4". Weights rotate
// over copies that together are several times the 60 MB L2.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/wx_products.h"
#include "backend/cuda/wx_row_choice.h"
#include "checks.h"
#include "host_reference.h"

namespace ds::cuda::wxcheck {
namespace {

constexpr double kRoofGBs = 4300.0;
constexpr size_t kRotateBytes = size_t(256) << 20;

struct Shape {
  const char* name;
  int64_t rows, cols;
};
// The batch-1 round's one-row products (joint matrices as one; one expert of each grouped product).
const Shape kShapes[] = {
    {"hc up", 10240, 320},          {"router|shared gate", 1152, 2560}, {"deltanet qkv|z|b|a", 16480, 2560},
    {"deltanet out", 2560, 6144},   {"attention proj", 13952, 2560},    {"attention out", 2560, 6144},
    {"expert gate|up", 1280, 2560}, {"expert down", 2560, 640},         {"lm_head", 248320, 2560}};
const int kFormats[][2] = {{4, 32}, {6, 64}};
const RowKernel kKernels[] = {RowKernel::Lockstep, RowKernel::LockstepExact, RowKernel::Paired,
                              RowKernel::PairedStaged};

// The grouped expert products of a decode step (11 pairs: top-10 and the shared expert, 512 experts, one
// row), x f32, lockstep against paired (every shape) and the default with its rule.
void run_grouped_row_bench(int reps, std::mt19937_64& rng, DeviceBuffer& x, DeviceBuffer& y,
                           const Stream& stream) {
  const RowKernel chosen = one_row_kernel();
  const int64_t min_tasks = paired_min_tasks();
  std::printf("\ngrouped, 11 of 512 experts, one row each (us): lockstep, paired, rule\n");
  const Shape shapes[] = {{"expert gate|up", 1280, 2560}, {"expert down", 2560, 640}};
  for (const Shape& s : shapes) {
    for (const auto& f : kFormats) {
      const int bits = f[0], group = f[1];
      const int64_t n_experts = 512;
      const size_t codes = size_t(s.rows * s.cols / 32 * bits * 4),
                   scales = size_t(s.rows * (s.cols / group) * 2);
      DeviceBuffer d_codes(codes * n_experts), d_scales(scales * n_experts), d_biases(scales * n_experts);
      std::vector<uint32_t> fill(d_codes.bytes() / 4);
      for (auto& v : fill) v = static_cast<uint32_t>(rng());
      d_codes.upload(fill.data(), d_codes.bytes());
      std::vector<uint16_t> sb(d_scales.bytes() / 2);
      for (auto& v : sb) v = uint16_t(0x3C00 | (rng() & 0x807F));
      d_scales.upload(sb.data(), d_scales.bytes());
      d_biases.upload(sb.data(), d_biases.bytes());
      const int lists = 64;
      const DeviceBuffer d_pairs = upload(random_expert_pairs(int(n_experts), lists, 11, rng));
      const AffineWeight w{d_codes.as<uint32_t>(),
                           d_scales.as<uint16_t>(),
                           d_biases.as<uint16_t>(),
                           s.rows,
                           s.cols,
                           bits,
                           group,
                           n_experts};
      std::printf("%-19s %d-bit g%-4d %8.2f MB", s.name, bits, group, 11.0 * (codes + 2 * scales) / 1e6);
      for (int v = 0; v < 3; ++v) {
        set_one_row_kernel(v == 0 ? RowKernel::Lockstep : v == 1 ? RowKernel::PairedStaged : chosen);
        set_paired_min_tasks(v < 2 ? 0 : min_tasks);
        auto launch = [&](int k) {
          affine_wx_grouped(w, d_pairs.as<ExpertRow>() + 11 * k, 11,
                            Activations{x.data(), ActType::F32, s.cols}, 1, y.as<float>(), s.rows,
                            stream.get());
        };
        std::printf(" %9.2f", median_us(launch, lists, reps, stream));
      }
      std::printf("\n");
    }
  }
  set_one_row_kernel(chosen);
  set_paired_min_tasks(min_tasks);
}

}  // namespace

void run_row_bench(int reps, const std::string& only) {
  Stream stream;
  const RowKernel chosen = one_row_kernel();
  const int64_t min_tasks = paired_min_tasks();
  std::mt19937_64 rng(11);
  const std::vector<float> xh = random_normal(6144, 1.0f, rng);
  DeviceBuffer x(xh.size() * 4), y(size_t(248320) * 4);
  x.upload(xh.data(), x.bytes());
  std::printf(
      "\none-row products, x f32 (us: each kernel on every shape, then the default with its shape rule; "
      "weight GB/s and %% of 4.3 TB/s of the rule; x = lockstep / rule)\n");
  std::printf("%-19s %-10s %8s", "shape", "format", "MB");
  for (RowKernel k : kKernels) std::printf(" %15s", one_row_kernel_name(k));
  std::printf(" %9s    GB/s    %%     x\n", "rule");
  for (const Shape& s : kShapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    for (const auto& f : kFormats) {
      const int bits = f[0], group = f[1];
      const size_t codes = size_t(s.rows * s.cols / 32 * bits * 4),
                   scales = size_t(s.rows * (s.cols / group) * 2);
      const size_t one = (codes + 255) / 256 * 256 + 2 * ((scales + 255) / 256 * 256);
      const int n_copies = int(std::max<size_t>(1, kRotateBytes / one + 1));
      DeviceBuffer arena(one * n_copies);
      std::vector<uint32_t> fill(arena.bytes() / 4);
      for (auto& v : fill) v = static_cast<uint32_t>(rng());
      // Scales and biases as bf16 of modest size (0x3C00: 2^-7 .. 2^-6), so no copy holds NaN or Inf.
      for (int c = 0; c < n_copies; ++c) {
        uint16_t* sb = reinterpret_cast<uint16_t*>(fill.data()) + (c * one + (codes + 255) / 256 * 256) / 2;
        const size_t n_sb = (scales + 255) / 256 * 256;  // scales then biases: 2 x n_sb bytes
        for (size_t i = 0; i < n_sb; ++i) sb[i] = uint16_t(0x3C00 | (sb[i] & 0x807F));
      }
      arena.upload(fill.data(), arena.bytes());
      const double mb = (codes + 2 * scales) / 1e6;
      std::printf("%-19s %d-bit g%-4d %8.2f", s.name, bits, group, mb);
      double first = 0, last = 0;
      for (int v = 0; v <= 4; ++v) {  // each kernel on every shape, then the default with the shape rule
        set_one_row_kernel(v < 4 ? kKernels[v] : chosen);
        set_paired_min_tasks(v < 4 ? 0 : min_tasks);
        auto launch = [&](int c) {
          const char* base = arena.as<char>() + size_t(c) * one;
          const AffineWeight w{reinterpret_cast<const uint32_t*>(base),
                               reinterpret_cast<const uint16_t*>(base + (codes + 255) / 256 * 256),
                               reinterpret_cast<const uint16_t*>(base + (codes + 255) / 256 * 256 +
                                                                 (scales + 255) / 256 * 256),
                               s.rows,
                               s.cols,
                               bits,
                               group,
                               1};
          affine_wx(w, Activations{x.data(), ActType::F32, s.cols}, 1, y.as<float>(), s.rows, stream.get());
        };
        last = median_us(launch, n_copies, reps, stream);
        if (first == 0) first = last;
        std::printf(v < 4 ? " %15.2f" : " %9.2f", last);
      }
      const double gbs = mb * 1e6 / (last * 1e-6) / 1e9;
      std::printf(" %7.0f %4.0f %5.2f\n", gbs, 100.0 * gbs / kRoofGBs, first / last);
    }
  }
  set_one_row_kernel(chosen);
  set_paired_min_tasks(min_tasks);
  run_grouped_row_bench(reps, rng, x, y, stream);
}

}  // namespace ds::cuda::wxcheck
