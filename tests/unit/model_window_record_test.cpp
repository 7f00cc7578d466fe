// Draft rollback: a decode window run with a WindowRecord and rewound to its first j rows leaves the bits j
// one-row steps leave, on every family (DeltaNet conv + state, PLE conv + context, K/V, indexer keys/blocks).
#include <gtest/gtest.h>

#include <random>

#include "expect_error.h"
#include "model/window_record.h"
#include "model_test_support.h"

namespace ds {
namespace {

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = 3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 3));
  return t;
}

class WindowRewind : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = std::make_unique<Model>(test::fixture(GetParam())); }
  std::unique_ptr<Model> model_;
};

TEST_P(WindowRewind, KeepingJRowsEqualsJPlainSteps) {
  const Model& m = *model_;
  const int64_t V = m.config().vocab_size;
  auto prompt = random_tokens(30, V, 1);
  // Positions 30..36: the window completes indexer blocks (ratio 4) that a short keep must drop again.
  auto window = random_tokens(7, V, 2);
  window[3] = 2;  // an EOS inside, for the PLE context rule
  auto after = random_tokens(5, V, 3);
  StreamState base = m.new_state();
  test::run(m, base, prompt, true, false);

  // Plain: one-row steps, keeping the state (and logits) after each.
  std::vector<StreamState> plain_after;
  std::vector<float> plain_logits;
  StreamState plain = base;
  for (int32_t t : window) {
    auto l = test::run(m, plain, {t}, false);
    plain_logits.insert(plain_logits.end(), l.begin(), l.end());
    plain_after.push_back(plain);
  }

  for (size_t keep = 1; keep <= window.size(); ++keep) {
    StreamState st = base;
    WindowRecord record;
    ForwardSegment seg{&st, window, false, true, nullptr, &record};
    std::vector<float> logits = m.forward({&seg, 1});
    EXPECT_TRUE(test::same_bits(logits, plain_logits)) << "recording changed the window's logits";
    if (keep < window.size()) {
      EXPECT_FALSE(test::same_state(st, plain_after[keep - 1])) << "the check cannot see a missing rewind";
    }
    rewind_window(m.config(), record, static_cast<int64_t>(keep), st);
    EXPECT_TRUE(test::same_state(st, plain_after[keep - 1])) << "keep " << keep;
    // Decoding on from the rewound state matches decoding on from the plain one.
    StreamState cont = plain_after[keep - 1];
    EXPECT_TRUE(test::same_bits(test::run(m, st, after, false), test::run(m, cont, after, false)))
        << "keep " << keep;
    EXPECT_TRUE(test::same_state(st, cont)) << "keep " << keep;
  }
}

TEST_P(WindowRewind, BadRewindsAreNamed) {
  const Model& m = *model_;
  StreamState st = m.new_state();
  test::run(m, st, random_tokens(10, m.config().vocab_size, 4), true, false);
  WindowRecord record;
  std::vector<int32_t> window = {5, 6, 7};
  ForwardSegment seg{&st, window, false, true, nullptr, &record};
  m.forward({&seg, 1});
  EXPECT_NE(test::error_of([&] { rewind_window(m.config(), record, 0, st); }).find("keep 0"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { rewind_window(m.config(), record, 4, st); }).find("keep 4"),
            std::string::npos);
  rewind_window(m.config(), record, 2, st);
  EXPECT_NE(test::error_of([&] { rewind_window(m.config(), record, 1, st); }).find("position 12"),
            std::string::npos);
  ForwardSegment prompt{&st, window, true, false, nullptr, &record};
  EXPECT_NE(test::error_of([&] { m.forward({&prompt, 1}); }).find("decode path"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, WindowRewind,
                         ::testing::Values("qwen4exp_base", "qwen3next", "qwen35moe", "qwen4exp_mlx_mixed"));

}  // namespace
}  // namespace ds
