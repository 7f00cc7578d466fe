// Admission: named errors for a full queue, a prompt over the context, bad fields and memory limits; a
// failing callback ends only its own request and the engine keeps serving.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine_test_support.h"
#include "expect_error.h"
#include "runtime/stream_memory.h"

namespace ds {
namespace {

using test::Collector;
using test::error_of;

class EngineAdmission : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<Model>(test::fixture("qwen4exp_base")); }
  static void TearDownTestSuite() { model_.reset(); }
  GenerationRequest request(size_t n, int32_t max_tokens) const {
    return test::make_request(test::random_prompt(n, model_->config().vocab_size, 1), max_tokens, false, 0);
  }
  static std::unique_ptr<Model> model_;
};
std::unique_ptr<Model> EngineAdmission::model_;

TEST_F(EngineAdmission, QueueFullIsNamed) {
  EngineOptions o;
  o.parallel = 1;
  o.max_queue = 1;
  Engine engine(*model_, o);
  std::vector<std::unique_ptr<Collector>> c;
  std::vector<uint64_t> ids;
  std::string message;
  // One running + one queued at most: a third submit must be refused while the first is still decoding.
  for (int i = 0; i < 3 && message.empty(); ++i) {
    c.push_back(std::make_unique<Collector>());
    try {
      ids.push_back(engine.submit(request(10, 500), c.back()->callback()));
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_EQ(message.rfind("queue full", 0), 0u) << message;
  EXPECT_NE(message.find("max_queue 1"), std::string::npos) << message;
  for (uint64_t id : ids) engine.cancel(id);
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(c[i]->wait().final.reason, FinishReason::Cancelled);
}

TEST_F(EngineAdmission, ContextExceededIsNamed) {
  EngineOptions o;
  o.context = 100;
  Engine engine(*model_, o);
  Collector c;
  EXPECT_EQ(error_of([&] { engine.submit(request(90, 20), c.callback()); }),
            "context_length_exceeded: prompt of 90 tokens + max_tokens 20 exceeds the context of 100 tokens");
  // Exactly at the limit is fine.
  engine.submit(request(90, 10), c.callback());
  EXPECT_EQ(c.wait().tokens.size(), 10u);
  EngineOptions big;
  big.context = model_->config().max_positions + 1;
  EXPECT_NE(error_of([&] { Engine e(*model_, big); }).find("max_position_embeddings"), std::string::npos);
}

TEST_F(EngineAdmission, BadFieldsAreNamed) {
  Engine engine(*model_, EngineOptions{});
  Collector c;
  auto r = request(5, 4);
  r.prompt[2] = 320;
  EXPECT_EQ(error_of([&] { engine.submit(r, c.callback()); }),
            "prompt: token id 320 at index 2 is out of range [0, 320)");
  r = request(5, 4);
  r.sampling.top_p = 1.5f;
  EXPECT_EQ(error_of([&] { engine.submit(r, c.callback()); }), "top_p must be in (0, 1], got 1.5");
  r = request(5, 0);
  EXPECT_EQ(error_of([&] { engine.submit(r, c.callback()); }), "max_tokens must be at least 1, got 0");
  r = request(0, 4);
  EXPECT_EQ(error_of([&] { engine.submit(r, c.callback()); }), "prompt: must hold at least one token");
  r = request(5, 4);
  r.top_logprobs = 21;
  EXPECT_EQ(error_of([&] { engine.submit(r, c.callback()); }), "top_logprobs must be in [0, 20], got 21");
  EXPECT_EQ(engine.stats().requests_total, 0);
}

TEST_F(EngineAdmission, MemoryLimitRefusesWithAReason) {
  EngineOptions o;
  Engine probe(*model_, o);
  const int64_t weights = probe.stats().weights_bytes;
  ASSERT_GT(weights, 0);
  // Room for the weights and a short stream, not for a long one.
  o.memory_limit_gib = (static_cast<double>(weights) + 400000.0) / (1024.0 * 1024.0 * 1024.0);
  Engine engine(*model_, o);
  Collector small, big;
  engine.submit(request(20, 8), small.callback());
  EXPECT_EQ(small.wait().tokens.size(), 8u);
  EXPECT_EQ(error_of([&] { engine.submit(request(3000, 500), big.callback()); }).rfind("memory: ", 0), 0u);
  EngineOptions tiny;
  tiny.memory_limit_gib = 1e-6;
  EXPECT_NE(error_of([&] { Engine e(*model_, tiny); }).find("below the weights"), std::string::npos);
}

TEST_F(EngineAdmission, MemoryLimitDelaysASecondStream) {
  EngineOptions o;
  Engine probe(*model_, o);
  const int64_t weights = probe.stats().weights_bytes;
  // A 20 + 200-token drafting stream's reserve (runtime/stream_memory.h) x 1.5: one fits the limit, two do
  // not.
  const int64_t reserve = stream_memory(*model_, o.max_drafts, true, kMaxIdleHeadRows).reserve(220, 20, true);
  o.memory_limit_gib =
      (static_cast<double>(weights) + 1.5 * static_cast<double>(reserve)) / (1024.0 * 1024.0 * 1024.0);
  Engine engine(*model_, o);
  std::mutex mu;
  std::vector<std::pair<int, bool>> log;  // (request, finished) in event order
  Collector a, b;
  auto logged = [&](int which, Collector& c) {
    return [&, which, cb = c.callback()](const TokenEvent& ev) {
      {
        std::lock_guard lock(mu);
        log.emplace_back(which, ev.finished);
      }
      cb(ev);
    };
  };
  engine.submit(request(20, 200), logged(0, a));
  engine.submit(request(20, 200), logged(1, b));
  EXPECT_EQ(a.wait().tokens, b.wait().tokens);
  std::lock_guard lock(mu);
  auto first_b = std::find_if(log.begin(), log.end(), [](const auto& e) { return e.first == 1; });
  ASSERT_NE(first_b, log.end());
  EXPECT_TRUE(std::none_of(first_b, log.end(), [](const auto& e) { return e.first == 0; }))
      << "the second stream started before the first freed its memory";
}

TEST_F(EngineAdmission, StateBytesAreReportedWhileRunning) {
  Engine engine(*model_, EngineOptions{});
  Collector c;
  uint64_t id = engine.submit(request(70, 400), c.callback());
  c.wait_tokens(5);
  EXPECT_GT(engine.stats().state_bytes, 0);
  EXPECT_EQ(engine.stats().running, 1);
  engine.cancel(id);
  c.wait();
}

TEST_F(EngineAdmission, ThrowingCallbackEndsOnlyItsRequest) {
  Engine engine(*model_, EngineOptions{});
  std::vector<TokenEvent> events;
  std::mutex mu;
  Collector done;
  engine.submit(request(10, 50), [&](const TokenEvent& ev) {
    {
      std::lock_guard lock(mu);
      events.push_back(ev);
    }
    if (ev.finished) done.callback()(ev);
    if (!ev.finished && ev.token >= 0) throw std::runtime_error("client went away");
  });
  const auto last = done.wait().final;
  EXPECT_EQ(last.reason, FinishReason::Error);
  EXPECT_NE(last.error.find("client went away"), std::string::npos) << last.error;
  // The engine still serves.
  EXPECT_EQ(test::run_on(engine, request(10, 5)).tokens.size(), 5u);
}

}  // namespace
}  // namespace ds
