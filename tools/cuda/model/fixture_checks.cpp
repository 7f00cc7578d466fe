// Whole-model checks on the committed fixtures (float64 transformers references, tests/fixtures) and the
// invariances of the decode path, all on the GPU.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda/model/cuda_model.h"
#include "core/error.h"
#include "formats/checkpoint.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

// The CPU golden test's bound (tests/unit/model_golden_test.cpp) and its top-1 margin floor.
constexpr double kLogitBound = 1e-4;
constexpr double kMarginFloor = 1e-3;

}  // namespace

std::vector<float> read_f32(const std::string& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  if (!f) fail("cannot open {}", p);
  std::vector<float> v(static_cast<size_t>(f.tellg()) / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

nlohmann::json read_json(const std::string& p) {
  std::ifstream f(p);
  if (!f) fail("cannot open {}", p);
  return nlohmann::json::parse(f);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// Runs `tokens` through one stream in windows of `window` tokens, every row's logits.
std::vector<float> run_windows(CudaModel& m, CudaStreamState& st, const std::vector<int32_t>& tokens,
                               size_t window) {
  std::vector<float> all;
  for (size_t i = 0; i < tokens.size(); i += window) {
    const size_t len = std::min(window, tokens.size() - i);
    const CudaSegment seg{&st, std::span<const int32_t>(tokens.data() + i, len), true};
    std::vector<float> l = m.forward(std::span<const CudaSegment>(&seg, 1));
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

// Three streams over different token runs, in windows of `window`: each alone, then all in one call per round
// (segment order reversed every other round); every round's logits must match bit for bit.
void check_alone_vs_together(Tally& tally, CudaModel& m, const std::vector<int32_t>& prompt, size_t window,
                             const std::string& name) {
  const size_t n = prompt.size();
  std::vector<std::vector<int32_t>> seqs{
      std::vector<int32_t>(prompt.begin(), prompt.begin() + std::min<size_t>(n, 23)),
      std::vector<int32_t>(prompt.begin() + std::min<size_t>(n, 5), prompt.begin() + std::min<size_t>(n, 42)),
      std::vector<int32_t>(prompt.rbegin(), prompt.rbegin() + std::min<size_t>(n, 11))};
  std::vector<std::vector<std::vector<float>>> solo(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    CudaStreamState st = m.new_state();
    for (size_t i = 0; i < seqs[s].size(); i += window) {
      const CudaSegment seg{
          &st, std::span<const int32_t>(seqs[s].data() + i, std::min(window, seqs[s].size() - i)), true};
      solo[s].push_back(m.forward(std::span<const CudaSegment>(&seg, 1)));
    }
  }
  std::vector<CudaStreamState> states;
  for (size_t s = 0; s < seqs.size(); ++s) states.push_back(m.new_state());
  bool same = true;
  for (size_t round = 0;; ++round) {
    std::vector<CudaSegment> segs;
    std::vector<size_t> who;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const size_t i = round * window;
      if (i >= seqs[s].size()) continue;
      segs.push_back({&states[s],
                      std::span<const int32_t>(seqs[s].data() + i, std::min(window, seqs[s].size() - i)),
                      true});
      who.push_back(s);
    }
    if (segs.empty()) break;
    if (round % 2 == 1) std::reverse(segs.begin(), segs.end()), std::reverse(who.begin(), who.end());
    const std::vector<float> l = m.forward(segs);
    const int64_t V = m.config().vocab_size;
    size_t at = 0;
    for (size_t j = 0; j < segs.size(); ++j) {
      const size_t rows = segs[j].tokens.size();
      std::vector<float> mine(l.begin() + at * V, l.begin() + (at + rows) * V);
      same = same && same_bits(mine, solo[who[j]][round]);
      at += rows;
    }
  }
  std::printf("  %s: 3 streams alone == in one call (windows of %zu): %s\n", name.c_str(), window,
              same ? "bit-identical" : "DIFFERENT");
  tally.expect(same, name + ": streams alone == together (windows of " + std::to_string(window) + ")");
}

void run_fixture_checks(Tally& tally, const std::string& root, const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    try {
      const std::string dir = root + "/tests/fixtures/" + name;
      Checkpoint ckpt(dir);
      ModelConfig cfg = ModelConfig::from_json(ckpt.config());
      const ModelWeights w = bind_weights(ckpt, cfg);
      CudaModelOptions opt;
      opt.max_context = 512;
      if (cfg.family == ModelFamily::Qwen3Next) {
        bool refused = false;
        try {
          CudaModel m(cfg, w, opt);
        } catch (const Error& e) {
          refused = std::string(e.what()).find("qwen3_next") != std::string::npos;
          std::printf("  %s: refused: %s\n", name.c_str(), e.what());
        }
        tally.expect(refused, name + ": qwen3_next is refused with a clear error");
        continue;
      }
      CudaModel m(cfg, w, opt);
      const nlohmann::json ref = read_json(dir + "/reference.json");
      const auto prompt = ref["prompt"].get<std::vector<int32_t>>();
      const auto greedy = ref["greedy"].get<std::vector<int32_t>>();
      const auto margins = ref["teacher_forced_margins"].get<std::vector<double>>();
      const std::vector<float> want = read_f32(dir + "/logits.f32");
      const int64_t V = cfg.vocab_size;

      // Teacher-forced logits in windows of 16 (the decode path), against the float64 reference.
      CudaStreamState st = m.new_state();
      const std::vector<float> got = run_windows(m, st, prompt, 16);
      double worst = 0;
      int top1_bad = 0;
      for (size_t t = 0; t < prompt.size(); ++t) {
        for (int64_t v = 0; v < V; ++v)
          worst = std::max(worst, std::fabs(double(got[t * V + v]) - want[t * V + v]));
        if (margins[t] > kMarginFloor && argmax(&got[t * V], V) != argmax(&want[t * V], V)) ++top1_bad;
      }
      std::printf(
          "  %s: worst |logit - float64 ref| %.3g over %zu positions (bound %.0e, %.3f of it); top-1 "
          "disagreements %d\n",
          name.c_str(), worst, prompt.size(), kLogitBound, worst / kLogitBound, top1_bad);
      tally.expect(got.size() == want.size() && worst <= kLogitBound, name + ": logits within bound");
      tally.expect(top1_bad == 0, name + ": top-1 equal where the reference margin > 1e-3");

      // Greedy continuation on single-token steps.
      std::vector<int32_t> gen;
      std::vector<float> last(got.end() - V, got.end());
      while (gen.size() < greedy.size()) {
        gen.push_back(argmax(last.data(), V));
        const CudaSegment seg{&st, std::span<const int32_t>(&gen.back(), 1), false};
        last = m.forward(std::span<const CudaSegment>(&seg, 1));
      }
      std::printf("  %s: greedy %zu tokens %s\n", name.c_str(), greedy.size(),
                  gen == greedy ? "equal" : "DIFFER");
      tally.expect(gen == greedy, name + ": greedy tokens equal the reference");

      // Window of L == L single steps == windows of 5, bit for bit.
      CudaStreamState s1 = m.new_state(), s5 = m.new_state();
      const bool steps_same = same_bits(run_windows(m, s1, prompt, 1), got);
      const bool five_same = same_bits(run_windows(m, s5, prompt, 5), got);
      std::printf("  %s: windows of 16 == single steps: %s; == windows of 5: %s\n", name.c_str(),
                  steps_same ? "bit-identical" : "DIFFERENT", five_same ? "bit-identical" : "DIFFERENT");
      tally.expect(steps_same && five_same, name + ": a window == its single steps");
      // Expert windows (each expert read once a step) == per-pair expert products, bit for bit.
      m.set_expert_windows(!m.options().expert_windows);
      CudaStreamState sp = m.new_state();
      const bool pairs_same = same_bits(run_windows(m, sp, prompt, 16), got);
      m.set_expert_windows(!m.options().expert_windows);
      tally.expect_identical(pairs_same, name + ": expert windows == per-pair expert products",
                             name + ": expert windows == per-pair expert products");
      check_alone_vs_together(tally, m, prompt, 4, name);
      // The MoE glue folded into the FMA products (fused_route/swiglu/combine) == the separate launches, bit
      // for bit, every fusion on and every one off, in windows of 16 and in single steps (where the routing
      // is folded into the router product too).
      {
        const CudaModelOptions was = m.options();
        bool all_same = true;
        for (const bool on : {false, true}) {
          m.set_fused_moe(on, on, on);
          CudaStreamState a16 = m.new_state(), a1 = m.new_state();
          const bool w16 = same_bits(run_windows(m, a16, prompt, 16), got);
          const bool w1 = same_bits(run_windows(m, a1, prompt, 1), got);
          std::printf("  %s: MoE glue %s == the default: windows of 16 %s, single steps %s\n", name.c_str(),
                      on ? "all fused" : "as separate ops", w16 ? "bit-identical" : "DIFFERENT",
                      w1 ? "bit-identical" : "DIFFERENT");
          all_same = all_same && w16 && w1;
        }
        m.set_fused_moe(was.fused_route, was.fused_swiglu, was.fused_combine);
        tally.expect(all_same, name + ": fused MoE glue == separate ops");
      }
      // Joint products (matrices over the same x as one product, the shared expert stacked with the routed
      // ones) == one product per matrix, and programmatic launch == plain graph edges, bit for bit.
      {
        CudaModelOptions sep_opt = opt;
        sep_opt.joint_products = false;
        CudaModel sep(cfg, w, sep_opt);
        CudaStreamState ss = sep.new_state();
        const bool joint_same = same_bits(run_windows(sep, ss, prompt, 16), got);
        m.set_programmatic_launch(false);
        CudaStreamState sq = m.new_state();
        const bool serial_same = same_bits(run_windows(m, sq, prompt, 16), got);
        m.set_programmatic_launch(true);
        // The other hyper-connection mix (hc_kernels.h, down|inject split by stream / the separate ops; other
        // sums, so not bit-equal where the split mix takes the shape): within the bound too, and its windows
        // == its steps.
        m.set_fused_hc(!m.options().fused_hc);
        CudaStreamState sh16 = m.new_state(), sh1 = m.new_state();
        const std::vector<float> other16 = run_windows(m, sh16, prompt, 16);
        const bool hc_steps = same_bits(run_windows(m, sh1, prompt, 1), other16);
        m.set_fused_hc(!m.options().fused_hc);
        double hc_worst = 0;
        for (size_t i = 0; i < other16.size() && i < want.size(); ++i)
          hc_worst = std::max(hc_worst, std::fabs(double(other16[i]) - want[i]));
        std::printf(
            "  %s: other hc mix (%s): worst %.3g (%.3f of the bound), %s the default; windows == steps: "
            "%s\n",
            name.c_str(), m.options().fused_hc ? "separate ops" : "split, hc_kernels", hc_worst,
            hc_worst / kLogitBound, same_bits(other16, got) ? "bit-identical to" : "differs from",
            hc_steps ? "bit-identical" : "DIFFERENT");
        tally.expect(other16.size() == want.size() && hc_worst <= kLogitBound,
                     name + ": other hc mix within bound");
        tally.expect(hc_steps, name + ": other hc mix: windows == steps");
        std::printf("  %s: joint products == separate: %s; programmatic launch == plain edges: %s\n",
                    name.c_str(), joint_same ? "bit-identical" : "DIFFERENT",
                    serial_same ? "bit-identical" : "DIFFERENT");
        tally.expect(joint_same, name + ": joint products == separate products");
        tally.expect(serial_same, name + ": programmatic launch == plain graph edges");
      }
      check_prompt_fixture(tally, m, prompt, want, margins, name);

      // Negative control: the final norm 1% off must exceed the bound.
      ModelWeights off = w;
      for (float& x : cfg.family == ModelFamily::Qwen4Exp ? off.final_mixer.norm : off.final_norm) x *= 1.01f;
      CudaModel m_off(cfg, off, opt);
      CudaStreamState so = m_off.new_state();
      const std::vector<float> bad = run_windows(m_off, so, prompt, 16);
      double bad_worst = 0;
      for (size_t i = 0; i < bad.size(); ++i)
        bad_worst = std::max(bad_worst, std::fabs(double(bad[i]) - want[i]));
      std::printf("  %s: negative control (final norm 1%% off): worst %.3g = %.1fx the bound\n", name.c_str(),
                  bad_worst, bad_worst / kLogitBound);
      tally.expect(bad_worst > kLogitBound, name + ": negative control exceeds the bound");
    } catch (const std::exception& e) {
      std::printf("  %s: %s\n", name.c_str(), e.what());
      tally.expect(false, name + " threw: " + e.what());
    }
    std::fflush(stdout);
  }
}

}  // namespace ds::cuda::modelcheck
