// The fast kernels against the any-shape ones on a small model of the real head shapes, and the real-shape
// decode bench with random weights made on the GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../scoped_env.h"
#include "backend/cuda/model/cuda_bench.h"
#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/model/hc_kernels.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/wx_products.h"
#include "backend/cuda/wx_row_choice.h"
#include "core/error.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

ModelConfig read_config(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("cannot open {}", path);
  return ModelConfig::from_json(nlohmann::json::parse(f));
}

namespace {

constexpr double kRooflineBytesPerSecond = 4.3e12;

// A process switch's value when made, put back by restore() and at the scope's end (scoped_env.h).
using EnvKeep = ScopedEnv;

// A variant token of DS_LEAN_ROW_VARIANTS or DS_OP_TABLE_ROW_VARIANTS: V (DS_CUDA_TC_ROW_VARIANT) or V:M
// (and DS_CUDA_TC_EXPERT_ROUTED = M, else the value the process had before the loop: `routed`, so a
// DS_CUDA_TC_EXPERT_ROUTED given on the command line holds for plain V tokens); both in the graphs' key.
void set_row_variant(const std::string& token, const EnvKeep& routed) {
  const size_t colon = token.find(':');
  setenv("DS_CUDA_TC_ROW_VARIANT", token.substr(0, colon).c_str(), 1);
  if (colon == std::string::npos)
    routed.restore();
  else
    setenv("DS_CUDA_TC_EXPERT_ROUTED", token.substr(colon + 1).c_str(), 1);
}

// The switch and its values of DS_LEAN_ENV (or DS_LEAN_ROW_VARIANTS under the tensor family); empty if none.
std::pair<std::string, std::vector<std::string>> env_variants(const CudaModel& m) {
  std::string name, list;
  if (const char* e = std::getenv("DS_LEAN_ENV"); e != nullptr && e[0] != '\0') {
    const std::string v(e);
    const size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0) fail("DS_LEAN_ENV must be NAME=v1,v2,... (got '{}')", v);
    name = v.substr(0, eq), list = v.substr(eq + 1);
    // Switches read once and cached by the kernels (review13): flipping them here would time one setting
    // under every label; their setters (bench_swiglu_fold's) are the way to A/B them.
    for (const char* cached : {"DS_CUDA_HC_TENSOR", "DS_CUDA_TC_SWIGLU", "DS_CUDA_TC_GROUP", "DS_CUDA_TC_ROW",
                               "DS_CUDA_TC_PLANES", "DS_CUDA_ROW_KERNEL"})
      if (name == cached) fail("DS_LEAN_ENV: {} is read once and cached, so it cannot be flipped here", name);
  } else if (const char* rv = std::getenv("DS_LEAN_ROW_VARIANTS");
             rv != nullptr && rv[0] != '\0' && m.options().decode_products == DecodeProducts::Tensor) {
    name = "DS_CUDA_TC_ROW_VARIANT", list = rv;
  }
  std::vector<std::string> values;
  std::stringstream ss(list);
  for (std::string t; std::getline(ss, t, ',');) values.push_back(t);
  return {name, values};
}

// The rounds under each value of env_variants' switch (restored after); false if there is none.
bool bench_env_variants(CudaModel& m, int n, int rounds) {
  const auto [name, values] = env_variants(m);
  if (name.empty() || values.empty()) return false;
  const EnvKeep before(name.c_str()), routed("DS_CUDA_TC_EXPERT_ROUTED");
  const char* ops_env = std::getenv("DS_LEAN_ENV_OPS");
  const bool ops = n == 1 && ops_env != nullptr && std::string(ops_env) == "1";
  for (const std::string& v : values) {
    if (name == "DS_CUDA_TC_ROW_VARIANT")
      set_row_variant(v, routed);  // V or V:M (moe13's routed expert mask with it)
    else
      setenv(name.c_str(), v.c_str(), 1);
    const DecodeRate x = bench_decode_rounds(m, n, rounds, 4);
    // graph_nodes() is the last capture's: a value seen before replays its parked graph.
    std::printf("%8d %10d %12.3f %12.1f  (%s=%s; the last captured round: %zu graph nodes)\n", n, rounds,
                x.ms_per_round, x.tokens_per_s, name.c_str(), v.c_str(), m.graph_nodes());
    if (ops) {
      for (const auto& [k, us] : op_breakdown(m, 4)) std::printf("    %-22s %9.1f us\n", k.c_str(), us);
    }
    std::fflush(stdout);
  }
  before.restore(), routed.restore();
  return true;
}

}  // namespace

