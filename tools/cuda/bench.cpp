// Timings of the CUDA weight products on the Flash Next shapes (flashnext-large-config.json): CUDA events,
// warm-up, median of many; weights rotate over copies that together are several times the 60 MB L2.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/wx_products.h"
#include "checks.h"
#include "host_reference.h"

namespace ds::cuda::wxcheck {
namespace {

constexpr double kCopyCeilingGBs = 4300.0;  // device-to-device copy measured on the H200 (read + write)
constexpr size_t kRotateBytes = size_t(256) << 20;  // > 4x the 60 MB L2
constexpr int kWindows[] = {1, 4, 8, 16};

struct Shape {
  const char* name;
  int64_t rows, cols;
};
// hidden 2560; experts 640 wide; attention 24 heads x 256 (q with its gate), 2 kv heads; DeltaNet 16 key
// heads and 48 value heads of 128 (q,k,v,z fused); vocabulary 248,320.
const Shape kShapes[] = {{"expert gate|up", 640, 2560}, {"expert down", 2560, 640},
                         {"attn q+gate", 12288, 2560},  {"attn k|v", 512, 2560},
                         {"attn o", 2560, 6144},        {"deltanet qkvz", 16384, 2560},
                         {"deltanet out", 2560, 6144},  {"lm_head", 248320, 2560}};

struct Format {
  const char* name;
  int bits, group;  // bits 16: dense bf16
};
const Format kFormats[] = {{"4-bit g32", 4, 32}, {"6-bit g64", 6, 64}, {"bf16", 16, 0}};

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

struct Layout {
  size_t codes, scales, total;  // byte sizes of one copy (scales and biases are the same size)
};
Layout layout_of(const Shape& s, const Format& f) {
  if (f.bits == 16) return {size_t(s.rows * s.cols * 2), 0, align256(s.rows * s.cols * 2)};
  const size_t codes = size_t(s.rows * s.cols / 32 * f.bits * 4);
  const size_t scales = size_t(s.rows * (s.cols / f.group) * 2);
  return {codes, scales, align256(codes) + 2 * align256(scales)};
}

// Fills device memory with random bits (weights' bit patterns do not change a kernel's speed; x is sane).
void fill_random(DeviceBuffer& b, uint64_t seed) {
  std::vector<uint64_t> host(size_t(64) << 17);  // 64 MiB
  std::mt19937_64 rng(seed);
  for (auto& v : host) v = rng();
  const size_t chunk = host.size() * 8;
  for (size_t off = 0; off < b.bytes(); off += chunk)
    check(cudaMemcpy(static_cast<char*>(b.data()) + off, host.data(), std::min(chunk, b.bytes() - off),
                     cudaMemcpyHostToDevice),
          "cudaMemcpy (bench fill)");
  // cudaMemcpy from pageable memory may return before its DMA lands, and the benches' kernels run on
  // non-blocking streams that never wait for the legacy stream (DeviceBuffer::upload waits the same way).
  check(cudaStreamSynchronize(nullptr), "cudaMemcpy (bench fill)");
}

double copy_ceiling_gbs(DeviceBuffer& a, const Stream& stream) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer b(bytes);
  auto launch = [&](int) {
    check(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()),
          "cudaMemcpyAsync");
  };
  const double ms = median_ms(launch, 1, 10, stream);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

}  // namespace

