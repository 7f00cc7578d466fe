// Teacher-forced logits and greedy continuations against transformers' float64 reference (tests/fixtures,
// made by tools/fixtures/make_fixtures.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model_test_support.h"

namespace ds {
namespace {

// The issue asks for 1e-3; f32 activations land near 1e-5 on these fixtures, so a tighter bound catches
// regressions.
constexpr double kLogitBound = 1e-4;
constexpr double kMarginFloor = 1e-3;  // top-1 must agree wherever the reference margin exceeds this

class Golden : public ::testing::TestWithParam<std::string> {};

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

TEST_P(Golden, TeacherForcedLogitsWithinBound) {
  auto dir = test::fixture(GetParam());
  auto ref = test::read_json(dir / "reference.json");
  std::vector<float> want = test::read_f32(dir / "logits.f32");
  Model model(dir);
  std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
  StreamState st = model.new_state();
  std::vector<float> got = test::run(model, st, prompt, true);
  const int64_t V = model.config().vocab_size;
  ASSERT_EQ(got.size(), want.size());
  auto margins = ref["teacher_forced_margins"].get<std::vector<double>>();
  // The fixtures are made tie-free: torch.topk orders exactly tied indexer scores arbitrarily, the engine
  // toward the earlier block, so a tie would make the reference's choice unreproducible.
  ASSERT_TRUE(ref.value("indexer_tie_positions", nlohmann::json::array()).empty());
  double worst = 0;
  for (size_t t = 0; t < prompt.size(); ++t) {
    for (int64_t v = 0; v < V; ++v)
      worst = std::max(worst, std::fabs(double(got[t * V + v]) - want[t * V + v]));
    if (margins[t] > kMarginFloor) {
      EXPECT_EQ(argmax(&got[t * V], V), argmax(&want[t * V], V)) << "position " << t;
    }
  }
  EXPECT_LE(worst, kLogitBound);
  RecordProperty("worst_abs_error", std::to_string(worst));
  std::printf("[ fixture ] %s: worst |logit error| %.3g over %zu positions\n", GetParam().c_str(), worst,
              prompt.size());
}

TEST_P(Golden, GreedyContinuationOnDecodePath) {
  auto dir = test::fixture(GetParam());
  auto ref = test::read_json(dir / "reference.json");
  Model model(dir);
  std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
  std::vector<int32_t> want = ref["greedy"].get<std::vector<int32_t>>();
  ASSERT_TRUE(ref.value("greedy_indexer_tie_steps", nlohmann::json::array()).empty());
  StreamState st = model.new_state();
  std::vector<float> logits = test::run(model, st, prompt, true, false);
  std::vector<int32_t> got;
  const int64_t V = model.config().vocab_size;
  while (got.size() < want.size()) {
    got.push_back(argmax(logits.data(), V));
    logits = test::run(model, st, {got.back()}, false, false);
  }
  EXPECT_EQ(got, want);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Golden,
                         ::testing::Values("qwen4exp_base", "qwen4exp_hc2_sigmoid", "qwen4exp_multimodal",
                                           "qwen4exp_mlx_mixed", "qwen4exp_mlx_8bit_g128",
                                           "qwen4exp_mlx_2bit_g32", "qwen3next", "qwen35moe",
                                           // the shipped default model (links into models/flashnext-tiny)
                                           "flashnext_tiny"));

}  // namespace
}  // namespace ds