void run_fast_vs_generic(Tally& tally, const std::string& config_path) {
  const ModelConfig cfg = read_config(config_path);
  DummySpec spec;
  spec.expert_bits = 4, spec.expert_group = 32, spec.other_bits = 6, spec.other_group = 64, spec.seed = 7;
  CudaModelOptions fast_opt, generic_opt;
  fast_opt.max_context = generic_opt.max_context = 256;
  generic_opt.generic_mixers = true;
  CudaModel fast(cfg, spec, fast_opt), generic(cfg, spec, generic_opt);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 60; ++i) tokens.push_back(static_cast<int32_t>((i * 7919 + 13) % cfg.vocab_size));
  CudaStreamState a = fast.new_state(), b = generic.new_state();
  const std::vector<float> lf = run_windows(fast, a, tokens, 4), lg = run_windows(generic, b, tokens, 4);
  const int64_t V = cfg.vocab_size;
  double worst = 0, top = 0;
  int top1_bad = 0;
  for (size_t r = 0; r < tokens.size(); ++r) {
    double row_top = 0;
    for (int64_t v = 0; v < V; ++v) {
      worst = std::max(worst, std::fabs(double(lf[r * V + v]) - lg[r * V + v]));
      row_top = std::max(row_top, std::fabs(double(lg[r * V + v])));
    }
    top = std::max(top, row_top);
    const auto am = [&](const std::vector<float>& l) {
      return std::max_element(l.begin() + r * V, l.begin() + (r + 1) * V) - (l.begin() + r * V);
    };
    top1_bad += am(lf) != am(lg);
  }
  // Both are f32 with different reduction orders over 60 positions; 1e-3 of the largest logit.
  const double bound = 1e-3 * top;
  std::printf(
      "  fast vs generic kernels (dk 128, hd 256, indexer selecting past position %lld): worst |diff| %.3g "
      "(bound %.3g, %.3f of it); top-1 disagreements %d\n",
      static_cast<long long>((cfg.indexer_budget / cfg.indexer_ratio + 1) * cfg.indexer_ratio - 1), worst,
      bound, worst / bound, top1_bad);
  tally.expect(worst <= bound, "fast vs generic kernels within bound");
  check_alone_vs_together(tally, fast, tokens, 4, "fast kernels");
  fast.set_graphs(false);
  CudaStreamState s0 = fast.new_state();
  const bool graph_same = run_windows(fast, s0, tokens, 4) == lf;
  fast.set_graphs(true);
  tally.expect_identical(graph_same, "fast kernels: CUDA-graph replay == direct launches",
                         "fast kernels: graph replay == direct launches");
  // Programmatic edges == plain edges where the split hc mix runs (the fixtures' hc up is unquantized).
  fast.set_programmatic_launch(false);
  CudaStreamState s5 = fast.new_state();
  const bool plain_same = run_windows(fast, s5, tokens, 4) == lf;
  fast.set_programmatic_launch(true);
  tally.expect_identical(plain_same, "fast kernels: programmatic launch == plain edges",
                         "fast kernels: programmatic launch == plain edges");
  CudaStreamState s1 = fast.new_state();
  const bool steps_same = run_windows(fast, s1, tokens, 1) == lf;
  tally.expect_identical(steps_same, "fast kernels: windows of 4 == single steps",
                         "fast kernels: a window == its single steps");
  // The other hyper-connection mix (split by stream / separate ops: other down|inject sums): against the
  // generic model within the same bound; its windows == its steps, bit for bit.
  fast.set_fused_hc(!fast.options().fused_hc);
  CudaStreamState s3 = fast.new_state(), s4 = fast.new_state();
  const std::vector<float> lh = run_windows(fast, s3, tokens, 4);
  const bool hc_steps = run_windows(fast, s4, tokens, 1) == lh;
  fast.set_fused_hc(!fast.options().fused_hc);
  double hc_worst = 0;
  for (size_t i = 0; i < lh.size(); ++i) hc_worst = std::max(hc_worst, std::fabs(double(lh[i]) - lg[i]));
  std::printf(
      "  fast kernels, other hc mix (%s): vs generic worst %.3g (%.3f of the bound), %s the default; windows "
      "of 4 == steps: %s\n",
      fast.options().fused_hc ? "separate ops" : "split, hc_kernels", hc_worst, hc_worst / bound,
      lh == lf ? "bit-identical to" : "differs from", hc_steps ? "bit-identical" : "DIFFERENT");
  tally.expect(lh.size() == lg.size() && hc_worst <= bound, "fast kernels: other hc mix within bound");
  tally.expect(hc_steps, "fast kernels: other hc mix: windows == steps");
  // The MoE glue as separate launches and all fused == the default, bit for bit: windows of 4 (SwiGLU and the
  // combine folded) and single steps (the routing too).
  const CudaModelOptions was = fast.options();
  for (const bool on : {false, true}) {
    fast.set_fused_moe(on, on, on);
    CudaStreamState s6 = fast.new_state(), s7 = fast.new_state();
    const bool moe_windows = run_windows(fast, s6, tokens, 4) == lf,
               moe_steps = run_windows(fast, s7, tokens, 1) == lf;
    const std::string what =
        std::string("fast kernels: MoE glue ") + (on ? "all fused" : "as separate ops") + " == the default";
    tally.expect_identical(moe_windows, what + " (windows of 4)", what + " (windows of 4)");
    tally.expect_identical(moe_steps, what + " (single steps)", what + " (single steps)");
  }
  fast.set_fused_moe(was.fused_route, was.fused_swiglu, was.fused_combine);
  fast.set_expert_windows(!fast.options().expert_windows);
  CudaStreamState s2 = fast.new_state();
  const bool pairs_same = run_windows(fast, s2, tokens, 4) == lf;
  fast.set_expert_windows(!fast.options().expert_windows);
  tally.expect_identical(pairs_same, "fast kernels: expert windows == per-pair expert products",
                         "fast kernels: expert windows == per-pair expert products");
  // Negative control for the comparison: the generic model on other tokens differs by far more than the
  // bound.
  std::vector<int32_t> other(tokens.rbegin(), tokens.rend());
  CudaStreamState c = generic.new_state();
  const std::vector<float> lo = run_windows(generic, c, other, 4);
  double far = 0;
  for (size_t i = 0; i < lo.size(); ++i) far = std::max(far, std::fabs(double(lo[i]) - lf[i]));
  std::printf("  negative control (other tokens): %.3g = %.0fx the bound\n", far, far / bound);
  tally.expect(far > bound, "fast vs generic: negative control exceeds the bound");
}