void run_bench(int reps, const std::string& only) {
  Stream stream;
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("\ndevice: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);

  size_t arena_bytes = 0;
  for (const Shape& s : kShapes)
    for (const Format& f : kFormats) {
      const Layout l = layout_of(s, f);
      arena_bytes = std::max(arena_bytes, std::max<size_t>(1, kRotateBytes / l.total + 1) * l.total);
    }
  DeviceBuffer arena(arena_bytes);
  fill_random(arena, 1);
  std::printf("copy ceiling (1 GiB device-to-device, read + write): %.0f GB/s\n",
              copy_ceiling_gbs(arena, stream));

  // Activations: 16 rows of bf16 x with ld 6144, values ~N(0,1).
  std::mt19937_64 rng(7);
  const int64_t ld = 6144;
  const std::vector<uint16_t> xh = random_bf16(kMaxWindowRows * ld, 1.0f, rng);
  DeviceBuffer x(xh.size() * 2);
  x.upload(xh.data(), x.bytes());
  DeviceBuffer y(size_t(kMaxWindowRows) * 248320 * 4);
  const Activations xv{x.data(), ActType::BF16, ld};

  std::printf("\n%-15s %-10s %8s", "shape", "format", "MB");
  for (int w : kWindows) std::printf(" | R=%-2d us   GB/s   %%", w);
  std::printf("\n");
  for (const Shape& s : kShapes) {
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    for (const Format& f : kFormats) {
      const Layout l = layout_of(s, f);
      const int n_copies = int(std::max<size_t>(1, kRotateBytes / l.total + 1));
      const size_t weight_bytes = l.codes + 2 * l.scales;
      std::printf("%-15s %-10s %8.2f", s.name, f.name, weight_bytes / 1e6);
      for (int w : kWindows) {
        auto launch = [&](int copy) {
          char* base = arena.as<char>() + size_t(copy) * l.total;
          if (f.bits == 16) {
            dense_wx({reinterpret_cast<uint16_t*>(base), s.rows, s.cols}, xv, w, y.as<float>(), s.rows,
                     stream.get());
          } else {
            const AffineWeight aw{reinterpret_cast<uint32_t*>(base),
                                  reinterpret_cast<uint16_t*>(base + align256(l.codes)),
                                  reinterpret_cast<uint16_t*>(base + align256(l.codes) + align256(l.scales)),
                                  s.rows,
                                  s.cols,
                                  f.bits,
                                  f.group,
                                  1};
            affine_wx(aw, xv, w, y.as<float>(), s.rows, stream.get());
          }
        };
        const double ms = median_ms(launch, n_copies, reps, stream);
        const double bytes = double(weight_bytes) + double(w) * s.cols * 2 + double(w) * s.rows * 4;
        const double gbs = bytes / (ms * 1e-3) / 1e9;
        std::printf(" | %7.1f %6.0f %3.0f", ms * 1e3, gbs, 100.0 * gbs / kCopyCeilingGBs);
      }
      std::printf("\n");
    }
  }

  // Grouped expert products as one decode token uses them: 10 of 512 experts, one row each, in one launch.
  if (!only.empty()) return;
  std::printf("\ngrouped: top-10 of 512 experts, 1 row each, one launch (x bf16)\n");
  for (const Format& f : kFormats) {
    if (f.bits == 16) continue;
    for (const Shape& s : {kShapes[0], kShapes[1]}) {
      const Layout l = layout_of(s, f);
      const int64_t n_experts = 512;
      DeviceBuffer codes(l.codes * n_experts), scales(l.scales * n_experts), biases(l.scales * n_experts);
      fill_random(codes, 2);
      fill_random(scales, 3);
      fill_random(biases, 4);
      const int lists = 64;
      const DeviceBuffer d_pairs = upload(random_expert_pairs(int(n_experts), lists, 10, rng));
      const AffineWeight aw{codes.as<uint32_t>(),
                            scales.as<uint16_t>(),
                            biases.as<uint16_t>(),
                            s.rows,
                            s.cols,
                            f.bits,
                            f.group,
                            n_experts};
      auto launch = [&](int k) {
        affine_wx_grouped(aw, d_pairs.as<ExpertRow>() + 10 * k, 10, xv, 1, y.as<float>(), s.rows,
                          stream.get());
      };
      const double ms = median_ms(launch, lists, reps, stream);
      const double bytes = 10.0 * (l.codes + 2 * l.scales);
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf("%-15s %-10s %8.2f MB  %7.1f us %6.0f GB/s %3.0f%%\n", s.name, f.name, bytes / 1e6,
                  ms * 1e3, gbs, 100.0 * gbs / kCopyCeilingGBs);
    }
  }
}

}  // namespace ds::cuda::wxcheck
