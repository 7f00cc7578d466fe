// Checks and timings of the DeltaNet decode step (backend/cuda/deltanet_decode.h) against the float64
// reference: bound, negative control, streams alone == streams in one launch, a window == its tokens one by
// one; and of the chunked prompt form (deltanet_chunked.h): bound, against the per-token form, alone ==
// together, a window cut on the 64-grid == one launch.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "backend/cuda/deltanet_chunked.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/stream.h"
#include "checks.h"
#include "deltanet_reference.h"

namespace ds::cuda::wxcheck {

namespace {

struct DeviceWeights {
  DeviceBuffer taps, a_log, dt_bias, norm;
  explicit DeviceWeights(const DeltaNetCase& c)
      : taps(upload(c.taps)), a_log(upload(c.a_log)), dt_bias(upload(c.dt_bias)), norm(upload(c.norm)) {}
  DeltaNetWeights view() const {
    return {taps.as<float>(), a_log.as<float>(), dt_bias.as<float>(), norm.as<float>()};
  }
};

// What one launch sequence left: core rows, and per window its conv state and state.
struct StepResult {
  std::vector<float> core;
  std::vector<std::vector<float>> conv_states, states;
};

// Runs windows `sel` of case `c` (their rows packed in the given order, starting at row 0) for tokens
// [t0, t0+n) of each window, starting from `conv_states`/`states`; core of the packed rows is poisoned first.
// chunked: the prompt form, window i's first token at position pos0[i] (0 where pos0 is empty) + t0.
StepResult run_step(const DeltaNetCase& c, const DeviceWeights& w, const std::vector<int>& sel, int t0, int n,
                    const std::vector<std::vector<float>>& conv_states,
                    const std::vector<std::vector<float>>& states, const Stream& stream, bool chunked = false,
                    const std::vector<int>& pos0 = {}, bool separate_norm = false, bool staged = false,
                    bool one_launch = false, bool loads_first = false) {
  const DeltaNetShape& s = c.shape;
  const int64_t cd = s.conv_dim(), vd = s.value_dim(), nv = s.nv;
  std::vector<float> mixed, z, b, a;
  std::vector<DeltaNetWindow> wins;
  std::vector<DeviceBuffer> conv_bufs, state_bufs;
  int rows = 0, max_count = 0;
  for (int i : sel) {
    const HostWindow& hw = c.windows[i];
    const int cnt = std::min(n, hw.count - t0);
    const int64_t src = hw.row0 + t0;
    mixed.insert(mixed.end(), c.mixed.begin() + src * cd, c.mixed.begin() + (src + cnt) * cd);
    z.insert(z.end(), c.z.begin() + src * vd, c.z.begin() + (src + cnt) * vd);
    b.insert(b.end(), c.b.begin() + src * nv, c.b.begin() + (src + cnt) * nv);
    a.insert(a.end(), c.a.begin() + src * nv, c.a.begin() + (src + cnt) * nv);
    conv_bufs.push_back(upload(conv_states[i]));
    state_bufs.push_back(upload(states[i]));
    const int p0 = (pos0.empty() ? 0 : pos0[i]) + t0;
    wins.push_back({rows, cnt, conv_bufs.back().as<float>(), state_bufs.back().as<float>(), p0});
    rows += cnt;
    max_count = std::max(max_count, cnt);
  }
  DeviceBuffer d_mixed = upload(mixed), d_z = upload(z), d_b = upload(b), d_a = upload(a),
               d_wins = upload(wins);
  DeviceBuffer gates(rows * 2 * nv * sizeof(float)), core(rows * vd * sizeof(float));
  core.fill_bytes(0xFF);
  gates.fill_bytes(0xFF);
  DeltaNetRows r{d_mixed.as<float>(), d_z.as<float>(),   d_b.as<float>(),
                 d_a.as<float>(),     gates.as<float>(), core.as<float>()};
  DeviceBuffer scratch(chunked ? deltanet_chunked_scratch_bytes(s, rows) : 16);
  scratch.fill_bytes(0xFF);
  const DeltaRuleChunks chunks{max_count, scratch.as<float>(), scratch.bytes()};
  deltanet_decode(s, w.view(), d_wins.as<DeltaNetWindow>(), static_cast<int>(wins.size()), r, rows,
                  stream.get(), chunked ? &chunks : nullptr, separate_norm, staged, one_launch, loads_first);
  stream.synchronize();
  StepResult out;
  out.core = download<float>(core, rows * vd);
  out.conv_states = conv_states;
  out.states = states;
  for (size_t k = 0; k < sel.size(); ++k) {
    out.conv_states[sel[k]] = download<float>(conv_bufs[k], conv_states[sel[k]].size());
    out.states[sel[k]] = download<float>(state_bufs[k], states[sel[k]].size());
  }
  return out;
}

bool same_bits(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// A random case on the device: its weights, every window's initial conv and recurrent states, the float64
// references (exact, and with beta 1% off: the negative control) and the list of all its windows.
struct CheckedCase {
  DeltaNetCase c;
  DeviceWeights w;
  std::vector<std::vector<float>> conv0, st0;
  DeltaNetReference ref, control;
  std::vector<int> all;
  CheckedCase(const DeltaNetShape& s, const std::vector<int>& counts, std::mt19937_64& rng)
      : c(random_deltanet_case(s, counts, rng)),
        w(c),
        ref(deltanet_reference(c, 1.0)),
        control(deltanet_reference(c, 1.01)) {
    for (const auto& hw : c.windows) {
      conv0.push_back(hw.conv_state);
      st0.push_back(hw.state);
      all.push_back(static_cast<int>(all.size()));
    }
  }
};

void check_shape(Tally& tally, const DeltaNetShape& s, const std::string& name, std::mt19937_64& rng) {
  const std::vector<int> counts = {1, 16, 3, 7, 2, 12, 5, 1};
  const CheckedCase checked(s, counts, rng);
  const auto& [c, w, conv0, st0, ref, control, all] = checked;
  Stream stream;
  const int64_t vd = s.value_dim(), nw = static_cast<int64_t>(c.windows.size());

  // All windows in one launch; packed rows are window 0 first, so map them back to the case's rows.
  const StepResult full = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream);
  double core_ratio = 0, core_control = 0, state_ratio = 0, state_control = 0;
  bool conv_exact = true, finite = true;
  int64_t packed = 0;
  for (int i = 0; i < nw; ++i) {
    const HostWindow& hw = c.windows[i];
    const float* got = full.core.data() + packed * vd;
    const double* want = ref.core.data() + int64_t{hw.row0} * vd;
    for (int64_t j = 0; j < hw.count * vd; ++j) finite = finite && std::isfinite(got[j]);
    core_ratio = std::max(core_ratio, head_err_ratio(got, want, hw.count * int64_t{s.nv}, s.dv));
    core_control = std::max(core_control, head_err_ratio(got, control.core.data() + int64_t{hw.row0} * vd,
                                                         hw.count * int64_t{s.nv}, s.dv));
    const int64_t heads = int64_t{s.nv} * s.dk;  // state rows of dv
    state_ratio =
        std::max(state_ratio, head_err_ratio(full.states[i].data(), ref.states[i].data(), heads, s.dv));
    state_control =
        std::max(state_control, head_err_ratio(full.states[i].data(), control.states[i].data(), heads, s.dv));
    conv_exact = conv_exact && same_bits(full.conv_states[i], ref.conv_states[i]);
    packed += hw.count;
  }
  std::printf("deltanet %-28s core err/bound %.4f (control %.1f)  state err/bound %.4f (control %.1f)\n",
              name.c_str(), core_ratio, core_control, state_ratio, state_control);
  tally.expect(finite, "deltanet " + name + ": every core output written and finite");
  tally.expect(core_ratio <= 1.0, "deltanet " + name + ": core within the bound");
  tally.expect(state_ratio <= 1.0, "deltanet " + name + ": state within the bound");
  tally.expect(core_control > 1.0,
               "deltanet " + name + ": negative control (beta 1% off) exceeds the core bound");
  tally.expect(state_control > 1.0, "deltanet " + name + ": negative control exceeds the state bound");
  tally.expect(conv_exact, "deltanet " + name + ": conv state = the last K-1 inputs, exactly");

  // The delta rule and gated norm in one launch (dv <= 128) == the two launches, bit for bit.
  const StepResult apart = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream, false, {}, true);
  bool apart_same = same_bits(apart.core, full.core);
  for (int i = 0; i < nw; ++i) apart_same = apart_same && same_bits(apart.states[i], full.states[i]);
  tally.expect(apart_same, "deltanet " + name + ": rule + gated norm in one launch == apart (bits)");
  // The loads-first kernels (sass13: the conv and the rule + norm issuing their loads together) == the
  // default ones, bit for bit: all windows in one launch, and each window alone; negative control: the same
  // kernels from states with one value changed by 0.5 give other states (one ulp was absorbed by the decay's
  // rounding in 2 of 3 shapes).
  {
    const StepResult lf =
        run_step(c, w, all, 0, 1 << 30, conv0, st0, stream, false, {}, false, false, false, true);
    bool lf_same = same_bits(lf.core, full.core);
    for (int i = 0; i < nw; ++i)
      lf_same = lf_same && same_bits(lf.states[i], full.states[i]) &&
                same_bits(lf.conv_states[i], full.conv_states[i]);
    int64_t at = 0;
    for (int i = 0; i < nw; ++i) {
      const StepResult r =
          run_step(c, w, {i}, 0, 1 << 30, conv0, st0, stream, false, {}, false, false, false, true);
      const int64_t n = c.windows[i].count * vd;
      lf_same = lf_same && std::memcmp(r.core.data(), full.core.data() + at * vd, n * 4) == 0 &&
                same_bits(r.states[i], full.states[i]) && same_bits(r.conv_states[i], full.conv_states[i]);
      at += c.windows[i].count;
    }
    auto st_off = st0;
    st_off[0][5] += 0.5f;
    const StepResult off =
        run_step(c, w, all, 0, 1 << 30, conv0, st_off, stream, false, {}, false, false, false, true);
    const bool lf_control = !same_bits(off.states[0], full.states[0]);
    std::printf("deltanet %-28s loads-first kernels == default: %s (a state changed: %s)\n", name.c_str(),
                lf_same ? "bit-identical" : "DIFFERENT", lf_control ? "differs" : "SAME");
    tally.expect(lf_same, "deltanet " + name + ": loads-first kernels == the default ones (bits)");
    tally.expect(lf_control, "deltanet " + name + ": loads-first from a changed state differs (control)");
  }
  // The prompt kernels (staged) on these short windows == the decode kernels, bit for bit.
  const StepResult staged = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream, false, {}, true, true);
  bool staged_same = same_bits(staged.core, full.core);
  for (int i = 0; i < nw; ++i)
    staged_same = staged_same && same_bits(staged.states[i], full.states[i]) &&
                  same_bits(staged.conv_states[i], full.conv_states[i]);
  tally.expect(staged_same,
               "deltanet " + name + ": the prompt (staged) kernels == the decode kernels (bits)");

