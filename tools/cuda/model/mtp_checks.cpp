// The MTP draft head on the GPU: against the float64 goldens (tests/fixtures/qwen4exp_mtp, made by
// tools/mtp/make_mtp_fixtures.py), its invariances (rows alone == together, windows == steps, Last/None ==
// rows of All, graph == direct, truncate_mtp rollback), a greedy chained-draft run against the CPU head on
// models/flashnext-tiny (MLX affine head), and the fast kernels' head on the small real-heads config.
#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "backend/cuda/model/cuda_model.h"
#include "core/error.h"
#include "formats/checkpoint.h"
#include "model/model.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

constexpr double kLogitBound = 1e-4;   // as tests/unit/mtp_golden_test.cpp (f32 lands near 1e-6 there)
constexpr double kMarginFloor = 1e-3;  // top-1 / drafts must agree wherever the reference margin exceeds this
constexpr double kHiddenRelBound = 1e-4;  // H rows, relative to the largest |H|
// GPU head vs CPU head on the same weights: each within kLogitBound of float64, so within twice that.
constexpr double kCpuBound = 2 * kLogitBound;

double worst_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  return worst;
}

double top_margin(const float* row, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    if (row[i] > a)
      b = a, a = row[i];
    else if (row[i] > b)
      b = row[i];
  return double(a) - b;
}

// Device floats [rows, width] with host copies.
struct DeviceRows {
  int64_t width;
  DeviceBuffer buf;
  DeviceRows(int64_t rows, int64_t w) : width(w), buf(static_cast<size_t>(rows * w) * sizeof(float)) {
    buf.fill_bytes(0xff);  // NaN: an unwritten row shows
  }
  float* row(int64_t r) const { return buf.as<float>() + r * width; }
  std::vector<float> host() const {
    std::vector<float> v(buf.bytes() / sizeof(float));
    buf.download(v.data(), buf.bytes());
    return v;
  }
  void set(const std::vector<float>& v) { buf.upload(v.data(), v.size() * sizeof(float)); }
};

// The main model over `tokens` in windows, every row's H into H (rows from `at`).
void main_rows(CudaModel& m, CudaStreamState& st, const std::vector<int32_t>& tokens, size_t window,
               const DeviceRows& H, int64_t at = 0) {
  for (size_t i = 0; i < tokens.size(); i += window) {
    const size_t len = std::min(window, tokens.size() - i);
    CudaSegment seg{&st, std::span<const int32_t>(tokens.data() + i, len), false};
    seg.hidden = H.row(at + static_cast<int64_t>(i));
    m.forward(std::span<const CudaSegment>(&seg, 1));
  }
}

std::vector<float> head(CudaModel& m, CudaStreamState& st, const float* hidden, std::span<const int32_t> next,
                        float* out = nullptr, MtpLogits logits = MtpLogits::All) {
  const CudaMtpSegment seg{&st, hidden, next, st.mtp_position, out, logits};
  return m.mtp_forward(std::span<const CudaMtpSegment>(&seg, 1));
}

// Draft 1 from the teacher-forced rows (their last row's logits and output), then `depth - 1` chained rows,
// each reading the previous row's output and draft. Returns the drafts' logits rows.
std::vector<float> chain(CudaModel& m, CudaStreamState& st, const float* hidden,
                         std::span<const int32_t> next, int depth, std::vector<int32_t>& drafts) {
  const int64_t V = m.config().vocab_size, W = m.mtp_hidden_width(), rows = static_cast<int64_t>(next.size());
  DeviceRows out(rows + depth, W);
  std::vector<float> l = head(m, st, hidden, next, out.row(0), MtpLogits::Last);
  drafts.assign(1, argmax(l.data(), V));
  const float* h = out.row(rows - 1);
  for (int k = 1; k < depth; ++k) {
    std::vector<float> lk = head(m, st, h, std::span<const int32_t>(&drafts.back(), 1), out.row(rows + k));
    drafts.push_back(argmax(lk.data(), V));
    l.insert(l.end(), lk.begin(), lk.end());
    h = out.row(rows + k);
  }
  return l;
}

