// resumed == fresh: prompt-cache hits and warm passes never change a reply (greedy and sampled).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "engine_test_support.h"
#include "runtime/cpu_backend.h"

namespace ds {
namespace {

using test::Reply;

struct CacheCase {
  std::string fixture;
  bool sampled;
};

class EngineCache : public ::testing::TestWithParam<CacheCase> {
 protected:
  void SetUp() override { model_ = std::make_unique<Model>(test::fixture(GetParam().fixture)); }
  GenerationRequest request(std::vector<int32_t> prompt, int32_t max_tokens) const {
    return test::make_request(std::move(prompt), max_tokens, GetParam().sampled, 99);
  }
  std::vector<int32_t> prompt(size_t n, uint32_t seed) const {
    return test::random_prompt(n, model_->config().vocab_size, seed);
  }
  std::unique_ptr<Model> model_;
};

TEST_P(EngineCache, ResumedEqualsFresh) {
  const Model& m = *model_;
  Engine engine(m, EngineOptions{});
  auto r = request(prompt(200, 1), 20);
  const Reply fresh = test::run_alone(m, r);
  const Reply first = test::run_on(engine, r), second = test::run_on(engine, r);
  EXPECT_EQ(first.final.cached_tokens, 0);
  EXPECT_EQ(second.final.cached_tokens, 192);  // the last mark at or before token 199
  EXPECT_EQ(first.tokens, fresh.tokens);
  EXPECT_EQ(second.tokens, fresh.tokens);

  // A prompt sharing 150 tokens resumes from the mark at 128.
  auto other = r;
  auto tail = prompt(40, 2);
  other.prompt.resize(150);
  other.prompt.insert(other.prompt.end(), tail.begin(), tail.end());
  const Reply shared = test::run_on(engine, other);
  EXPECT_EQ(shared.final.cached_tokens, 128);
  EXPECT_EQ(shared.tokens, test::run_alone(m, other).tokens);

  // A prompt of exactly 128 tokens must still run one chunk: it resumes from 64, not 128.
  auto exact = r;
  exact.prompt.resize(128);
  const Reply e = test::run_on(engine, exact);
  EXPECT_EQ(e.final.cached_tokens, 64);
  EXPECT_EQ(e.tokens, test::run_alone(m, exact).tokens);

  const EngineStats s = engine.stats();
  EXPECT_EQ(s.cache_hits, 3);
  EXPECT_EQ(s.cached_tokens_total, 192 + 128 + 64);
  EXPECT_GT(s.prompt_cache_bytes, 0);
  EXPECT_GT(s.weights_bytes, 0);
}

TEST_P(EngineCache, SecondChatTurnAfterWarmPassEqualsFresh) {
  const Model& m = *model_;
  Engine engine(m, EngineOptions{});
  auto turn1 = request(prompt(100, 3), 40);
  const Reply reply1 = test::run_on(engine, turn1);
  ASSERT_EQ(reply1.tokens.size(), 40u);
  test::wait_warm(engine);  // the warm pass stores marks over prompt + reply (140 tokens: marks 64, 128)

  auto turn2 = turn1;
  turn2.prompt.insert(turn2.prompt.end(), reply1.tokens.begin(), reply1.tokens.end());
  auto more = prompt(30, 4);
  turn2.prompt.insert(turn2.prompt.end(), more.begin(), more.end());
  const Reply reply2 = test::run_on(engine, turn2);
  EXPECT_EQ(reply2.final.cached_tokens, 128);  // 128 > 100: the mark came from the warm pass
  EXPECT_EQ(reply2.tokens, test::run_alone(m, turn2).tokens);
}

TEST_P(EngineCache, TinyCacheEvictsAndStaysExact) {
  const Model& m = *model_;
  EngineOptions o;
  o.prompt_cache_gib = 1e-9;  // a few bytes: every snapshot is refused or evicted at once
  Engine engine(m, o);
  auto r = request(prompt(150, 5), 10);
  const Reply a = test::run_on(engine, r), b = test::run_on(engine, r);
  EXPECT_EQ(b.final.cached_tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(engine.stats().prompt_cache_bytes, 0);
}

TEST_P(EngineCache, OptOutSkipsTheCache) {
  const Model& m = *model_;
  Engine engine(m, EngineOptions{});
  auto r = request(prompt(150, 6), 8);
  r.use_prompt_cache = false;
  test::run_on(engine, r);
  const Reply b = test::run_on(engine, r);
  EXPECT_EQ(b.final.cached_tokens, 0);
  EXPECT_EQ(engine.stats().prompt_cache_bytes, 0);
}

// The GPU's way of cutting prompts (CudaBackend with prompt passes: long pieces, marks far apart), here with
// marks every 128 tokens and pieces of up to 128 rows: marks only at multiples of 128 and at each prompt's
// last grid point, and replies equal to fresh runs.
TEST_P(EngineCache, WideMarkSpacingKeepsMarksAndReplies) {
  const Model& m = *model_;
  EngineOptions o;
  o.cache_mark_interval = 128;
  o.prompt_rows_per_round = 128;
  Engine engine(m, o);
  auto r = request(prompt(230, 7), 12);
  const Reply fresh = test::run_alone(m, r);
  const Reply first = test::run_on(engine, r), second = test::run_on(engine, r);
  EXPECT_EQ(first.final.cached_tokens, 0);
  EXPECT_EQ(second.final.cached_tokens, 192);  // the final mark (last grid point at or before token 229)
  EXPECT_EQ(first.tokens, fresh.tokens);
  EXPECT_EQ(second.tokens, fresh.tokens);

  // Sharing 180 tokens: the mark at 128 (no mark at 64, which the 64 spacing would have stored).
  auto other = r;
  auto tail = prompt(30, 8);
  other.prompt.resize(180);
  other.prompt.insert(other.prompt.end(), tail.begin(), tail.end());
  const Reply shared = test::run_on(engine, other);
  EXPECT_EQ(shared.final.cached_tokens, 128);
  EXPECT_EQ(shared.tokens, test::run_alone(m, other).tokens);
  auto short_one = r;
  short_one.prompt.resize(100);
  EXPECT_EQ(test::run_on(engine, short_one).final.cached_tokens, 0);
}

// The message of the error constructing an engine throws, or "" when it does not throw.
std::string engine_error(const Model& m, const EngineOptions& o) {
  try {
    Engine e(m, o);
  } catch (const Error& err) {
    return err.what();
  }
  return {};
}

TEST(EngineCacheOptions, BadPieceOptionsAreNamed) {
  const Model m(test::fixture("qwen4exp_base"));
  EngineOptions o;
  o.cache_mark_interval = 100;
  EXPECT_NE(engine_error(m, o).find("cache_mark_interval must be a positive multiple of 64"),
            std::string::npos);
  o.cache_mark_interval = 0;
  o.prompt_rows_per_round = 32;
  EXPECT_NE(engine_error(m, o).find("prompt_rows_per_round must be at least 64"), std::string::npos);
  o.prompt_rows_per_round = 64;
  EXPECT_EQ(engine_error(m, o), "");
}

// The CPU backend with its own mark spacing (0: a backend that names none).
class MarkSpacingBackend final : public test::WrappedCpuBackend {
 public:
  MarkSpacingBackend(const Model& m, int64_t marks) : WrappedCpuBackend(m, "mark spacing"), marks_(marks) {}
  int64_t cache_mark_interval() const override { return marks_; }

 private:
  int64_t marks_;
};

// A backend's own spacing is checked as the option is: 0 would divide by zero at the first prompt piece.
TEST(EngineCacheOptions, BadBackendMarkSpacingIsNamed) {
  const Model m(test::fixture("qwen4exp_base"));
  for (int64_t marks : {int64_t{0}, int64_t{-64}, int64_t{100}}) {
    std::string error;
    try {
      Engine e(std::make_shared<MarkSpacingBackend>(m, marks), EngineOptions{});
    } catch (const Error& err) {
      error = err.what();
    }
    EXPECT_NE(error.find("cache_mark_interval must be a positive multiple of 64"), std::string::npos)
        << marks << ": " << error;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineCache,
                         ::testing::Values(CacheCase{"qwen4exp_base", false},
                                           CacheCase{"qwen4exp_base", true}, CacheCase{"qwen3next", true},
                                           CacheCase{"qwen4exp_mlx_mixed", false}),
                         [](const auto& info) {
                           return info.param.fixture + (info.param.sampled ? "_Sampled" : "_Greedy");
                         });

}  // namespace
}  // namespace ds