  // The whole step in one launch (a cluster per key head; dv == 128) == the two launches, bit for bit: all
  // windows at once, each window alone, and a window as steps of one token.
  if (conv_rule_norm_supported(s)) {
    const StepResult one = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream, false, {}, false, false, true);
    bool one_same = same_bits(one.core, full.core);
    for (int i = 0; i < nw; ++i)
      one_same = one_same && same_bits(one.states[i], full.states[i]) &&
                 same_bits(one.conv_states[i], full.conv_states[i]);
    tally.expect(one_same, "deltanet " + name + ": conv + rule + norm in one launch == two launches (bits)");
    bool one_alone = true;
    packed = 0;
    for (int i = 0; i < nw; ++i) {
      const StepResult r = run_step(c, w, {i}, 0, 1 << 30, conv0, st0, stream, false, {}, false, false, true);
      const int64_t n = c.windows[i].count * vd;
      one_alone = one_alone && std::memcmp(r.core.data(), full.core.data() + packed * vd, n * 4) == 0 &&
                  same_bits(r.states[i], full.states[i]) && same_bits(r.conv_states[i], full.conv_states[i]);
      packed += c.windows[i].count;
    }
    tally.expect(one_alone, "deltanet " + name + ": one launch, each stream alone == two launches (bits)");
    auto conv = conv0, st = st0;
    std::vector<int> sel;
    for (int i = 0; i < nw; ++i) sel.push_back(i);
    StepResult r;
    for (int t0 = 0; t0 < 16;
         ++t0) {  // every window's tokens one step at a time (windows past their end idle)
      std::vector<int> live;
      for (int i : sel)
        if (c.windows[i].count > t0) live.push_back(i);
      if (live.empty()) break;
      r = run_step(c, w, live, t0, 1, conv, st, stream, false, {}, false, false, true);
      conv = r.conv_states, st = r.states;
    }
    bool steps_same = true;
    for (int i = 0; i < nw; ++i)
      steps_same = steps_same && same_bits(st[i], full.states[i]) && same_bits(conv[i], full.conv_states[i]);
    tally.expect(steps_same,
                 "deltanet " + name + ": one launch, steps of 1 token: states == the window's (bits)");
  }
  // A negative control of the memcmp above: a state one ulp off is caught.
  {
    auto st = full.states;
    uint32_t u;
    std::memcpy(&u, &st[0][5], 4);
    ++u;
    std::memcpy(&st[0][5], &u, 4);
    tally.expect(!same_bits(st[0], full.states[0]),
                 "deltanet " + name + ": a state one ulp off differs (control)");
  }

  // Each window alone (its rows at row 0, one window per launch) == inside the full launch, bit for bit.
  bool alone_same = true;
  packed = 0;
  for (int i = 0; i < nw; ++i) {
    const StepResult one = run_step(c, w, {i}, 0, 1 << 30, conv0, st0, stream);
    const int64_t n = c.windows[i].count * vd;
    alone_same = alone_same && std::memcmp(one.core.data(), full.core.data() + packed * vd, n * 4) == 0 &&
                 same_bits(one.states[i], full.states[i]) &&
                 same_bits(one.conv_states[i], full.conv_states[i]);
    packed += c.windows[i].count;
  }
  tally.expect(alone_same, "deltanet " + name + ": each stream alone == inside the 8-stream launch (bits)");

  // A window == its tokens in successive steps of 1, and of 4 then the rest, bit for bit (all streams at
  // once).
  for (int step : {1, 4}) {
    auto conv = conv0, st = st0;
    std::vector<std::vector<float>> cores(nw);
    for (int t0 = 0; t0 < 16; t0 += step) {
      std::vector<int> sel;
      for (int i = 0; i < nw; ++i)
        if (c.windows[i].count > t0) sel.push_back(i);
      if (sel.empty()) break;
      const StepResult r = run_step(c, w, sel, t0, step, conv, st, stream);
      int64_t p = 0;
      for (int i : sel) {
        const int cnt = std::min(step, c.windows[i].count - t0);
        cores[i].insert(cores[i].end(), r.core.begin() + p * vd, r.core.begin() + (p + cnt) * vd);
        p += cnt;
      }
      conv = r.conv_states;
      st = r.states;
    }
    bool same = true;
    packed = 0;
    for (int i = 0; i < nw; ++i) {
      const int64_t n = c.windows[i].count * vd;
      same = same && cores[i].size() == static_cast<size_t>(n) &&
             std::memcmp(cores[i].data(), full.core.data() + packed * vd, n * 4) == 0 &&
             same_bits(st[i], full.states[i]) && same_bits(conv[i], full.conv_states[i]);
      packed += c.windows[i].count;
    }
    tally.expect(same,
                 "deltanet " + name + ": windows == steps of " + std::to_string(step) + " tokens (bits)");
  }
}

