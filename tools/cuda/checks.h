#pragma once
// Correctness checks and timings of the CUDA weight products (run by cuda_wx_check's main).
#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/wx_products.h"

namespace ds::cuda::wxcheck {

// A device copy of v (at least one element's room, so an empty vector still gets a valid pointer), and the
// first n elements of a device buffer back on the host.
template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size(), 1) * sizeof(T));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> h(n);
  if (n > 0) b.download(h.data(), n * sizeof(T));
  return h;
}

// The benches' timing: the median over `reps` batches of one call of `launch(copy)`, each batch of at least
// 16 launches rotating over `n_copies` copies (after a warm-up batch: module load, clocks).
template <class Launch>
double median_ms(const Launch& launch, int n_copies, int reps, const Stream& stream) {
  const int batch = std::max(n_copies, 16);
  for (int i = 0; i < batch; ++i) launch(i % n_copies);
  Event start, stop;
  std::vector<double> t;
  for (int rep = 0; rep < reps; ++rep) {
    start.record(stream.get());
    for (int i = 0; i < batch; ++i) launch((rep * batch + i) % n_copies);
    stop.record(stream.get());
    stop.synchronize();
    t.push_back(stop.ms_since(start) / batch);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
template <class Launch>
double median_us(const Launch& launch, int n_copies, int reps, const Stream& stream) {
  return 1e3 * median_ms(launch, n_copies, reps, stream);
}

// The benches' routed pairs: `lists` rows' top-k experts (distinct within a row, shuffled), all of x row 0.
inline std::vector<ExpertRow> random_expert_pairs(int n_experts, int lists, int k, std::mt19937_64& rng) {
  std::vector<ExpertRow> pairs;
  std::vector<int32_t> ids(n_experts);
  for (int l = 0; l < lists; ++l) {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int j = 0; j < k; ++j) pairs.push_back({ids[j], 0});
  }
  return pairs;
}

// Counts and a short log of what failed; every check adds to it.
struct Tally {
  int passed = 0;
  int failed = 0;
  std::vector<std::string> failures;
  void expect(bool ok, const std::string& what);
};

// Each kernel against the float64 reference within its bound, a negative control, rows alone == rows in every
// window, poisoned outputs, grouped == one-row products, and argument errors.
void run_checks(Tally& tally, bool quick);

// Timings on the Flash Next shapes; prints a table. `only`: the shapes whose name contains it (all if empty;
// the grouped table only when empty).
void run_bench(int reps, const std::string& only);
// One-row products on each RowKernel (row_bench.cpp); `only` filters the shapes by name (empty: all).
void run_row_bench(int reps, const std::string& only);

// The DeltaNet decode step (deltanet_checks.cpp): bound, negative control, streams alone == together, a
// window
// == its tokens step by step; and its timings at the Flash Next shape.
void run_deltanet_checks(Tally& tally);
void run_deltanet_bench(int reps);

// The attention decode step (attention_checks.cpp): the same kinds of checks, and timings over context
// lengths.
void run_attention_checks(Tally& tally);
void run_attention_bench(int reps);

// MoE routing (routing_checks.cpp): experts and order exact, weights within the bound, rows alone == batch.
void run_routing_checks(Tally& tally);
void run_routing_bench(int reps);

// The MoE expert path (moe_checks.cpp): grouping of a routing into expert windows, every slot == its expert
// on its row alone (bits); and timings of one decode step's expert products at the Flash Next shape.
void run_moe_checks(Tally& tally);
void run_moe_bench(int reps);

// The tensor-core prompt products (tc_checks.cpp): bound, negative control, rows alone == in a larger launch,
// expert tiles == each expert alone; and their timings at prompt sizes (against cuBLAS where built with it).
void run_tc_checks(Tally& tally);
void run_tc_bench(int reps);

// The tensor-core decode products (tc_decode_checks.cpp): bound, negative control, a row alone == in every
// count 1..64 at every position, expert tiles == each expert alone, bad shapes refused; and their timings
// against the FMA products at 1/8/16/64 rows (tc_decode_bench.cpp).
void run_tc_decode_checks(Tally& tally);
void run_tc_grouping_checks(Tally& tally);  // part of decode-tc (its own section)

// The CUDA wrappers' error hygiene (error_checks.cpp): a failure thrown by check() leaves no last error that
// the next check_launch would report; with the premise as its negative control.
void run_error_checks(Tally& tally);
// The products' launch arguments (launch_checks.cpp): x rows that would overlap refused by every public
// product naming itself and the stride, the shared memory opt-in's failure, and with two GPUs or more every
// device's products == device 0's bits (the opt-in is per device).
void run_launch_checks(Tally& tally);
void run_tc_decode_bench(int reps);

}  // namespace ds::cuda::wxcheck