void check_fixture(Tally& tally, const std::string& root) {
  const std::string dir = root + "/tests/fixtures/qwen4exp_mtp", name = "qwen4exp_mtp head";
  Checkpoint ckpt(dir);
  ModelConfig cfg = ModelConfig::from_json(ckpt.config());
  const ModelWeights w = bind_weights(ckpt, cfg);
  const MtpWeights mw = bind_mtp(ckpt, cfg);
  cfg.mtp_layers = mw.present ? 1 : 0;
  CudaModelOptions opt;
  opt.max_context = 256;
  CudaModel m(cfg, w, opt, &mw);
  tally.expect(m.has_mtp(), name + ": the head is loaded");
  const nlohmann::json ref = read_json(dir + "/mtp.json");
  const auto prompt = ref["prompt"].get<std::vector<int32_t>>();
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(ref["next_token"].get<int32_t>());
  const int64_t T = static_cast<int64_t>(prompt.size()), W = m.mtp_hidden_width(), V = cfg.vocab_size;
  tally.expect(W == ref["hidden_width"].get<int64_t>(), name + ": hidden width");

  // The main model's H rows (decode path, windows of 16) against the float64 reference.
  DeviceRows H(T, W);
  CudaStreamState st = m.new_state();
  main_rows(m, st, prompt, 16, H);
  const std::vector<float> h_got = H.host(), h_want = read_f32(dir + "/hidden.f32");
  double scale = 1;
  for (float v : h_want) scale = std::max(scale, double(std::fabs(v)));
  const double h_err = worst_error(h_got, h_want);
  std::printf("  %s: main H rows: worst |H - float64 ref| %.3g (bound %.3g = 1e-4 of max |H|)\n",
              name.c_str(), h_err, kHiddenRelBound * scale);
  tally.expect(h_err <= kHiddenRelBound * scale, name + ": main H rows within bound");
  {
    DeviceRows H1(T, W);
    CudaStreamState s1 = m.new_state();
    main_rows(m, s1, prompt, 1, H1);
    const bool same = same_bits(H1.host(), h_got);
    tally.expect_identical(same, name + ": H rows of windows of 16 == of single steps",
                           name + ": H rows do not depend on the window");
  }

  // Teacher-forced head logits against the float64 goldens.
  DeviceRows out(T, W);
  const std::vector<float> all = head(m, st, H.row(0), next, out.row(0));
  const std::vector<float> want = read_f32(dir + "/mtp_logits.f32");
  const auto margins = ref["teacher_forced_margins"].get<std::vector<double>>();
  int top1_bad = 0;
  for (int64_t t = 0; t < T && all.size() == want.size(); ++t)
    if (margins[t] > kMarginFloor && argmax(&all[t * V], V) != argmax(&want[t * V], V)) ++top1_bad;
  const double err = worst_error(all, want);
  std::printf(
      "  %s: teacher-forced logits: worst |logit - float64 ref| %.3g over %lld rows (bound %.0e, %.3f "
      "of it); top-1 disagreements %d\n",
      name.c_str(), err, static_cast<long long>(T), kLogitBound, err / kLogitBound, top1_bad);
  tally.expect(err <= kLogitBound, name + ": teacher-forced logits within bound");
  tally.expect(top1_bad == 0, name + ": top-1 equal where the reference margin > 1e-3");
  tally.expect(st.mtp_position == T, name + ": the head's cache holds every row");

  // Chained 3-deep greedy draft from the last position.
  {
    CudaStreamState sc = m.new_state();
    std::vector<int32_t> drafts;
    const int depth = ref["chain_depth"].get<int>();
    const std::vector<float> got = chain(m, sc, H.row(0), next, depth, drafts);
    const double cerr = worst_error(got, read_f32(dir + "/mtp_chain.f32"));
    const auto cm = ref["chain_margins"].get<std::vector<double>>();
    const auto cd = ref["chain_drafts"].get<std::vector<int32_t>>();
    bool drafts_ok = true;
    for (int k = 0; k < depth && cm[k] > kMarginFloor; ++k) drafts_ok = drafts_ok && drafts[k] == cd[k];
    std::printf("  %s: chained %d-deep draft: worst logit error %.3g (bound %.0e); drafts %s\n", name.c_str(),
                depth, cerr, kLogitBound, drafts_ok ? "equal the reference's" : "DIFFER");
    tally.expect(cerr <= kLogitBound, name + ": chained draft logits within bound");
    tally.expect(drafts_ok, name + ": chained drafts equal the reference's where margins allow");

    // Rollback: the chain's rows dropped and redone from the last verified row give the same bits.
    sc.truncate_mtp(T - 1);
    std::vector<int32_t> again_d;
    const std::vector<float> again =
        chain(m, sc, H.row(T - 1), std::span<const int32_t>(&next.back(), 1), depth, again_d);
    const bool same = same_bits(again, got) && again_d == drafts;
    tally.expect_identical(same, name + ": truncate_mtp and redo == first run",
                           name + ": truncate_mtp rollback");
  }

  // Rows alone == together: windows of 1, 3, 7 rows, two streams in every call (hidden_out too).
  const std::vector<float> out_all = out.host();
  for (size_t win : {size_t{1}, size_t{3}, size_t{7}}) {
    CudaStreamState a = m.new_state(), b = m.new_state();
    DeviceRows oa(T, W), ob(T, W);
    std::vector<float> got_a, got_b;
    for (int64_t t0 = 0; t0 < T; t0 += static_cast<int64_t>(win)) {
      const int64_t t1 = std::min<int64_t>(T, t0 + static_cast<int64_t>(win));
      const std::span<const int32_t> nx(next.data() + t0, static_cast<size_t>(t1 - t0));
      const CudaMtpSegment segs[2] = {{&a, H.row(t0), nx, t0, oa.row(t0), MtpLogits::All},
                                      {&b, H.row(t0), nx, t0, ob.row(t0), MtpLogits::All}};
      const std::vector<float> l = m.mtp_forward(segs);
      got_a.insert(got_a.end(), l.begin(), l.begin() + (t1 - t0) * V);
      got_b.insert(got_b.end(), l.begin() + (t1 - t0) * V, l.end());
    }
    const bool same = same_bits(got_a, all) && same_bits(got_b, all) && same_bits(oa.host(), out_all) &&
                      same_bits(ob.host(), out_all);
    std::printf("  %s: rows in windows of %zu, two streams a call == all rows in one: %s\n", name.c_str(),
                win, same ? "bit-identical" : "DIFFERENT");
    tally.expect(same, name + ": rows alone == together (windows of " + std::to_string(win) + ")");
  }

  // Last / None rows are rows of All, and logits never change the cache: windows of 5 asking Last, then
  // None, then All again.
  {
    CudaStreamState s5 = m.new_state();
    bool same = true;
    for (int64_t t0 = 0; t0 < T; t0 += 5) {
      const int64_t t1 = std::min<int64_t>(T, t0 + 5);
      const std::span<const int32_t> nx(next.data() + t0, static_cast<size_t>(t1 - t0));
      const MtpLogits kind = (t0 / 5) % 3 == 0   ? MtpLogits::Last
                             : (t0 / 5) % 3 == 1 ? MtpLogits::None
                                                 : MtpLogits::All;
      const std::vector<float> l = head(m, s5, H.row(t0), nx, nullptr, kind);
      if (kind == MtpLogits::Last)
        same = same && std::equal(l.begin(), l.end(), all.begin() + (t1 - 1) * V) && l.size() == size_t(V);
      else if (kind == MtpLogits::None)
        same = same && l.empty();
      else
        same =
            same && std::equal(l.begin(), l.end(), all.begin() + t0 * V) && l.size() == size_t((t1 - t0) * V);
    }
    tally.expect_identical(same, name + ": Last / None rows are rows of All, the cache unchanged by them",
                           name + ": Last and None are rows of All");
  }

  // CUDA graph replay == direct launches.
  {
    m.set_graphs(false);
    CudaStreamState sd = m.new_state();
    const bool same = same_bits(head(m, sd, H.row(0), next), all);
    m.set_graphs(true);
    tally.expect_identical(same, name + ": CUDA-graph replay == direct launches", name + ": graph == direct");
  }

  // Negative control: the head's final mixer norm 1% off must exceed the bound.
  {
    MtpWeights off = mw;
    for (float& x : off.mixer.norm) x *= 1.01f;
    CudaModel m_off(cfg, w, opt, &off);
    CudaStreamState so = m_off.new_state();
    const double bad = worst_error(head(m_off, so, H.row(0), next), want);
    std::printf("  %s: negative control (head mixer norm 1%% off): worst %.3g = %.1fx the bound\n",
                name.c_str(), bad, bad / kLogitBound);
    tally.expect(bad > kLogitBound, name + ": negative control exceeds the bound");
  }

  // Named errors.
  {
    CudaStreamState se = m.new_state();
    bool named = false;
    try {
      const CudaMtpSegment bad{&se, H.row(0), std::span<const int32_t>(next.data(), 1),
                               5,   nullptr,  MtpLogits::All};
      m.mtp_forward(std::span<const CudaMtpSegment>(&bad, 1));
    } catch (const Error& e) {
      named = std::string(e.what()).find("position") != std::string::npos;
    }
    tally.expect(named, name + ": a segment at the wrong position is refused naming it");
  }
}

