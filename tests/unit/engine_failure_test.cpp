// Backend failures inside the engine (what a GPU out of memory or an illegal address looks like from the
// engine): a failed forward ends the round's streams with the error and the engine serves on; a failed
// new_state ends only its request; the optional parts (prompt-cache snapshots, drafts) cost only themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>

#include "engine_test_support.h"
#include "runtime/draft_policy.h"

namespace ds {
namespace {

using test::Collector;

// Copies of a FailingBackend state (prompt-cache snapshots, cache hits) throw while `fail` is set, as a
// device-to-device state copy does when the device is out of memory.
class CopyableUntil final : public BackendState {
 public:
  CopyableUntil(const std::atomic<bool>* fail, std::atomic<int>* copies) : fail_(fail), copies_(copies) {}
  std::unique_ptr<BackendState> clone() const override {
    ++*copies_;
    if (fail_->load())
      throw std::runtime_error("injected: cudaMalloc: cudaErrorMemoryAllocation (state copy)");
    return std::make_unique<CopyableUntil>(fail_, copies_);
  }
  size_t bytes() const override { return 0; }

 private:
  const std::atomic<bool>* fail_;
  std::atomic<int>* copies_;
};

// The CPU backend failing where a test arms it: the next `forward_fails` forward calls, the next
// `prompt_pass_fails` calls holding a prompt piece, every call holding a draft window while `windows_fail`,
// every new_state while `new_state_fails`, every state copy while `copies_fail` (every copy counted in
// `copies`).
class FailingBackend final : public test::WrappedCpuBackend {
 public:
  explicit FailingBackend(const Model& m) : WrappedCpuBackend(m, "failing") {}
  StreamState new_state() const override {
    if (new_state_fails)
      throw std::runtime_error("injected: cudaMalloc: cudaErrorMemoryAllocation (new state)");
    StreamState s = cpu_.new_state();
    s.backend = BackendStateSlot(std::make_unique<CopyableUntil>(&copies_fail, &copies));
    return s;
  }
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    if (windows_fail && std::any_of(segments.begin(), segments.end(),
                                    [](const ForwardSegment& s) { return s.record != nullptr; })) {
      ++windows_failed;
      throw std::runtime_error("injected: cudaErrorMemoryAllocation (a draft window)");
    }
    if (forward_fails.load() > 0) {
      --forward_fails;
      throw std::runtime_error("injected: cudaErrorIllegalAddress (an illegal memory access)");
    }
    if (prompt_pass_fails.load() > 0 &&
        std::any_of(segments.begin(), segments.end(), [](const ForwardSegment& s) { return s.prompt; })) {
      --prompt_pass_fails;
      throw std::runtime_error("injected: cudaErrorMemoryAllocation (a prompt pass's scratch)");
    }
    return cpu_.forward(segments);
  }

  mutable std::atomic<int> forward_fails{0};
  mutable std::atomic<int> prompt_pass_fails{0};  // the next calls holding a prompt piece
  std::atomic<bool> windows_fail{false};          // every call with a draft window (a WindowRecord) in it
  mutable std::atomic<int> windows_failed{0};
  std::atomic<bool> new_state_fails{false}, copies_fail{false};
  mutable std::atomic<int> copies{0};
};

// A draft source that fails every time, as the MTP head's call does when the device fails under it.
class ThrowingDrafter final : public DraftSource {
 public:
  void propose(std::span<DraftAsk>) override {
    ++calls;
    throw std::runtime_error("injected: the draft head's call failed");
  }
  std::atomic<int> calls{0};
};

class EngineFailure : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<Model>(test::fixture("qwen4exp_base")); }
  static void TearDownTestSuite() { model_.reset(); }
  static GenerationRequest request(size_t n, int32_t max_tokens, uint32_t seed) {
    return test::make_request(test::random_prompt(n, model_->config().vocab_size, seed), max_tokens, seed % 2,
                              seed);
  }
  static EngineOptions plain_options(int parallel) {
    EngineOptions o;
    o.parallel = parallel;
    o.prompt_cache_gib = 0;
    o.drafts = false;
    return o;
  }
  // Two requests at once on `engine`: each reply equals plain decoding and nothing was drafted.
  static void expect_two_plain_replies_undrafted(Engine& engine) {
    const GenerationRequest r1 = request(10, 16, 8), r2 = request(14, 16, 9);
    Collector a, b;
    engine.submit(r1, a.callback());
    engine.submit(r2, b.callback());
    const test::Reply got1 = a.wait(), got2 = b.wait();
    test::expect_same(got1, test::run_plain(*model_, r1), "first");
    test::expect_same(got2, test::run_plain(*model_, r2), "second");
    EXPECT_EQ(got1.final.drafted_tokens + got2.final.drafted_tokens, 0);
  }
  static std::unique_ptr<Model> model_;
};
std::unique_ptr<Model> EngineFailure::model_;

