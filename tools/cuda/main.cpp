// cuda_wx_check: correctness checks, then timings, of the CUDA weight products. Exit code 1 when a check
// fails. Usage: cuda_wx_check [--quick] [--no-bench] [--reps N]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "checks.h"

int main(int argc, char** argv) {
  bool quick = false, bench = true;
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--no-bench") {
      bench = false;
    } else if (a == "--reps" && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--no-bench] [--reps N]\n", argv[0]);
      return 2;
    }
  }
  try {
    ds::cuda::wxcheck::Tally tally;
    ds::cuda::wxcheck::run_checks(tally, quick);
    std::printf("checks: %d passed, %d failed\n", tally.passed, tally.failed);
    if (bench) ds::cuda::wxcheck::run_bench(reps);
    if (tally.failed > 0) {
      std::printf("\nFAILED checks:\n");
      for (const auto& f : tally.failures) std::printf("  %s\n", f.c_str());
      return 1;
    }
    std::printf("\nall %d checks passed\n", tally.passed);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_wx_check: %s\n", e.what());
    return 1;
  }
}
