// The engine's device-draw hook (runtime/row_draws.h, ModelBackend::forward_rows) on the CPU: pack_draws
// packs exactly KeyedSampler's inputs (keys, modes, histories with the window's drafts, masks) and leaves to
// the host every row a device would not draw as the host does; draw_rows_on_host is the KeyedSampler's draw;
// an engine over a backend that takes the hook gives the plain engine's replies (greedy, sampled, penalties,
// drafted windows cut by misses, logprobs rows on the host), and a device's "nothing drawable" ends the
// stream with KeyedSampler's error.
#include "runtime/row_draws.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/portable_log.h"
#include "engine_test_support.h"
#include "runtime/cpu_backend.h"
#include "runtime/keyed_noise.h"
#include "runtime/keyed_sampler.h"
#include "runtime/softmax_mass.h"

namespace ds {
namespace {

RowDraw draw_row(const SamplingParams& p, int64_t position, const TokenCounts* h,
                 std::span<const int32_t> drafted = {}) {
  RowDraw d;
  d.use = RowUse::Draw;
  d.params = &p;
  d.position = position;
  d.history = h;
  d.drafted = drafted;
  return d;
}

TEST(PackDraws, ModesKeysAndScales) {
  SamplingParams greedy, dense, filtered;
  greedy.temperature = 0;
  dense.temperature = 0.7f;
  dense.seed = 11;
  filtered.temperature = 1.3f;
  filtered.top_k = 20;
  filtered.min_p = 0.05f;
  filtered.seed = 12;
  std::vector<RowDraw> rows = {draw_row(greedy, 5, nullptr), row_with(RowUse::Skip),
                               draw_row(dense, 9, nullptr), row_with(RowUse::Host),
                               draw_row(filtered, 10, nullptr)};
  const PackedDraws p = pack_draws(rows, 1000);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[0].row, 0);
  EXPECT_EQ(p.rows[1].row, 2);
  EXPECT_EQ(p.rows[2].row, 4);
  EXPECT_EQ(p.rows[0].mode, DrawMode::Greedy);
  EXPECT_EQ(p.rows[1].mode, DrawMode::Dense);
  EXPECT_EQ(p.rows[2].mode, DrawMode::Filtered);
  EXPECT_EQ(p.rows[1].key, draw_key(11, 9));
  EXPECT_EQ(p.rows[2].key, draw_key(12, 10));
  EXPECT_EQ(p.rows[1].inv_t, 1.0 / static_cast<double>(0.7f));
  EXPECT_EQ(p.rows[1].log_min_p, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(p.rows[2].log_min_p, portable_log(static_cast<double>(0.05f)));
  EXPECT_EQ(p.rows[2].top_k, 20);
  EXPECT_EQ(p.rows[2].top_p, 1.0f);
  EXPECT_TRUE(p.entries.empty());  // no penalties: no history travels
  EXPECT_TRUE(p.mask_words.empty());
  EXPECT_EQ(rows[1].use, RowUse::Skip);
  EXPECT_EQ(rows[3].use, RowUse::Host);
}

TEST(PackDraws, HistoryWithDraftsAndMasks) {
  SamplingParams p;
  p.repetition_penalty = 1.2f;
  p.presence_penalty = 0.5f;
  TokenCounts h;
  h.add_prompt(std::vector<int32_t>{4, 9, 9, 70});
  h.add_generated(9);
  const std::vector<int32_t> drafts = {70, 3, 9};
  std::vector<uint64_t> mask(2, ~uint64_t{0});
  mask[1] = 0x5;
  std::vector<RowDraw> rows = {draw_row(p, 20, &h), draw_row(p, 21, &h, std::span(drafts).first(1)),
                               draw_row(p, 23, &h, drafts)};
  rows[2].mask = mask;
  const PackedDraws packed = pack_draws(rows, 100);
  ASSERT_EQ(packed.rows.size(), 3u);
  auto entries_of = [&](const PackedRow& r) {
    return std::vector<TokenCounts::Entry>(packed.entries.begin() + r.entries_begin,
                                           packed.entries.begin() + r.entries_begin + r.entries_count);
  };
  auto same = [](const std::vector<TokenCounts::Entry>& a, std::span<const TokenCounts::Entry> b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].id != b[i].id || a[i].prompt != b[i].prompt || a[i].generated != b[i].generated) return false;
    return true;
  };
  TokenCounts want = h;
  EXPECT_TRUE(same(entries_of(packed.rows[0]), want.entries()));
  want.add_generated(70);
  EXPECT_TRUE(same(entries_of(packed.rows[1]), want.entries()));
  want.add_generated(3);
  want.add_generated(9);
  EXPECT_TRUE(same(entries_of(packed.rows[2]), want.entries()));
  EXPECT_EQ(packed.rows[0].mask_begin, -1);
  ASSERT_EQ(packed.rows[2].mask_begin, 0);
  EXPECT_EQ(packed.mask_words, mask);
  EXPECT_EQ(packed.rows[2].presence, 0.5f);
  EXPECT_EQ(packed.rows[2].repetition, 1.2f);
}

