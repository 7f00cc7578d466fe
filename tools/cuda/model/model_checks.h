#pragma once
// cuda_model_check: the whole model's decode path on the GPU against the committed fixtures' float64
// references, its invariances (stream alone == beside others, window == single steps), and the real-shape
// bench with random weights made on the GPU.
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cuda/model/cuda_model.h"
#include "model/model_config.h"

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
  // Prints "  <line>: bit-identical" (or DIFFERENT) and counts `same` as the check `what`.
  void expect_identical(bool same, const std::string& line, const std::string& what) {
    std::printf("  %s: %s\n", line.c_str(), same ? "bit-identical" : "DIFFERENT");
    expect(same, what);
  }
};

// Files of the fixtures, bitwise equality, the first largest entry of a row.
std::vector<float> read_f32(const std::string& path);
nlohmann::json read_json(const std::string& path);
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);
int32_t argmax(const float* row, int64_t n);
ModelConfig read_config(const std::string& path);  // a config.json

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
// The MTP head on the GPU (mtp_checks.cpp): against the float64 goldens of tests/fixtures/qwen4exp_mtp, its
// invariances, a greedy chained-draft run against the CPU head on models/flashnext-tiny, and the fast
// kernels' head on the small real-heads config.
void run_mtp_checks(Tally& tally, const std::string& root, const std::string& small_config);
// The head's real-shape cost (mtp_bench.cpp): ms of a catch-up call by rows, of a chained call by streams,
// of drafting 1-4 deep, and the bytes a head row reads.
void run_mtp_bench(const std::string& config_path, int bits, int group, int reps);
// The real shape from the config at the given expert/other encodings; decode rounds at each stream count.
// lean: the decode rounds and the MoE glue variants only (no other paths, op tables or long contexts).
void run_bench(const std::string& config_path, int bits, int group, const std::vector<int>& streams,
               int rounds, bool lean = false);
// Per-op GPU tables at each stream count, FMA and tensor decode products (and FMA with the other expert
// path).
void run_op_tables(const std::string& config_path, int bits, int group, const std::vector<int>& streams,
                   int rounds);

// The greedy pick (argmax_checks.cpp): the split argmax == the one-block kernel == the host, ties and NaN
// planted, several vocabulary sizes and row counts.
void run_argmax_checks(Tally& tally);
// The MoE glue folded into the FMA products (moe_fused_checks.cpp) == the separate launches, bit for bit.
void run_moe_fused_checks(Tally& tally);
// The tensor expert tiles' gate|up with the SwiGLU folded in (moe_tc_swiglu_checks.cpp) == the separate ops.
void run_tc_swiglu_checks(Tally& tally);
void run_tc_down_checks(Tally& tally);  // moe_tc_down_checks.cpp: the down's routed form at one row
// The hyper-connection mix kernels (hc_checks.cpp) at the real shape against float64, rows alone == together.
void run_hc_checks(Tally& tally);
// hc_head's partials (S = 4 blocks of `rows` a row) as the tails join them, (p0 + p1) + (p2 + p3) in f32
// (-ffp-contract=off: the kernels' bits), downloaded after the caller's synchronisation.
std::vector<float> hc_joint_partials(const DeviceBuffer& partial, int n, int64_t rows);
// The tensor family's fused hc mix (hc_tensor_checks.cpp) == the separate ops (tc_decode_wx of up), bit for
// bit at 1-64 rows, with a negative control.
void run_hc_tensor_checks(Tally& tally);
// The prompt path (prompt_checks.cpp): a fixture's teacher-forced logits through prompt passes within the
// bound, and the prompt invariances (cut at 64 == one pass, cut elsewhere within 1e-3 of the largest logit;
// alone == beside other prompts).
void check_prompt_fixture(Tally& tally, CudaModel& m, const std::vector<int32_t>& prompt,
                          const std::vector<float>& want, const std::vector<double>& margins,
                          const std::string& name);
// The same on a small model of the real head shapes, against its decode path; passes of 64 == one pass.
void run_prompt_real_heads(Tally& tally, const std::string& config_path);
// The prompt path's selected-blocks attention kernel (attention_prompt_checks.cpp) against float64.
void run_attention_prompt_checks(Tally& tally);
// Random weights at one MLX affine width for experts and the other matrices alike (the benches' encodings).
inline DummySpec uniform_spec(int bits, int group) {
  DummySpec spec;
  spec.expert_bits = spec.other_bits = bits;
  spec.expert_group = spec.other_group = group;
  return spec;
}
// Prompt tokens/s at the real shape (4-bit g32), batch 1, for each prompt length.
void run_prompt_bench(const std::string& config_path, const std::vector<int>& lengths);

}  // namespace ds::cuda::modelcheck
