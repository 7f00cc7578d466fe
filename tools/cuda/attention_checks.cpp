// Checks and timings of the attention decode step (backend/cuda/attention_decode.h) against the float64
// reference: bound, negative control, streams alone == streams in one launch, a window == its tokens step by
// step, appended caches.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "attention_reference.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stream.h"
#include "checks.h"
#include "deltanet_reference.h"
#include "scoped_env.h"

namespace ds::cuda::wxcheck {

namespace {

struct DeviceAttnWeights {
  DeviceBuffer q_norm, k_norm, inv_freq;
  explicit DeviceAttnWeights(const AttentionCase& c)
      : q_norm(upload(c.q_norm)), k_norm(upload(c.k_norm)), inv_freq(upload(c.inv_freq)) {}
  AttentionWeights view() const { return {q_norm.as<float>(), k_norm.as<float>(), inv_freq.as<float>()}; }
};

// Caches per window on the host: positions 0 .. filled-1 ([capacity = pos0 + count, kv_width]).
struct HostCaches {
  std::vector<std::vector<float>> keys, values;
};

HostCaches initial_caches(const AttentionCase& c) {
  HostCaches h;
  const int64_t kvw = c.shape.kv_width();
  for (const auto& w : c.windows) {
    h.keys.push_back(w.keys);
    h.values.push_back(w.values);
    h.keys.back().resize((w.pos0 + w.count) * kvw, 0.0f);
    h.values.back().resize((w.pos0 + w.count) * kvw, 0.0f);
  }
  return h;
}

// Runs windows `sel` (rows packed from row 0 in the given order), tokens [t0, t0+n) of each, on `caches`.
std::vector<float> run_attn(const AttentionCase& c, const DeviceAttnWeights& w, const std::vector<int>& sel,
                            int t0, int n, HostCaches& caches, const Stream& stream) {
  const AttentionShape& s = c.shape;
  const int64_t qw = s.q_width(), kvw = s.kv_width();
  std::vector<float> qg, k, v;
  std::vector<AttentionWindow> wins;
  std::vector<DeviceBuffer> kbufs, vbufs;
  int rows = 0, max_count = 0;
  for (int i : sel) {
    const HostAttentionWindow& hw = c.windows[i];
    const int cnt = std::min(n, hw.count - t0);
    const int64_t src = hw.row0 + t0;
    qg.insert(qg.end(), c.qg.begin() + src * qw, c.qg.begin() + (src + cnt) * qw);
    k.insert(k.end(), c.k.begin() + src * kvw, c.k.begin() + (src + cnt) * kvw);
    v.insert(v.end(), c.v.begin() + src * kvw, c.v.begin() + (src + cnt) * kvw);
    kbufs.push_back(upload(caches.keys[i]));
    vbufs.push_back(upload(caches.values[i]));
    wins.push_back(
        {rows, cnt, hw.pos0 + t0, hw.pos0 + hw.count, kbufs.back().as<float>(), vbufs.back().as<float>()});
    rows += cnt;
    max_count = std::max(max_count, cnt);
  }
  DeviceBuffer d_qg = upload(qg), d_k = upload(k), d_v = upload(v), d_wins = upload(wins);
  DeviceBuffer out(rows * int64_t{s.nh} * s.hd * sizeof(float));
  out.fill_bytes(0xFF);
  AttentionRows r{d_qg.as<float>(), d_k.as<float>(), d_v.as<float>(), out.as<float>()};
  attention_decode(s, w.view(), d_wins.as<AttentionWindow>(), static_cast<int>(wins.size()), max_count, r,
                   rows, stream.get());
  stream.synchronize();
  for (size_t j = 0; j < sel.size(); ++j) {
    caches.keys[sel[j]] = download<float>(kbufs[j], caches.keys[sel[j]].size());
    caches.values[sel[j]] = download<float>(vbufs[j], caches.values[sel[j]].size());
  }
  return download<float>(out, rows * int64_t{s.nh} * s.hd);
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

void check_attention_shape(Tally& tally, const AttentionShape& s, const std::string& name,
                           std::mt19937_64& rng) {
  const std::vector<int> counts = {1, 16, 3, 7, 2, 12, 5, 1}, prefixes = {0, 37, 1000, 5, 300, 64, 9000, 1};
  const AttentionCase c = random_attention_case(s, counts, prefixes, rng);
  const DeviceAttnWeights w(c);
  Stream stream;
  const int64_t ow = int64_t{s.nh} * s.hd, kvw = s.kv_width();
  const int nw = static_cast<int>(c.windows.size());
  const AttentionReference ref = attention_reference(c, 1.0), control = attention_reference(c, 1.01);
  std::vector<int> all(nw);
  for (int i = 0; i < nw; ++i) all[i] = i;
  HostCaches full_caches = initial_caches(c);
  const std::vector<float> full = run_attn(c, w, all, 0, 1 << 30, full_caches, stream);

  double out_ratio = 0, out_control = 0, key_ratio = 0;
  bool finite = true, values_exact = true, prefix_kept = true;
  int64_t packed = 0;
  for (int i = 0; i < nw; ++i) {
    const HostAttentionWindow& hw = c.windows[i];
    const float* got = full.data() + packed * ow;
    for (int64_t j = 0; j < hw.count * ow; ++j) finite = finite && std::isfinite(got[j]);
    out_ratio = std::max(out_ratio,
                         head_err_ratio(got, ref.out.data() + hw.row0 * ow, hw.count * int64_t{s.nh}, s.hd));
    out_control = std::max(
        out_control, head_err_ratio(got, control.out.data() + hw.row0 * ow, hw.count * int64_t{s.nh}, s.hd));
    const float* new_keys = full_caches.keys[i].data() + int64_t{hw.pos0} * kvw;
    key_ratio = std::max(key_ratio,
                         head_err_ratio(new_keys, ref.new_keys[i].data(), hw.count * int64_t{s.nkv}, s.hd));
    values_exact = values_exact && std::memcmp(full_caches.values[i].data() + int64_t{hw.pos0} * kvw,
                                               c.v.data() + int64_t{hw.row0} * kvw, hw.count * kvw * 4) == 0;
    prefix_kept =
        prefix_kept && std::memcmp(full_caches.keys[i].data(), hw.keys.data(), hw.keys.size() * 4) == 0;
    packed += hw.count;
  }
  std::printf("attention %-26s out err/bound %.4f (control %.1f)  new keys err/bound %.4f\n", name.c_str(),
              out_ratio, out_control, key_ratio);
  tally.expect(finite, "attention " + name + ": every output written and finite");
  tally.expect(out_ratio <= 1.0, "attention " + name + ": output within the bound");
  tally.expect(key_ratio <= 1.0, "attention " + name + ": appended keys within the bound");
  tally.expect(out_control > 1.0,
               "attention " + name + ": negative control (scores 1% off) exceeds the bound");
  tally.expect(values_exact && prefix_kept,
               "attention " + name + ": values appended exactly, prefix untouched");

  // The attend kernel at 8 and 16 warps a block (DS_CUDA_ATTEND_WARPS) == at 4, bit for bit: outputs and the
  // appended keys; a head's arithmetic is one warp's at every count.
  {
    const ScopedEnv attend_warps("DS_CUDA_ATTEND_WARPS", "4");
    HostCaches base_caches = initial_caches(c);
    const std::vector<float> base = run_attn(c, w, all, 0, 1 << 30, base_caches, stream);
    bool warps_same = true;
    for (const char* warps : {"8", "16"}) {
      attend_warps.set(warps);
      HostCaches caches = initial_caches(c);
      const std::vector<float> got = run_attn(c, w, all, 0, 1 << 30, caches, stream);
      warps_same = warps_same && same_bits(got, base);
      for (int i = 0; i < nw; ++i) warps_same = warps_same && same_bits(caches.keys[i], base_caches.keys[i]);
    }
    std::printf("attention %-26s attend at 8 and 16 warps == 4: %s\n", name.c_str(),
                warps_same ? "bit-identical" : "DIFFERENT");
    tally.expect(warps_same, "attention " + name + ": the attend kernel at 8 and 16 warps == at 4 (bits)");
  }

  bool alone_same = true;
  packed = 0;
  for (int i = 0; i < nw; ++i) {
    HostCaches caches = initial_caches(c);
    const std::vector<float> one = run_attn(c, w, {i}, 0, 1 << 30, caches, stream);
    alone_same = alone_same && std::memcmp(one.data(), full.data() + packed * ow, one.size() * 4) == 0 &&
                 same_bits(caches.keys[i], full_caches.keys[i]) &&
                 same_bits(caches.values[i], full_caches.values[i]);
    packed += c.windows[i].count;
  }
  tally.expect(alone_same, "attention " + name + ": each stream alone == inside the 8-stream launch (bits)");

  for (int step : {1, 4}) {
    HostCaches caches = initial_caches(c);
    std::vector<std::vector<float>> outs(nw);
    for (int t0 = 0; t0 < 16; t0 += step) {
      std::vector<int> sel;
      for (int i = 0; i < nw; ++i)
        if (c.windows[i].count > t0) sel.push_back(i);
      if (sel.empty()) break;
      const std::vector<float> o = run_attn(c, w, sel, t0, step, caches, stream);
      int64_t p = 0;
      for (int i : sel) {
        const int cnt = std::min(step, c.windows[i].count - t0);
        outs[i].insert(outs[i].end(), o.begin() + p * ow, o.begin() + (p + cnt) * ow);
        p += cnt;
      }
    }
    bool same = true;
    packed = 0;
    for (int i = 0; i < nw; ++i) {
      const int64_t n = c.windows[i].count * ow;
      same = same && outs[i].size() == static_cast<size_t>(n) &&
             std::memcmp(outs[i].data(), full.data() + packed * ow, n * 4) == 0 &&
             same_bits(caches.keys[i], full_caches.keys[i]) &&
             same_bits(caches.values[i], full_caches.values[i]);
      packed += c.windows[i].count;
    }
    tally.expect(same,
                 "attention " + name + ": windows == steps of " + std::to_string(step) + " tokens (bits)");
  }
}

}  // namespace

void run_attention_checks(Tally& tally) {
  std::mt19937_64 rng(5);
  AttentionShape flash;  // Flash Next large: 24 q heads, 2 kv heads, hd 256, rotary 64
  check_attention_shape(tally, flash, "flashnext 24/2 hd256 rd64", rng);
  AttentionShape small;
  small.nh = 8;
  small.nkv = 4;
  small.hd = 128;
  small.rotary_dim = 32;
  check_attention_shape(tally, small, "small 8/4 hd128 rd32", rng);
  bool named = false;
  try {
    AttentionShape bad;
    bad.hd = 64;
    attention_decode(bad, {}, nullptr, 1, 1, {}, 1, nullptr);
  } catch (const ArgumentError& e) {
    named = std::string(e.what()).find("hd must be 128 or 256") != std::string::npos;
  }
  tally.expect(named, "attention: hd = 64 is an ArgumentError naming hd");
}

void run_attention_bench(int reps) {
  std::printf(
      "\nAttention decode step, Flash Next shape (24 q / 2 kv heads, hd 256, rotary 64); one token per "
      "stream; KV bytes = streams x context x 2 x 2 KB (f32)\n");
  std::printf("%8s %8s %10s %10s %8s\n", "streams", "context", "us/step", "KV GB/s", "%4.3TB");
  const AttentionShape s;
  std::mt19937_64 rng(13);
  for (int streams : {1, 8, 32, 64}) {
    for (int context : {1024, 8192, 32768}) {
      const AttentionCase wc = random_attention_case(s, {1}, {0}, rng);
      const DeviceAttnWeights w(wc);
      const int64_t kvw = s.kv_width(), cap = context + 1;
      DeviceBuffer keys(streams * cap * kvw * 4), values(streams * cap * kvw * 4);
      keys.fill_bytes(0);
      values.fill_bytes(0);
      std::normal_distribution<float> d(0.0f, 1.0f);
      std::vector<float> qg(streams * s.q_width()), kv(streams * kvw);
      for (auto& x : qg) x = d(rng);
      for (auto& x : kv) x = d(rng);
      DeviceBuffer d_qg = upload(qg), d_kv = upload(kv), out(streams * int64_t{s.nh} * s.hd * 4);
      std::vector<AttentionWindow> wins;
      for (int i = 0; i < streams; ++i)
        wins.push_back({i, 1, context, static_cast<int32_t>(cap), keys.as<float>() + i * cap * kvw,
                        values.as<float>() + i * cap * kvw});
      DeviceBuffer d_wins = upload(wins);
      AttentionRows r{d_qg.as<float>(), d_kv.as<float>(), d_kv.as<float>(), out.as<float>()};
      Stream stream;
      Event start, stop;
      DeviceBuffer ws(
          attention_decode_workspace_bytes(s, streams));  // caller-owned scratch, as a model holds it
      auto launch = [&] {
        attention_decode(s, w.view(), d_wins.as<AttentionWindow>(), streams, 1, r, streams, ws.data(),
                         ws.bytes(), stream.get());
      };
      for (int i = 0; i < 3; ++i) launch();
      start.record(stream.get());
      for (int i = 0; i < reps; ++i) launch();
      stop.record(stream.get());
      stop.synchronize();
      const double us = 1000.0 * stop.ms_since(start) / reps;
      const double gbs = streams * double(context + 1) * 2.0 * kvw * 4 / (us * 1e3);
      std::printf("%8d %8d %10.2f %10.0f %7.1f%%\n", streams, context, us, gbs, gbs / 43.0);
    }
  }
}

}  // namespace ds::cuda::wxcheck
