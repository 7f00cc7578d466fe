// The engine through runtime/model_backend.h with states it cannot see into, as the GPU's are: a backend that
// keeps each stream's CPU state inside StreamState::backend (prompt-cache copies go through
// BackendState::clone) and rolls drafts back the CUDA backend's way (the state before the window restored,
// the kept rows re-run at the next forward). Its replies equal the CPU's plain decode: concurrent == solo,
// drafted == plain (landing and missing drafts), resumed == fresh. Also: Engine(model) is the CPU backend.
#include <gtest/gtest.h>

#include "core/error.h"
#include "engine_test_support.h"
#include "runtime/cpu_backend.h"

namespace ds {
namespace {

using test::Collector;
using test::OracleDrafter;
using test::Reply;

class OpaqueBackend final : public ModelBackend {
 public:
  explicit OpaqueBackend(const Model& m) : m_(m) {}
  const char* name() const override { return "opaque"; }
  const ModelConfig& config() const override { return m_.config(); }
  int64_t max_context() const override { return m_.config().max_positions; }
  int64_t weights_bytes() const override { return 1; }
  StreamState new_state() const override {
    auto held = std::make_unique<Held>();
    held->inner = m_.new_state();
    StreamState s;
    s.backend = BackendStateSlot(std::move(held));
    return s;
  }
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    std::vector<ForwardSegment> replays, runs;
    for (const ForwardSegment& sg : segments) {
      Held& h = held(*sg.state);
      if (!h.replay.empty()) replays.push_back({&h.inner, h.replay});
    }
    if (!replays.empty()) m_.forward(replays);
    for (const ForwardSegment& sg : segments) {
      Held& h = held(*sg.state);
      h.replay.clear();
      if (sg.record) {
        sg.record->pos0 = h.inner.position;
        sg.record->count = static_cast<int64_t>(sg.tokens.size());
        sg.record->tokens.assign(sg.tokens.begin(), sg.tokens.end());
        h.before = h.inner;
      }
      EXPECT_EQ(sg.hidden, nullptr);  // no MTP head: the engine captures no rows
      runs.push_back({&h.inner, sg.tokens, sg.prompt, sg.all_logits});
    }
    std::vector<float> logits = m_.forward(runs);
    for (size_t i = 0; i < segments.size(); ++i) segments[i].state->position = runs[i].state->position;
    ++forwards;
    return logits;
  }
  void rewind(const WindowRecord& record, int64_t keep, StreamState& state) const override {
    Held& h = held(state);
    h.inner = h.before;
    h.replay.assign(record.tokens.begin(), record.tokens.begin() + keep);
    state.position = record.pos0 + keep;
    ++rewinds;
  }
  bool rewind_reruns() const override { return true; }  // as CudaBackend: the depth policy counts re-runs
  bool has_mtp() const override { return false; }
  int64_t mtp_hidden_width() const override { return 0; }
  std::vector<float> mtp_forward(std::span<const MtpSegment>) const override {
    ADD_FAILURE() << "mtp_forward on a backend without a head";
    return {};
  }
  mutable int64_t forwards = 0, rewinds = 0;
  static inline int64_t clones = 0;

