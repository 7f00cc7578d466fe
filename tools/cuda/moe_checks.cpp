// Checks and timings of the MoE expert path of a decode step (backend/cuda/wx_products.h): moe_expert_windows
// groups the routing into expert windows; affine_wx_expert_windows runs every expert's rows in one launch.
// Each slot's result must equal affine_wx of its expert on its row alone, bit for bit (whatever the window).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stream.h"
#include "backend/cuda/wx_products.h"
#include "checks.h"
#include "host_reference.h"

namespace ds::cuda::wxcheck {
namespace {

// Top-k distinct experts per row, drawn from the first `hot` experts so that experts serve several rows.
std::vector<int32_t> random_topk(int n_rows, int k, int hot, std::mt19937_64& rng) {
  std::vector<int32_t> ids;
  for (int r = 0; r < n_rows; ++r) {
    std::vector<int32_t> all(hot);
    for (int e = 0; e < hot; ++e) all[e] = e;
    std::shuffle(all.begin(), all.end(), rng);
    ids.insert(ids.end(), all.begin(), all.begin() + k);
  }
  return ids;
}

struct Grouping {
  std::vector<ExpertWindow> windows;
  std::vector<int32_t> row_ids, slot_of;
};

Grouping group_on_device(const std::vector<int32_t>& topk, int n_rows, int k, int n_experts,
                         const Stream& stream, DeviceBuffer& d_windows, DeviceBuffer& d_row_ids) {
  const size_t n = topk.size();
  DeviceBuffer d_topk = upload(topk), d_slot(n * 4);
  d_windows = DeviceBuffer(n * sizeof(ExpertWindow));
  d_row_ids = DeviceBuffer(n * 4);
  d_windows.fill_bytes(0x7F);
  d_row_ids.fill_bytes(0x7F);
  moe_expert_windows(d_topk.as<int32_t>(), n_rows, k, n_experts, d_windows.as<ExpertWindow>(),
                     d_row_ids.as<int32_t>(), d_slot.as<int32_t>(), stream.get());
  stream.synchronize();
  return {download<ExpertWindow>(d_windows, n), download<int32_t>(d_row_ids, n),
          download<int32_t>(d_slot, n)};
}

// The grouping is a partition of the pairs: every pair has one slot holding its row, windows cover the slots
// of one expert each, in expert order, rows ascending, at most kMaxExpertWindowRows per window.
bool grouping_ok(const Grouping& g, const std::vector<int32_t>& topk, int k) {
  const int n = static_cast<int>(topk.size());
  std::vector<int32_t> expert_of_slot(n, -1);
  int covered = 0, last_expert = -1, last_row = -1;
  bool ok = true;
  for (const ExpertWindow& w : g.windows) {
    if (w.count == 0) continue;
    ok = ok && w.count <= kMaxExpertWindowRows && w.first == covered && w.expert >= last_expert;
    if (w.expert != last_expert) last_row = -1;
    for (int j = 0; ok && j < w.count; ++j) {
      expert_of_slot[w.first + j] = w.expert;
      ok = g.row_ids[w.first + j] > last_row;
      last_row = g.row_ids[w.first + j];
    }
    last_expert = w.expert;
    covered += w.count;
  }
  ok = ok && covered == n;
  std::set<int32_t> slots;
  for (int p = 0; ok && p < n; ++p) {
    const int32_t s = g.slot_of[p];
    ok = s >= 0 && s < n && slots.insert(s).second && expert_of_slot[s] == topk[p] && g.row_ids[s] == p / k;
  }
  return ok;
}

void check_expert_windows(Tally& tally, std::mt19937_64& rng, const Stream& stream) {
  const int n_experts = 8, rows = 70, cols = 2560, n_rows = 13, k = 5;
  const std::vector<int32_t> topk =
      random_topk(n_rows, k, n_experts, rng);  // ~8 rows per expert: 2-3 windows
  DeviceBuffer d_windows, d_row_ids;
  const Grouping g = group_on_device(topk, n_rows, k, n_experts, stream, d_windows, d_row_ids);
  tally.expect(grouping_ok(g, topk, k), "moe_expert_windows: a partition of the pairs in expert/row order");
  const int n_slots = n_rows * k;
  std::vector<ExpertWindow> with_bad = g.windows;
  const int bad_first = n_slots;  // one more window past the slots, naming expert n_experts: NaN outputs
  with_bad.push_back({n_experts, bad_first, 2});
  DeviceBuffer d_bad_windows = upload(with_bad);
  std::vector<int32_t> ids_bad = g.row_ids;
  ids_bad.push_back(0);
  ids_bad.push_back(1);
  DeviceBuffer d_ids_bad = upload(ids_bad);

  for (int bits : {3, 4, 6}) {
    const int group = bits == 4 ? 32 : 64;
    const HostAffine h = random_affine(int64_t{n_experts} * rows, cols, bits, group, rng);
    DeviceBuffer codes = upload(h.codes), scales = upload(h.scales), biases = upload(h.biases);
    const AffineWeight all{codes.as<uint32_t>(),
                           scales.as<uint16_t>(),
                           biases.as<uint16_t>(),
                           rows,
                           cols,
                           bits,
                           group,
                           n_experts};
    for (ActType t : {ActType::F32, ActType::BF16}) {
      // x: n_rows rows (gather through row_ids) and the same rows laid out in slot order (contiguous
      // windows).
      const int64_t ld = cols + 8;
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> xf(n_rows * ld), xs_f((n_slots + 2) * ld);
      std::vector<uint16_t> xb(n_rows * ld), xs_b((n_slots + 2) * ld);
      for (int64_t i = 0; i < n_rows * ld; ++i) {
        xf[i] = d(rng);
        xb[i] = float_to_bf16(d(rng));
      }
      for (int s = 0; s < n_slots; ++s) {
        std::memcpy(&xs_f[s * ld], &xf[g.row_ids[s] * ld], ld * 4);
        std::memcpy(&xs_b[s * ld], &xb[g.row_ids[s] * ld], ld * 2);
      }
      DeviceBuffer dx = t == ActType::F32 ? upload(xf) : upload(xb);
      DeviceBuffer dxs = t == ActType::F32 ? upload(xs_f) : upload(xs_b);
      const Activations x{dx.data(), t, ld}, xs{dxs.data(), t, ld};
      const int64_t ldy = rows + 1;
      DeviceBuffer y_gather((n_slots + 2) * ldy * 4), y_slots((n_slots + 2) * ldy * 4);
      y_gather.fill_bytes(0x7F);
      y_slots.fill_bytes(0x7F);
      affine_wx_expert_windows(all, d_bad_windows.as<ExpertWindow>(), static_cast<int>(with_bad.size()),
                               d_ids_bad.as<int32_t>(), x, n_rows, y_gather.as<float>(), ldy, stream.get());
      affine_wx_expert_windows(all, d_windows.as<ExpertWindow>(), n_slots, nullptr, xs, n_slots,
                               y_slots.as<float>(), ldy, stream.get());
      stream.synchronize();
      const std::vector<float> got = download<float>(y_gather, (n_slots + 2) * ldy);
      const std::vector<float> got_slots = download<float>(y_slots, (n_slots + 2) * ldy);
      bool same = true, same_slots = true;
      DeviceBuffer y1(rows * 4);
      for (const ExpertWindow& w : g.windows) {
        for (int j = 0; j < w.count; ++j) {
          const int s = w.first + j;
          AffineWeight one = all;
          one.n_experts = 1;
          one.codes += w.expert * rows * h.words_per_row();
          one.scales += w.expert * rows * h.groups_per_row();
          one.biases += w.expert * rows * h.groups_per_row();
          const Activations xr{
              static_cast<const char*>(dx.data()) + g.row_ids[s] * ld * (t == ActType::F32 ? 4 : 2), t, ld};
          affine_wx(one, xr, 1, y1.as<float>(), rows, stream.get());
          stream.synchronize();
          const std::vector<float> alone = download<float>(y1, rows);
          same = same && std::memcmp(alone.data(), &got[s * ldy], rows * 4) == 0;
          same_slots = same_slots && std::memcmp(alone.data(), &got_slots[s * ldy], rows * 4) == 0;
        }
      }
      bool nan_rows = true;
      for (int j = 0; j < 2; ++j)
        for (int64_t o = 0; o < rows; ++o) nan_rows = nan_rows && std::isnan(got[(bad_first + j) * ldy + o]);
      const std::string name = "expert windows " + std::to_string(bits) + "-bit x " +
                               (t == ActType::F32 ? std::string("f32") : std::string("bf16"));
      tally.expect(same, name + ": each slot (gathered rows) == its expert on its row alone (bits)");
      tally.expect(same_slots,
                   name + ": each slot (rows in slot order) == its expert on its row alone (bits)");
      tally.expect(nan_rows, name + ": a window with an out-of-range expert gives NaN outputs");
    }
  }
}

}  // namespace

void run_moe_checks(Tally& tally) {
  std::mt19937_64 rng(77);
  Stream stream;
  check_expert_windows(tally, rng, stream);
}

// The expert path of one decode step at the Flash Next shape: 512 experts, top-10, gate|up 1280 x 2560 and
// down 2560 x 640, x bf16. Bytes = the distinct experts' weights (each read once per launch) + x + y.
void run_moe_bench(int reps) {
  std::printf(
      "\nMoE expert path (512 experts, top-10; gate|up 1280x2560, down 2560x640; x bf16): one launch each, "
      "64 routings rotate\n");
  std::printf("%-10s %7s %8s | %9s %9s %6s | %9s %9s %6s | %8s %6s\n", "format", "streams", "experts",
              "gu us", "GB/s", "%", "down us", "GB/s", "%", "total us", "%");
  std::mt19937_64 rng(99);
  const int n_experts = 512, k = 10, lists = 64;
  Stream stream;
  for (int bits : {4, 6}) {
    const int group = bits == 4 ? 32 : 64;
    struct Mat {
      int64_t rows, cols;
      size_t codes, scales;
    };
    const Mat gu{1280, 2560, size_t(1280) * 2560 / 8 * bits, size_t(1280) * (2560 / group) * 2};
    const Mat dn{2560, 640, size_t(2560) * 640 / 8 * bits, size_t(2560) * (640 / group) * 2};
    std::vector<DeviceBuffer> bufs;
    AffineWeight w[2];
    int i = 0;
    for (const Mat& m : {gu, dn}) {
      bufs.emplace_back(m.codes * n_experts);
      bufs.emplace_back(m.scales * n_experts);
      bufs.emplace_back(m.scales * n_experts);
      for (size_t b = bufs.size() - 3; b < bufs.size(); ++b) bufs[b].fill_bytes(static_cast<int>(0x3C + b));
      w[i++] = AffineWeight{bufs[bufs.size() - 3].as<uint32_t>(),
                            bufs[bufs.size() - 2].as<uint16_t>(),
                            bufs[bufs.size() - 1].as<uint16_t>(),
                            m.rows,
                            m.cols,
                            bits,
                            group,
                            n_experts};
    }
    for (int streams : {1, 8, 32, 64}) {
      const int n_slots = streams * k;
      std::vector<DeviceBuffer> d_win(lists), d_ids(lists);
      double distinct = 0;
      for (int l = 0; l < lists; ++l) {
        const std::vector<int32_t> topk = random_topk(streams, k, n_experts, rng);
        distinct += std::set<int32_t>(topk.begin(), topk.end()).size();
        const Grouping g = group_on_device(topk, streams, k, n_experts, stream, d_win[l], d_ids[l]);
        (void)g;
      }
      distinct /= lists;
      const std::vector<uint16_t> xh = random_bf16(int64_t{n_slots} * 2560, 1.0f, rng);
      DeviceBuffer x = upload(xh), y_gu(size_t(n_slots) * 1280 * 4), y_dn(size_t(n_slots) * 2560 * 4);
      const Activations xg{x.data(), ActType::BF16, 2560}, xd{x.data(), ActType::BF16, 640};
      auto time_us = [&](auto launch) {
        for (int l = 0; l < lists; ++l) launch(l);
        Event start, stop;
        start.record(stream.get());
        for (int r = 0; r < reps; ++r)
          for (int l = 0; l < lists; ++l) launch(l);
        stop.record(stream.get());
        stop.synchronize();
        return 1000.0 * stop.ms_since(start) / (double(reps) * lists);
      };
      const double gu_us = time_us([&](int l) {
        affine_wx_expert_windows(w[0], d_win[l].as<ExpertWindow>(), n_slots, d_ids[l].as<int32_t>(), xg,
                                 streams, y_gu.as<float>(), 1280, stream.get());
      });
      const double dn_us = time_us([&](int l) {
        affine_wx_expert_windows(w[1], d_win[l].as<ExpertWindow>(), n_slots, nullptr, xd, n_slots,
                                 y_dn.as<float>(), 2560, stream.get());
      });
      const double gu_bytes = distinct * (gu.codes + 2 * gu.scales),
                   dn_bytes = distinct * (dn.codes + 2 * dn.scales);
      auto pct = [](double bytes, double us) { return 100.0 * bytes / (us * 1e3) / 4300.0; };
      std::printf("%d-bit g%-3d %7d %8.1f | %9.1f %9.0f %5.0f%% | %9.1f %9.0f %5.0f%% | %8.1f %5.0f%%\n",
                  bits, group, streams, distinct, gu_us, gu_bytes / (gu_us * 1e3), pct(gu_bytes, gu_us),
                  dn_us, dn_bytes / (dn_us * 1e3), pct(dn_bytes, dn_us), gu_us + dn_us,
                  pct(gu_bytes + dn_bytes, gu_us + dn_us));
    }
  }
}

}  // namespace ds::cuda::wxcheck
