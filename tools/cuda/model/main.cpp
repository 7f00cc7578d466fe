// cuda_model_check: whole-model checks on the committed fixtures and the real-shape decode bench on the GPU
// (docs/backend-cuda.md, docs/receipts/cuda-decode.md). Exit 1 when a check fails.
// Usage: cuda_model_check ROOT [--no-checks] [--mtp-only] [--small-config JSON] [--bench CONFIG] [--encoding
// BITS:GROUP]... [--streams 1,8,32,64] [--rounds N] [--mtp-reps N] [--lean-bench] [--prompt 2048,8192,32768]
// [--op-streams 8,64] [--hc-only]
// --mtp-only: only the MTP head's checks and (with --bench) its real-shape cost.
// --hc-only: of the checks, only the hyper-connection mix kernels' ("hc mix", "hc tensor mix").
// --prompt: the prompt bench at these lengths (the decode bench then only with --encoding).
#include <cstdlib>
#include <exception>
#include <sstream>

#include "model_checks.h"

namespace {

template <class F>
void section(ds::cuda::modelcheck::Tally& tally, const char* name, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::printf("cuda_model_check: %s: %s\n", name, e.what());
    tally.expect(false, std::string(name) + " threw: " + e.what());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: %s ROOT [--no-checks] [--mtp-only] [--bench CONFIG] [--bits B] [--group G] [--streams LIST] "
        "[--rounds N]\n",
        argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  bool checks = true, mtp_only = false, lean = false, hc_only = false, moe_only = false;
  int mtp_reps = 20;
  std::string bench_config, small_config = root + "/tests/cuda/flashnext-small-real-heads.json";
  std::vector<std::pair<int, int>> encodings;
  std::vector<int> streams{1, 8, 32, 64};
  int rounds = 32;
  std::vector<int> prompt_lengths, op_streams;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--lean-bench") {  // the decode rounds and the MoE glue variants only
      lean = true;
    } else if (a == "--hc-only") {
      hc_only = true;
    } else if (a == "--moe-only") {  // the tensor experts' sections only (a short device call)
      moe_only = true;
    } else if (a == "--no-checks") {
      checks = false;
    } else if (a == "--mtp-only") {
      mtp_only = true;
    } else if (a == "--mtp-reps") {
      mtp_reps = std::atoi(next().c_str());
    } else if (a == "--small-config") {
      small_config = next();
    } else if (a == "--bench") {
      bench_config = next();
    } else if (a == "--encoding") {  // BITS:GROUP, repeatable
      const std::string v = next();
      encodings.push_back({std::atoi(v.c_str()), std::atoi(v.substr(v.find(':') + 1).c_str())});
    } else if (a == "--streams") {
      streams.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) streams.push_back(std::atoi(t.c_str()));
    } else if (a == "--prompt") {  // prompt lengths for the prompt bench, e.g. 2048,8192,32768
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) prompt_lengths.push_back(std::atoi(t.c_str()));
    } else if (a == "--op-streams") {  // per-op tables at these stream counts instead of the decode bench
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) op_streams.push_back(std::atoi(t.c_str()));
    } else if (a == "--rounds") {
      rounds = std::atoi(next().c_str());
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  namespace mc = ds::cuda::modelcheck;
  mc::Tally tally;
  if (checks && moe_only) {
    section(tally, "tensor expert swiglu", [&] { mc::run_tc_swiglu_checks(tally); });
    section(tally, "tensor expert down", [&] { mc::run_tc_down_checks(tally); });
    section(tally, "fast vs generic", [&] { mc::run_fast_vs_generic(tally, small_config); });
    std::printf("checks: %d passed, %d failed\n", tally.passed, tally.failed);
  } else if (checks && hc_only) {
    section(tally, "hc mix", [&] { mc::run_hc_checks(tally); });
    section(tally, "hc tensor mix", [&] { mc::run_hc_tensor_checks(tally); });
    std::printf("checks: %d passed, %d failed\n", tally.passed, tally.failed);
  } else if (checks) {
    if (!mtp_only) {
      section(tally, "fixtures", [&] {
        mc::run_fixture_checks(
            tally, root,
            {"qwen4exp_base", "qwen4exp_hc2_sigmoid", "qwen4exp_multimodal", "qwen4exp_mlx_mixed",
             "qwen4exp_mlx_8bit_g128", "qwen4exp_mlx_2bit_g32", "qwen35moe", "flashnext_tiny", "qwen3next"});
      });
      section(tally, "hc mix", [&] { mc::run_hc_checks(tally); });
      section(tally, "hc tensor mix", [&] { mc::run_hc_tensor_checks(tally); });
      section(tally, "argmax", [&] { mc::run_argmax_checks(tally); });
      section(tally, "fused moe glue", [&] { mc::run_moe_fused_checks(tally); });
      section(tally, "tensor expert swiglu", [&] { mc::run_tc_swiglu_checks(tally); });
      section(tally, "tensor expert down", [&] { mc::run_tc_down_checks(tally); });
      section(tally, "fast vs generic", [&] { mc::run_fast_vs_generic(tally, small_config); });
      section(tally, "prompt real heads", [&] { mc::run_prompt_real_heads(tally, small_config); });
      section(tally, "prompt attention", [&] { mc::run_attention_prompt_checks(tally); });
    }
    section(tally, "mtp head", [&] { mc::run_mtp_checks(tally, root, small_config); });
    std::printf("checks: %d passed, %d failed\n", tally.passed, tally.failed);
  }
  if (!bench_config.empty() && !prompt_lengths.empty() && !mtp_only)
    section(tally, "prompt bench", [&] { mc::run_prompt_bench(bench_config, prompt_lengths); });
  if (!bench_config.empty() && (prompt_lengths.empty() || !encodings.empty())) {
    if (encodings.empty()) encodings = {{4, 32}, {6, 64}};
    for (auto [bits, group] : encodings) {
      if (!mtp_only && !op_streams.empty())
        section(tally, "op tables",
                [&] { mc::run_op_tables(bench_config, bits, group, op_streams, rounds); });
      else if (!mtp_only)
        section(tally, "bench", [&] { mc::run_bench(bench_config, bits, group, streams, rounds, lean); });
      if (mtp_reps > 0)  // --mtp-reps 0: no MTP bench (it builds a second model)
        section(tally, "mtp bench", [&] { mc::run_mtp_bench(bench_config, bits, group, mtp_reps); });
    }
  }
  if (tally.failed > 0) {
    std::printf("\nFAILED checks:\n");
    for (const auto& f : tally.failures) std::printf("  %s\n", f.c_str());
    return 1;
  }
  return 0;
}
