// drafted == plain: speculative windows (n-gram copies verified by keyed draws, rollback on a miss) give the
// tokens, finish reasons and counts plain decoding gives, greedy and sampled, alone and beside others.
#include <gtest/gtest.h>

#include "engine_test_support.h"
#include "runtime/draft_policy.h"
#include "runtime/ngram_drafter.h"

namespace ds {
namespace {

using test::Collector;
using test::expect_same;
using test::OracleDrafter;
using test::Reply;
using test::run_plain;

// A phrase repeated: n-gram copies land while the reply follows it, and miss when it departs.
std::vector<int32_t> repetitive_prompt(size_t phrase, size_t times, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> p = test::random_prompt(phrase, vocab, seed), out;
  for (size_t i = 0; i < times; ++i) out.insert(out.end(), p.begin(), p.end());
  return out;
}

class EngineDrafts : public ::testing::TestWithParam<bool> {  // param: sampled (else greedy)
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<Model>(test::fixture("qwen4exp_base")); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<Model> model_;

  // Requests whose copies land (repetitive prompts) and miss (random ones), some with penalties.
  std::vector<GenerationRequest> requests() const {
    const int64_t V = model_->config().vocab_size;
    std::vector<GenerationRequest> rs;
    for (uint32_t i = 0; i < 6; ++i) {
      auto prompt =
          i % 3 == 2 ? test::random_prompt(40, V, 100 + i) : repetitive_prompt(6 + i, 8, V, 100 + i);
      // Long replies: the tiny random model's own recurring n-grams give some copies.
      auto r = test::make_request(prompt, 80, GetParam(), 500 + i);
      if (i % 2 == 1) {
        r.sampling.repetition_penalty = 1.2f;
        r.sampling.presence_penalty = 0.3f;
        r.sampling.frequency_penalty = 0.2f;
      }
      if (i == 4) r.top_logprobs = 2;
      rs.push_back(r);
    }
    return rs;
  }
};
std::unique_ptr<Model> EngineDrafts::model_;

// N-gram copies (the default source): exact, and on greedy replies some land (deterministic on the fixture).
TEST_P(EngineDrafts, NgramCopiesEqualPlain) {
  const Model& m = *model_;
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  o.draft_depth = 5;
  Engine engine(m, o);
  int64_t drafted = 0, accepted = 0;
  auto rs = requests();
  for (size_t i = 0; i < rs.size(); ++i) {
    Reply got = test::run_on(engine, rs[i]);
    expect_same(got, run_plain(m, rs[i]), "request " + std::to_string(i));
    drafted += got.final.drafted_tokens;
    accepted += got.final.accepted_tokens;
  }
  EXPECT_GT(drafted, 0);
  if (!GetParam()) {
    EXPECT_GT(accepted, 0);
  }
  EXPECT_EQ(engine.stats().drafted_total, drafted);
  EXPECT_EQ(engine.stats().accepted_total, accepted);
}

TEST_P(EngineDrafts, LandingAndMissingDraftsEqualPlain) {
  const Model& m = *model_;
  auto oracle = std::make_shared<OracleDrafter>();
  auto rs = requests();
  const auto want = oracle->learn_plain(m, rs);
  for (int depth : {1, 3, 8}) {
    EngineOptions o;
    o.parallel = 1;
    o.prompt_cache_gib = 0;
    o.draft_depth = depth;
    o.draft_source = oracle;
    Engine engine(m, o);
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      Reply got = test::run_on(engine, rs[i]);
      expect_same(got, want[i], "depth " + std::to_string(depth) + " request " + std::to_string(i));
      drafted += got.final.drafted_tokens;
      accepted += got.final.accepted_tokens;
      // Not vacuous: drafts landed and windows were cut by misses.
      EXPECT_GT(got.final.accepted_tokens, 0) << "request " << i;
      if (depth >= 3) {
        EXPECT_LT(got.final.accepted_tokens, got.final.drafted_tokens) << "request " << i;
      }
    }
    EXPECT_EQ(engine.stats().drafted_total, drafted);
    EXPECT_EQ(engine.stats().accepted_total, accepted);
  }
}

TEST_P(EngineDrafts, BesideOthersWithStaggeredArrivals) {
  const Model& m = *model_;
  auto rs = requests();
  rs[3].use_drafts = false;  // "draft": false beside drafting streams
  auto oracle = std::make_shared<OracleDrafter>();
  const auto want = oracle->learn_plain(m, rs);
  for (int depth : {0, 3}) {  // 0: depths chosen by measured cost
    EngineOptions o;
    o.parallel = 3;  // six requests: half wait in the queue
    o.draft_depth = depth;
    o.draft_source = oracle;
    Engine engine(m, o);
    std::vector<std::unique_ptr<Collector>> got;
    for (const auto& r : rs) {
      got.push_back(std::make_unique<Collector>());
      engine.submit(r, got.back()->callback());
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    int64_t drafted = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      Reply r = got[i]->wait();
      expect_same(r, want[i], "depth " + std::to_string(depth) + " request " + std::to_string(i));
      drafted += r.final.drafted_tokens;
    }
    EXPECT_EQ(got[3]->wait().final.drafted_tokens, 0) << "a request that asked for no drafts got some";
    if (depth > 0) {
      EXPECT_GT(engine.stats().accepted_total, 0);
    }
    EXPECT_EQ(engine.stats().drafted_total, drafted);
  }
}

TEST_P(EngineDrafts, StopIdsAndMaxTokensInsideAWindow) {
  const Model& m = *model_;
  auto base = requests()[0];
  Reply full = run_plain(m, base);
  ASSERT_GE(full.tokens.size(), 20u);
  auto oracle = std::make_shared<OracleDrafter>();
  oracle->learn(base, full);
  EngineOptions o;
  o.prompt_cache_gib = 0;
  o.draft_depth = 8;
  o.draft_source = oracle;
  Engine engine(m, o);
  // Every reply length from 1 up: the last window is cut at max_tokens wherever it falls.
  for (int32_t n = 1; n <= 20; ++n) {
    auto r = base;
    r.max_tokens = n;
    Reply got = test::run_on(engine, r);
    expect_same(got, run_plain(m, r), "max_tokens " + std::to_string(n));
    EXPECT_EQ(got.final.reason, FinishReason::Length);
  }
  // A stop id at several places of the reply: the window holding it ends the reply there.
  for (size_t k : {2u, 9u, 14u}) {
    auto r = base;
    r.stop_token_ids = {full.tokens[k]};
    Reply want = run_plain(m, r);
    EXPECT_EQ(want.final.reason, FinishReason::Stop);
    Reply got = test::run_on(engine, r);
    expect_same(got, want, "stop id at " + std::to_string(k));
  }
  EXPECT_GT(engine.stats().accepted_total, 0);
}

TEST_P(EngineDrafts, CancelInTheMiddleOfAWindow) {
  const Model& m = *model_;
  auto r = requests()[0];
  r.max_tokens = 200;
  Reply want = run_plain(m, r);
  auto oracle = std::make_shared<OracleDrafter>();
  oracle->learn(r, want);
  EngineOptions o;
  o.draft_depth = 8;
  o.draft_source = oracle;
  Engine engine(m, o);
  for (size_t at : {5u, 12u}) {
    Reply got = test::run_cancelled_at(engine, r, at);
    EXPECT_EQ(got.final.reason, FinishReason::Cancelled) << "cancel at " << at;
    ASSERT_GE(got.tokens.size(), at);
    EXPECT_LT(got.tokens.size(), want.tokens.size());
    EXPECT_EQ(got.tokens, std::vector<int32_t>(want.tokens.begin(), want.tokens.begin() + got.tokens.size()))
        << "cancel at " << at;
    EXPECT_GT(got.final.accepted_tokens, 0) << "cancel at " << at;
  }
  // The engine goes on exactly after the cancels.
  expect_same(test::run_on(engine, requests()[1]), run_plain(m, requests()[1]), "after cancels");
}

TEST_P(EngineDrafts, OffSwitchesGiveThePlainPath) {
  const Model& m = *model_;
  auto r = requests()[0];
  auto oracle = std::make_shared<OracleDrafter>();
  oracle->learn(r, run_plain(m, r));
  EngineOptions o;
  o.draft_depth = 4;
  o.draft_source = oracle;
  o.drafts = false;
  Engine off(m, o);
  Reply a = test::run_on(off, r);
  EXPECT_EQ(a.final.drafted_tokens, 0);
  o.drafts = true;
  Engine on(m, o);
  r.use_drafts = false;
  Reply b = test::run_on(on, r);
  EXPECT_EQ(b.final.drafted_tokens, 0);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(on.stats().drafted_total, 0);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampled, EngineDrafts, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Sampled" : "Greedy"; });

// Other families: DeltaNet without PLE or hyper-connections (qwen3_next, qwen3_5_moe), the mlx-quantized
// qwen4_exp.
class EngineDraftFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineDraftFamilies, DraftedEqualsPlain) {
  Model m(test::fixture(GetParam()));
  const int64_t V = m.config().vocab_size;
  auto oracle = std::make_shared<OracleDrafter>();
  std::vector<GenerationRequest> rs;
  std::vector<Reply> want;
  for (uint32_t i = 0; i < 3; ++i) {
    rs.push_back(test::make_request(repetitive_prompt(5 + i, 6, V, 40 + i), 40, i == 1, 9 + i));
    rs.back().sampling.repetition_penalty = i == 2 ? 1.3f : 1.0f;
    want.push_back(run_plain(m, rs.back()));
    oracle->learn(rs.back(), want.back());
  }
  EngineOptions o;
  o.parallel = 2;
  o.draft_depth = 5;
  o.draft_source = oracle;
  Engine engine(m, o);
  std::vector<std::unique_ptr<Collector>> got;
  for (const auto& r : rs) {
    got.push_back(std::make_unique<Collector>());
    engine.submit(r, got.back()->callback());
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    Reply r = got[i]->wait();
    expect_same(r, want[i], GetParam() + " request " + std::to_string(i));
    EXPECT_GT(r.final.accepted_tokens, 0) << GetParam() << " request " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineDraftFamilies,
                         ::testing::Values("qwen3next", "qwen35moe", "qwen4exp_mlx_mixed"));

TEST(NgramDrafter, ProposesWhatFollowedTheLongestRecentMatch) {
  NgramDrafter d;
  std::vector<int32_t> prompt = {1, 2, 3, 4, 9, 2, 3, 4, 5, 6, 7};
  // Suffix [2 3 4] matches twice; the longer match [9 2 3 4]... is not there, so the most recent wins: 5 6.
  EXPECT_EQ(d.propose_one(prompt, std::vector<int32_t>{2, 3, 4}, 2), (std::vector<int32_t>{5, 6}));
  // A longer match beats a more recent one.
  EXPECT_EQ(d.propose_one(prompt, std::vector<int32_t>{9, 2, 3, 4}, 3), (std::vector<int32_t>{5, 6, 7}));
  // No match of two tokens: nothing.
  EXPECT_TRUE(d.propose_one(prompt, std::vector<int32_t>{8, 4}, 4).empty());
  // A loop is continued past the context's end.
  EXPECT_EQ(d.propose_one(std::vector<int32_t>{7, 8, 7, 8}, {}, 5), (std::vector<int32_t>{7, 8, 7, 8, 7}));
  EXPECT_TRUE(d.propose_one(prompt, std::vector<int32_t>{2, 3, 4}, 0).empty());
}

TEST(DraftPolicy, LandingRatesFollowWhatLanded) {
  LandingRates fresh;
  EXPECT_DOUBLE_EQ(fresh.expected_tokens(0), 1.0);
  EXPECT_DOUBLE_EQ(fresh.expected_tokens(2), 1.0 + 0.5 + 0.25);  // untried depths: an even chance
  LandingRates good, bad;
  for (int i = 0; i < 50; ++i) {
    good.record(4, 4);
    bad.record(4, 0);
  }
  EXPECT_GT(good.expected_tokens(4), 4.5);
  EXPECT_LT(bad.expected_tokens(4), 1.05);
  // A window cut at the second draft: the first landed, the second was tried and missed, the rest untried.
  LandingRates cut;
  cut.record(4, 1);
  EXPECT_DOUBLE_EQ(cut.expected_tokens(2), 1.0 + 2.0 / 3.0 + 2.0 / 3.0 * 1.0 / 3.0);
}

TEST(DraftPolicy, DepthsPayOrTurnOff) {
  auto costs_of = [](double fixed, double per_row) {
    RoundCosts c;
    c.calibrate(9, [&](int64_t rows) { return fixed + per_row * static_cast<double>(rows); });
    return c;
  };
  LandingRates good;
  for (int i = 0; i < 50; ++i) good.record(8, 8);
  LandingRates fresh;
  // Weight-bound rounds (cost nearly flat in rows): landing drafts go to full depth.
  RoundCosts flat = costs_of(10, 0.1);
  std::vector<DepthChoice> one = {{&good, 8}};
  choose_depths(flat, one);
  EXPECT_EQ(one[0].depth, 8);
  // Compute-bound rounds (cost proportional to rows): an even chance never pays.
  RoundCosts linear = costs_of(0, 1);
  std::vector<DepthChoice> even = {{&fresh, 8}};
  choose_depths(linear, even);
  EXPECT_EQ(even[0].depth, 0);
  // Sixteen streams on a cost of 10 ms + 1 ms per row: a fresh stream's draft pays alone, not among many.
  RoundCosts mixed = costs_of(10, 1);
  std::vector<DepthChoice> alone = {{&fresh, 8}};
  choose_depths(mixed, alone);
  EXPECT_GT(alone[0].depth, 0);
  std::vector<DepthChoice> crowd(16, DepthChoice{&fresh, 8});
  choose_depths(mixed, crowd);
  for (const auto& c : crowd) EXPECT_EQ(c.depth, 0);
  // No drafts on offer: depth 0 however cheap.
  std::vector<DepthChoice> none = {{&good, 0}};
  choose_depths(flat, none);
  EXPECT_EQ(none[0].depth, 0);
  // Costs past the calibrated widths extrapolate from the last step.
  EXPECT_DOUBLE_EQ(mixed.cost(12), 22.0);
}

// A backend whose rollback re-runs the kept rows (CUDA) pays a pass more for every window that misses: on
// weight-bound rounds an even-chance draft then no longer pays, while drafts that nearly always land still
// do.
TEST(DraftPolicy, ReRunsAfterMissesCount) {
  RoundCosts flat;
  flat.calibrate(9, [](int64_t rows) { return 10.0 + 0.1 * static_cast<double>(rows); });
  LandingRates half, good;
  for (int i = 0; i < 50; ++i) half.record(1, i % 2), good.record(4, 4);
  std::vector<DepthChoice> even = {{&half, 1}};
  choose_depths(flat, even);
  EXPECT_EQ(even[0].depth, 1);  // restored outright: 1.5 tokens for 10.2 ms beats 1 for 10.1
  choose_depths(flat, even, 0, nullptr, true);
  EXPECT_EQ(even[0].depth, 0);  // + half a re-run pass: 1.5 tokens for about 15.2 ms
  std::vector<DepthChoice> sure = {{&good, 4}};
  choose_depths(flat, sure, 0, nullptr, true);
  EXPECT_EQ(sure[0].depth, 4);
}

// Where the kept rows ride in the next round's window (CUDA), a miss costs those rows, not a pass: on
// weight-bound rounds an even-chance draft pays again, while on rounds that cost by the row it still does
// not.
TEST(DraftPolicy, ReRunRowsCostRowsNotAPass) {
  LandingRates half;
  for (int i = 0; i < 50; ++i) half.record(1, i % 2);
  RoundCosts flat;
  flat.calibrate(9, [](int64_t rows) { return 10.0 + 0.1 * static_cast<double>(rows); });
  std::vector<DepthChoice> even = {{&half, 1}};
  choose_depths(flat, even, 0, nullptr, true, false);
  EXPECT_EQ(even[0].depth, 0);  // a pass: 1.5 tokens for about 15.2 ms
  choose_depths(flat, even, 0, nullptr, true, true);
  EXPECT_EQ(even[0].depth, 1);  // two rows more at half the chance: 1.5 tokens for about 10.3 ms
  RoundCosts by_row;
  by_row.calibrate(9, [](int64_t rows) { return 2.0 + static_cast<double>(rows); });
  choose_depths(by_row, even, 0, nullptr, false);
  EXPECT_EQ(even[0].depth, 1);  // restored outright: 1.5 tokens for 4 ms beats 1 for 3
  choose_depths(by_row, even, 0, nullptr, true, true);
  EXPECT_EQ(even[0].depth, 0);  // + half of two rows: 1.5 tokens for 5 ms
}

// Drafting whose whole rounds come out slower per token than plain rounds rests, twice as long after each
// failed try; drafting that pays never rests; a plain round's one-off slow start does not make plain look
// dear; each stream count is judged against its own plain rounds.
TEST(DraftGuard, RestsWhenDraftingMeasuresSlower) {
  DraftGuard g;
  g.observe(false, 1, 1, 3.0, 1.0);  // the first plain round (a capture, say)
  g.observe(false, 1, 1, 1.0, 1.0);  // then plain rounds of 1 ms: the figure falls at once
  // Drafting rounds of 2 ms making 1.5 tokens: 1.33 ms a token, slower than plain's 1.
  for (int64_t i = 0; i < DraftGuard::kProbeRounds; ++i) {
    EXPECT_FALSE(g.resting());
    g.observe(true, 1, i % 2 == 0 ? 1 : 2, 2.0, 1.0);
  }
  EXPECT_TRUE(g.resting());
  EXPECT_EQ(g.rests(), 1);
  for (int64_t i = 0; i < DraftGuard::kFirstRest; ++i) {
    EXPECT_TRUE(g.resting());
    g.observe(false, 1, 1, 1.0, 1.0);
  }
  EXPECT_FALSE(g.resting());
  for (int64_t i = 0; i < DraftGuard::kProbeRounds; ++i) g.observe(true, 1, 1, 2.0, 1.0);
  int64_t rest = 0;
  while (g.resting()) g.observe(false, 1, 1, 1.0, 1.0), ++rest;
  EXPECT_EQ(rest, 2 * DraftGuard::kFirstRest);  // the second failed try rests twice as long

  // Drafting at 1.2 ms for 2 tokens beats plain's 1 ms a token: no rest, however long.
  DraftGuard pays;
  pays.observe(false, 1, 1, 1.0, 1.0);
  for (int i = 0; i < 100; ++i) pays.observe(true, 1, 2, 1.2, 1.0);
  EXPECT_FALSE(pays.resting());
  EXPECT_EQ(pays.rests(), 0);

  // Eight streams: plain measured at one stream (1 ms) does not judge them; the estimate (4 ms a round of 8,
  // 0.5 ms a token) does, so 8 tokens in 5 ms (0.625) rests while 12 tokens in 5 ms does not.
  DraftGuard crowd;
  crowd.observe(false, 1, 1, 1.0, 1.0);
  for (int64_t i = 0; i < DraftGuard::kProbeRounds; ++i) crowd.observe(true, 8, 12, 5.0, 4.0);
  EXPECT_FALSE(crowd.resting());
  for (int64_t i = 0; i < DraftGuard::kProbeRounds; ++i) crowd.observe(true, 8, 8, 5.0, 4.0);
  EXPECT_TRUE(crowd.resting());
}

// A resting round in which the head caught up runs the rest down as a plain round does, but its time (a plain
// round's plus a head call's) is not taken for a plain round's: the figure drafting is judged against stays
// the plain rounds' own. Before, the engine reported it as a plain round.
TEST(DraftGuard, CatchUpRoundsRunTheRestDownButAreNotPlainRounds) {
  DraftGuard g;
  g.observe(false, 1, 1, 1.0, 1.0);
  for (int64_t i = 0; i < DraftGuard::kProbeRounds; ++i) g.observe(true, 1, 1, 2.0, 1.0);
  ASSERT_TRUE(g.resting());
  for (int64_t i = 0; i + 1 < DraftGuard::kFirstRest; ++i) g.observe(false, 1, 1, 1.0, 1.0);
  EXPECT_TRUE(g.resting());
  g.observe_catch_up();
  EXPECT_FALSE(g.resting()) << "a catch-up round is one of the rest's rounds";
  EXPECT_EQ(g.plain_ms(1), 1.0);
  EXPECT_EQ(g.plain_ms(2), 0.0);
}

// A new stream (no windows yet) still tries drafts where misses re-run: priced at the even-chance prior, the
// re-run pass would keep it from ever drafting, so it would never learn that its drafts land (on the H200
// every reply drafted nothing). Once it has tried a few windows, its measured rates decide.
TEST(DraftPolicy, NewStreamsExploreDespiteReRuns) {
  RoundCosts flat;
  flat.calibrate(9, [](int64_t rows) { return 10.0 + 0.1 * static_cast<double>(rows); });
  LandingRates fresh;
  std::vector<DepthChoice> c = {{&fresh, 4}};
  choose_depths(flat, c, 0, nullptr, true);
  EXPECT_GE(c[0].depth, 1);
  for (int i = 0; i < 4; ++i) fresh.record(1, 0);  // four misses: the re-run is priced in, drafting stops
  choose_depths(flat, c, 0, nullptr, true);
  EXPECT_EQ(c[0].depth, 0);
  LandingRates lands;
  for (int i = 0; i < 4; ++i) lands.record(4, 4);
  std::vector<DepthChoice> l = {{&lands, 4}};
  choose_depths(flat, l, 0, nullptr, true);
  EXPECT_EQ(l[0].depth, 4);
}

// The MTP head's own calls are in the round's cost: a head whose catch-up costs more than its drafts save
// turns drafting off; a chain step dearer than what a deeper draft adds stops the chain; copies (no head
// rows) are unaffected; without head costs the same choice drafts full depth.
TEST(DraftPolicy, TheHeadsCostCounts) {
  auto costs_of = [](int64_t widths, double fixed, double per_row) {
    RoundCosts c;
    c.calibrate(widths, [&](int64_t rows) { return fixed + per_row * static_cast<double>(rows); });
    return c;
  };
  LandingRates good;
  for (int i = 0; i < 50; ++i) good.record(8, 8);
  LandingRates half;  // every other draft lands: a window of depth d expects < 2 tokens
  for (int i = 0; i < 50; ++i) half.record(8, i % 2 == 0 ? 1 : 0);
  const RoundCosts flat = costs_of(9, 10, 0.1);
  HeadCosts cheap{costs_of(9, 0.2, 0.05), costs_of(4, 0.2, 0.05)};
  HeadCosts dear_catch_up{costs_of(9, 12, 0.1), costs_of(4, 0.2, 0.05)};
  HeadCosts dear_chain{costs_of(9, 0.2, 0.05), costs_of(4, 6, 0.1)};

  std::vector<DepthChoice> one = {{&good, 8, 1}};
  choose_depths(flat, one, 0, &cheap);
  EXPECT_EQ(one[0].depth, 8);
  choose_depths(flat, one, 0, &dear_chain);
  EXPECT_EQ(one[0].depth, 1);  // draft 1 comes with the catch-up; each further one costs a chain step
  std::vector<DepthChoice> middling = {{&half, 8, 1}};
  choose_depths(flat, middling, 0, &dear_catch_up);
  EXPECT_EQ(middling[0].depth, 0);  // ~1.5 tokens for twice the round: off
  choose_depths(flat, middling);
  EXPECT_GT(middling[0].depth, 0);  // the same stream drafts when its drafts cost nothing to make
  std::vector<DepthChoice> copies = {{&good, 8, 0}};
  choose_depths(flat, copies, 0, &dear_catch_up);
  EXPECT_EQ(copies[0].depth, 8);
  // The catch-up is one call for all streams, a chain step one call per depth over the streams that deep.
  const int depths[3] = {3, 1, 0};
  const int64_t rows[3] = {2, 4, 5};
  EXPECT_DOUBLE_EQ(cheap.cost(depths, rows), cheap.catch_up.cost(6) + 2 * cheap.chain.cost(1));
  EXPECT_DOUBLE_EQ(HeadCosts{}.cost(depths, rows), 0.0);  // uncalibrated: no head cost
}

}  // namespace
}  // namespace ds
