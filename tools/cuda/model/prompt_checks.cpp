// The prompt path of CudaModel (docs/cuda-model.md, "Prompt path"): fixtures within the float64 bound
// through prompt passes; a prompt split at multiples of 64 (or into passes) == one pass, and a stream's
// prompt alone == beside other streams' prompts, bit for bit (split off the 64-grid: within 1e-3 of the
// largest logit, as DeltaNet's chunks follow the cut); and prompt tokens/s at the real shape.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/tc_products_ring.h"
#include "core/error.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

// Every row's logits of `tokens` through prompt calls cut at `cuts` (token offsets, ascending).
std::vector<float> prompt_pieces(CudaModel& m, CudaStreamState& st, const std::vector<int32_t>& tokens,
                                 std::vector<size_t> cuts) {
  cuts.push_back(tokens.size());
  std::vector<float> all;
  size_t at = 0;
  for (size_t c : cuts) {
    if (c <= at) continue;
    const CudaSegment seg{&st, std::span<const int32_t>(tokens.data() + at, c - at), true, true};
    const std::vector<float> l = m.forward(std::span<const CudaSegment>(&seg, 1));
    all.insert(all.end(), l.begin(), l.end());
    at = c;
  }
  return all;
}

std::vector<int32_t> synthetic_tokens(size_t n, int64_t vocab, int64_t salt) {
  std::vector<int32_t> t;
  for (size_t i = 0; i < n; ++i) t.push_back(static_cast<int32_t>((int64_t(i) * 7919 + 13 + salt) % vocab));
  return t;
}

// Split invariance and stream independence of prompt passes on `m`, over `tokens` (more than 128).
void check_prompt_invariance(Tally& tally, CudaModel& m, const std::vector<int32_t>& tokens,
                             const std::string& name) {
  CudaStreamState one = m.new_state(), by64 = m.new_state(), odd = m.new_state();
  const std::vector<float> whole = prompt_pieces(m, one, tokens, {});
  const bool same64 = same_bits(prompt_pieces(m, by64, tokens, {64, 128}), whole);
  const std::vector<float> odd_cut = prompt_pieces(m, odd, tokens, {37, 101, tokens.size() - 1});
  double odd_diff = 0, top = 0;
  for (size_t i = 0; i < whole.size() && odd_cut.size() == whole.size(); ++i) {
    odd_diff = std::max(odd_diff, std::fabs(double(odd_cut[i]) - whole[i]));
    top = std::max(top, std::fabs(double(whole[i])));
  }
  const bool odd_ok = odd_cut.size() == whole.size() && odd_diff <= 1e-3 * top;
  std::printf(
      "  %s: prompt of %zu in one pass == cut at 64, 128: %s; cut at 37, 101 and a last 1-row piece: max "
      "|diff| %.3g (%.3f of 1e-3 x the largest logit)\n",
      name.c_str(), tokens.size(), same64 ? "bit-identical" : "DIFFERENT", odd_diff,
      top > 0 ? odd_diff / (1e-3 * top) : 0.0);
  tally.expect(same64, name + ": prompt cut at multiples of 64 == one pass");
  tally.expect(odd_ok, name + ": prompt cut off the 64-grid within 1e-3 of the largest logit of one pass");
  // Three prompts alone, then in one call (all logits rows), in both orders.
  const int64_t V = m.config().vocab_size;
  std::vector<std::vector<int32_t>> seqs{std::vector<int32_t>(tokens.begin(), tokens.begin() + 70),
                                         std::vector<int32_t>(tokens.begin() + 9, tokens.end()),
                                         synthetic_tokens(33, V, 101)};
  std::vector<std::vector<float>> solo;
  for (const auto& s : seqs) {
    CudaStreamState st = m.new_state();
    solo.push_back(prompt_pieces(m, st, s, {}));
  }
  bool together = true;
  for (int order = 0; order < 2; ++order) {
    std::vector<CudaStreamState> states;
    for (size_t i = 0; i < seqs.size(); ++i) states.push_back(m.new_state());
    std::vector<size_t> who{0, 1, 2};
    if (order == 1) std::reverse(who.begin(), who.end());
    std::vector<CudaSegment> segs;
    for (size_t i : who) segs.push_back({&states[i], std::span<const int32_t>(seqs[i]), true, true});
    const std::vector<float> l = m.forward(segs);
    size_t at = 0;
    for (size_t i : who) {
      const size_t rows = seqs[i].size();
      together =
          together && same_bits(std::vector<float>(l.begin() + at * V, l.begin() + (at + rows) * V), solo[i]);
      at += rows;
    }
  }
  tally.expect_identical(together, name + ": 3 prompts alone == in one call (both orders)",
                         name + ": prompts alone == beside other prompts");
  // Decode after a prompt: a mixed call is refused by name.
  bool refused = false;
  try {
    CudaStreamState a = m.new_state(), b = m.new_state();
    const CudaSegment segs[2] = {{&a, std::span<const int32_t>(tokens.data(), 3), false, true},
                                 {&b, std::span<const int32_t>(tokens.data(), 1), false, false}};
    m.forward(segs);
  } catch (const Error& e) {
    refused = std::string(e.what()).find("all prompt or all decode") != std::string::npos;
  }
  tally.expect(refused, name + ": a call mixing prompt and decode segments is refused");
}

}  // namespace