// The chunked prompt form: windows longer than a chunk, starting on and off the 64-grid.
void check_chunked(Tally& tally, const DeltaNetShape& s, const std::string& name, std::mt19937_64& rng) {
  const std::vector<int> counts = {200, 37, 130, 64, 1, 90};
  const std::vector<int> pos0 = {0, 27, 64, 100, 63, 250};
  const CheckedCase checked(s, counts, rng);
  const auto& [c, w, conv0, st0, ref, control, all] = checked;
  Stream stream;
  const int64_t vd = s.value_dim(), nw = static_cast<int64_t>(c.windows.size());
  const StepResult full = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream, true, pos0);
  const StepResult token = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream);
  double core_ratio = 0, core_control = 0, state_ratio = 0, state_control = 0, vs_token = 0,
         state_vs_token = 0;
  bool finite = true;
  int64_t packed = 0;
  const int64_t state_rows = int64_t{s.nv} * s.dk;
  for (int i = 0; i < nw; ++i) {
    const HostWindow& hw = c.windows[i];
    const int64_t heads = hw.count * int64_t{s.nv};
    const float* got = full.core.data() + packed * vd;
    const double* want = ref.core.data() + int64_t{hw.row0} * vd;
    for (int64_t j = 0; j < hw.count * vd; ++j) finite = finite && std::isfinite(got[j]);
    core_ratio = std::max(core_ratio, head_err_ratio(got, want, heads, s.dv));
    core_control =
        std::max(core_control, head_err_ratio(got, control.core.data() + int64_t{hw.row0} * vd, heads, s.dv));
    state_ratio =
        std::max(state_ratio, head_err_ratio(full.states[i].data(), ref.states[i].data(), state_rows, s.dv));
    state_control = std::max(
        state_control, head_err_ratio(full.states[i].data(), control.states[i].data(), state_rows, s.dv));
    // Against the per-token form: the same bound, measured from the per-token output (as float64).
    const std::vector<double> tok(token.core.begin() + packed * vd,
                                  token.core.begin() + (packed + hw.count) * vd);
    const std::vector<double> tok_state(token.states[i].begin(), token.states[i].end());
    vs_token = std::max(vs_token, head_err_ratio(got, tok.data(), heads, s.dv));
    state_vs_token =
        std::max(state_vs_token, head_err_ratio(full.states[i].data(), tok_state.data(), state_rows, s.dv));
    packed += hw.count;
  }
  std::printf(
      "deltanet chunked %-20s core err/bound %.4f (control %.1f)  state %.4f (control %.1f)  vs per-token "
      "core %.4f state %.4f\n",
      name.c_str(), core_ratio, core_control, state_ratio, state_control, vs_token, state_vs_token);
  const std::string what = "deltanet chunked " + name;
  tally.expect(finite, what + ": every core output written and finite");
  tally.expect(core_ratio <= 1.0 && state_ratio <= 1.0, what + ": core and state within the bound");
  tally.expect(core_control > 1.0 && state_control > 1.0,
               what + ": negative control (beta 1% off) exceeds the core and state bounds");
  tally.expect(vs_token <= 1.0 && state_vs_token <= 1.0, what + ": within the bound of the per-token form");
  tally.expect(!same_bits(full.core, token.core), what + ": is not the per-token form (other bits)");

  // Each window alone == inside the 6-stream launch; a window cut on the 64-grid (pieces of 64 and of 128
  // positions, each its own launch) == one launch, bit for bit.
  bool alone = true, cut64 = true, cut128 = true;
  double odd_ratio = 0;
  packed = 0;
  for (int i = 0; i < nw; ++i) {
    const int cnt = c.windows[i].count;
    const StepResult one = run_step(c, w, {i}, 0, 1 << 30, conv0, st0, stream, true, pos0);
    alone = alone && std::memcmp(one.core.data(), full.core.data() + packed * vd, cnt * vd * 4) == 0 &&
            same_bits(one.states[i], full.states[i]);
    for (int piece : {64, 128, 0}) {
      auto conv = conv0, st = st0;
      std::vector<float> core;
      for (int t0 = 0; t0 < cnt;) {
        // piece 0: cut at 37 and 101 tokens into the window (off the grid): bits may differ, within bound
        const int grid_end = piece ? ((pos0[i] + t0) / piece + 1) * piece - pos0[i]
                                   : (t0 < 37    ? 37
                                      : t0 < 101 ? 101
                                                 : cnt);
        const int n = std::min(cnt, grid_end) - t0;
        const StepResult r = run_step(c, w, {i}, t0, n, conv, st, stream, true, pos0);
        core.insert(core.end(), r.core.begin(), r.core.begin() + int64_t{n} * vd);
        conv = r.conv_states;
        st = r.states;
        t0 += n;
      }
      if (piece == 0) {
        odd_ratio =
            std::max(odd_ratio, head_err_ratio(core.data(), ref.core.data() + int64_t{c.windows[i].row0} * vd,
                                               cnt * int64_t{s.nv}, s.dv));
        continue;
      }
      const bool same = std::memcmp(core.data(), full.core.data() + packed * vd, cnt * vd * 4) == 0 &&
                        same_bits(st[i], full.states[i]) && same_bits(conv[i], full.conv_states[i]);
      (piece == 64 ? cut64 : cut128) = (piece == 64 ? cut64 : cut128) && same;
    }
    packed += cnt;
  }
  std::printf("deltanet chunked %-20s cut off the grid (37, 101): core err/bound %.4f\n", name.c_str(),
              odd_ratio);
  tally.expect(alone, what + ": each stream alone == inside the 6-stream launch (bits)");
  tally.expect(cut64, what + ": a window cut at every multiple of 64 positions == one launch (bits)");
  tally.expect(cut128, what + ": a window cut at multiples of 128 positions == one launch (bits)");
  tally.expect(odd_ratio <= 1.0, what + ": a window cut off the grid stays within the bound");
}

