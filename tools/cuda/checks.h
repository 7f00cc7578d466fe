#pragma once
// Correctness checks and timings of the CUDA weight products (run by cuda_wx_check's main).
#include <string>
#include <vector>

namespace ds::cuda::wxcheck {

// Counts and a short log of what failed; every check adds to it.
struct Tally {
  int passed = 0;
  int failed = 0;
  std::vector<std::string> failures;
  void expect(bool ok, const std::string& what);
};

// Each kernel against the float64 reference within its bound, a negative control, rows alone == rows in every
// window, poisoned outputs, grouped == one-row products, and argument errors.
void run_checks(Tally& tally, bool quick);

// Timings on the Flash Next shapes; prints a table.
void run_bench(int reps);

}  // namespace ds::cuda::wxcheck