TEST_F(EngineFailure, FailedForwardEndsItsRoundsStreamsAndTheEngineServesOn) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  Engine engine(backend, plain_options(2));
  Collector a;
  engine.submit(request(12, 400, 1), a.callback());
  a.wait_tokens(3);
  backend->forward_fails = 1;
  const test::Reply failed = a.wait();
  EXPECT_EQ(failed.final.reason, FinishReason::Error);
  EXPECT_NE(failed.final.error.find("forward failed: injected: cudaErrorIllegalAddress"), std::string::npos)
      << failed.final.error;
  EXPECT_GE(failed.tokens.size(), 3u);
  EXPECT_EQ(engine.stats().running, 0);
  // The next requests run as if nothing had happened.
  for (uint32_t seed : {2u, 3u}) {
    const GenerationRequest r = request(9, 12, seed);
    test::expect_same(test::run_on(engine, r), test::run_plain(*model_, r), "after the failed round");
  }
}

// A round of a decode window and a prompt piece that fails ends both its streams (states half advanced), but
// not a stream whose prompt waited for the round's prompt budget: its state was not touched, so its reply is
// the plain one.
TEST_F(EngineFailure, FailedBatchedRoundEndsOnlyTheStreamsInIt) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  EngineOptions o = plain_options(3);
  o.prompt_rows_per_round = 64;  // one piece a round: the second prompt waits for the first
  Engine engine(backend, o);
  Collector decoding, in_round, waiting;
  const GenerationRequest waits = request(150, 12, 14);
  engine.submit(request(10, 400, 12), decoding.callback());
  decoding.wait_tokens(3);
  backend->prompt_pass_fails = 1;
  engine.submit(request(150, 12, 13), in_round.callback());
  engine.submit(waits, waiting.callback());
  const test::Reply a = decoding.wait(), b = in_round.wait();
  for (const test::Reply* r : {&a, &b}) {
    EXPECT_EQ(r->final.reason, FinishReason::Error);
    EXPECT_NE(r->final.error.find("forward failed: injected: cudaErrorMemoryAllocation"), std::string::npos)
        << r->final.error;
  }
  EXPECT_GE(a.tokens.size(), 3u);
  EXPECT_TRUE(b.tokens.empty());
  test::expect_same(waiting.wait(), test::run_plain(*model_, waits), "the prompt outside the failed round");
  EXPECT_EQ(engine.stats().running, 0);
  EXPECT_TRUE(engine.stats().backend_failure.empty()) << "a recoverable failure leaves /health ok";
}

TEST_F(EngineFailure, FailedNewStateEndsOnlyItsRequest) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  Engine engine(backend, plain_options(2));
  const GenerationRequest running = request(10, 40, 4);
  Collector a, b;
  engine.submit(running, a.callback());
  a.wait_tokens(2);
  backend->new_state_fails = true;
  engine.submit(request(10, 40, 5), b.callback());
  const test::Reply refused = b.wait();
  backend->new_state_fails = false;
  EXPECT_EQ(refused.final.reason, FinishReason::Error);
  EXPECT_NE(refused.final.error.find("injected: cudaMalloc"), std::string::npos) << refused.final.error;
  EXPECT_TRUE(refused.tokens.empty());
  test::expect_same(a.wait(), test::run_plain(*model_, running), "the stream already running");
}

// A cache hit whose state cannot be copied (the copy's device memory) ends that request with the error, as a
// failed new_state does; the engine serves on.
TEST_F(EngineFailure, FailedCacheHitCopyEndsOnlyItsRequest) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  EngineOptions o = plain_options(1);
  o.prompt_cache_gib = 1.0;
  Engine engine(backend, o);
  const GenerationRequest r = request(70, 4, 11);
  test::expect_same(test::run_on(engine, r), test::run_plain(*model_, r), "filling the cache");
  test::wait_warm(engine);
  backend->copies_fail = true;
  const test::Reply refused = test::run_on(engine, r);
  backend->copies_fail = false;
  EXPECT_EQ(refused.final.reason, FinishReason::Error);
  EXPECT_NE(refused.final.error.find("(state copy)"), std::string::npos) << refused.final.error;
  EXPECT_TRUE(refused.tokens.empty());
  const test::Reply again = test::run_on(engine, r);
  test::expect_same(again, test::run_plain(*model_, r), "a cache hit once copies work");
  EXPECT_EQ(again.final.cached_tokens, 64);
}

