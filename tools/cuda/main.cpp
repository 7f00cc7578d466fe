// cuda_wx_check: correctness checks, then timings, of the CUDA kernels (weight products, DeltaNet decode,
// attention decode, MoE routing). Exit code 1 when a check fails. Usage: cuda_wx_check [--quick] [--no-bench]
// [--reps N]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "backend/cuda/wx_row_choice.h"
#include "checks.h"

namespace {

// Runs one section; an exception fails it (and is logged) but the later sections still run.
template <class F>
void section(ds::cuda::wxcheck::Tally& tally, const char* name, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_wx_check: %s: %s\n", name, e.what());
    tally.expect(false, std::string(name) + " threw: " + e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, bench = true, checks = true;
  // --only NAME: only the check sections, and bench the product shapes (or sections), whose name contains
  // NAME
  std::string only;
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--no-bench") {
      bench = false;
    } else if (a == "--no-checks") {
      checks = false;
    } else if (a == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--no-bench] [--reps N] [--no-checks] [--only NAME]\n",
                   argv[0]);
      return 2;
    }
  }
  namespace wx = ds::cuda::wxcheck;
  wx::Tally tally;
  auto wanted = [&](const std::string& name) { return only.empty() || name.find(only) != std::string::npos; };
  // The checks take the paired one-row and grouped kernels on every shape, not only those the rule gives
  // them.
  const int64_t min_tasks = ds::cuda::paired_min_tasks();
  ds::cuda::set_paired_min_tasks(0);
  if (checks) {
    if (wanted("weight")) section(tally, "weight product checks", [&] { wx::run_checks(tally, quick); });
    if (wanted("deltanet")) section(tally, "deltanet checks", [&] { wx::run_deltanet_checks(tally); });
    if (wanted("attention")) section(tally, "attention checks", [&] { wx::run_attention_checks(tally); });
    if (wanted("routing")) section(tally, "routing checks", [&] { wx::run_routing_checks(tally); });
    if (wanted("moe")) section(tally, "moe checks", [&] { wx::run_moe_checks(tally); });
    if (wanted("tiled")) section(tally, "tiled product checks", [&] { wx::run_tc_checks(tally); });
    if (wanted("decode-tc")) section(tally, "decode tc checks", [&] { wx::run_tc_decode_checks(tally); });
    if (wanted("decode-tc grouping"))
      section(tally, "decode tc grouping checks", [&] { wx::run_tc_grouping_checks(tally); });
    if (wanted("errors")) section(tally, "error checks", [&] { wx::run_error_checks(tally); });
    if (wanted("launch")) section(tally, "launch checks", [&] { wx::run_launch_checks(tally); });
  }
  ds::cuda::set_paired_min_tasks(min_tasks);
  std::printf("checks: %d passed, %d failed\n", tally.passed, tally.failed);
  std::fflush(stdout);
  if (bench) {
    section(tally, "weight product bench", [&] { wx::run_bench(reps, only); });
    // --only weight or --only row: every shape of the one-row table; another name filters its shapes.
    section(tally, "one-row kernel bench",
            [&] { wx::run_row_bench(reps, only == "weight" || only == "row" ? std::string() : only); });
    if (wanted("deltanet")) section(tally, "deltanet bench", [&] { wx::run_deltanet_bench(reps); });
    if (wanted("attention")) section(tally, "attention bench", [&] { wx::run_attention_bench(reps); });
    if (wanted("routing")) section(tally, "routing bench", [&] { wx::run_routing_bench(reps); });
    if (wanted("moe")) section(tally, "moe bench", [&] { wx::run_moe_bench(reps); });
    if (wanted("tiled")) section(tally, "tiled bench", [&] { wx::run_tc_bench(std::min(reps, 20)); });
    if (wanted("decode-tc"))
      section(tally, "decode tc bench", [&] { wx::run_tc_decode_bench(std::min(reps, 20)); });
  }
  if (tally.failed > 0) {
    std::printf("\nFAILED checks:\n");
    for (const auto& f : tally.failures) std::printf("  %s\n", f.c_str());
    return 1;
  }
  std::printf("\nall %d checks passed\n", tally.passed);
  return 0;
}
