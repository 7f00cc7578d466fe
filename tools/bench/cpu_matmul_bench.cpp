// CPU weight-product throughput: GB/s of weight bytes streamed per call (decode: 1, 4, 16 rows) and GMAC/s
// for prompt-sized inputs, on 4096 x 4096 matrices cycled through a ~1 GB set so weights come from memory;
// beside each, the read bandwidth (another 1 GB buffer) or FMA ceiling of the same thread pool, measured in
// the same iteration so both see the same load. Results: docs/receipts/cpu-matmul.md.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace ds {
namespace {

constexpr int64_t kDim = 4096;
constexpr int64_t kSetBytes = int64_t{1} << 30;

enum Kind { kBF16 = 0, kQ4G64 = 1, kQ8G64 = 2 };
const char* kind_name(int k) {
  return k == kBF16 ? "bf16" : k == kQ4G64 ? "q4g64" : "q8g64";
}

uint64_t next(uint64_t& s) {
  s ^= s << 13, s ^= s >> 7, s ^= s << 17;
  return s;
}

// A set of distinct matrices of one encoding, together about kSetBytes, in one allocation each for
// codes/scales.
struct WeightSet {
  int kind = -1;
  std::vector<uint8_t> data, scales, biases;
  std::vector<MatrixWeight> mats;
  int64_t bytes_per_matrix = 0;
};

std::unique_ptr<WeightSet> build_set(int kind) {
  auto set = std::make_unique<WeightSet>();
  set->kind = kind;
  MatrixWeight w;
  w.rows = w.cols = kDim;
  w.name = kind_name(kind);
  if (kind == kBF16) {
    w.encoding = MatrixEncoding::BF16;
  } else {
    w.encoding = MatrixEncoding::Affine, w.bits = kind == kQ4G64 ? 4 : 8, w.group = 64;
    w.scale_dtype = DType::BF16;
  }
  const int64_t data_bytes = kDim * w.row_bytes();
  const int64_t scale_bytes = kind == kBF16 ? 0 : kDim * (kDim / w.group) * 2;
  set->bytes_per_matrix = data_bytes + 2 * scale_bytes;
  const int64_t count = std::max<int64_t>(2, kSetBytes / set->bytes_per_matrix);
  set->data.resize(static_cast<size_t>(count * data_bytes));
  set->scales.resize(static_cast<size_t>(count * scale_bytes));
  set->biases.resize(set->scales.size());
  uint64_t s = 88172645463325252ull;
  if (kind == kBF16) {
    uint16_t* p = reinterpret_cast<uint16_t*>(set->data.data());
    for (size_t i = 0; i < set->data.size() / 2; ++i)
      p[i] = f32_to_bf16(static_cast<float>(static_cast<int>(next(s) % 2001) - 1000) * 1e-4f);
  } else {
    for (size_t i = 0; i < set->data.size(); i += 8) {
      uint64_t v = next(s);
      std::memcpy(set->data.data() + i, &v, 8);
    }
    uint16_t* sc = reinterpret_cast<uint16_t*>(set->scales.data());
    uint16_t* bi = reinterpret_cast<uint16_t*>(set->biases.data());
    for (size_t i = 0; i < set->scales.size() / 2; ++i)
      sc[i] = f32_to_bf16(1e-3f), bi[i] = f32_to_bf16(-8e-3f);
  }
  for (int64_t m = 0; m < count; ++m) {
    MatrixWeight v = w;
    v.data = set->data.data() + m * data_bytes;
    if (kind != kBF16)
      v.scales = set->scales.data() + m * scale_bytes, v.biases = set->biases.data() + m * scale_bytes;
    set->mats.push_back(v);
  }
  return set;
}

// One set alive at a time keeps the bench near 1 GB of memory.
const WeightSet& weight_set(int kind) {
  static std::unique_ptr<WeightSet> current;
  if (!current || current->kind != kind) {
    current.reset();
    current = build_set(kind);
  }
  return *current;
}

// Sums bytes [begin, end) of buf on every pool thread with 256-bit loads: the machine's read bandwidth.
int64_t read_bytes(const uint8_t* buf, int64_t bytes) {
  const int64_t lines = bytes / 128;
  std::vector<int64_t> sums(64, 0);
  ThreadPool::global().parallel_for(lines, std::max<int64_t>(1, lines / 64), [&](int64_t b, int64_t e) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = b; i < e; ++i) {
      const __m256i* p = reinterpret_cast<const __m256i*>(buf + i * 128);
      a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(p));
      a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(p + 1));
      a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(p + 2));
      a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(p + 3));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    sums[static_cast<size_t>(b * 64 / lines)] = _mm256_extract_epi64(a0, 0);
  });
  int64_t total = 0;
  for (int64_t v : sums) total += v;
  return total;
}

// A second 1 GB buffer, cycled by the read loop so it too comes from memory.
const std::vector<uint8_t>& read_buffer() {
  static std::vector<uint8_t> buf = [] {
    std::vector<uint8_t> b(static_cast<size_t>(kSetBytes));
    std::memset(b.data(), 1, b.size());
    return b;
  }();
  return buf;
}