// The tensor expert tiles' folds (tc_decode_fold_swiglu, tc_decode_fold_grouping; in the graphs' key: each
// setting captures its own): both off, the SwiGLU alone, both on; at one row (where the grouping fold is
// taken) the op tables of each.
static void bench_swiglu_fold(CudaModel& m, int n, int rounds) {
  const bool swiglu = tc_decode_fold_swiglu_on(), group = tc_decode_fold_grouping_on();
  struct Folds {
    bool swiglu, group;
    const char* name;
  };
  for (const Folds f :
       {Folds{false, false, "folds off (tiles, product, SwiGLU)"}, Folds{true, false, "SwiGLU fold only"},
        Folds{true, true, "SwiGLU + grouping folds"}}) {
    tc_decode_fold_swiglu(f.swiglu), tc_decode_fold_grouping(f.group);
    const DecodeRate v = bench_decode_rounds(m, n, rounds, 1);
    std::printf("%8d %10d %12.3f %12.1f  (tensor expert gate|up: %s", n, rounds, v.ms_per_round,
                v.tokens_per_s, f.name);
    if (n == 1) std::printf("; %zu graph nodes a round", m.graph_nodes());
    std::printf(")\n");
    if (n != 1) continue;
    const int timed = 8;
    const auto ops = op_breakdown(m, timed);
    double total = 0;
    for (const auto& o : ops) total += o.second;
    std::printf("  per-op GPU time of one batch-1 round, %s (events as graph nodes; mean of %d):\n", f.name,
                timed);
    for (const auto& [k, us] : ops)
      std::printf("    %-22s %9.1f us %5.1f%%\n", k.c_str(), us, 100 * us / total);
    std::printf("    %-22s %9.1f us\n", "total", total);
  }
  tc_decode_fold_swiglu(swiglu), tc_decode_fold_grouping(group);
  std::fflush(stdout);
}

