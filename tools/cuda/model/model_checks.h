#pragma once
// cuda_model_check: the whole model's decode path on the GPU against the committed fixtures' float64
// references, its invariances (stream alone == beside others, window == single steps), and the real-shape
// bench with random weights made on the GPU.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace ds::cuda {
class CudaModel;
struct CudaStreamState;
}  // namespace ds::cuda

namespace ds::cuda::modelcheck {

struct Tally {
  int passed = 0, failed = 0;
  std::vector<std::string> failures;
  void expect(bool ok, const std::string& what) {
    if (ok) {
      ++passed;
    } else {
      ++failed;
      failures.push_back(what);
      std::printf("  FAIL %s\n", what.c_str());
    }
  }
};

// Helpers shared by the checks: one stream's tokens in windows (every row's logits); three streams alone and
// then together, every round's logits compared bit for bit.
std::vector<float> run_windows(CudaModel& m, CudaStreamState& st, const std::vector<int32_t>& tokens,
                               size_t window);
void check_alone_vs_together(Tally& tally, CudaModel& m, const std::vector<int32_t>& prompt, size_t window,
                             const std::string& name);

// Fixture checks on tests/fixtures/<name> under `root` (the repository).
void run_fixture_checks(Tally& tally, const std::string& root, const std::vector<std::string>& names);
// A small model of the real layer shapes (dk 128, hd 256): the fast kernels against the any-shape ones.
void run_fast_vs_generic(Tally& tally, const std::string& config_path);
// The real shape from the config at the given expert/other encodings; decode rounds at each stream count.
void run_bench(const std::string& config_path, int bits, int group, const std::vector<int>& streams,
               int rounds);

// The prompt path (prompt_checks.cpp): a fixture's teacher-forced logits through prompt passes within the
// bound, and the prompt invariances (cut at 64 == cut anywhere == one pass; alone == beside other prompts).
void check_prompt_fixture(Tally& tally, CudaModel& m, const std::vector<int32_t>& prompt,
                          const std::vector<float>& want, const std::vector<double>& margins,
                          const std::string& name);
// The same on a small model of the real head shapes, against its decode path; passes of 64 == one pass.
void run_prompt_real_heads(Tally& tally, const std::string& config_path);
// Prompt tokens/s at the real shape (4-bit g32), batch 1, for each prompt length.
void run_prompt_bench(const std::string& config_path, const std::vector<int>& lengths);

}  // namespace ds::cuda::modelcheck
