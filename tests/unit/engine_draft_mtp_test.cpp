// drafted == plain with the MTP head as the draft source (runtime/mtp_drafter.*), on both fixtures with a
// head: greedy and sampled, alone and beside other streams, partial windows, a cancel mid-window, a resumed
// prompt-cache hit; and the head's drafts are its golden chained drafts, some of which land.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

#include "engine_test_support.h"
#include "head_only_drafter.h"
#include "runtime/mtp_drafter.h"
#include "runtime/stream_memory.h"

namespace ds {
namespace {

using test::Collector;
using test::expect_same;
using test::Reply;
using test::run_plain;

using test::HeadOnly;

class EngineMtpDrafts : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = std::make_unique<Model>(test::fixture(GetParam())); }
  // The fixture heads are random: a draft lands about once in 320 (the vocabulary). These request indices
  // are ones whose replies land some (found by running 40 of them; deterministic on the fixture), so the
  // checks below that drafts land and are cut are not vacuous. Index 2 asks for logprobs, 3 has penalties.
  std::vector<GenerationRequest> requests() const {
    const int64_t V = model_->config().vocab_size;
    const std::vector<uint32_t> picked = GetParam() == "qwen4exp_mtp"
                                             ? std::vector<uint32_t>{2, 3, 6, 7, 13, 15}
                                             : std::vector<uint32_t>{2, 3, 5, 25, 38};
    std::vector<GenerationRequest> rs;
    for (uint32_t i : picked) {
      auto r = test::make_request(test::random_prompt(30 + 7 * (i % 4), V, 70 + i), 48, i % 2 == 1, 300 + i);
      if (i == 3) r.sampling.repetition_penalty = 1.2f;
      if (i == 2) r.top_logprobs = 2;
      rs.push_back(r);
    }
    return rs;
  }
  std::unique_ptr<Model> model_;
};

TEST_P(EngineMtpDrafts, TheModelsHeadIsTheDefaultSource) {
  ASSERT_TRUE(model_->has_mtp());
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  Engine engine(*model_, o);
  auto r = requests()[0];
  expect_same(test::run_on(engine, r), run_plain(*model_, r), "default source");
}

// Alone, at fixed depths and by cost: every reply equals plain; drafts were proposed, some landed, some
// missed.
TEST_P(EngineMtpDrafts, HeadDraftsEqualPlain) {
  const Model& m = *model_;
  auto rs = requests();
  std::vector<Reply> want;
  for (const auto& r : rs) want.push_back(run_plain(m, r));
  for (int depth : {1, 3, 0}) {
    auto head = std::make_shared<HeadOnly>(m);
    EngineOptions o;
    o.parallel = 1;
    o.prompt_cache_gib = 0;
    o.draft_depth = depth;
    o.draft_source = head;
    Engine engine(m, o);
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      Reply got = test::run_on(engine, rs[i]);
      expect_same(got, want[i], "depth " + std::to_string(depth) + " request " + std::to_string(i));
      drafted += got.final.drafted_tokens;
      accepted += got.final.accepted_tokens;
    }
    EXPECT_FALSE(head->proposals.empty());
    if (depth > 0) {
      EXPECT_GT(drafted, 0) << "depth " << depth;
      EXPECT_GT(accepted, 0) << "depth " << depth;
      EXPECT_LT(accepted, drafted) << "depth " << depth;  // partial windows were rolled back
    }
  }
}

TEST_P(EngineMtpDrafts, BesideOtherStreams) {
  const Model& m = *model_;
  auto rs = requests();
  rs[1].use_drafts = false;
  std::vector<Reply> want;
  for (const auto& r : rs) want.push_back(run_plain(m, r));
  EngineOptions o;
  o.parallel = 3;
  o.draft_depth = 3;
  o.draft_source = std::make_shared<HeadOnly>(m);
  Engine engine(m, o);
  std::vector<std::unique_ptr<Collector>> got;
  for (const auto& r : rs) {
    got.push_back(std::make_unique<Collector>());
    engine.submit(r, got.back()->callback());
    got.back()->wait_tokens(3);  // staggered arrivals: later requests prefill beside decoding windows
  }
  int64_t accepted = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    Reply r = got[i]->wait();
    expect_same(r, want[i], "request " + std::to_string(i));
    accepted += r.final.accepted_tokens;
  }
  EXPECT_EQ(got[1]->wait().final.drafted_tokens, 0);
  EXPECT_GT(accepted, 0);
}

