// The tensor experts' down at one row in its routed form (tc_decode_experts_routed, session 13) against the
// separate ops: moe_expert_tiles + tc_decode_experts into the slots, then moe_combine: every valid slot's row
// and the combined row, memcmp, under each mask of DS_CUDA_TC_EXPERT_ROUTED (the tile found from topk; its
// first stages before the wait; the combine folded) and the one-row kernel's launch variants 14, 30 and 94
// (30 + dnrow13's warp-parallel bits: single matrices only, the routed down must not take it).
// Routings: plain, an id -1, an id past the experts, a repeated id, the shared expert's id. Each launch runs
// twice (the combine's counters must be left zero). Negative control: the reference's combine with the first
// two weights swapped must differ.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/device_matrix.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/tc_decode.h"
#include "check_buffers.h"
#include "model_checks.h"
#include "routing_cases.h"

namespace ds::cuda::modelcheck {

namespace {

struct DownCase {
  int D, I, E, K, bits, group;
};

// The environment's value of `name` (empty: unset), and its restore.
std::string env_of(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}
void restore(const char* name, const std::string& was) {
  if (was.empty())
    unsetenv(name);
  else
    setenv(name, was.c_str(), 1);
}

void check_down(Tally& tally, const DownCase& c, uint64_t seed, bool control) {
  std::mt19937_64 rng(seed);
  const std::string routed_was = env_of("DS_CUDA_TC_EXPERT_ROUTED"),
                    variant_was = env_of("DS_CUDA_TC_ROW_VARIANT");
  const int stack = c.E + 1, all = c.K + 1, max_tiles = max_expert_tiles(1, all, stack, 1);
  const DeviceMatrix w = random_matrix(c.D, c.I, stack, c.bits, c.group, seed, nullptr);
  TiledWeight t;
  t.affine = w.affine, t.rows = c.D, t.cols = c.I, t.n_experts = stack;
  const DeviceBuffer h = random_floats(int64_t{all} * c.I, seed + 1, -1.0f, 1.0f, nullptr);
  const DeviceBuffer weights = random_floats(c.K, seed + 2, 0.0f, 0.2f, nullptr);
  const DeviceBuffer gate = random_floats(1, seed + 3, -2.0f, 2.0f, nullptr);
  const int64_t n_counters = (c.D + 3) / 4;
  DeviceBuffer scratch(tc_decode_scratch_bytes(c.I, all)), group(expert_tiles_scratch_bytes(stack)),
      tiles(size_t(max_tiles) * sizeof(ExpertWindow)), row_ids(size_t(all) * 4), slot_of(size_t(c.K) * 4),
      slots_a(size_t(all) * c.D * 4), out_a(size_t(c.D) * 4), slots_f(size_t(all) * c.D * 4),
      out_f(size_t(c.D) * 4), counters(size_t(n_counters) * 4);
  counters.fill_bytes(0);
  for (int kind = 0; kind < kRoutingKinds; ++kind) {
    std::vector<int32_t> topk = routing_of_kind(kind, c.E, c.K, stack, rng);
    DeviceBuffer d_topk(topk.size() * 4);
    d_topk.upload(topk.data(), topk.size() * 4);
    // The separate ops (the grouping also gives slot_of, which the folded combine reads).
    slots_a.fill_bytes(0xFF), out_a.fill_bytes(0xFF);
    moe_expert_tiles(d_topk.as<int32_t>(), 1, c.K, stack, tiles.as<ExpertWindow>(), max_tiles,
                     row_ids.as<int32_t>(), slot_of.as<int32_t>(), group.data(), nullptr, 1, c.E);
    tc_decode_experts(t, tiles.as<ExpertWindow>(), max_tiles, 1, nullptr, h.as<float>(), c.I, all,
                      slots_a.as<float>(), c.D, scratch.data(), scratch.bytes(), nullptr);
    moe_combine(weights.as<float>(), slots_a.as<float>(), slot_of.as<int32_t>(), 1, c.K, c.D,
                slots_a.as<float>() + int64_t{c.K} * c.D, gate.as<float>(), out_a.as<float>(), nullptr);
    const auto tw = synced_download<ExpertWindow>(tiles, max_tiles);
    const auto sa = synced_download<float>(slots_a, size_t(all) * c.D);
    const auto oa = synced_download<float>(out_a, c.D);
    for (const int variant : {14, 30, 94}) {
      setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(variant).c_str(), 1);
      for (const int mode : {1, 3, 5, 7}) {
        setenv("DS_CUDA_TC_EXPERT_ROUTED", std::to_string(mode).c_str(), 1);
        TcCombine cb;
        cb.weights = weights.as<float>(), cb.slot_of = slot_of.as<int32_t>(),
        cb.shared_gate = gate.as<float>();
        cb.out = out_f.as<float>(), cb.counters = counters.as<uint32_t>(), cb.n_counters = n_counters;
        bool same = true;
        int r = 0;
        for (int rep = 0; rep < 2; ++rep) {
          slots_f.fill_bytes(0xFF), out_f.fill_bytes(0xFF);
          r = tc_decode_experts_routed(t, d_topk.as<int32_t>(), c.K, c.E, h.as<float>(), c.I,
                                       slots_f.as<float>(), c.D, &cb, scratch.data(), scratch.bytes(),
                                       nullptr);
          const auto sf = synced_download<float>(slots_f, size_t(all) * c.D);
          for (const ExpertWindow& x : tw)
            if (x.count == 1)
              same = same && std::memcmp(&sa[size_t(x.first) * c.D], &sf[size_t(x.first) * c.D],
                                         size_t(c.D) * 4) == 0;
          if (r == 2) same = same && same_bytes(synced_download<float>(out_f, c.D), oa);
        }
        const bool want_fold = (mode & kTcRoutedCombine) != 0;
        const bool ok = same && r == (want_fold ? 2 : 1) &&
                        same_bytes(synced_download<uint32_t>(counters, n_counters),
                                   std::vector<uint32_t>(size_t(n_counters), 0u));
        const std::string name = "tensor down, routed form (D " + std::to_string(c.D) + ", I " +
                                 std::to_string(c.I) + ", top-" + std::to_string(c.K) + " of " +
                                 std::to_string(c.E) + " + shared, " + routing_kind_name(kind) + ", " +
                                 std::to_string(c.bits) + "-bit g" + std::to_string(c.group) + ", " +
                                 tc_planes_name(tc_decode_planes()) + ", row variant " +
                                 std::to_string(variant) + ", mode " + std::to_string(mode) + ")";
        std::printf("  %s: %s\n", name.c_str(),
                    r == 0 ? "NOT TAKEN"
                    : ok   ? (want_fold ? "bit-identical (slots, combined row)" : "bit-identical (slots)")
                           : "DIFFERENT");
        tally.expect(ok, name + ": == moe_expert_tiles + tc_decode_experts (+ moe_combine), twice");
      }
    }
    restore("DS_CUDA_TC_EXPERT_ROUTED", routed_was), restore("DS_CUDA_TC_ROW_VARIANT", variant_was);
    if (!control || kind != 0) continue;
    // Negative control: the combine with the first two weights swapped (other roundings) must differ.
    auto wh = synced_download<float>(weights, c.K);
    std::swap(wh[0], wh[1]);
    DeviceBuffer w2(size_t(c.K) * 4), o2(size_t(c.D) * 4);
    w2.upload(wh.data(), wh.size() * 4);
    moe_combine(w2.as<float>(), slots_a.as<float>(), slot_of.as<int32_t>(), 1, c.K, c.D,
                slots_a.as<float>() + int64_t{c.K} * c.D, gate.as<float>(), o2.as<float>(), nullptr);
    const auto oc = synced_download<float>(o2, c.D);
    size_t differ = 0;
    for (int i = 0; i < c.D; ++i) differ += std::memcmp(&oc[i], &oa[i], 4) != 0;
    std::printf("  negative control (the first two weights swapped): %zu of %d outputs differ\n", differ,
                c.D);
    tally.expect(differ > 0, "tensor down, routed form: negative control (weights swapped) differs");
  }
}

// The routing folded into the gate|up launch (TcRoute, kTcRoutedRoute) against moe_route then the same launch
// reading its ids: ids, weights, tiles, row_ids, slot_of and every slot's h row, memcmp; renormalised and
// not. Negative control: the weights of the other renormalisation must differ.
void check_route_fold(Tally& tally, int E, int K, int64_t I, int64_t cols, uint64_t seed) {
  const int stack = E + 1, all = K + 1, max_tiles = max_expert_tiles(1, all, stack, 1);
  const DeviceMatrix w = random_matrix(2 * I, cols, stack, 4, 32, seed, nullptr);
  TiledWeight t;
  t.affine = w.affine, t.rows = 2 * I, t.cols = cols, t.n_experts = stack;
  const DeviceBuffer x = random_floats(cols, seed + 1, -1.0f, 1.0f, nullptr);
  const DeviceBuffer logits = random_floats(E, seed + 2, -4.0f, 4.0f, nullptr);
  DeviceBuffer scratch(tc_decode_scratch_bytes(cols, 1));
  struct Out {
    DeviceBuffer ids, weights, tiles, row_ids, slot_of, h;
    Out(int K, int max_tiles, int all, int64_t I)
        : ids(size_t(K) * 4),
          weights(size_t(K) * 4),
          tiles(size_t(max_tiles) * sizeof(ExpertWindow)),
          row_ids(size_t(all) * 4),
          slot_of(size_t(K) * 4),
          h(size_t(all) * I * 4) {
      ids.fill_bytes(0xFF), weights.fill_bytes(0xFF), tiles.fill_bytes(0xFF), row_ids.fill_bytes(0xFF);
      slot_of.fill_bytes(0xFF), h.fill_bytes(0xFF);
    }
  };
  std::vector<float> renorm_w[2];
  for (const bool renorm : {true, false}) {
    Out a(K, max_tiles, all, I), f(K, max_tiles, all, I);
    moe_route(logits.as<float>(), 1, E, K, renorm, a.ids.as<int32_t>(), a.weights.as<float>(), nullptr);
    const bool took_a = tc_decode_experts_swiglu_routed(
        t, a.ids.as<int32_t>(), K, E, a.tiles.as<ExpertWindow>(), max_tiles, a.row_ids.as<int32_t>(),
        a.slot_of.as<int32_t>(), x.as<float>(), a.h.as<float>(), I, scratch.data(), scratch.bytes(), nullptr);
    TcRoute r;
    r.logits = logits.as<float>(), r.E = E, r.renormalise = renorm, r.weights = f.weights.as<float>();
    const bool took_f =
        tc_decode_experts_swiglu_routed(t, f.ids.as<int32_t>(), K, E, f.tiles.as<ExpertWindow>(), max_tiles,
                                        f.row_ids.as<int32_t>(), f.slot_of.as<int32_t>(), x.as<float>(),
                                        f.h.as<float>(), I, scratch.data(), scratch.bytes(), nullptr, &r);
    auto same = [&](const DeviceBuffer& p, const DeviceBuffer& q, size_t bytes) {
      return same_bytes(synced_download<uint8_t>(p, bytes), synced_download<uint8_t>(q, bytes));
    };
    const bool ids = same(a.ids, f.ids, size_t(K) * 4), wts = same(a.weights, f.weights, size_t(K) * 4);
    const bool grouping = same(a.tiles, f.tiles, size_t(max_tiles) * sizeof(ExpertWindow)) &&
                          same(a.row_ids, f.row_ids, size_t(all) * 4) &&
                          same(a.slot_of, f.slot_of, size_t(K) * 4);
    const bool h = same(a.h, f.h, size_t(all) * I * 4);
    renorm_w[renorm ? 0 : 1] = synced_download<float>(f.weights, K);
    const bool ok = took_a && took_f && ids && wts && grouping && h;
    const std::string name = "tensor gate|up with the routing folded in (top-" + std::to_string(K) + " of " +
                             std::to_string(E) + " + shared, " + std::to_string(2 * I) + " x " +
                             std::to_string(cols) + ", " + (renorm ? "renormalised" : "softmax weights") +
                             ", " + tc_planes_name(tc_decode_planes()) + ")";
    std::printf("  %s: %s (ids %s, weights %s, grouping %s, h %s)\n", name.c_str(),
                ok ? "bit-identical" : "DIFFERENT",
                ids ? "=" : "!=", wts ? "=" : "!=", grouping ? "=" : "!=", h ? "=" : "!=");
    tally.expect(ok, name + ": == moe_route + the launch reading its ids");
  }
  const bool differ = !same_bytes(renorm_w[0], renorm_w[1]);
  std::printf("  negative control (the other renormalisation's weights): %s\n", differ ? "differ" : "SAME");
  tally.expect(differ, "routing folded into gate|up: negative control (renormalisation) differs");
}

}  // namespace

void run_tc_down_checks(Tally& tally) {
  const TcPlanes was = tc_decode_planes();
  for (const TcPlanes p : {TcPlanes::Chained, TcPlanes::Columns}) {
    tc_decode_set_planes(p);
    // The real down (2560 x 640 an expert: 1 slice, blocks of 64 outputs), 4-bit g32; 384 x 1280 (2 slices,
    // blocks of 32), 3-bit g128.
    check_down(tally, DownCase{2560, 640, 32, 10, 4, 32}, 501, p == TcPlanes::Chained);
    check_down(tally, DownCase{384, 1280, 16, 4, 3, 128}, 502, false);
    check_route_fold(tally, 32, 10, 640, 2560, 503);  // the real gate|up shape
    check_route_fold(tally, 300, 10, 64, 256, 504);   // 300 router logits (not a multiple of 32)
  }
  tc_decode_set_planes(was);
}

}  // namespace ds::cuda::modelcheck
