// Checks and timings of MoE routing (backend/cuda/moe_routing.h) against a float64 reference of route_row
// (src/model/layers/moe.cpp): the same experts in the same order (ties to the lower id), weights within the
// bound, a negative control, rows alone == rows in a batch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/stream.h"
#include "checks.h"
#include "scoped_env.h"

namespace ds::cuda::wxcheck {

namespace {

// Stated bound: |w - ref| <= kRouteTol * ref (positive sums of <= 1024 terms, exp and one division in fp32).
constexpr double kRouteTol = 1.0 / 131072;

// route_row in double on logits scaled by `factor` (1.0 = the function).
void reference_route(const float* logits, int E, int k, bool renormalise, double factor,
                     std::vector<int>& ids, std::vector<double>& w) {
  std::vector<double> l(E);
  for (int e = 0; e < E; ++e) l[e] = logits[e] * factor;
  const double mx = *std::max_element(l.begin(), l.end());
  std::vector<double> p(E);
  double sum = 0;
  for (int e = 0; e < E; ++e) sum += (p[e] = std::exp(l[e] - mx));
  std::vector<int> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  double top = 0;
  for (int i = 0; i < k; ++i) top += p[order[i]];
  ids.assign(order.begin(), order.begin() + k);
  w.resize(k);
  for (int i = 0; i < k; ++i) w[i] = p[order[i]] / (renormalise ? top : sum);
}

// moe_route on logits [n, E] (uploaded), in one launch: ids and weights [n, k] (poisoned before).
std::pair<std::vector<int32_t>, std::vector<float>> route_batch(const std::vector<float>& logits, int n,
                                                                int E, int k, bool renormalise) {
  DeviceBuffer d_logits(logits.size() * 4), d_ids(int64_t{n} * k * 4), d_w(int64_t{n} * k * 4);
  d_logits.upload(logits.data(), logits.size() * 4);
  d_ids.fill_bytes(0xFF);
  d_w.fill_bytes(0xFF);
  Stream stream;
  moe_route(d_logits.as<float>(), n, E, k, renormalise, d_ids.as<int32_t>(), d_w.as<float>(), stream.get());
  stream.synchronize();
  std::vector<int32_t> ids(int64_t{n} * k);
  std::vector<float> w(int64_t{n} * k);
  d_ids.download(ids.data(), ids.size() * 4);
  d_w.download(w.data(), w.size() * 4);
  return {ids, w};
}

void check_routing(Tally& tally, int E, int k, bool renormalise, std::mt19937_64& rng) {
  const int n = 64;
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> logits(int64_t{n} * E);
  for (auto& x : logits) x = d(rng);
  // Plant ties: in each row, copy the largest logit to a higher and a lower id, and tie two mid-rank experts.
  for (int r = 0; r < n; ++r) {
    float* l = logits.data() + int64_t{r} * E;
    const int top = static_cast<int>(std::max_element(l, l + E) - l);
    l[(top + 7) % E] = l[top];
    l[(top + E - 5) % E] = l[top];
    l[(r * 13 + 3) % E] = l[(r * 29 + 11) % E];
  }
  const auto [ids, w] = route_batch(logits, n, E, k, renormalise);
  bool ids_same = true;
  double worst = 0, control = 0;
  for (int r = 0; r < n; ++r) {
    std::vector<int> rid, cid;
    std::vector<double> rw, cw;
    reference_route(logits.data() + int64_t{r} * E, E, k, renormalise, 1.0, rid, rw);
    reference_route(logits.data() + int64_t{r} * E, E, k, renormalise, 1.001, cid, cw);
    for (int i = 0; i < k; ++i) {
      ids_same = ids_same && ids[r * k + i] == rid[i];
      worst = std::max(worst, std::fabs(w[r * k + i] - rw[i]) / (kRouteTol * rw[i]));
      control = std::max(control, std::fabs(w[r * k + i] - cw[i]) / (kRouteTol * cw[i]));
    }
  }
  // Each row alone == the same row in the batch of 64, bit for bit.
  bool alone_same = true;
  DeviceBuffer d_logits(logits.size() * 4), one_ids(k * 4), one_w(k * 4);
  d_logits.upload(logits.data(), logits.size() * 4);
  Stream stream;
  for (int r = 0; r < n; ++r) {
    moe_route(d_logits.as<float>() + int64_t{r} * E, 1, E, k, renormalise, one_ids.as<int32_t>(),
              one_w.as<float>(), stream.get());
    stream.synchronize();
    std::vector<int32_t> oi(k);
    std::vector<float> ow(k);
    one_ids.download(oi.data(), k * 4);
    one_w.download(ow.data(), k * 4);
    alone_same = alone_same && std::memcmp(oi.data(), ids.data() + r * k, k * 4) == 0 &&
                 std::memcmp(ow.data(), w.data() + r * k, k * 4) == 0;
  }
  const std::string name = "routing E" + std::to_string(E) + " k" + std::to_string(k) +
                           (renormalise ? " renormalised" : " full-sum");
  std::printf("%-32s weight err/bound %.4f (control %.1f)\n", name.c_str(), worst, control);
  tally.expect(ids_same, name + ": experts and order == reference (ties to the lower id)");
  tally.expect(worst <= 1.0, name + ": weights within the bound");
  tally.expect(control > 1.0, name + ": negative control (logits 0.1% off) exceeds the bound");
  tally.expect(alone_same, name + ": rows alone == rows in the batch (bits)");
}

// moe_route under DS_CUDA_ROUTE_FAST=v on logits [n, E]: ids and weights.
std::pair<std::vector<int32_t>, std::vector<float>> route_with(const std::vector<float>& logits, int n, int E,
                                                               int k, bool renormalise, const char* v) {
  setenv("DS_CUDA_ROUTE_FAST", v, 1);
  return route_batch(logits, n, E, k, renormalise);
}

// The redux top k (DS_CUDA_ROUTE_FAST=1) == the butterflies, bit for bit, on rows built to tie: logits on a
// coarse grid (many equal values), +0 and -0 together, -inf entries, all equal, and one row with a NaN (the
// redux form then takes the butterflies: still equal). Negative control: a row's largest logit raised by 1
// changes its weights.
void check_route_fast(Tally& tally, int E, int k, std::mt19937_64& rng) {
  const int n = 48;
  std::uniform_int_distribution<int> coarse(-6, 6), pick(0, E - 1);
  std::vector<float> logits(int64_t{n} * E);
  for (int r = 0; r < n; ++r) {
    float* l = logits.data() + int64_t{r} * E;
    for (int e = 0; e < E; ++e) l[e] = 0.5f * static_cast<float>(coarse(rng));
    if (r % 4 == 1)
      for (int e = 0; e < E; ++e) l[e] = (e % 3 == 0) ? -0.0f : (e % 3 == 1 ? 0.0f : l[e] - 4.0f);
    if (r % 4 == 2)
      for (int e = 0; e < E; e += 2) l[e] = -INFINITY;
    if (r == 3)
      for (int e = 0; e < E; ++e) l[e] = 1.25f;
    if (r == 7) l[pick(rng)] = NAN;
  }
  const ScopedEnv keep("DS_CUDA_ROUTE_FAST");  // route_with sets it
  bool same = true;
  for (bool renormalise : {true, false}) {
    const auto slow = route_with(logits, n, E, k, renormalise, "0");
    const auto fast = route_with(logits, n, E, k, renormalise, "1");
    same = same && slow.first == fast.first &&
           std::memcmp(slow.second.data(), fast.second.data(), slow.second.size() * 4) == 0;
  }
  std::vector<float> nudged = logits;
  float* row0 = nudged.data();
  float* top = std::max_element(row0, row0 + E);
  *top += 1.0f;
  const auto base = route_with(logits, n, E, k, false, "1");
  const auto off = route_with(nudged, n, E, k, false, "1");
  const bool control = std::memcmp(base.second.data(), off.second.data(), size_t(k) * 4) != 0 ||
                       !std::equal(base.first.begin(), base.first.begin() + k, off.first.begin());
  const std::string name = "routing E" + std::to_string(E) + " k" + std::to_string(k);
  std::printf("%-32s redux top k == butterflies: %s (a top logit raised: %s)\n", name.c_str(),
              same ? "bit-identical" : "DIFFERENT", control ? "differs" : "SAME");
  tally.expect(same, name + ": the redux top k == the butterflies (ids and weights, bits)");
  tally.expect(control, name + ": the redux top k's negative control differs");
}

}  // namespace

void run_routing_checks(Tally& tally) {
  std::mt19937_64 rng(17);
  check_routing(tally, 512, 10, true, rng);  // Flash Next
  check_routing(tally, 512, 10, false, rng);
  check_routing(tally, 60, 4, true, rng);     // E not a multiple of 32
  check_routing(tally, 1024, 32, true, rng);  // the limits
  {                                           // the same against the reference with the redux top k
    const ScopedEnv fast("DS_CUDA_ROUTE_FAST", "1");
    check_routing(tally, 512, 10, true, rng);
    check_routing(tally, 60, 4, false, rng);
    check_routing(tally, 1024, 32, true, rng);
  }
  check_route_fast(tally, 512, 10, rng);
  check_route_fast(tally, 60, 4, rng);
  check_route_fast(tally, 1024, 32, rng);
  check_route_fast(tally, 200, 8, rng);
  bool named = false;
  try {
    moe_route(nullptr, 1, 2048, 10, true, nullptr, nullptr, nullptr);
  } catch (const ArgumentError& e) {
    named = std::string(e.what()).find("E must be") != std::string::npos;
  }
  tally.expect(named, "routing: E = 2048 is an ArgumentError naming E");
}

void run_routing_bench(int reps) {
  std::printf("\nMoE routing, E 512, k 10\n%8s %10s\n", "rows", "us");
  std::mt19937_64 rng(19);
  std::normal_distribution<float> d(0.0f, 2.0f);
  for (int n : {1, 64, 1024}) {
    std::vector<float> logits(int64_t{n} * 512);
    for (auto& x : logits) x = d(rng);
    DeviceBuffer d_logits(logits.size() * 4), d_ids(int64_t{n} * 10 * 4), d_w(int64_t{n} * 10 * 4);
    d_logits.upload(logits.data(), logits.size() * 4);
    Stream stream;
    Event start, stop;
    auto launch = [&] {
      moe_route(d_logits.as<float>(), n, 512, 10, true, d_ids.as<int32_t>(), d_w.as<float>(), stream.get());
    };
    for (int i = 0; i < 3; ++i) launch();
    start.record(stream.get());
    for (int i = 0; i < reps; ++i) launch();
    stop.record(stream.get());
    stop.synchronize();
    std::printf("%8d %10.2f\n", n, 1000.0 * stop.ms_since(start) / reps);
  }
}

}  // namespace ds::cuda::wxcheck
