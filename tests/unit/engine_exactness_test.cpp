// concurrent == solo, replay and cancellation: a reply never depends on what else the engine runs.
#include <gtest/gtest.h>

#include "engine_test_support.h"

namespace ds {
namespace {

using test::Collector;
using test::Reply;

class EngineExactness : public ::testing::TestWithParam<bool> {  // param: sampled (else greedy)
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<Model>(test::fixture("qwen4exp_base")); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<Model> model_;
};
std::unique_ptr<Model> EngineExactness::model_;

TEST_P(EngineExactness, ConcurrentEqualsSolo) {
  const Model& m = *model_;
  const std::vector<size_t> lengths = {5, 200, 64, 17, 130, 65, 40, 100};
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto r = test::make_request(test::random_prompt(lengths[i], m.config().vocab_size, 10 + i), 12 + 2 * i,
                                GetParam(), 1000 + i);
    r.ignore_eos = i % 3 != 0;  // some may stop on EOS
    if (i == 2) r.top_logprobs = 3;
    requests.push_back(r);
  }
  std::vector<Reply> alone;
  for (const auto& r : requests) alone.push_back(test::run_alone(m, r));

  EngineOptions o;
  o.parallel = 4;  // 8 requests: half wait in the queue
  Engine engine(m, o);
  std::vector<std::unique_ptr<Collector>> got;
  for (const auto& r : requests) {
    got.push_back(std::make_unique<Collector>());
    engine.submit(r, got.back()->callback());
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // staggered arrivals
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    Reply r = got[i]->wait();
    EXPECT_EQ(r.tokens, alone[i].tokens) << "request " << i << " (prompt " << lengths[i] << ")";
    EXPECT_EQ(r.final.reason, alone[i].final.reason) << "request " << i;
    EXPECT_EQ(r.final.completion_tokens, static_cast<int64_t>(r.tokens.size()));
    EXPECT_EQ(r.final.prompt_tokens, static_cast<int64_t>(lengths[i]));
    if (requests[i].ignore_eos) {
      EXPECT_EQ(r.final.reason, FinishReason::Length);
      EXPECT_EQ(static_cast<int32_t>(r.tokens.size()), requests[i].max_tokens);
    }
  }
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.requests_total, 8);
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.queued, 0);
}

TEST_P(EngineExactness, ReplaySameSeedSameReplyOtherSeedDiffers) {
  const Model& m = *model_;
  EngineOptions o;
  o.prompt_cache_gib = 0;
  Engine engine(m, o);
  auto r = test::make_request(test::random_prompt(30, m.config().vocab_size, 7), 32, GetParam(), 42);
  Reply a = test::run_on(engine, r), b = test::run_on(engine, r);
  EXPECT_EQ(a.tokens, b.tokens);
  if (!GetParam()) return;  // greedy ignores the seed
  r.sampling.seed = 43;
  Reply c = test::run_on(engine, r);
  EXPECT_NE(a.tokens, c.tokens);
}

TEST_P(EngineExactness, CancelFreesTheSlotAndLeavesOthersUnchanged) {
  const Model& m = *model_;
  const int64_t V = m.config().vocab_size;
  std::vector<GenerationRequest> requests;
  for (uint32_t i = 0; i < 5; ++i)
    requests.push_back(
        test::make_request(test::random_prompt(20 + 30 * i, V, 50 + i), 16, GetParam(), 7 + i));
  requests[1].max_tokens = 400;  // the one we cancel
  std::vector<Reply> alone;
  for (size_t i = 0; i < requests.size(); ++i)
    if (i != 1) alone.push_back(test::run_alone(m, requests[i]));

  EngineOptions o;
  o.parallel = 4;
  Engine engine(m, o);
  std::vector<std::unique_ptr<Collector>> got;
  std::vector<uint64_t> ids;
  for (const auto& r : requests) {
    got.push_back(std::make_unique<Collector>());
    ids.push_back(engine.submit(r, got.back()->callback()));
  }
  got[1]->wait_tokens(20);
  engine.cancel(ids[1]);
  Reply cancelled = got[1]->wait();
  EXPECT_EQ(cancelled.final.reason, FinishReason::Cancelled);
  EXPECT_LT(cancelled.tokens.size(), 400u);
  EXPECT_GE(cancelled.tokens.size(), 20u);
  size_t k = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == 1) continue;
    Reply r = got[i]->wait();  // request 4 only starts once a slot is free
    EXPECT_EQ(r.tokens, alone[k++].tokens) << "request " << i;
  }
  engine.cancel(ids[1]);  // a second cancel of a finished request is a no-op
  EXPECT_EQ(engine.stats().running, 0);
}

TEST_P(EngineExactness, CancelWhileQueued) {
  const Model& m = *model_;
  EngineOptions o;
  o.parallel = 1;
  Engine engine(m, o);
  auto r = test::make_request(test::random_prompt(10, m.config().vocab_size, 3), 300, GetParam(), 1);
  Collector first, second;
  uint64_t a = engine.submit(r, first.callback());
  uint64_t b = engine.submit(r, second.callback());
  engine.cancel(b);
  Reply rb = second.wait();
  EXPECT_EQ(rb.final.reason, FinishReason::Cancelled);
  EXPECT_TRUE(rb.tokens.empty());
  engine.cancel(a);
  EXPECT_EQ(first.wait().final.reason, FinishReason::Cancelled);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampled, EngineExactness, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Sampled" : "Greedy"; });

}  // namespace
}  // namespace ds