// FMA throughput of every pool thread (10 independent chains): the ceiling for prompt-sized products.
double fma_peak_macs(int64_t macs_per_thread) {
  const int threads = ThreadPool::global().size();
  std::vector<float> out(static_cast<size_t>(threads) * 64);
  ThreadPool::global().parallel_for(threads, 1, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      __m256 a[10];
      for (auto& v : a) v = _mm256_set1_ps(1.0f);
      const __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
      for (int64_t i = 0; i < macs_per_thread / 80; ++i)
        for (auto& v : a) v = _mm256_fmadd_ps(v, m, c);
      for (int k = 1; k < 10; ++k) a[0] = _mm256_add_ps(a[0], a[k]);
      out[static_cast<size_t>(t) * 64] = _mm256_cvtss_f32(a[0]);
    }
  });
  benchmark::DoNotOptimize(out.data());
  return static_cast<double>(macs_per_thread) * threads;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Each iteration times one product, then a read of the same number of bytes from the other 1 GB buffer, so
// weight GB/s and read GB/s are measured under the same load on the shared machine.
void BM_Decode(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1);
  const WeightSet& set = weight_set(kind);
  const std::vector<uint8_t>& rbuf = read_buffer();
  std::vector<float> x(static_cast<size_t>(rows * kDim), 0.01f), y(static_cast<size_t>(rows * kDim));
  size_t m = 0;
  int64_t roff = 0;
  double t_mm = 0, t_rd = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    matmul(set.mats[m], x.data(), rows, kDim, y.data(), kDim);
    const double dt = seconds_since(t0);
    benchmark::DoNotOptimize(y.data());
    m = (m + 1) % set.mats.size();
    if (roff + set.bytes_per_matrix > kSetBytes) roff = 0;
    t0 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(read_bytes(rbuf.data() + roff, set.bytes_per_matrix));
    t_rd += seconds_since(t0);
    roff += set.bytes_per_matrix;
    t_mm += dt;
    state.SetIterationTime(dt);
  }
  const double bytes = static_cast<double>(state.iterations()) * set.bytes_per_matrix;
  state.counters["weight_GB/s"] = bytes / t_mm / 1e9;
  state.counters["read_GB/s"] = bytes / t_rd / 1e9;
  state.counters["of_read"] = t_rd / t_mm;
  state.SetLabel(kind_name(kind));
}

// Prompt-sized products: GMAC/s, beside the FMA ceiling measured right after each product.
void BM_Prompt(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1);
  const WeightSet& set = weight_set(kind);
  std::vector<float> x(static_cast<size_t>(rows * kDim), 0.01f), y(static_cast<size_t>(rows * kDim));
  size_t m = 0;
  double t_mm = 0, t_peak = 0, peak_macs = 0;
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    matmul(set.mats[m], x.data(), rows, kDim, y.data(), kDim);
    const double dt = seconds_since(t0);
    benchmark::DoNotOptimize(y.data());
    m = (m + 1) % set.mats.size();
    t0 = std::chrono::steady_clock::now();
    peak_macs += fma_peak_macs(rows * kDim * kDim / 8 / ThreadPool::global().size());
    t_peak += seconds_since(t0);
    t_mm += dt;
    state.SetIterationTime(dt);
  }
  const double macs = static_cast<double>(state.iterations()) * rows * kDim * kDim;
  state.counters["GMAC/s"] = macs / t_mm / 1e9;
  state.counters["fma_peak_GMAC/s"] = peak_macs / t_peak / 1e9;
  state.counters["of_peak"] = (macs / t_mm) / (peak_macs / t_peak);
  state.SetLabel(kind_name(kind));
}

// One thread on one 512 x 4096 matrix that stays in L3: the kernel's own ceiling per core, free of DRAM.
void BM_DecodeOneCoreInCache(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  const int64_t rows = state.range(1);
  const WeightSet& set = weight_set(kind);
  MatrixWeight w = set.mats[0].row_slice(0, 512);
  static ThreadPool one(1);
  std::vector<float> x(static_cast<size_t>(rows * kDim), 0.01f), y(static_cast<size_t>(rows * kDim));
  for (auto _ : state) {
    matmul(w, x.data(), rows, kDim, y.data(), kDim, one);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * set.bytes_per_matrix / 8);
  state.counters["GMAC/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * rows * 512 * kDim / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(kind_name(kind));
}

// Plain read bandwidth over a 1 GB buffer.
void BM_MemoryRead(benchmark::State& state) {
  const std::vector<uint8_t>& rbuf = read_buffer();
  for (auto _ : state) benchmark::DoNotOptimize(read_bytes(rbuf.data(), kSetBytes));
  state.SetBytesProcessed(state.iterations() * kSetBytes);
}

BENCHMARK(BM_MemoryRead)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)
    ->ArgsProduct({{kBF16, kQ4G64, kQ8G64}, {1, 4, 16}})
    ->ArgNames({"kind", "rows"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_DecodeOneCoreInCache)
    ->ArgsProduct({{kBF16, kQ4G64, kQ8G64}, {1, 4, 16}})
    ->ArgNames({"kind", "rows"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prompt)
    ->ArgsProduct({{kBF16, kQ4G64, kQ8G64}, {64, 512}})
    ->ArgNames({"kind", "rows"})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace ds

BENCHMARK_MAIN();