// A snapshot that cannot be copied (no device memory for it) leaves the cache without it: the prompt's own
// request goes on, and a warm pass's failed snapshot does not end the streams decoding beside it.
TEST_F(EngineFailure, FailedSnapshotsCostOnlyTheCache) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  backend->copies_fail = true;
  EngineOptions o = plain_options(2);
  o.prompt_cache_gib = 1.0;
  Engine engine(backend, o);
  // The first reaches the cache mark at 64 within its prompt and queues a warm pass when it ends (to 64
  // again), while the second still decodes.
  const GenerationRequest marked = request(70, 3, 6), beside = request(10, 120, 7);
  Collector a, b;
  engine.submit(marked, a.callback());
  engine.submit(beside, b.callback());
  test::expect_same(a.wait(), test::run_plain(*model_, marked), "the request whose snapshot failed");
  test::expect_same(b.wait(), test::run_plain(*model_, beside), "the request beside the warm pass");
  test::wait_warm(engine);
  EXPECT_EQ(engine.stats().prompt_cache_bytes, 0);
  EXPECT_EQ(backend->copies.load(),
            4);  // marks: the prompt at 64, its warm pass at 64, the other's at 64, 128
  // Once copies work again, the cache fills and serves as before.
  backend->copies_fail = false;
  test::expect_same(test::run_on(engine, marked), test::run_plain(*model_, marked), "copies working again");
}

// A warm pass with no cached mark to start from starts from a new state, not a copy of one (on a GPU a copy
// is a second whole device state): its only copy is the snapshot at its mark.
TEST_F(EngineFailure, WarmPassFromNothingCopiesOnlyItsSnapshot) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  EngineOptions o = plain_options(1);
  o.prompt_cache_gib = 1.0;
  Engine engine(backend, o);
  // 40 prompt tokens (no mark inside the prompt) and 30 of reply: a warm pass to 64 from nothing.
  const GenerationRequest r = request(40, 30, 10);
  test::expect_same(test::run_on(engine, r), test::run_plain(*model_, r), "warm pass from nothing");
  test::wait_warm(engine);
  EXPECT_GT(engine.stats().prompt_cache_bytes, 0);
  EXPECT_EQ(backend->copies.load(), 1);
}

TEST_F(EngineFailure, FailedDraftSourceCostsOnlyTheDrafts) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  auto drafter = std::make_shared<ThrowingDrafter>();
  EngineOptions o = plain_options(2);
  o.drafts = true;
  o.draft_depth = 4;  // no calibration: every decode round asks the source
  o.draft_source = drafter;
  Engine engine(backend, o);
  expect_two_plain_replies_undrafted(engine);
  EXPECT_GT(drafter->calls.load(), 0);
}

// With the depth policy and the draft guard, a round whose source failed drafted nothing: it is no drafting
// round for the guard, so a source failing at every round never makes drafting "measure slower" and rest
// (before: each failed round counted as a drafting round of one token a stream, and its time, the failure's
// included, against plain rounds: the guard rested after kProbeRounds of them).
TEST_F(EngineFailure, FailedDraftSourceRoundsAreNoDraftingRounds) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  auto drafter = std::make_shared<ThrowingDrafter>();
  EngineOptions o = plain_options(1);
  o.drafts = true;
  o.draft_depth = 0;  // the depth policy, calibrated when the engine starts
  o.draft_guard = true;
  o.draft_source = drafter;
  Engine engine(backend, o);
  const GenerationRequest r = request(10, 6 * DraftGuard::kProbeRounds, 15);
  const test::Reply got = test::run_on(engine, r);
  test::expect_same(got, test::run_plain(*model_, r), "a source failing at every round");
  EXPECT_EQ(got.final.drafted_tokens, 0);
  EXPECT_GE(drafter->calls.load(), DraftGuard::kProbeRounds) << "the policy asked the source every round";
  EXPECT_EQ(engine.stats().draft_rests, 0) << "failed rounds were counted as drafting rounds";
}

// The depth policy's calibration failing (its windows fail on the device) costs only the drafts: the replies
// are the plain ones, nothing is drafted, and the engine tries the calibration again at later rounds, after
// 1, 2, 4 ... rounds (at most 5 tries here, where a try at every round that could draft made 19).
TEST_F(EngineFailure, FailedCalibrationCostsOnlyTheDrafts) {
  auto backend = std::make_shared<FailingBackend>(*model_);
  backend->windows_fail = true;
  EngineOptions o = plain_options(2);
  o.drafts = true;
  o.draft_depth = 0;  // the depth policy: calibrated when the engine starts, else at a round that could draft
  Engine engine(backend, o);
  expect_two_plain_replies_undrafted(engine);
  EXPECT_GT(backend->windows_failed.load(), 1) << "calibration tried again after its first failure";
  EXPECT_LE(backend->windows_failed.load(), 5) << "a failing calibration backs off";
  EXPECT_EQ(engine.stats().draft_calibration_ms, 0.0);
}

}  // namespace
}  // namespace ds
