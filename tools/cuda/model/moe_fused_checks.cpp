// The MoE glue folded into the FMA products (CudaModelOptions::fused_route/swiglu/combine) against the
// separate launches, bit for bit, on random MLX affine weights: the router product that routes in its last
// warp (affine_wx_route vs affine_wx + moe_route), gate|up with SwiGLU in the epilogue
// (affine_wx_grouped_swiglu vs affine_wx_grouped + silu_mul_halves), the down products that sum the combine
// (affine_wx_grouped_combine vs affine_wx_grouped + moe_combine). Each fused launch runs twice (its
// completion counters must be back at zero for the second, as for a graph replay), at shapes with and without
// the column slices.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/device_matrix.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/moe_routing.h"
#include "check_buffers.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

bool all_zero(const DeviceBuffer& counters) {
  const auto c = synced_download<uint32_t>(counters, counters.bytes() / 4);
  return std::all_of(c.begin(), c.end(), [](uint32_t v) { return v == 0; });
}

// Pairs as moe_route writes them for n rows of K distinct routed experts of E (+ the shared expert E).
struct Routing {
  std::vector<ExpertRow> up, down;
};
Routing random_routing(int n, int K, int E, bool shared, std::mt19937_64& rng) {
  Routing r;
  std::vector<int> ids(E);
  for (int row = 0; row < n; ++row) {
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int k = 0; k < K; ++k) r.up.push_back({ids[k], row}), r.down.push_back({ids[k], row * K + k});
  }
  for (int row = 0; shared && row < n; ++row) r.up.push_back({E, row}), r.down.push_back({E, n * K + row});
  return r;
}