void run_bench(const std::string& config_path, int bits, int group, const std::vector<int>& streams,
               int rounds, bool lean) {
  const ModelConfig cfg = read_config(config_path);
  const DummySpec spec = uniform_spec(bits, group);
  CudaModelOptions opt;
  const int max_streams = *std::max_element(streams.begin(), streams.end());
  opt.max_context = max_streams > 8 ? 512 : 4096;
  const auto t0 = std::chrono::steady_clock::now();
  CudaModel m(cfg, spec, opt);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\n== real shape, MLX affine %d-bit g%d ==\n%sbuilt in %.1f s\n", bits, group,
              m.describe().c_str(), build_s);
  const double bytes = static_cast<double>(m.bytes_per_token());
  std::printf("%8s %10s %12s %12s %10s\n", "streams", "rounds", "ms/round", "tok/s", "vs 4.3TB/s");
  for (int n : streams) {
    const DecodeRate r = bench_decode_rounds(m, n, rounds, 4);
    std::printf("%8d %10d %12.3f %12.1f", n, rounds, r.ms_per_round, r.tokens_per_s);
    if (n == 1)
      std::printf(" %9.1f%%  (%.3f GB/token -> %.0f GB/s; %zu graph nodes a round, %zu programmatic edges)",
                  100 * bytes * r.tokens_per_s / kRooflineBytesPerSecond, bytes / 1e9,
                  bytes * r.tokens_per_s / 1e9, m.graph_nodes(), m.graph_programmatic_edges());
    std::printf("\n");
    if (n == 1) {  // the round's nodes by kind (its graph was the last captured)
      std::vector<std::pair<int, std::string>> kinds;
      for (const auto& [k, c] : m.graph_node_kinds()) kinds.push_back({c, k});
      std::sort(kinds.rbegin(), kinds.rend());
      std::printf("  nodes of a batch-1 round by kind:\n");
      for (const auto& [c, k] : kinds) std::printf("    %5d  %s\n", c, k.c_str());
    }
    std::fflush(stdout);
    // DS_LEAN_ENV="NAME=a,b,a,b" (lean bench): the round under each value of the process-wide switch NAME,
    // in this order, then nothing else at this stream count; DS_LEAN_ROW_VARIANTS="14,30" is
    // NAME=DS_CUDA_TC_ROW_VARIANT (tensor family only). NAME must be in the graphs' key, so each value
    // re-captures; DS_LEAN_ENV_OPS=1 adds each value's per-op table at one stream.
    if (lean && bench_env_variants(m, n, rounds)) continue;
    if (m.options().decode_products == DecodeProducts::Tensor) bench_swiglu_fold(m, n, rounds);
    // DS_LEAN_FOLDS_ONLY=1: the default line and the folds' lines only (a short device call).
    if (const char* v = std::getenv("DS_LEAN_FOLDS_ONLY"); lean && v != nullptr && std::string(v) == "1")
      continue;
    // The greedy pick by the one-block argmax (the earlier kernel; the same ids), then the default again,
    // each with the host's time a round: preparing the inputs, the launch, the wait for the ids.
    for (const bool split : {false, true}) {
      m.set_split_argmax(split);
      m.reset_host_times();
      const DecodeRate v = bench_decode_rounds(m, n, rounds, 1);
      const CudaModel::HostTimes h = m.host_times();
      const double per = 1e3 / static_cast<double>(std::max<int64_t>(h.calls, 1));
      std::printf("%8d %10d %12.3f %12.1f  (%s; host a call: prep %.0f us, launch %.0f us, wait %.0f us)\n",
                  n, rounds, v.ms_per_round, v.tokens_per_s,
                  split ? "split argmax again" : "one-block argmax", h.prep_ms * per, h.launch_ms * per,
                  h.wait_ms * per);
    }
    // The other one-row kernels (the same bits, docs/cuda-products.md "Kernels"), against the default line.
    const RowKernel row_kernel = one_row_kernel();
    for (RowKernel k :
         {RowKernel::Lockstep, RowKernel::LockstepExact, RowKernel::Paired, RowKernel::PairedStaged}) {
      if (k == row_kernel) continue;
      set_one_row_kernel(k);
      const DecodeRate v = bench_decode_rounds(m, n, rounds, 1);
      std::printf("%8d %10d %12.3f %12.1f  (one-row kernel %s)\n", n, rounds, v.ms_per_round, v.tokens_per_s,
                  one_row_kernel_name(k));
    }
    set_one_row_kernel(row_kernel);
    const int64_t min_tasks = paired_min_tasks();  // the paired kernels on every shape, however few tasks
    set_paired_min_tasks(0);
    const DecodeRate every = bench_decode_rounds(m, n, rounds, 1);
    set_paired_min_tasks(min_tasks);
    std::printf("%8d %10d %12.3f %12.1f  (one-row kernel %s on every shape)\n", n, rounds, every.ms_per_round,
                every.tokens_per_s, one_row_kernel_name(row_kernel));
    set_paired_grouped(false);
    const DecodeRate lock_grouped = bench_decode_rounds(m, n, rounds, 1);
    set_paired_grouped(true);
    std::printf("%8d %10d %12.3f %12.1f  (one-row kernel %s, grouped products on lockstep)\n", n, rounds,
                lock_grouped.ms_per_round, lock_grouped.tokens_per_s, one_row_kernel_name(row_kernel));
    std::fflush(stdout);
    // The MoE glue fusions one by one (the same bits every way), against the default line above: at one row
    // every combination; at 2-8 rows the routing is never folded; past 8 rows the separate ops and SwiGLU
    // alone, over half the rounds.
    struct Fusion {
      bool route, swiglu, combine;
      const char* name;
    };
    const CudaModelOptions was = m.options();
    for (const Fusion f : {Fusion{false, false, false, "MoE glue as separate ops"},
                           Fusion{true, false, false, "fused MoE glue: routing only"},
                           Fusion{false, true, false, "fused MoE glue: SwiGLU only"},
                           Fusion{false, false, true, "fused MoE glue: combine only"},
                           Fusion{true, true, false, "fused MoE glue: routing + SwiGLU"},
                           Fusion{true, true, true, "fused MoE glue: all three"}}) {
      if (n > 1 && f.route && !f.combine) continue;  // the same launches as without the routing
      if (n > 8 && (f.combine || f.route)) continue;
      m.set_fused_moe(f.route, f.swiglu, f.combine);
      const DecodeRate v = bench_decode_rounds(m, n, n > 8 ? std::max(rounds / 2, 1) : rounds, 1);
      std::printf("%8d %10d %12.3f %12.1f  (%s", n, n > 8 ? std::max(rounds / 2, 1) : rounds, v.ms_per_round,
                  v.tokens_per_s, f.name);
      if (n == 1) std::printf("; %zu graph nodes a round", m.graph_nodes());
      std::printf(")\n");
    }
    m.set_fused_moe(was.fused_route, was.fused_swiglu, was.fused_combine);
    // The split mix's head with the other count of outputs a warp (the same bits), at every stream count.
    if (m.options().fused_hc) {
      const int outputs = m.options().hc_head_outputs;
      const int other = 3 - m.hc_head_outputs_taken(n);
      m.set_hc_head_outputs(other);
      const DecodeRate v = bench_decode_rounds(m, n, rounds, 1);
      m.set_hc_head_outputs(outputs);
      std::printf("%8d %10d %12.3f %12.1f  (split hc mix, hc_head with %d output(s) a warp)\n", n, rounds,
                  v.ms_per_round, v.tokens_per_s, other);
    }
    std::fflush(stdout);
    if (lean) continue;
    // The other hyper-connection mix (split by stream / separate ops), at every stream count.
    const bool fused = m.options().fused_hc;
    m.set_fused_hc(!fused);
    const DecodeRate other_hc = bench_decode_rounds(m, n, rounds, 1);
    m.set_fused_hc(fused);
    std::printf("%8d %10d %12.3f %12.1f  (%s)\n", n, rounds, other_hc.ms_per_round, other_hc.tokens_per_s,
                fused ? "hc mix as separate ops" : "split hc mix, hc_kernels");
    // The other routed-expert path (expert windows / per-pair products), same rounds; up to 8 streams (it
    // measured slower at 8-64, docs/receipts/cuda-decode-streams.md).
    if (n > 8) continue;
    const bool windows = m.options().expert_windows;
    m.set_expert_windows(!windows);
    const DecodeRate other = bench_decode_rounds(m, n, rounds, 1);
    m.set_expert_windows(windows);
    std::printf("%8d %10d %12.3f %12.1f  (%s)\n", n, rounds, other.ms_per_round, other.tokens_per_s,
                windows ? "per-pair expert products" : "expert windows");
    if (n != 1) continue;
    m.set_programmatic_launch(false);
    const DecodeRate serial = bench_decode_rounds(m, n, rounds, 1);
    m.set_programmatic_launch(true);
    std::printf("%8d %10d %12.3f %12.1f  (graphs without programmatic launch)\n", n, rounds,
                serial.ms_per_round, serial.tokens_per_s);
    m.set_graphs(false);
    const DecodeRate plain = bench_decode_rounds(m, n, rounds, 1);
    m.set_graphs(true);
    std::printf("%8d %10d %12.3f %12.1f  (without CUDA graphs)\n", n, rounds, plain.ms_per_round,
                plain.tokens_per_s);
    // The op table of both hyper-connection paths (the default first): the events split the programmatic
    // chain at every op, so compare fusions by the untimed rounds above, not by these sums.
    const int timed = 8;
    struct Table {
      bool fused_hc, fused_moe;
      int head_outputs;
    };
    const bool hc = m.options().fused_hc;
    // The tables are of one row: hc_head's outputs a warp as the default takes them there, and the other.
    const int outs = m.options().hc_head_outputs, one_row = m.hc_head_outputs_taken(1);
    for (const Table t : {Table{hc, true, outs}, Table{hc, false, outs}, Table{!hc, true, outs},
                          Table{hc, true, 3 - one_row}}) {
      if (t.head_outputs != outs && !hc) continue;
      m.set_fused_hc(t.fused_hc), m.set_hc_head_outputs(t.head_outputs);
      if (!t.fused_moe) m.set_fused_moe(false, false, false);
      const auto ops = op_breakdown(m, timed);
      m.set_fused_hc(hc), m.set_hc_head_outputs(outs);
      m.set_fused_moe(was.fused_route, was.fused_swiglu, was.fused_combine);
      double total = 0;
      for (const auto& o : ops) total += o.second;
      std::printf(
          "  per-op GPU time of one batch-1 round, %s (hc_head %d output(s) a warp), %s (graph replay, CUDA "
          "events as graph nodes; mean of %d):\n",
          t.fused_hc ? "split hc mix" : "hc mix as separate ops",
          t.head_outputs > 0 ? t.head_outputs : one_row,
          t.fused_moe ? "MoE glue as the default" : "MoE glue as separate ops", timed);
      for (const auto& [k, us] : ops)
        std::printf("    %-20s %9.1f us %5.1f%%\n", k.c_str(), us, 100 * us / total);
      std::printf("    %-20s %9.1f us\n", "total", total);
    }
  }
  // Batch 1 at longer contexts: past the indexer budget the block selection and the selected attention run.
  for (int context : {1024, 4000}) {
    if (lean) break;
    if (context + rounds + 8 > opt.max_context) break;
    const DecodeRate r = bench_decode_rounds(m, 1, rounds, 2, context);
    std::printf("  batch 1 after %d context tokens: %.3f ms/round, %.1f tok/s\n", context, r.ms_per_round,
                r.tokens_per_s);
  }
}