TEST(PackDraws, RowsTheDeviceWouldNotDrawAsTheHostStayOnTheHost) {
  SamplingParams bad, pen, ok;
  bad.top_p = 1.5f;
  pen.frequency_penalty = 1;
  TokenCounts far;
  far.add_generated(500);  // outside a vocabulary of 100: the host's draw fails naming it
  std::vector<uint64_t> short_mask(1, ~uint64_t{0});
  std::vector<RowDraw> rows = {draw_row(bad, 0, nullptr), draw_row(pen, 0, &far), draw_row(ok, 0, nullptr),
                               draw_row(ok, 0, nullptr)};
  rows[3].mask = short_mask;
  const PackedDraws packed = pack_draws(rows, 100);
  ASSERT_EQ(packed.rows.size(), 1u);
  EXPECT_EQ(packed.rows[0].row, 2);
  EXPECT_EQ(rows[0].use, RowUse::Host);
  EXPECT_EQ(rows[1].use, RowUse::Host);
  EXPECT_EQ(rows[3].use, RowUse::Host);
  std::vector<RowDraw> big = {draw_row(ok, 0, nullptr)};
  EXPECT_TRUE(pack_draws(big, kMaxSampledVocab + 1).rows.empty());
  EXPECT_EQ(big[0].use, RowUse::Host);
}

TEST(DrawRowsOnHost, KeyedSamplerDrawsAndHostRowsInOrder) {
  const int64_t V = 50;
  std::vector<float> logits(4 * V);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i) * 0.37f) * 3;
  for (int64_t j = 0; j < V; ++j) logits[3 * V + j] = -std::numeric_limits<float>::infinity();
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.8f;
  p.repetition_penalty = 1.5f;
  p.seed = 3;
  TokenCounts h;
  h.add_prompt(std::vector<int32_t>{1, 2, 3});
  const std::vector<int32_t> drafts = {7};
  const std::vector<RowDraw> rows = {draw_row(p, 8, &h, drafts), row_with(RowUse::Host),
                                     row_with(RowUse::Skip), draw_row(p, 9, &h)};
  const DrawnRows out = draw_rows_on_host(logits, V, rows);
  TokenCounts with = h;
  with.add_generated(7);
  ASSERT_EQ(out.tokens.size(), 4u);
  EXPECT_EQ(out.tokens[0], sample_token(std::span(logits).first(V), p, 8, with));
  EXPECT_EQ(out.tokens[1], kRowOnHost);
  EXPECT_EQ(out.tokens[2], kRowSkipped);
  EXPECT_EQ(out.tokens[3], kRowOnHost);  // nothing drawable: left to the engine's draw, which reports it
  ASSERT_EQ(out.logits.size(), static_cast<size_t>(2 * V));
  EXPECT_TRUE(std::equal(out.logits.begin(), out.logits.begin() + V, logits.begin() + V));
  EXPECT_TRUE(std::equal(out.logits.begin() + V, out.logits.end(), logits.begin() + 3 * V));
}

// The CPU backend behind the hook: the engine asks for row uses and reads drawn tokens, as with CUDA.
class HookedBackend final : public test::WrappedCpuBackend {
 public:
  explicit HookedBackend(const Model& m, bool nothing = false)
      : WrappedCpuBackend(m, "hooked"), nothing_(nothing) {}
  // Never called by an engine: rounds and the draft policy's calibration go through forward_rows.
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    ++forwards;
    return cpu_.forward(segments);
  }
  bool draws_rows() const override { return true; }
  DrawnRows forward_rows(std::span<const ForwardSegment> segments,
                         std::span<const RowDraw> rows) const override {
    DrawnRows out = draw_rows_on_host(cpu_.forward(segments), config().vocab_size, rows);
    for (size_t i = 0; i < rows.size(); ++i) {
      ++uses[static_cast<int>(rows[i].use)];
      if (nothing_ && rows[i].use == RowUse::Draw) out.tokens[i] = kNothingDrawable;
    }
    return out;
  }
  mutable int64_t uses[3] = {0, 0, 0};  // Skip, Host, Draw
  mutable int64_t forwards = 0;

 private:
  bool nothing_;
};

class RowDrawsEngine : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = std::make_unique<Model>(test::fixture("qwen4exp_base")); }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<Model> model_;
};
std::unique_ptr<Model> RowDrawsEngine::model_;