// A greedy decode of models/flashnext-tiny (MLX affine main model and head) drafting 4 deep at every step, on
// the CPU and on the GPU: head logits within kCpuBound, drafts equal wherever the CPU's margins allow.
void check_cpu_drafts(Tally& tally, const std::string& root) {
  const std::string dir = root + "/models/flashnext-tiny", name = "flashnext-tiny head";
  Model cpu(dir, false);
  if (!cpu.has_mtp()) fail("{} has no MTP head", dir);
  const ModelConfig& cfg = cpu.config();
  CudaModelOptions opt;
  opt.max_context = 256;
  CudaModel gpu(cfg, cpu.weights(), opt, &cpu.mtp_weights());
  const int64_t V = cfg.vocab_size, W = gpu.mtp_hidden_width();
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % V));
  const int steps = 16, depth = 4;
  const int64_t T = static_cast<int64_t>(prompt.size());

  StreamState cs = cpu.new_state();
  CudaStreamState gs = gpu.new_state();
  std::vector<float> ch(static_cast<size_t>(T * W));
  ForwardSegment fs{&cs, prompt, false, false, ch.data()};
  std::vector<float> c_last = cpu.forward({&fs, 1});
  DeviceRows gh(T + steps, W);
  main_rows(gpu, gs, prompt, 16, gh);
  // Catch the heads up over the prompt rows whose next token is known (no logits).
  {
    const std::span<const int32_t> nx(prompt.data() + 1, static_cast<size_t>(T - 1));
    MtpSegment seg{&cs,     std::span<const float>(ch.data(), static_cast<size_t>((T - 1) * W)),
                   nx,      0,
                   nullptr, MtpLogits::None};
    cpu.mtp_forward({&seg, 1});
    head(gpu, gs, gh.row(0), nx, nullptr, MtpLogits::None);
  }
  std::vector<float> pending(ch.end() - W, ch.end());
  double worst = 0;
  int compared = 0, drafts_equal = 0, drafts_differ = 0;
  DeviceRows gout(depth, W);
  for (int step = 0; step < steps; ++step) {
    const int32_t g = argmax(c_last.data(), V);
    const int64_t row = T - 1 + step;  // the pending row (its next token is g now)
    std::vector<int32_t> cd, gd;
    std::vector<float> hidden = pending, hout(static_cast<size_t>(W));
    const float* gin = gh.row(row);
    int32_t tok = g;
    bool agree = true;
    for (int k = 0; k < depth; ++k) {
      MtpSegment seg{&cs,         hidden,        std::span<const int32_t>(&tok, 1), cs.mtp_position,
                     hout.data(), MtpLogits::All};
      const std::vector<float> cl = cpu.mtp_forward({&seg, 1});
      const int32_t gtok = k == 0 ? g : gd.back();
      const std::vector<float> gl =
          head(gpu, gs, gin, std::span<const int32_t>(&gtok, 1), gout.row(k), MtpLogits::All);
      if (agree) worst = std::max(worst, worst_error(gl, cl)), ++compared;
      cd.push_back(argmax(cl.data(), V));
      gd.push_back(argmax(gl.data(), V));
      // Deeper rows read this draft: compare them only while the drafts agree and the margin is clear.
      if (agree && top_margin(cl.data(), V) > kMarginFloor) {
        if (cd.back() == gd.back())
          ++drafts_equal;
        else
          ++drafts_differ;
      }
      agree = agree && cd.back() == gd.back() && top_margin(cl.data(), V) > kMarginFloor;
      hidden = hout, tok = cd.back(), gin = gout.row(k);
    }
    // Drafts are not verified here: both heads roll back to the verified row, then the main model takes g.
    cs.truncate_mtp(row + 1), gs.truncate_mtp(row + 1);
    ForwardSegment one{&cs, std::span<const int32_t>(&g, 1), false, false, pending.data()};
    c_last = cpu.forward({&one, 1});
    main_rows(gpu, gs, {g}, 1, gh, row + 1);
  }
  std::printf(
      "  %s: greedy run of %d steps drafting %d deep: worst |GPU - CPU head logit| %.3g over %d rows "
      "(bound %.0e); drafts equal %d, differ %d (compared where the CPU margin > 1e-3)\n",
      name.c_str(), steps, depth, worst, compared, kCpuBound, drafts_equal, drafts_differ);
  tally.expect(worst <= kCpuBound, name + ": GPU head logits == CPU head's within bound");
  tally.expect(drafts_differ == 0 && drafts_equal > 0, name + ": GPU drafts == CPU drafts");
}