// The prompt kernels (deltanet_prompt.h) on prompt-length windows (several conv token ranges and rule
// stages, ends off both grids) == the per-token decode kernels, bit for bit: core, states and conv states.
void check_staged(Tally& tally, const DeltaNetShape& s, const std::string& name, std::mt19937_64& rng) {
  const std::vector<int> counts = {700, 37, 130, 300, 1, 90, 16, 17};
  const DeltaNetCase c = random_deltanet_case(s, counts, rng);
  const DeviceWeights w(c);
  std::vector<std::vector<float>> conv0, st0;
  std::vector<int> all;
  for (const auto& hw : c.windows) {
    conv0.push_back(hw.conv_state);
    st0.push_back(hw.state);
    all.push_back(static_cast<int>(all.size()));
  }
  Stream stream;
  const StepResult old = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream, false, {}, true);
  const StepResult staged = run_step(c, w, all, 0, 1 << 30, conv0, st0, stream, false, {}, true, true);
  bool same = same_bits(staged.core, old.core), finite = true;
  for (size_t i = 0; i < all.size(); ++i)
    same = same && same_bits(staged.states[i], old.states[i]) &&
           same_bits(staged.conv_states[i], old.conv_states[i]);
  for (float x : staged.core) finite = finite && std::isfinite(x);
  // Each window alone (one launch each) == inside the 8-window launch.
  bool alone = true;
  int64_t packed = 0;
  const int64_t vd = s.value_dim();
  for (size_t i = 0; i < all.size(); ++i) {
    const int cnt = c.windows[i].count;
    const StepResult one =
        run_step(c, w, {static_cast<int>(i)}, 0, 1 << 30, conv0, st0, stream, false, {}, true, true);
    alone = alone && std::memcmp(one.core.data(), staged.core.data() + packed * vd, cnt * vd * 4) == 0 &&
            same_bits(one.states[i], staged.states[i]) &&
            same_bits(one.conv_states[i], staged.conv_states[i]);
    packed += cnt;
  }
  std::printf("deltanet staged %-21s vs the decode kernels: %s; alone == together: %s\n", name.c_str(),
              same ? "bit-identical" : "DIFFERENT", alone ? "yes" : "NO");
  const std::string what = "deltanet staged " + name;
  tally.expect(finite, what + ": every core output written and finite");
  tally.expect(same, what + ": == the per-token decode kernels on windows of up to 700 tokens (bits)");
  tally.expect(alone, what + ": each window alone == inside the 8-window launch (bits)");
}