void check_prompt_fixture(Tally& tally, CudaModel& m, const std::vector<int32_t>& prompt,
                          const std::vector<float>& want, const std::vector<double>& margins,
                          const std::string& name) {
  constexpr double kLogitBound = 1e-4, kMarginFloor = 1e-3;
  const int64_t V = m.config().vocab_size;
  CudaStreamState st = m.new_state();
  const std::vector<float> got = prompt_pieces(m, st, prompt, {});
  double worst = 0;
  int top1_bad = 0;
  for (size_t t = 0; t < prompt.size() && got.size() == want.size(); ++t) {
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::fabs(double(got[t * V + v]) - want[t * V + v]));
    const auto am = [&](const float* row) { return std::max_element(row, row + V) - row; };
    if (margins[t] > kMarginFloor && am(&got[t * V]) != am(&want[t * V])) ++top1_bad;
  }
  std::printf(
      "  %s: prompt path: worst |logit - float64 ref| %.3g (%.3f of the bound); top-1 disagreements %d\n",
      name.c_str(), worst, worst / kLogitBound, top1_bad);
  tally.expect(got.size() == want.size() && worst <= kLogitBound, name + ": prompt path logits within bound");
  tally.expect(top1_bad == 0, name + ": prompt path top-1 equal where the reference margin > 1e-3");
  std::vector<int32_t> longer;
  while (longer.size() < 200) longer.insert(longer.end(), prompt.begin(), prompt.end());
  longer.resize(200);
  check_prompt_invariance(tally, m, longer, name);
}