// The fast attention kernels (hd 256, indexer hd 128) under a random head: rows alone == together, a window
// == its single rows, graph == direct.
void check_fast_head(Tally& tally, const std::string& config_path) {
  ModelConfig cfg = read_config(config_path);
  cfg.mtp_declared = 1, cfg.mtp_layers = 1;
  DummySpec spec;
  spec.expert_bits = 4, spec.expert_group = 32, spec.other_bits = 6, spec.other_group = 64, spec.seed = 11;
  CudaModelOptions opt;
  opt.max_context = 256;
  CudaModel m(cfg, spec, opt);
  const std::string name = "small real-heads random head";
  tally.expect(m.has_mtp(), name + ": a random head is made");
  const int64_t W = m.mtp_hidden_width(), V = cfg.vocab_size;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 40; ++i) tokens.push_back(static_cast<int32_t>((i * 7919 + 13) % V));
  const int64_t T = static_cast<int64_t>(tokens.size()) - 1;
  DeviceRows H(T + 1, W);
  CudaStreamState st = m.new_state();
  main_rows(m, st, tokens, 8, H);
  const std::span<const int32_t> next(tokens.data() + 1, static_cast<size_t>(T));
  CudaStreamState s0 = m.new_state();
  const std::vector<float> all = head(m, s0, H.row(0), next);
  bool finite = !all.empty();
  for (float v : all) finite = finite && std::isfinite(v);
  tally.expect(finite, name + ": logits finite");
  for (size_t win : {size_t{1}, size_t{4}}) {
    CudaStreamState a = m.new_state(), b = m.new_state();
    std::vector<float> got_a, got_b;
    for (int64_t t0 = 0; t0 < T; t0 += static_cast<int64_t>(win)) {
      const int64_t t1 = std::min<int64_t>(T, t0 + static_cast<int64_t>(win));
      const std::span<const int32_t> nx(next.data() + t0, static_cast<size_t>(t1 - t0));
      const CudaMtpSegment segs[2] = {{&b, H.row(t0), nx, t0, nullptr, MtpLogits::All},
                                      {&a, H.row(t0), nx, t0, nullptr, MtpLogits::All}};
      const std::vector<float> l = m.mtp_forward(segs);
      got_b.insert(got_b.end(), l.begin(), l.begin() + (t1 - t0) * V);
      got_a.insert(got_a.end(), l.begin() + (t1 - t0) * V, l.end());
    }
    const bool same = same_bits(got_a, all) && same_bits(got_b, all);
    std::printf(
        "  %s (hd 256, indexer selecting): windows of %zu, two streams a call == all rows in one: %s\n",
        name.c_str(), win, same ? "bit-identical" : "DIFFERENT");
    tally.expect(same, name + ": rows alone == together (windows of " + std::to_string(win) + ")");
  }
  m.set_graphs(false);
  CudaStreamState sd = m.new_state();
  const bool same = same_bits(head(m, sd, H.row(0), next), all);
  m.set_graphs(true);
  tally.expect_identical(same, name + ": CUDA-graph replay == direct launches", name + ": graph == direct");
  // The head's graph with programmatic edges == plain edges; the other hc mix (split by stream / separate
  // ops: other down|inject sums) within 1e-3 of the largest logit, as the fast-vs-generic comparison.
  m.set_programmatic_launch(false);
  CudaStreamState sp = m.new_state();
  const bool plain_same = same_bits(head(m, sp, H.row(0), next), all);
  m.set_programmatic_launch(true);
  m.set_fused_hc(!m.options().fused_hc);
  CudaStreamState sf = m.new_state();
  const std::vector<float> other = head(m, sf, H.row(0), next);
  m.set_fused_hc(!m.options().fused_hc);
  double top = 0, hc_worst = 0;
  for (float v : all) top = std::max(top, std::fabs(double(v)));
  for (size_t i = 0; i < other.size() && i < all.size(); ++i)
    hc_worst = std::max(hc_worst, std::fabs(double(other[i]) - all[i]));
  const bool hc_ok = other.size() == all.size() && hc_worst <= 1e-3 * top;
  std::printf("  %s: programmatic edges == plain edges: %s; other hc mix: worst %.3g (bound %.3g)\n",
              name.c_str(), plain_same ? "bit-identical" : "DIFFERENT", hc_worst, 1e-3 * top);
  tally.expect(plain_same, name + ": programmatic edges == plain edges");
  tally.expect(hc_ok, name + ": other hc mix within bound");
}

}  // namespace

void run_mtp_checks(Tally& tally, const std::string& root, const std::string& small_config) {
  for (auto [what, f] : std::initializer_list<std::pair<const char*, std::function<void()>>>{
           {"qwen4exp_mtp", [&] { check_fixture(tally, root); }},
           {"flashnext-tiny", [&] { check_cpu_drafts(tally, root); }},
           {"small real heads", [&] { check_fast_head(tally, small_config); }}}) {
    try {
      f();
    } catch (const std::exception& e) {
      std::printf("  mtp %s: %s\n", what, e.what());
      tally.expect(false, std::string("mtp ") + what + " threw: " + e.what());
    }
    std::fflush(stdout);
  }
}

}  // namespace ds::cuda::modelcheck