TEST_F(RowDrawsEngine, DrawnRowsGiveThePlainEnginesReplies) {
  const Model& m = *model_;
  const int64_t V = m.config().vocab_size;
  std::vector<GenerationRequest> rs;
  for (uint32_t i = 0; i < 4; ++i) {
    // The first prompt takes two rounds' pieces (256 rows a round): its first piece's row is unread.
    const size_t len = i == 0 ? 300 : 20 + 30 * i;
    rs.push_back(test::make_request(test::random_prompt(len, V, 90 + i), 24, i % 2 == 1, 40 + i));
    // Strong penalties: a verify row that missed the window's earlier drafts in its history would differ.
    rs.back().sampling.presence_penalty = 1.5f;
    rs.back().sampling.frequency_penalty = 0.5f;
    rs.back().sampling.repetition_penalty = 1.3f;
  }
  rs[2].top_logprobs = 3;  // its rows come back to the host
  rs[3].sampling.top_k = 5;
  auto oracle = std::make_shared<test::OracleDrafter>();
  const auto want = oracle->learn_plain(m, rs);
  auto backend = std::make_shared<HookedBackend>(m);
  EngineOptions o;
  o.parallel = 4;
  o.draft_depth = 3;
  o.draft_source = oracle;
  o.prompt_cache_gib = 0;
  Engine engine(backend, o);
  std::vector<std::unique_ptr<test::Collector>> got;
  for (const auto& r : rs) {
    got.push_back(std::make_unique<test::Collector>());
    engine.submit(r, got.back()->callback());
  }
  int64_t accepted = 0;
  for (size_t i = 0; i < rs.size(); ++i) {
    const test::Reply g = got[i]->wait();
    test::expect_same(g, want[i], "request " + std::to_string(i));
    EXPECT_EQ(g.final.reason, FinishReason::Length);
    accepted += g.final.accepted_tokens;
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(backend->uses[2], 0);  // drawn through the hook
  EXPECT_GT(backend->uses[1], 0);  // the logprobs request's rows
  EXPECT_GT(backend->uses[0], 0);  // prompt pieces that do not end their prompt
  EXPECT_EQ(backend->forwards, 0);
}

// The depth policy's calibration times windows through forward_rows, as the rounds that refine it run.
TEST_F(RowDrawsEngine, CalibrationTimesTheDrawingPath) {
  const Model& m = *model_;
  std::vector<int32_t> phrase = test::random_prompt(12, m.config().vocab_size, 8), prompt;
  for (int i = 0; i < 6; ++i) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
  const GenerationRequest r = test::make_request(prompt, 24, false, 3);
  const test::Reply want = test::run_plain(m, r);
  auto backend = std::make_shared<HookedBackend>(m);
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;  // drafts on, depth by measured cost: the first drafting round calibrates
  Engine engine(backend, o);
  test::expect_same(test::run_on(engine, r), want, "calibrated");
  EXPECT_EQ(backend->forwards, 0);
  EXPECT_GT(backend->uses[2], 24);  // the reply's rows and the calibration windows' rows
}

TEST_F(RowDrawsEngine, NothingDrawableEndsTheStreamWithTheSamplersError) {
  auto backend = std::make_shared<HookedBackend>(*model_, /*nothing=*/true);
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  Engine engine(backend, o);
  const test::Reply r = test::run_on(
      engine, test::make_request(test::random_prompt(10, model_->config().vocab_size, 5), 8, true, 1));
  EXPECT_EQ(r.final.reason, FinishReason::Error);
  EXPECT_EQ(r.final.error, kNothingDrawableMessage);
  EXPECT_TRUE(r.tokens.empty());
}

// A backend whose forward_rows answers fewer rows than it was asked for (here none): the round's streams end
// with an error naming the count, instead of the engine reading tokens past the end.
class ShortRowsBackend final : public test::WrappedCpuBackend {
 public:
  explicit ShortRowsBackend(const Model& m) : WrappedCpuBackend(m, "short rows") {}
  bool draws_rows() const override { return true; }
  DrawnRows forward_rows(std::span<const ForwardSegment> segments, std::span<const RowDraw>) const override {
    cpu_.forward(segments);
    return {};
  }
};

TEST_F(RowDrawsEngine, TooFewRowsFromTheBackendEndTheStreamsWithAnError) {
  Engine engine(std::make_shared<ShortRowsBackend>(*model_), EngineOptions{});
  const test::Reply r = test::run_on(
      engine, test::make_request(test::random_prompt(10, model_->config().vocab_size, 5), 8, false, 1));
  EXPECT_EQ(r.final.reason, FinishReason::Error);
  EXPECT_NE(r.final.error.find("0 row results for 1 rows"), std::string::npos) << r.final.error;
  EXPECT_TRUE(r.tokens.empty());
}

}  // namespace
}  // namespace ds