void run_op_tables(const std::string& config_path, int bits, int group, const std::vector<int>& streams,
                   int rounds) {
  const ModelConfig cfg = read_config(config_path);
  const DummySpec spec = uniform_spec(bits, group);
  CudaModelOptions opt;
  opt.max_context = 512;
  CudaModel m(cfg, spec, opt);
  std::printf("\n== op tables, real shape, MLX affine %d-bit g%d ==\n", bits, group);
  const CudaModelOptions was = m.options();
  struct Mode {
    const char* name;
    DecodeProducts products;
    bool tall_only;
  };
  // DS_OP_TABLE_MODES (e.g. "tensor,tensor-tall"): only these modes; default all three.
  const char* only = std::getenv("DS_OP_TABLE_MODES");
  auto wanted = [&](const char* name) {
    if (only == nullptr) return true;
    const std::string list(only);
    for (size_t pos = 0; pos <= list.size();) {
      const size_t end = std::min(list.find(',', pos), list.size());
      if (list.compare(pos, end - pos, name) == 0) return true;
      pos = end + 1;
    }
    return false;
  };
  for (const Mode& md :
       {Mode{"fma", DecodeProducts::Fma, false}, Mode{"tensor", DecodeProducts::Tensor, false},
        Mode{"tensor-tall", DecodeProducts::Tensor, true}}) {
    if (!wanted(md.name)) continue;
    m.set_decode_products(md.products, md.tall_only);
    const DecodeProducts p = md.products;
    // DS_OP_TABLE_ROW_VARIANTS (e.g. "2,6,14"): the tensor modes once per one-row launch variant
    // (DS_CUDA_TC_ROW_VARIANT, part of the graphs' key, so each re-captures); default the environment's.
    std::vector<std::string> row_variants{""};
    if (const char* rv = std::getenv("DS_OP_TABLE_ROW_VARIANTS");
        rv != nullptr && p == DecodeProducts::Tensor) {
      row_variants.clear();
      std::stringstream ss(rv);
      for (std::string t; std::getline(ss, t, ',');) row_variants.push_back(t);
    }
    const EnvKeep row_before("DS_CUDA_TC_ROW_VARIANT"), routed("DS_CUDA_TC_EXPERT_ROUTED");
    for (const std::string& rv : row_variants) {
      if (!rv.empty()) set_row_variant(rv, routed);
      const std::string mode_name = rv.empty() ? std::string(md.name) : std::string(md.name) + " v" + rv;
      const char* mode = mode_name.c_str();
      for (int n : streams) {
        const DecodeRate r = bench_decode_rounds(m, n, rounds, 3);
        std::printf("%s, %d streams: %.3f ms/round, %.1f tok/s\n", mode, n, r.ms_per_round, r.tokens_per_s);
        // The other routed-expert path where the FMA products run the experts (the tensor ones tile them).
        if (p == DecodeProducts::Fma) {
          m.set_expert_windows(!m.options().expert_windows);
          const DecodeRate w = bench_decode_rounds(m, n, rounds, 1);
          std::printf("%s, %d streams, %s: %.3f ms/round, %.1f tok/s\n", mode, n,
                      m.options().expert_windows ? "expert windows" : "per-pair expert products",
                      w.ms_per_round, w.tokens_per_s);
        }
        // Events split the programmatic chain at every op: the sum exceeds the untimed round.
        for (const bool windows : {false, true}) {
          if (windows && (p != DecodeProducts::Fma || n > 8)) break;
          m.set_expert_windows(windows);
          const int timed = 4;
          const auto ops = op_breakdown(m, timed, n);
          double total = 0;
          for (const auto& o : ops) total += o.second;
          std::printf(
              "  per-op GPU time of one round, %s products, %d streams%s (events as graph nodes; mean of "
              "%d):\n",
              mode, n, windows ? ", expert windows" : "", timed);
          for (const auto& [k, us] : ops)
            std::printf("    %-22s %10.1f us %5.1f%%\n", k.c_str(), us, 100 * us / total);
          std::printf("    %-22s %10.1f us\n", "total", total);
          std::fflush(stdout);
        }
        m.set_expert_windows(was.expert_windows);
      }
    }
    if (row_variants.size() > 1 || !row_variants[0].empty()) row_before.restore(), routed.restore();
  }
  m.set_decode_products(was.decode_products, was.tensor_tall_only);
}

}  // namespace ds::cuda::modelcheck