void check_arguments(Tally& tally) {
  DeltaNetShape bad;
  bad.dk = 64;
  bool named = false;
  try {
    DeltaNetRows r{};
    deltanet_decode(bad, {}, nullptr, 1, r, 1, nullptr);
  } catch (const ArgumentError& e) {
    named = std::string(e.what()).find("dk must be 128") != std::string::npos;
  }
  tally.expect(named, "deltanet: dk = 64 is an ArgumentError naming dk");
  bool scratch_named = false;
  try {
    DeltaNetShape ok;
    const DeltaRuleChunks small{1, nullptr, 0};
    delta_rule_chunked(ok, nullptr, 1, nullptr, ok.conv_dim(), nullptr, nullptr, 1, small, nullptr);
  } catch (const ArgumentError& e) {
    scratch_named = std::string(e.what()).find("scratch") != std::string::npos;
  }
  tally.expect(scratch_named, "deltanet chunked: a missing scratch is an ArgumentError naming it");
}

}  // namespace

void run_deltanet_checks(Tally& tally) {
  std::mt19937_64 rng(7);
  DeltaNetShape flash;  // Flash Next large: 16 key heads, 48 value heads, 128 x 128, sigmoid gate, K = 4
  check_shape(tally, flash, "flashnext 16/48 sigmoid K4", rng);
  DeltaNetShape next;
  next.nv = 32;
  next.gate_sigmoid = false;
  check_shape(tally, next, "qwen3next 16/32 silu K4", rng);
  DeltaNetShape small;
  small.nk = 2;
  small.nv = 6;
  small.dv = 64;
  small.conv_kernel = 3;
  check_shape(tally, small, "small 2/6 dv64 silu K3", rng);
  check_chunked(tally, flash, "flashnext 16/48", rng);
  check_chunked(tally, small, "small 2/6 dv64", rng);
  check_staged(tally, flash, "flashnext 16/48", rng);
  DeltaNetShape odd = small;  // value_dim 576: the last conv block half past the channels
  odd.dv = 96;
  odd.conv_kernel = 2;
  check_staged(tally, odd, "small 2/6 dv96 K2", rng);
  check_arguments(tally);
}