 private:
  struct Held final : BackendState {
    StreamState inner, before;
    std::vector<int32_t> replay;
    std::unique_ptr<BackendState> clone() const override {
      ++clones;
      auto c = std::make_unique<Held>();
      c->inner = inner;
      c->replay = replay;
      return c;
    }
    size_t bytes() const override { return inner.bytes() + before.bytes(); }
  };
  static Held& held(const StreamState& s) {
    auto* h = dynamic_cast<Held*>(s.backend.get());
    if (!h) throw std::runtime_error("a state not made by OpaqueBackend::new_state");
    return *h;
  }
  const Model& m_;
};

class EngineBackend : public ::testing::TestWithParam<bool> {  // param: sampled (else greedy)
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<Model>(test::fixture("qwen4exp_base")); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<Model> model_;
  GenerationRequest request(std::vector<int32_t> prompt, int32_t max_tokens, uint64_t seed) const {
    return test::make_request(std::move(prompt), max_tokens, GetParam(), seed);
  }
  std::vector<int32_t> prompt(size_t n, uint32_t seed) const {
    return test::random_prompt(n, model_->config().vocab_size, seed);
  }
};
std::unique_ptr<Model> EngineBackend::model_;

TEST_P(EngineBackend, ConcurrentDraftedEqualsPlain) {
  const Model& m = *model_;
  std::vector<GenerationRequest> rs;
  for (uint32_t i = 0; i < 4; ++i) rs.push_back(request(prompt(30 + 25 * i, 40 + i), 40, 70 + i));
  auto oracle = std::make_shared<OracleDrafter>();
  const auto want = oracle->learn_plain(m, rs);
  auto backend = std::make_shared<OpaqueBackend>(m);
  EngineOptions o;
  o.parallel = 4;
  o.draft_depth = 3;
  o.draft_source = oracle;
  Engine engine(backend, o);
  std::vector<std::unique_ptr<Collector>> got;
  for (const auto& r : rs) {
    got.push_back(std::make_unique<Collector>());
    engine.submit(r, got.back()->callback());
  }
  int64_t accepted = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    const Reply g = got[i]->wait();
    test::expect_same(g, want[i], "request " + std::to_string(i));
    accepted += g.final.accepted_tokens;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(backend->rewinds, 0);  // not vacuous: windows were cut by misses and re-run
}

TEST_P(EngineBackend, ResumedEqualsFreshThroughClones) {
  const Model& m = *model_;
  auto backend = std::make_shared<OpaqueBackend>(m);
  Engine engine(backend, EngineOptions{});
  // Prompt marks at 64 and 128; the warm pass over prompt + reply (210 tokens) adds 192.
  const GenerationRequest r = request(prompt(180, 1), 30, 99);
  const Reply fresh = test::run_alone(m, r);
  const int64_t clones_before = OpaqueBackend::clones;
  const Reply first = test::run_on(engine, r), second = test::run_on(engine, r);
  EXPECT_EQ(second.final.cached_tokens, 128);
  EXPECT_EQ(first.tokens, fresh.tokens);
  EXPECT_EQ(second.tokens, fresh.tokens);
  EXPECT_GT(OpaqueBackend::clones, clones_before);  // snapshots and restores went through clone()
  // A second turn resumes from the warm pass's mark (prompt + reply re-run as a prompt pass).
  test::wait_warm(engine);
  GenerationRequest next = r;
  next.prompt.insert(next.prompt.end(), first.tokens.begin(), first.tokens.end());
  const std::vector<int32_t> user = prompt(30, 3);
  next.prompt.insert(next.prompt.end(), user.begin(), user.end());
  const Reply turn2 = test::run_on(engine, next);
  EXPECT_EQ(turn2.final.cached_tokens, 192);
  EXPECT_EQ(turn2.tokens, test::run_alone(m, next).tokens);
  EXPECT_GT(engine.stats().state_bytes + engine.stats().prompt_cache_bytes, 0);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampled, EngineBackend, ::testing::Bool());

// Engine(model) and Engine(CpuBackend) are the same engine: equal replies, equal weight accounting.
TEST(CpuBackend, SameAsModelConstructor) {
  const Model m(test::fixture("qwen4exp_base"));
  const GenerationRequest r =
      test::make_request(test::random_prompt(50, m.config().vocab_size, 5), 16, true, 3);
  Engine a(m, EngineOptions{});
  Engine b(std::make_shared<CpuBackend>(m), EngineOptions{});
  EXPECT_EQ(test::run_on(a, r).tokens, test::run_on(b, r).tokens);
  EXPECT_EQ(a.stats().weights_bytes, b.stats().weights_bytes);
  EXPECT_THROW(Engine(std::shared_ptr<const ModelBackend>(), EngineOptions{}), Error);
}

}  // namespace
}  // namespace ds
