// The tensor expert tiles' gate|up with the SwiGLU in the one-row kernel's epilogue
// (tc_decode_experts_swiglu, session 12) against the separate ops (tc_decode_experts into gu, then
// silu_mul_halves), memcmp over every slot's h row: random MLX affine gate|up stacks ([2 I, cols] an expert,
// the shared expert stacked last), random top-K routings of 1, 2, 4, 8, 16 and 64 rows grouped by
// moe_expert_tiles into tiles of one slot, shapes of 4, 2 and 1 column slices, both plane layouts. A negative
// control (the reference's product forced to other column slices: other bits by a rounding) must differ;
// shapes and tiles the fold does not take must be refused with nothing launched. Both folds also under the
// one-row kernel's launch modes kLean2 and kPair (DS_CUDA_TC_ROW_VARIANT 30 and 62) at one row.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/device_matrix.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/tc_decode.h"
#include "check_buffers.h"
#include "model_checks.h"
#include "routing_cases.h"

namespace ds::cuda::modelcheck {

namespace {

std::vector<float> host_floats(const DeviceBuffer& b, size_t count) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<float> v(count);
  b.download(v.data(), count * sizeof(float));
  return v;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::memcmp(&a[i], &b[i], 4) != 0;
  return d;
}

struct Case {
  int I, cols, E, K, bits, group;
};

// The one-row kernel's launch variant where DS_CUDA_TC_ROW_VARIANT sets one (the checks' launch modes).
std::string variant_note() {
  const char* v = std::getenv("DS_CUDA_TC_ROW_VARIANT");
  return v != nullptr && v[0] != '\0' ? ", row variant " + std::to_string(tc_decode_row_variant()) : "";
}

// One shape: the routing of each row count grouped into tiles of one slot (the shared expert E taken by
// every row), the fold against the separate ops. control: also the negative control at the first row count.
void check_case(Tally& tally, const Case& c, const std::vector<int>& row_counts, uint64_t seed,
                bool control) {
  std::mt19937_64 rng(seed);
  const int stack = c.E + 1;
  const DeviceMatrix w = random_matrix(2 * int64_t{c.I}, c.cols, stack, c.bits, c.group, seed, nullptr);
  TiledWeight t;
  t.affine = w.affine, t.rows = 2 * int64_t{c.I}, t.cols = c.cols, t.n_experts = stack;
  const int slices = tc_decode_column_slices(t.rows, t.cols);
  for (const int n : row_counts) {
    std::vector<int32_t> topk;
    std::vector<int32_t> ids(c.E);
    for (int r = 0; r < n; ++r) {
      std::iota(ids.begin(), ids.end(), 0);
      std::shuffle(ids.begin(), ids.end(), rng);
      topk.insert(topk.end(), ids.begin(), ids.begin() + c.K);
    }
    const int total = n * (c.K + 1), max_tiles = max_expert_tiles(n, c.K + 1, stack, 1);
    DeviceBuffer d_topk(topk.size() * 4), tiles(size_t(max_tiles) * sizeof(ExpertWindow)),
        row_ids(size_t(total) * 4), slot_of(size_t(n) * c.K * 4), group(expert_tiles_scratch_bytes(stack));
    d_topk.upload(topk.data(), topk.size() * 4);
    moe_expert_tiles(d_topk.as<int32_t>(), n, c.K, stack, tiles.as<ExpertWindow>(), max_tiles,
                     row_ids.as<int32_t>(), slot_of.as<int32_t>(), group.data(), nullptr, 1, c.E);
    const DeviceBuffer x = random_floats(int64_t{n} * c.cols, seed + n, -1.0f, 1.0f, nullptr);
    DeviceBuffer scratch(tc_decode_scratch_bytes(c.cols, n)), gu(size_t(total) * 2 * c.I * 4),
        ha(size_t(total) * c.I * 4), hf(size_t(total) * c.I * 4);
    auto separate = [&] {
      gu.fill_bytes(0xFF), ha.fill_bytes(0xFF);
      tc_decode_experts(t, tiles.as<ExpertWindow>(), max_tiles, 1, row_ids.as<int32_t>(), x.as<float>(),
                        c.cols, n, gu.as<float>(), 2 * c.I, scratch.data(), scratch.bytes(), nullptr);
      silu_mul_halves(gu.as<float>(), total, c.I, ha.as<float>(), nullptr);
      return host_floats(ha, size_t(total) * c.I);
    };
    const std::vector<float> want = separate();
    hf.fill_bytes(0xFF);
    const bool took = tc_decode_experts_swiglu(t, tiles.as<ExpertWindow>(), max_tiles, 1,
                                               row_ids.as<int32_t>(), x.as<float>(), c.cols, n,
                                               hf.as<float>(), c.I, scratch.data(), scratch.bytes(), nullptr);
    const std::vector<float> got = host_floats(hf, size_t(total) * c.I);
    const size_t diff = differing(got, want);
    const std::string name = "tensor gate|up + SwiGLU in one launch (I " + std::to_string(c.I) + ", " +
                             std::to_string(c.cols) + " cols, " + std::to_string(slices) + " slices, " +
                             std::to_string(n) + " rows x " + std::to_string(c.K) + " + shared, " +
                             std::to_string(c.bits) + "-bit g" + std::to_string(c.group) + ", " +
                             tc_planes_name(tc_decode_planes()) + variant_note() + ")";
    std::printf("  %s: %s\n", name.c_str(),
                !took       ? "NOT TAKEN"
                : diff == 0 ? "bit-identical"
                            : ("DIFFERENT (" + std::to_string(diff) + " floats)").c_str());
    tally.expect(took && diff == 0, name + ": == tc_decode_experts + silu_mul_halves");
    // Tiles of 8 slots (the general kernels) are refused, nothing launched.
    hf.fill_bytes(0xFF);
    const bool took8 = tc_decode_experts_swiglu(
        t, tiles.as<ExpertWindow>(), max_tiles, 8, row_ids.as<int32_t>(), x.as<float>(), c.cols, n,
        hf.as<float>(), c.I, scratch.data(), scratch.bytes(), nullptr);
    const std::vector<float> untouched = host_floats(hf, size_t(total) * c.I);
    const bool all_ff = std::all_of(untouched.begin(), untouched.end(), [](float v) {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      return u == 0xFFFFFFFFu;
    });
    tally.expect(!took8 && all_ff, name + ": tiles of 8 slots refused, nothing written");
    if (!control || n != row_counts.front()) continue;
    // Negative control: the reference's product at other column slices (other roundings) must differ.
    tc_decode_force_column_slices(slices == 4 ? 2 : 4);
    const std::vector<float> other = separate();
    tc_decode_force_column_slices(0);
    const size_t ctrl = differing(got, other);
    std::printf("  negative control (the reference at %d slices): %zu of %zu floats differ\n",
                slices == 4 ? 2 : 4, ctrl, got.size());
    tally.expect(ctrl > 0, name + ": negative control (other slices) differs");
  }
}

// One row with the grouping folded in too (tc_decode_experts_swiglu_routed) against moe_expert_tiles, the
// tiles' product and silu_mul_halves: tiles, row_ids, slot_of and every slot's h row, memcmp. Routings:
// plain, an id -1, an id past the experts, a repeated id, the shared expert's id (a bad id in both: slot_of
// -1, every tile inside the routing's slots, the shared expert at slot K). Negative control: the separate
// ops on the routing with two ids swapped (the same tiles and h rows, other slot_of) must differ.
void check_routed(Tally& tally, const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int stack = c.E + 1, total = c.K + 1, max_tiles = max_expert_tiles(1, c.K + 1, stack, 1);
  const DeviceMatrix w = random_matrix(2 * int64_t{c.I}, c.cols, stack, c.bits, c.group, seed, nullptr);
  TiledWeight t;
  t.affine = w.affine, t.rows = 2 * int64_t{c.I}, t.cols = c.cols, t.n_experts = stack;
  const DeviceBuffer x = random_floats(c.cols, seed + 1, -1.0f, 1.0f, nullptr);
  DeviceBuffer scratch(tc_decode_scratch_bytes(c.cols, 1)), group(expert_tiles_scratch_bytes(stack)),
      gu(size_t(total) * 2 * c.I * 4);
  struct Out {
    DeviceBuffer tiles, row_ids, slot_of, h;
    Out(int max_tiles, int total, int K, int I)
        : tiles(size_t(max_tiles) * sizeof(ExpertWindow)),
          row_ids(size_t(total) * 4),
          slot_of(size_t(K) * 4),
          h(size_t(total) * I * 4) {
      tiles.fill_bytes(0xFF), row_ids.fill_bytes(0xFF), slot_of.fill_bytes(0xFF), h.fill_bytes(0xFF);
    }
  };
  auto separate = [&](const DeviceBuffer& topk, Out& o) {
    moe_expert_tiles(topk.as<int32_t>(), 1, c.K, stack, o.tiles.as<ExpertWindow>(), max_tiles,
                     o.row_ids.as<int32_t>(), o.slot_of.as<int32_t>(), group.data(), nullptr, 1, c.E);
    tc_decode_experts(t, o.tiles.as<ExpertWindow>(), max_tiles, 1, o.row_ids.as<int32_t>(), x.as<float>(),
                      c.cols, 1, gu.as<float>(), 2 * c.I, scratch.data(), scratch.bytes(), nullptr);
    silu_mul_halves(gu.as<float>(), total, c.I, o.h.as<float>(), nullptr);
  };
  for (int kind = 0; kind < kRoutingKinds; ++kind) {
    std::vector<int32_t> topk = routing_of_kind(kind, c.E, c.K, stack, rng);
    DeviceBuffer d_topk(topk.size() * 4);
    d_topk.upload(topk.data(), topk.size() * 4);
    Out a(max_tiles, total, c.K, c.I), f(max_tiles, total, c.K, c.I);
    separate(d_topk, a);
    const bool took = tc_decode_experts_swiglu_routed(
        t, d_topk.as<int32_t>(), c.K, c.E, f.tiles.as<ExpertWindow>(), max_tiles, f.row_ids.as<int32_t>(),
        f.slot_of.as<int32_t>(), x.as<float>(), f.h.as<float>(), c.I, scratch.data(), scratch.bytes(),
        nullptr);
    const auto ta = synced_download<ExpertWindow>(a.tiles, max_tiles),
               tf = synced_download<ExpertWindow>(f.tiles, max_tiles);
    const auto ha = synced_download<float>(a.h, size_t(total) * c.I),
               hf = synced_download<float>(f.h, size_t(total) * c.I);
    bool h_same = true;
    int slots = 0;
    for (const ExpertWindow& tw : ta)
      for (int j = 0; j < tw.count; ++j, ++slots)
        h_same = h_same && std::memcmp(&ha[size_t(tw.first + j) * c.I], &hf[size_t(tw.first + j) * c.I],
                                       size_t(c.I) * 4) == 0;
    const bool tiles_same = std::memcmp(ta.data(), tf.data(), ta.size() * sizeof(ExpertWindow)) == 0;
    const bool rows_same =
        same_bytes(synced_download<int32_t>(a.row_ids, total), synced_download<int32_t>(f.row_ids, total));
    const auto sa = synced_download<int32_t>(a.slot_of, c.K), sf = synced_download<int32_t>(f.slot_of, c.K);
    // The shared expert's id routed: a bad id (slot_of -1), no tile past the slots, the shared one at K.
    bool inside = true;
    for (const ExpertWindow& tw : tf)
      inside =
          inside && tw.first + tw.count <= total && (tw.expert != c.E || (tw.first == c.K && tw.count == 1));
    const bool bad_ok = kind != 4 || (sa[4 % c.K] == -1 && sf[4 % c.K] == -1 && inside);
    const bool ok = took && tiles_same && rows_same && same_bytes(sa, sf) && h_same && slots > 0 && bad_ok;
    const std::string name =
        "tensor gate|up + SwiGLU + grouping in one launch (one row, top-" + std::to_string(c.K) + " of " +
        std::to_string(c.E) + " + shared, " + routing_kind_name(kind) + ", " + std::to_string(c.bits) +
        "-bit g" + std::to_string(c.group) + ", " + tc_planes_name(tc_decode_planes()) + variant_note() + ")";
    std::printf("  %s: %s (tiles %s, row_ids %s, slot_of %s, h of %d slots %s%s)\n", name.c_str(),
                !took ? "NOT TAKEN"
                : ok  ? "bit-identical"
                      : "DIFFERENT",
                tiles_same ? "=" : "!=", rows_same ? "=" : "!=", same_bytes(sa, sf) ? "=" : "!=", slots,
                h_same ? "=" : "!=",
                kind != 4 ? ""
                : bad_ok  ? "; the id: slot_of -1, no slot past"
                          : "; the id TOOK A SLOT");
    tally.expect(ok, name + ": == moe_expert_tiles + tc_decode_experts + silu_mul_halves");
    if (kind != 0) continue;
    std::swap(topk[0], topk[1]);
    d_topk.upload(topk.data(), topk.size() * 4);
    Out s(max_tiles, total, c.K, c.I);
    separate(d_topk, s);
    const bool ctrl_tiles = same_bytes(synced_download<ExpertWindow>(s.tiles, max_tiles), tf);
    const bool ctrl_slots = same_bytes(synced_download<int32_t>(s.slot_of, c.K), sf);
    std::printf("  negative control (two ids swapped): tiles %s, slot_of %s\n",
                ctrl_tiles ? "=" : "!=", ctrl_slots ? "=" : "!=");
    tally.expect(ctrl_tiles && !ctrl_slots,
                 name + ": negative control (swapped ids: same tiles, other slot_of)");
  }
}

}  // namespace