namespace {

// Microseconds of one step of `streams` windows of `window` tokens at shape s (the per-token or the chunked
// rule), over `reps` launches after 3 warm-ups.
enum class StepKind { Fused, Separate, Staged, Chunked, OneLaunch };

double time_step(const DeltaNetShape& s, int streams, int window, StepKind kind, int reps,
                 std::mt19937_64& rng) {
  const bool chunked = kind == StepKind::Chunked;
  const int rows = streams * window;
  const int64_t cd = s.conv_dim(), vd = s.value_dim(), state_n = int64_t{s.nv} * s.dk * s.dv;
  DeltaNetCase weights_only = random_deltanet_case(s, {1}, rng);
  const DeviceWeights w(weights_only);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> mixed(rows * cd), small(rows * vd);
  for (auto& x : mixed) x = d(rng);
  for (auto& x : small) x = d(rng);
  DeviceBuffer d_mixed = upload(mixed), d_z = upload(small), d_ba = upload(small);
  DeviceBuffer gates(rows * 2 * s.nv * sizeof(float)), core(rows * vd * sizeof(float));
  DeviceBuffer conv(streams * (s.conv_kernel - 1) * cd * sizeof(float)), state(streams * state_n * 4);
  DeviceBuffer scratch(chunked ? deltanet_chunked_scratch_bytes(s, rows) : 16);
  conv.fill_bytes(0);
  state.fill_bytes(0);
  std::vector<DeltaNetWindow> wins;
  for (int i = 0; i < streams; ++i)
    wins.push_back({i * window, window, conv.as<float>() + i * (s.conv_kernel - 1) * cd,
                    state.as<float>() + i * state_n});
  DeviceBuffer d_wins = upload(wins);
  DeltaNetRows r{d_mixed.as<float>(), d_z.as<float>(),   d_ba.as<float>(),
                 d_ba.as<float>(),    gates.as<float>(), core.as<float>()};
  const DeltaRuleChunks chunks{window, scratch.as<float>(), scratch.bytes()};
  Stream stream;
  Event start, stop;
  auto launch = [&] {
    deltanet_decode(s, w.view(), d_wins.as<DeltaNetWindow>(), streams, r, rows, stream.get(),
                    chunked ? &chunks : nullptr, kind != StepKind::Fused && kind != StepKind::OneLaunch,
                    kind == StepKind::Staged, kind == StepKind::OneLaunch);
  };
  for (int i = 0; i < 3; ++i) launch();
  start.record(stream.get());
  for (int i = 0; i < reps; ++i) launch();
  stop.record(stream.get());
  stop.synchronize();
  return 1000.0 * stop.ms_since(start) / reps;
}

}  // namespace