void check_route(Tally& tally, int E, int rows, int cols, int k, int bits, int group, bool renorm, bool pairs,
                 uint64_t seed) {
  const DeviceMatrix w = random_matrix(rows, cols, 1, bits, group, seed, nullptr);
  const DeviceBuffer x = random_floats(cols, seed + 9, -1.0f, 1.0f, nullptr);
  const int shared = pairs ? E : -1, slots = k + (pairs ? 1 : 0);
  auto buffers = [&] {
    std::vector<DeviceBuffer> b;
    b.emplace_back(size_t(rows) * 4), b.emplace_back(size_t(k) * 4), b.emplace_back(size_t(k) * 4);
    b.emplace_back(size_t(slots) * sizeof(ExpertRow)), b.emplace_back(size_t(slots) * sizeof(ExpertRow));
    for (auto& d : b) d.fill_bytes(0xFF);
    return b;
  };
  auto read = [&](const std::vector<DeviceBuffer>& b) {
    std::vector<uint32_t> all = synced_download<uint32_t>(b[0], rows);
    for (size_t i = 1; i < 3; ++i) {
      const auto v = synced_download<uint32_t>(b[i], k);
      all.insert(all.end(), v.begin(), v.end());
    }
    for (size_t i = 3; pairs && i < 5; ++i) {
      const auto v = synced_download<uint32_t>(b[i], size_t(slots) * 2);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  auto pair_ptr = [&](const DeviceBuffer& d) { return pairs ? d.as<ExpertRow>() : nullptr; };
  std::vector<DeviceBuffer> a = buffers(), f = buffers();
  affine_wx(w.affine, Activations{x.data(), ActType::F32, cols}, 1, a[0].as<float>(), rows, nullptr);
  moe_route(a[0].as<float>(), 1, E, k, renorm, a[1].as<int32_t>(), a[2].as<float>(), nullptr, rows,
            pair_ptr(a[3]), pair_ptr(a[4]), shared);
  DeviceBuffer counter(4);
  counter.fill_bytes(0);
  bool took = true, twice = true;
  std::vector<uint32_t> first;
  for (int run = 0; run < 2; ++run) {
    took = took && affine_wx_route(w.affine, x.as<float>(), f[0].as<float>(), E, k, renorm,
                                   f[1].as<int32_t>(), f[2].as<float>(), pair_ptr(f[3]), pair_ptr(f[4]),
                                   shared, counter.as<uint32_t>(), nullptr);
    if (run == 0) first = read(f);
    if (run == 1) twice = read(f) == first;
    for (auto& d : f) d.fill_bytes(0xFF);  // the second run must write everything again
  }
  const bool ok = took && same_bytes(first, read(a)) && twice && all_zero(counter);
  std::printf("  router + routing in one launch (E %d of %d rows, %d cols, top %d, %d-bit g%d%s): %s\n", E,
              rows, cols, k, bits, group, pairs ? ", pairs + shared" : "",
              !took ? "NOT TAKEN"
              : ok  ? "bit-identical, twice, counter back at 0"
                    : "DIFFERENT");
  tally.expect(ok, "affine_wx_route == affine_wx + moe_route");
}

void check_swiglu(Tally& tally, int I, int cols, int n_experts, int n, int K, int bits, int group,
                  uint64_t seed) {
  std::mt19937_64 rng(seed);
  const DeviceMatrix w = random_matrix(2 * I, cols, n_experts + 1, bits, group, seed, nullptr);
  const DeviceBuffer x = random_floats(int64_t{n} * cols, seed + 9, -1.0f, 1.0f, nullptr);
  const Routing r = random_routing(n, K, n_experts, true, rng);
  const int P = static_cast<int>(r.up.size());
  const DeviceBuffer pairs = upload(r.up);
  DeviceBuffer gu(size_t(P) * 2 * I * 4), ha(size_t(P) * I * 4), hf(size_t(P) * I * 4);
  const Activations act{x.data(), ActType::F32, cols};
  affine_wx_grouped(w.affine, pairs.as<ExpertRow>(), P, act, n, gu.as<float>(), 2 * I, nullptr);
  silu_mul_halves(gu.as<float>(), P, I, ha.as<float>(), nullptr);
  hf.fill_bytes(0xFF);
  affine_wx_grouped_swiglu(w.affine, pairs.as<ExpertRow>(), P, act, n, hf.as<float>(), I, nullptr);
  const bool ok =
      same_bytes(synced_download<float>(hf, size_t(P) * I), synced_download<float>(ha, size_t(P) * I));
  std::printf("  gate|up + SwiGLU in one launch (I %d, %d cols, %d rows x %d + shared, %d-bit g%d): %s\n", I,
              cols, n, K, bits, group, ok ? "bit-identical" : "DIFFERENT");
  tally.expect(ok, "affine_wx_grouped_swiglu == affine_wx_grouped + silu_mul_halves");
}

void check_combine(Tally& tally, int D, int I, int n_experts, int n, int K, bool shared, int bits, int group,
                   uint64_t seed) {
  std::mt19937_64 rng(seed);
  const DeviceMatrix w = random_matrix(D, I, n_experts + 1, bits, group, seed, nullptr);
  const Routing r = random_routing(n, K, n_experts, shared, rng);
  const int P = static_cast<int>(r.down.size());
  const DeviceBuffer pairs = upload(r.down),
                     h = random_floats(int64_t{P} * I, seed + 9, -1.0f, 1.0f, nullptr),
                     weights = random_floats(int64_t{n} * K, seed + 10, 0.0f, 0.3f, nullptr);
  const int64_t ld_gate = 3;  // the gate logit sits in a wider row, as in the router's joint output
  const DeviceBuffer gates = random_floats(n * ld_gate, seed + 11, -2.0f, 2.0f, nullptr);
  const float* gate = shared ? gates.as<float>() : nullptr;
  const Activations act{h.data(), ActType::F32, I};
  DeviceBuffer sa(size_t(P) * D * 4), oa(size_t(n) * D * 4), sf(size_t(P) * D * 4), of(size_t(n) * D * 4);
  affine_wx_grouped(w.affine, pairs.as<ExpertRow>(), P, act, P, sa.as<float>(), D, nullptr);
  moe_combine(weights.as<float>(), sa.as<float>(), nullptr, n, K, D,
              shared ? sa.as<float>() + int64_t{n} * K * D : nullptr, gate, oa.as<float>(), nullptr, ld_gate);
  DeviceBuffer counters(size_t(n * grouped_combine_tiles(w.affine)) * 4);
  counters.fill_bytes(0);
  const MoeCombineArgs c{weights.as<float>(), gate, ld_gate, of.as<float>(), counters.as<uint32_t>(), n, K};
  bool ok = true;
  for (int run = 0; run < 2; ++run) {
    sf.fill_bytes(0xFF), of.fill_bytes(0xFF);
    affine_wx_grouped_combine(w.affine, pairs.as<ExpertRow>(), P, act, P, sf.as<float>(), D, c, nullptr);
    ok = ok &&
         same_bytes(synced_download<float>(sf, size_t(P) * D), synced_download<float>(sa, size_t(P) * D)) &&
         same_bytes(synced_download<float>(of, size_t(n) * D), synced_download<float>(oa, size_t(n) * D));
  }
  ok = ok && all_zero(counters);
  std::printf("  down + combine in one launch (D %d, %d cols, %d rows x %d%s, %d-bit g%d): %s\n", D, I, n, K,
              shared ? " + shared" : "", bits, group,
              ok ? "bit-identical (slots and sums), twice, counters back at 0" : "DIFFERENT");
  tally.expect(ok, "affine_wx_grouped_combine == affine_wx_grouped + moe_combine");
}

}  // namespace

void run_moe_fused_checks(Tally& tally) {
  // The real shape's router (512 experts + the shared expert's gate: 80 units of 513 rows, column slices),
  // and others with (96 rows of 4096 columns) and without (1024 columns: 32 units) the slices.
  check_route(tally, 512, 513, 2560, 10, 4, 32, true, true, 101);
  check_route(tally, 200, 200, 1024, 6, 6, 64, false, false, 102);
  check_route(tally, 64, 96, 4096, 8, 3, 128, true, true, 103);
  check_route(tally, 512, 1300, 1024, 10, 5, 32, true, true, 104);
  // gate|up: the real shape (no slices: 1280 rows) and a short wide one (128 rows of 4096: 4 slices).
  check_swiglu(tally, 640, 2560, 32, 1, 10, 4, 32, 201);
  check_swiglu(tally, 640, 2560, 32, 3, 10, 6, 64, 202);
  check_swiglu(tally, 64, 4096, 16, 2, 4, 2, 32, 203);
  // down: the real shape (2560 rows of 640 columns) at 1 and 5 rows, and a sliced one without shared expert.
  check_combine(tally, 2560, 640, 32, 1, 10, true, 4, 32, 301);
  check_combine(tally, 2560, 640, 32, 5, 10, true, 6, 64, 302);
  check_combine(tally, 256, 4096, 16, 3, 4, false, 8, 128, 303);
}

}  // namespace ds::cuda::modelcheck