void run_tc_swiglu_checks(Tally& tally) {
  const TcPlanes was = tc_decode_planes();
  const bool fold = tc_decode_fold_swiglu_on(), row = tc_decode_row_kernel_on(),
             grouping = tc_decode_fold_grouping_on();
  tc_decode_fold_swiglu(true);
  tc_decode_fold_grouping(true);
  tc_decode_row_kernel(true);
  for (const TcPlanes p : {TcPlanes::Chained, TcPlanes::Columns}) {
    tc_decode_set_planes(p);
    // The real shape (1280 x 2560 an expert: 4 slices, blocks of 16 outputs), 4-bit g32 and 6-bit g64.
    check_case(tally, Case{640, 2560, 32, 10, 4, 32}, {1, 2, 4, 8, 16, 64}, 401, true);
    check_case(tally, Case{640, 2560, 32, 10, 6, 64}, {1, 16}, 402, false);
    // 2 slices (384 x 1280: blocks of 32 outputs), 3-bit g128; 1 slice (512 x 1024: 64 outputs), 2-bit g32.
    check_case(tally, Case{192, 1280, 16, 4, 3, 128}, {1, 8}, 403, true);
    check_case(tally, Case{256, 1024, 16, 6, 2, 32}, {1, 4}, 404, true);
    check_routed(tally, Case{640, 2560, 32, 10, 4, 32}, 411);
    check_routed(tally, Case{192, 1280, 16, 4, 3, 128}, 412);
    // The one-row kernel's launch modes (tc_row.cu, tcmid12: kLean2 +16, kPair +32) on the folds: the only
    // tile launches whose blocks run two tasks (gate, then up), so the ring runs on into the next task.
    for (const int variant : {30, 62}) {
      setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(variant).c_str(), 1);
      check_case(tally, Case{640, 2560, 32, 10, 4, 32}, {1}, 421, false);
      check_case(tally, Case{192, 1280, 16, 4, 3, 128}, {1}, 423, false);
      check_routed(tally, Case{640, 2560, 32, 10, 4, 32}, 431);
      unsetenv("DS_CUDA_TC_ROW_VARIANT");
    }
  }
  tc_decode_set_planes(was);
  // Refused: half not a multiple of the output block (400 x 2560: 4 slices, 200 % 16 != 0); the fold off.
  {
    const DeviceMatrix w = random_matrix(400, 2560, 3, 4, 32, 405, nullptr);
    TiledWeight t;
    t.affine = w.affine, t.rows = 400, t.cols = 2560, t.n_experts = 3;
    const bool odd = tc_decode_swiglu_takes(t, 1);
    TiledWeight real = t;
    real.rows = 1280;  // shape only: never launched
    tc_decode_fold_swiglu(false);
    const bool off = tc_decode_swiglu_takes(real, 1);
    tc_decode_fold_swiglu(true);
    const bool on = tc_decode_swiglu_takes(real, 1);
    std::printf(
        "  fold refuses half 200 of 16-output blocks: %s; refuses with the fold off: %s; takes 1280 x "
        "2560 with it on: %s\n",
        odd ? "no" : "yes", off ? "no" : "yes", on ? "yes" : "no");
    tally.expect(!odd && !off && on, "tc_decode_swiglu_takes: the shape rule and the switch");
  }
  tc_decode_fold_swiglu(fold);
  tc_decode_fold_grouping(grouping);
  tc_decode_row_kernel(row);
}

}  // namespace ds::cuda::modelcheck