// The real head shapes (fast DeltaNet/attention kernels, indexer selecting past position 19): prompt path
// against the decode path within 1e-3 of the largest logit, the invariances, and passes of 64 == one pass.
void run_prompt_real_heads(Tally& tally, const std::string& config_path) {
  const ModelConfig cfg = read_config(config_path);
  DummySpec spec;
  spec.expert_bits = 4, spec.expert_group = 32, spec.other_bits = 6, spec.other_group = 64, spec.seed = 7;
  CudaModelOptions opt, passes_opt;
  opt.max_context = passes_opt.max_context = 512;
  passes_opt.prompt_pass_rows = 64;
  CudaModel m(cfg, spec, opt), m64(cfg, spec, passes_opt);
  const std::vector<int32_t> tokens = synthetic_tokens(300, cfg.vocab_size, 0);
  const int64_t V = cfg.vocab_size;
  CudaStreamState d = m.new_state(), p = m.new_state(), q = m64.new_state(), far = m.new_state();
  const std::vector<float> decode = run_windows(m, d, tokens, 16);
  const std::vector<float> prompt = prompt_pieces(m, p, tokens, {});
  double worst = 0, top = 0;
  int top1_bad = 0;
  for (size_t r = 0; r < tokens.size(); ++r) {
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::fabs(double(prompt[r * V + v]) - decode[r * V + v]));
      top = std::max(top, std::fabs(double(decode[r * V + v])));
    }
    const auto am = [&](const std::vector<float>& l) {
      return std::max_element(l.begin() + r * V, l.begin() + (r + 1) * V) - (l.begin() + r * V);
    };
    top1_bad += am(prompt) != am(decode);
  }
  const double bound = 1e-3 * top;
  std::printf(
      "  real heads: prompt path vs decode path over %zu positions: worst |diff| %.3g (bound %.3g, %.3f "
      "of it); top-1 disagreements %d\n",
      tokens.size(), worst, bound, worst / bound, top1_bad);
  tally.expect(worst <= bound, "real heads: prompt path within 1e-3 of the largest logit of the decode path");
  // The chunked DeltaNet rule (off by default): the same prompt pass with it, against the default's.
  m.set_prompt_chunked_deltanet(true);
  CudaStreamState pc = m.new_state();
  const std::vector<float> chunked = prompt_pieces(m, pc, tokens, {});
  m.set_prompt_chunked_deltanet(opt.prompt_chunked_deltanet);
  double rule_diff = 0;
  for (size_t i = 0; i < chunked.size() && chunked.size() == prompt.size(); ++i)
    rule_diff = std::max(rule_diff, std::fabs(double(prompt[i]) - chunked[i]));
  const bool rule_same = same_bits(chunked, prompt);
  std::printf(
      "  real heads: prompt path, chunked vs per-token DeltaNet rule: worst |diff| %.3g (%.3f of the "
      "bound)%s\n",
      rule_diff, rule_diff / bound, rule_same ? " BIT-IDENTICAL (chunked form not in use?)" : "");
  tally.expect(chunked.size() == prompt.size() && rule_diff <= bound && !rule_same,
               "real heads: the chunked rule runs when asked, within the bound of the per-token rule");
  // The per-token rule through the staged prompt kernels (deltanet_prompt.h) and through the decode
  // kernels: the same bits (whichever the default is, the other one here).
  m.set_prompt_staged_deltanet(!opt.prompt_staged_deltanet);
  CudaStreamState ps = m.new_state();
  const bool staged_same = same_bits(prompt_pieces(m, ps, tokens, {}), prompt);
  m.set_prompt_staged_deltanet(opt.prompt_staged_deltanet);
  tally.expect_identical(
      staged_same, "real heads: DeltaNet staged prompt kernels == decode kernels",
      "real heads: a prompt pass with the staged DeltaNet kernels == with the decode kernels");
  std::vector<int32_t> other = tokens;
  std::reverse(other.begin(), other.end());
  const std::vector<float> wrong = prompt_pieces(m, far, other, {});
  double control = 0;
  for (size_t i = 0; i < wrong.size(); ++i)
    control = std::max(control, std::fabs(double(wrong[i]) - decode[i]));
  std::printf("  real heads: negative control (other tokens) %.3g = %.0fx the bound\n", control,
              control / bound);
  tally.expect(control > bound, "real heads: negative control exceeds the bound");
  // One call of 300 rows, run by the model in passes of 64 rows == one pass of 300.
  const CudaSegment seg{&q, std::span<const int32_t>(tokens), true, true};
  const bool passes_same = same_bits(m64.forward(std::span<const CudaSegment>(&seg, 1)), prompt);
  tally.expect_identical(passes_same, "real heads: passes of 64 rows == one pass",
                         "real heads: a prompt run in passes of 64 rows == one pass");
  check_prompt_invariance(tally, m, tokens, "real heads");
  // The same with the chunked rule: passes of 64 rows == one pass, and the invariances.
  m.set_prompt_chunked_deltanet(true);
  m64.set_prompt_chunked_deltanet(true);
  CudaStreamState qc = m64.new_state();
  const CudaSegment seg_c{&qc, std::span<const int32_t>(tokens), true, true};
  const bool passes_chunked = same_bits(m64.forward(std::span<const CudaSegment>(&seg_c, 1)), chunked);
  tally.expect_identical(passes_chunked, "real heads, chunked rule: passes of 64 rows == one pass",
                         "real heads, chunked rule: a prompt run in passes of 64 rows == one pass");
  check_prompt_invariance(tally, m, tokens, "real heads, chunked rule");
  m.set_prompt_chunked_deltanet(opt.prompt_chunked_deltanet);
}