void run_deltanet_bench(int reps) {
  std::printf(
      "\nDeltaNet decode step, Flash Next shape (nk 16, nv 48, 128 x 128, K 4); state bytes read + written "
      "per step = streams x 2 x 3.15 MB\n");
  std::printf("%8s %7s %10s %12s %8s %12s\n", "streams", "window", "us/step", "state GB/s", "%4.3TB",
              "us/token");
  const DeltaNetShape s;
  std::mt19937_64 rng(11);
  const int64_t state_n = int64_t{s.nv} * s.dk * s.dv;
  for (int streams : {1, 8, 32, 128}) {
    for (int window : {1, 4, 16}) {
      const double us = time_step(s, streams, window, StepKind::Fused, reps, rng);
      const double gbs = streams * 2.0 * state_n * 4 / (us * 1e3);
      const double one = time_step(s, streams, window, StepKind::OneLaunch, reps, rng);
      std::printf("%8d %7d %10.2f %12.0f %7.1f%% %12.3f   one launch %.2f us\n", streams, window, us, gbs,
                  gbs / 43.0, us / (streams * window), one);
    }
  }
  std::printf(
      "\nDeltaNet prompt step (conv, rule, gated norm), Flash Next shape: the per-token kernels (rule and "
      "norm apart, as prompt passes ran them), the staged prompt kernels (same bits), the chunked rule\n");
  std::printf("%8s %7s %14s %11s %14s %9s\n", "streams", "window", "per-token us", "staged us", "chunked us",
              "staged x");
  for (auto [streams, window] :
       {std::pair{1, 2048}, std::pair{4, 512}, std::pair{1, 512}, std::pair{1, 64}}) {
    const int n = std::max(2, reps / 4);
    const double a = time_step(s, streams, window, StepKind::Separate, n, rng);
    const double b = time_step(s, streams, window, StepKind::Staged, n, rng);
    const double c = time_step(s, streams, window, StepKind::Chunked, n, rng);
    std::printf("%8d %7d %14.1f %11.1f %14.1f %8.2fx\n", streams, window, a, b, c, a / b);
  }
}

}  // namespace ds::cuda::wxcheck