TEST_P(EngineMtpDrafts, CancelInTheMiddleOfAWindow) {
  const Model& m = *model_;
  auto r = requests()[0];
  r.max_tokens = 120;
  Reply want = run_plain(m, r);
  EngineOptions o;
  o.draft_depth = 4;
  o.draft_source = std::make_shared<HeadOnly>(m);
  Engine engine(m, o);
  for (size_t at : {5u, 17u}) {
    Reply got = test::run_cancelled_at(engine, r, at);
    EXPECT_EQ(got.final.reason, FinishReason::Cancelled) << "cancel at " << at;
    ASSERT_GE(got.tokens.size(), at);
    EXPECT_LT(got.tokens.size(), want.tokens.size());
    EXPECT_EQ(got.tokens, std::vector<int32_t>(want.tokens.begin(), want.tokens.begin() + got.tokens.size()));
  }
  expect_same(test::run_on(engine, requests()[1]), run_plain(m, requests()[1]), "after cancels");
}

// A follow-up turn resumes from the warm pass's mark: the head's cache came with the snapshot, so the resumed
// stream still drafts with the head, and the reply is the plain one.
TEST_P(EngineMtpDrafts, PromptCacheHitStillDrafts) {
  const Model& m = *model_;
  const int64_t V = m.config().vocab_size;
  auto first = test::make_request(test::random_prompt(100, V, 11), 40, false, 1);
  auto head = std::make_shared<HeadOnly>(m);
  EngineOptions o;
  o.parallel = 1;
  o.draft_depth = 3;
  o.draft_source = head;
  Engine engine(m, o);
  Reply a = test::run_on(engine, first);
  expect_same(a, run_plain(m, first), "first turn");
  test::wait_warm(engine);
  auto second = first;
  second.prompt.insert(second.prompt.end(), a.tokens.begin(), a.tokens.end());
  auto more = test::random_prompt(9, V, 12);
  second.prompt.insert(second.prompt.end(), more.begin(), more.end());
  const size_t before = head->proposals.size();
  Reply b = test::run_on(engine, second);
  expect_same(b, run_plain(m, second), "second turn");
  EXPECT_EQ(b.final.cached_tokens, 128);  // the warm pass's mark over prompt + reply (140 tokens)
  EXPECT_GT(b.final.drafted_tokens, 0);
  bool head_drafted = false;
  for (size_t i = before; i < head->proposals.size(); ++i) head_drafted |= !head->proposals[i].empty();
  EXPECT_TRUE(head_drafted);
}

