#include "core/host_memory.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace ds {

uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

namespace {

// XOR of every 64-bit word: the loads cannot be elided and the ALU work hides under the memory stall.
uint64_t xor_words(const uint64_t* p, int64_t n) {
#if defined(__AVX2__)
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  __m256i a = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a);
  uint64_t x = lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3];
#else
  uint64_t x = 0;
  int64_t i = 0;
#endif
  for (; i < n; ++i) x ^= p[i];
  return x;
}

}  // namespace

void advise_huge_pages(void* p, uint64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{1} << 21;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (hi > lo) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);  // advice only
#else
  (void)p, (void)bytes;
#endif
}

double measure_read_bandwidth_gbs(uint64_t bytes, int passes, ThreadPool& pool) {
  const int64_t words = static_cast<int64_t>(bytes / 8) & ~int64_t{63};
  if (words <= 0) fail("bandwidth buffer of {} bytes is too small", bytes);
  auto* raw = static_cast<uint64_t*>(std::aligned_alloc(64, static_cast<size_t>(words) * 8));
  if (raw == nullptr) fail("cannot allocate a {}-byte bandwidth buffer", words * 8);
  std::unique_ptr<uint64_t, decltype(&std::free)> buf(raw, &std::free);
  advise_huge_pages(raw, static_cast<uint64_t>(words) * 8);
  const int threads = pool.size();
  // Each thread writes its own slice first so its pages sit on its NUMA node, as the read pass finds them.
  pool.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t i = t * words / threads; i < (t + 1) * words / threads; ++i) raw[i] = i * 0x9E37u;
  });
  std::vector<uint64_t> sink(threads);
  double best = 0;
  for (int pass = 0; pass <= passes; ++pass) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(threads, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t lo = (t * words / threads) & ~int64_t{3},
                      hi = ((t + 1) * words / threads) & ~int64_t{3};
        sink[t] ^= xor_words(raw + lo, (t + 1 == threads ? words : hi) - lo);
      }
    });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (pass > 0) best = std::max(best, static_cast<double>(words) * 8 / s / 1e9);
  }
  volatile uint64_t keep = 0;  // the XORs must be observable or the reads could be dropped
  for (uint64_t v : sink) keep = keep ^ v;
  (void)keep;
  return best;
}

}  // namespace ds