void run_prompt_bench(const std::string& config_path, const std::vector<int>& lengths) {
  const ModelConfig cfg = read_config(config_path);
  DummySpec spec;  // 4-bit g32 everywhere, the receipt's encoding
  CudaModelOptions opt;
  opt.max_context = *std::max_element(lengths.begin(), lengths.end()) + 64;
  const auto t0 = std::chrono::steady_clock::now();
  CudaModel m(cfg, spec, opt);
  std::printf(
      "\n== prompt, real shape, MLX affine 4-bit g32, batch 1, passes of %d rows ==\n%sbuilt in %.1f s\n",
      opt.prompt_pass_rows, m.describe().c_str(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  auto run = [&](int n) {
    CudaStreamState st = m.new_state();
    const std::vector<int32_t> tokens = synthetic_tokens(static_cast<size_t>(n), cfg.vocab_size, n);
    const CudaSegment seg{&st, std::span<const int32_t>(tokens), false, true};
    const auto a = std::chrono::steady_clock::now();
    m.forward_greedy(std::span<const CudaSegment>(&seg, 1));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
  };
  run(2048);  // warm-up: scratch for a whole pass
  // The model's default kernels, then two other choices of the prompt tile kernel for affine weights
  // (tiled_ring: the register-staged kernel, the ring kernel, or the ring for the expert tiles alone; the
  // same bits), each at every length up to 8192 and by op kind at 1024 and 2048 tokens. (The DeltaNet prompt
  // kernels, output tilings, chunked rule and attention variants: docs/receipts/cuda-prompt.md.)
  const int base = tiled_ring();
  static const char* const kRingNames[] = {
      "register-staged kernel (tc_products.cu) everywhere", "ring kernel everywhere, codes by conversions",
      "ring kernel everywhere, 4-bit codes by LOP3",
      "ring kernel for the expert tiles, register-staged for single matrices"};
  for (const int ring : {base, base == 0 ? 3 : 0, base == 2 ? 3 : 2}) {
    const bool other = ring != base;
    set_tiled_ring(ring);
    std::printf("prompt tiles, affine weights: %s%s\n%8s %10s %12s\n", kRingNames[ring],
                other ? "" : " (default)", "tokens", "seconds", "tokens/s");
    run(2048);  // warm-up at this setting
    for (int n : lengths) {
      if (other && n > 8192) continue;
      const double s = run(n);
      std::printf("%8d %10.3f %12.1f\n", n, s, n / s);
      std::fflush(stdout);
    }
    for (const int n : {1024, 2048}) {
      m.set_time_ops(true);
      m.reset_op_times();
      run(n);
      std::vector<std::pair<std::string, double>> ops(m.op_times().begin(), m.op_times().end());
      std::sort(ops.begin(), ops.end(), [](auto& a, auto& b) { return a.second > b.second; });
      double total = 0;
      for (auto& [k, ms] : ops) total += ms;
      std::printf("  GPU time of a %d-token prompt by op (%.1f ms in all):\n", n, total);
      for (auto& [k, ms] : ops) std::printf("    %-20s %9.2f ms %5.1f%%\n", k.c_str(), ms, 100 * ms / total);
      m.set_time_ops(false);
    }
  }
  set_tiled_ring(base);
}

}  // namespace ds::cuda::modelcheck