// A cached prefix that ends exactly on a grid mark at the end of the known tokens (a 128-token prompt; a
// first turn whose prompt + reply is 128 tokens, stored by the warm pass): the snapshot carries the head's
// pending row, so the resumed stream drafts with the head at once, and its drafts are exactly those of the
// same request run cold (the head's cache and pending row are the bits a fresh pass computes).
TEST_P(EngineMtpDrafts, ResumesWithTheHeadFromAMarkAtTheEndOfTheKnownTokens) {
  const Model& m = *model_;
  const int64_t V = m.config().vocab_size;
  struct Case {
    int64_t prompt, reply;
  };
  for (const Case c : {Case{128, 4}, Case{100, 28}}) {
    const std::string what = "prompt " + std::to_string(c.prompt) + " reply " + std::to_string(c.reply);
    auto first =
        test::make_request(test::random_prompt(c.prompt, V, 21), static_cast<int32_t>(c.reply), false, 1);
    auto head = std::make_shared<HeadOnly>(m);
    EngineOptions o;
    o.parallel = 1;
    o.draft_depth = 3;
    o.draft_source = head;
    Engine engine(m, o);
    Reply a = test::run_on(engine, first);
    test::wait_warm(engine);
    auto second = first;
    second.max_tokens = 24;
    if (c.prompt + c.reply == 128)
      second.prompt.insert(second.prompt.end(), a.tokens.begin(), a.tokens.end());
    auto more = test::random_prompt(6, V, 22);
    second.prompt.insert(second.prompt.end(), more.begin(), more.end());
    const size_t before = head->proposals.size();
    Reply b = test::run_on(engine, second);
    expect_same(b, run_plain(m, second), what);
    EXPECT_EQ(b.final.cached_tokens, 128) << what;
    const std::vector<std::vector<int32_t>> resumed(head->proposals.begin() + static_cast<int64_t>(before),
                                                    head->proposals.end());
    ASSERT_FALSE(resumed.empty()) << what;
    EXPECT_FALSE(resumed[0].empty()) << what << ": the head did not draft after the resumed prompt";

    auto cold_head = std::make_shared<HeadOnly>(m);
    EngineOptions cold = o;
    cold.prompt_cache_gib = 0;
    cold.draft_source = cold_head;
    Engine cold_engine(m, cold);
    expect_same(test::run_on(cold_engine, second), b, what + " cold");
    EXPECT_EQ(cold_head->proposals, resumed) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineMtpDrafts, ::testing::Values("qwen4exp_mtp", "qwen3next_mtp"));

// The first proposal after the prompt is the golden chained draft (tools/mtp/make_mtp_fixtures.py): the
// head's cache was filled over the prompt rows and the first drawn token, then chained 3 deep.
TEST(MtpDrafter, FirstProposalIsTheGoldenChain) {
  for (const std::string name : {"qwen4exp_mtp", "qwen3next_mtp"}) {
    Model m(test::fixture(name));
    const auto ref = test::read_json(test::fixture(name) / "mtp.json");
    const auto depth = ref["chain_depth"].get<int>();
    auto head = std::make_shared<HeadOnly>(m);
    EngineOptions o;
    o.parallel = 1;
    o.prompt_cache_gib = 0;
    o.draft_depth = depth;
    o.draft_source = head;
    Engine engine(m, o);
    auto r = test::make_request(ref["prompt"].get<std::vector<int32_t>>(), 2 + depth, false, 0);
    Reply got = test::run_on(engine, r);
    ASSERT_FALSE(got.tokens.empty()) << name;
    EXPECT_EQ(got.tokens[0], ref["next_token"].get<int32_t>()) << name;
    ASSERT_FALSE(head->proposals.empty()) << name;
    EXPECT_EQ(head->proposals[0], ref["chain_drafts"].get<std::vector<int32_t>>()) << name;
  }
}

// A source that follows the stream with the model's head as MtpDrafter does (its pending rows run through the
// head, none left idle) but drafts the plain reply's own next tokens (every draft lands), and sleeps in each
// call that drafts: drafting measures far slower than plain rounds, so the draft guard rests 16, 32, 64 ...
// rounds. `drafted_at`: the reply's length at each call that drafted.
class SlowLandingHead final : public DraftSource {
 public:
  SlowLandingHead(const Model& m, std::vector<int32_t> reply) : cpu_(m), reply_(std::move(reply)) {}
  void propose(std::span<DraftAsk> asks) override {
    std::vector<HeadRows> items;
    std::vector<size_t> owner;
    for (size_t i = 0; i < asks.size(); ++i) {
      const DraftAsk& a = asks[i];
      if (a.depth_hint <= 0 || !head_in_sync(cpu_, *a.state)) continue;
      items.push_back({a.state, a.prompt, a.reply, {}, {}});
      owner.push_back(i);
    }
    if (items.empty()) return;
    run_head_rows(cpu_, items, MtpLogits::None);
    std::lock_guard lock(mutex_);
    for (size_t i : owner) {
      DraftAsk& a = asks[i];
      for (size_t d = 0; d < static_cast<size_t>(std::min(a.max, a.depth_hint)); ++d)
        if (a.reply.size() + d < reply_.size()) a.drafts.push_back(reply_[a.reply.size() + d]);
      drafted_at_.push_back(static_cast<int64_t>(a.reply.size()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
  bool uses_hidden() const override { return true; }
  std::vector<int64_t> drafted_at() {
    std::lock_guard lock(mutex_);
    return drafted_at_;
  }

 private:
  CpuBackend cpu_;
  std::vector<int32_t> reply_;
  std::mutex mutex_;
  std::vector<int64_t> drafted_at_;
};

// The CPU backend with a fixed cost a forward call, as a GPU's round costs about the same at 1 and 5 rows:
// the depth policy finds that drafting pays (on the CPU alone a window's rows cost as much as rounds).
class FixedCostBackend final : public test::WrappedCpuBackend {
 public:
  explicit FixedCostBackend(const Model& m) : WrappedCpuBackend(m, "fixed-cost") {}
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return cpu_.forward(segments);
  }
  bool has_mtp() const override { return cpu_.has_mtp(); }
  int64_t mtp_hidden_width() const override { return cpu_.mtp_hidden_width(); }
};

// A guard's rest longer than kMaxIdleHeadRows rounds leaves the head following the stream (it catches up
// during the rest): drafting resumes after it. Before, the head's idle rows were dropped past
// kMaxIdleHeadRows as if the depth policy had given up on them, so the first rest of 64 rounds (the third)
// ended drafting for every running stream for good.
TEST(DraftGuardRest, TheHeadResumesAfterALongRest) {
  const Model m(test::fixture("qwen4exp_mtp"));
  const GenerationRequest r =
      test::make_request(test::random_prompt(20, m.config().vocab_size, 91), 400, false, 91);
  const Reply want = run_plain(m, r);
  auto source = std::make_shared<SlowLandingHead>(m, want.tokens);
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  o.draft_depth = 0;  // the depth policy, with the guard
  o.draft_guard = true;
  o.max_drafts = 4;
  o.draft_source = source;
  Engine engine(std::make_shared<FixedCostBackend>(m), o);
  expect_same(test::run_on(engine, r), want, "drafts with guard rests");
  EXPECT_GE(engine.stats().draft_rests, 3) << "the guard rested 16, 32 and 64 rounds";
  // The catch-ups are counted as such (at most one per kMaxIdleHeadRows rounds of a rest), not as plain
  // rounds.
  EXPECT_GE(engine.stats().draft_catch_ups, 1);
  EXPECT_LE(engine.stats().draft_catch_ups, 400 / kMaxIdleHeadRows);
  const std::vector<int64_t> at = source->drafted_at();
  ASSERT_FALSE(at.empty());
  int64_t longest_gap = 0;
  for (size_t i = 1; i < at.size(); ++i) longest_gap = std::max(longest_gap, at[i] - at[i - 1]);
  EXPECT_GT(longest_gap, kMaxIdleHeadRows) << "drafting resumed after a rest of more than kMaxIdleHeadRows "
                                              "rounds (last drafting call at reply length "
                                           << at.back() << ")";
}

}  // namespace
}  // namespace ds

namespace ds {
namespace {

// Rows that ask for no logits or only the last row's change nothing else: the returned rows are those of
// the all-rows call, bit for bit, and the head's cache and output hidden rows are the same.
TEST(MtpLogits, LastAndNoneAreRowsOfAll) {
  for (const std::string name : {"qwen4exp_mtp", "qwen3next_mtp"}) {
    Model m(test::fixture(name));
    const int64_t W = m.mtp_hidden_width(), V = m.config().vocab_size, rows = 7;
    std::vector<float> hidden(rows * W);
    for (int64_t i = 0; i < rows * W; ++i) hidden[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
    const std::vector<int32_t> next = test::random_prompt(rows, V, 5);
    std::vector<StreamState> st(3, m.new_state());
    std::vector<std::vector<float>> out(3, std::vector<float>(rows * W));
    std::vector<std::vector<float>> logits;
    const MtpLogits kinds[3] = {MtpLogits::All, MtpLogits::Last, MtpLogits::None};
    for (int k = 0; k < 3; ++k) {
      MtpSegment seg{&st[k], hidden, next, 0, out[k].data(), kinds[k]};
      logits.push_back(m.mtp_forward({&seg, 1}));
    }
    ASSERT_EQ(logits[0].size(), static_cast<size_t>(rows * V)) << name;
    EXPECT_TRUE(test::same_bits(logits[1], std::vector<float>(logits[0].end() - V, logits[0].end()))) << name;
    EXPECT_TRUE(logits[2].empty()) << name;
    for (int k = 1; k < 3; ++k) {
      EXPECT_TRUE(test::same_state(st[k], st[0])) << name << " kind " << k;
      EXPECT_TRUE(test::same_bits(out[k], out[0])) << name << " kind " << k;
    }
    // Two segments, the first without logits: the second's rows come first in the result.
    std::vector<StreamState> two(2, m.new_state());
    MtpSegment segs[2] = {{&two[0], hidden, next, 0, nullptr, MtpLogits::None},
                          {&two[1], hidden, next, 0, nullptr, MtpLogits::Last}};
    EXPECT_TRUE(test::same_bits(m.mtp_forward(segs), logits[1])) << name;
  }
}

}  // namespace
}  // namespace ds
