#pragma once
// Shared helpers for engine tests: collect a request's events, run a request alone, random prompts.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model_test_support.h"
#include "runtime/cpu_backend.h"
#include "runtime/draft_source.h"
#include "runtime/engine.h"
#include "runtime/reply_collector.h"

namespace ds::test {

using Reply = CollectedReply;

// One request's events; wait() fails the test when no final event comes within 60 s.
class Collector : public ReplyCollector {
 public:
  Reply wait() {
    if (!wait_done(std::chrono::seconds(60))) ADD_FAILURE() << "no final event";
    return reply();
  }
  void wait_tokens(size_t n) { ReplyCollector::wait_tokens(n, std::chrono::seconds(60)); }
};

inline std::vector<int32_t> random_prompt(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  // Ids from 3 up: no EOS (2) inside prompts, so replies are not cut short by a copied EOS.
  for (auto& x : t) x = 3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 3));
  return t;
}

inline GenerationRequest make_request(std::vector<int32_t> prompt, int32_t max_tokens, bool sampled,
                                      uint64_t seed) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = sampled ? 0.8f : 0.0f;
  r.sampling.top_p = sampled ? 0.9f : 1.0f;
  r.sampling.seed = seed;
  return r;
}

inline Reply run_on(Engine& engine, const GenerationRequest& r) {
  Collector c;
  engine.submit(r, c.callback());
  return c.wait();
}

// Runs r, cancelling it from inside the callback at its at-th token: with drafts, the rest of that verify
// window is still being drawn when the cancel lands.
inline Reply run_cancelled_at(Engine& engine, const GenerationRequest& r, size_t at) {
  Collector c;
  auto forward = c.callback();
  std::atomic<uint64_t> id{0};
  std::atomic<size_t> seen{0};
  id = engine.submit(r, [&, forward](const TokenEvent& ev) {
    forward(ev);
    if (ev.token >= 0 && ++seen == at) engine.cancel(id.load());
  });
  return c.wait();
}

// The reference: a fresh engine with one slot and no prompt cache.
inline Reply run_alone(const Model& model, const GenerationRequest& r) {
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  Engine engine(model, o);
  return run_on(engine, r);
}

// The drafting tests' reference: one slot, no cache, no drafts (and it must not have drafted).
inline Reply run_plain(const Model& model, const GenerationRequest& r) {
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  o.drafts = false;
  Engine engine(model, o);
  Reply reply = run_on(engine, r);
  EXPECT_EQ(reply.final.drafted_tokens, 0);
  return reply;
}

// A drafted reply equals the plain one: tokens, finish reason and counts.
inline void expect_same(const Reply& got, const Reply& want, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.final.reason, want.final.reason) << what;
  EXPECT_EQ(got.final.completion_tokens, want.final.completion_tokens) << what;
  EXPECT_EQ(got.final.completion_tokens, static_cast<int64_t>(got.tokens.size())) << what;
  EXPECT_LE(got.final.accepted_tokens, got.final.drafted_tokens) << what;
}

// Proposes the plain reply's next tokens with every fourth one wrong: windows land for a while and then miss
// at a known rhythm, so acceptance, partial windows and rollback certainly happen (n-gram copies on a tiny
// random model land rarely).
class OracleDrafter final : public DraftSource {
 public:
  void learn(const GenerationRequest& r, const Reply& plain) { known_.push_back({r.prompt, plain.tokens}); }
  // Each request's plain reply (run_plain), learned: what drafted runs must equal.
  std::vector<Reply> learn_plain(const Model& model, const std::vector<GenerationRequest>& rs) {
    std::vector<Reply> plain;
    for (const auto& r : rs) {
      plain.push_back(run_plain(model, r));
      learn(r, plain.back());
    }
    return plain;
  }
  void propose(std::span<DraftAsk> asks) override {
    for (DraftAsk& a : asks) {
      a.drafts.clear();
      for (const auto& [prompt, reply] : known_) {
        if (!std::equal(prompt.begin(), prompt.end(), a.prompt.begin(), a.prompt.end())) continue;
        for (size_t i = a.reply.size(); i < reply.size() && static_cast<int>(a.drafts.size()) < a.max; ++i)
          a.drafts.push_back(i % 4 == 3 ? (reply[i] + 1) % 320 : reply[i]);
        break;
      }
    }
  }

 private:
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> known_;
};

// The CPU backend under another name, for tests that override one part of the backend contract (its row
// draws, mark spacing, ...): every member forwards to the CPU's; no MTP head.
class WrappedCpuBackend : public ModelBackend {
 public:
  WrappedCpuBackend(const Model& m, const char* name) : cpu_(m), name_(name) {}
  const char* name() const override { return name_; }
  const ModelConfig& config() const override { return cpu_.config(); }
  int64_t max_context() const override { return cpu_.max_context(); }
  int64_t weights_bytes() const override { return cpu_.weights_bytes(); }
  StreamState new_state() const override { return cpu_.new_state(); }
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    return cpu_.forward(segments);
  }
  void rewind(const WindowRecord& record, int64_t keep, StreamState& state) const override {
    cpu_.rewind(record, keep, state);
  }
  bool has_mtp() const override { return false; }
  int64_t mtp_hidden_width() const override { return 0; }
  std::vector<float> mtp_forward(std::span<const MtpSegment> segments) const override {
    return cpu_.mtp_forward(segments);
  }

 protected:
  CpuBackend cpu_;

 private:
  const char* name_;
};

// Polls until the engine has no warm pass left (they run in later rounds).
inline void wait_warm(const Engine& engine) {
  for (int i = 0; i < 6000 && engine.stats().warm_pending > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(engine.stats().warm_pending, 0);
}

}  // namespace ds::test
