// The engine with a backend that keeps the MTP head's hidden rows itself (ModelBackend::keeps_hidden_rows, as
// the CUDA backend keeps them on the device): a CPU backend that holds each stream's rows by position, and
// the head's last output row, in StreamState::backend, and refuses host rows. The engine never hands it
// floats, its replies equal plain decoding, and the head drafts exactly what it drafts from host rows (the
// same rows, the same chains), also after a prompt-cache hit (the rows travel with the snapshot).
#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "core/error.h"
#include "engine_test_support.h"
#include "head_only_drafter.h"
#include "runtime/mtp_drafter.h"

namespace ds {
namespace {

using test::expect_same;
using test::Reply;
using test::run_plain;

class KeptRowsBackend final : public ModelBackend {
 public:
  explicit KeptRowsBackend(const Model& m) : cpu_(m) {}
  const char* name() const override { return "kept-rows"; }
  const ModelConfig& config() const override { return cpu_.config(); }
  int64_t max_context() const override { return cpu_.max_context(); }
  int64_t weights_bytes() const override { return cpu_.weights_bytes(); }
  StreamState new_state() const override {
    StreamState s = cpu_.new_state();
    s.backend = BackendStateSlot(std::make_unique<Kept>());
    return s;
  }
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    const int64_t W = mtp_hidden_width();
    std::vector<ForwardSegment> runs(segments.begin(), segments.end());
    std::vector<std::vector<float>> rows(segments.size());
    std::vector<int64_t> pos0(segments.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      EXPECT_EQ(runs[i].hidden, nullptr) << "host rows asked of a backend that keeps them";
      pos0[i] = runs[i].state->position;
      if (!runs[i].keep_hidden) continue;
      runs[i].keep_hidden = false;
      rows[i].resize(runs[i].tokens.size() * static_cast<size_t>(W));
      runs[i].hidden = rows[i].data();
    }
    std::vector<float> logits = cpu_.forward(runs);
    for (size_t i = 0; i < runs.size(); ++i)
      for (size_t t = 0; t < runs[i].tokens.size() && !rows[i].empty(); ++t)
        kept(*segments[i].state)
            .rows[pos0[i] + static_cast<int64_t>(t)]
            .assign(rows[i].begin() + static_cast<int64_t>(t) * W,
                    rows[i].begin() + static_cast<int64_t>(t + 1) * W);
    return logits;
  }
  void rewind(const WindowRecord& record, int64_t keep, StreamState& state) const override {
    cpu_.rewind(record, keep, state);
  }
  bool has_mtp() const override { return cpu_.has_mtp(); }
  int64_t mtp_hidden_width() const override { return cpu_.mtp_hidden_width(); }
  bool keeps_hidden_rows() const override { return true; }
  std::vector<float> mtp_forward(std::span<const MtpSegment> segments) const override {
    const int64_t W = mtp_hidden_width();
    std::vector<MtpSegment> runs(segments.begin(), segments.end());
    std::vector<std::vector<float>> in(runs.size()), out(runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      MtpSegment& sg = runs[i];
      if (sg.input == MtpInput::Given) {  // the depth policy's calibration times the head on made-up rows
        EXPECT_FALSE(sg.keep_output);
        ++given_calls;
        continue;
      }
      EXPECT_TRUE(sg.hidden.empty() && sg.hidden_out == nullptr) << "host rows with kept ones";
      Kept& k = kept(*sg.state);
      const auto n = static_cast<int64_t>(sg.next_tokens.size());
      if (sg.input == MtpInput::KeptRows) {
        for (int64_t p = sg.position; p < sg.position + n; ++p) {
          if (!k.rows.count(p)) ADD_FAILURE() << "no kept row at position " << p;
          const std::vector<float>& row = k.rows[p];
          in[i].insert(in[i].end(), row.begin(), row.end());
        }
        ++kept_row_reads;
      } else {
        EXPECT_EQ(n, 1);
        in[i] = k.last_out;
        ++kept_output_reads;
      }
      in[i].resize(static_cast<size_t>(n * W));
      sg.hidden = in[i];
      sg.input = MtpInput::Given;
      if (sg.keep_output) {
        out[i].resize(static_cast<size_t>(n * W));
        sg.hidden_out = out[i].data();
        sg.keep_output = false;
      }
    }
    std::vector<float> logits = cpu_.mtp_forward(runs);
    for (size_t i = 0; i < runs.size(); ++i)
      if (!out[i].empty()) kept(*segments[i].state).last_out.assign(out[i].end() - W, out[i].end());
    return logits;
  }
  mutable int64_t kept_row_reads = 0, kept_output_reads = 0, given_calls = 0;

 private:
  struct Kept final : BackendState {
    std::map<int64_t, std::vector<float>> rows;  // the main model's H by position
    std::vector<float> last_out;
    std::unique_ptr<BackendState> clone() const override { return std::make_unique<Kept>(*this); }
    size_t bytes() const override { return rows.size() * 4; }
  };
  static Kept& kept(const StreamState& s) {
    auto* k = dynamic_cast<Kept*>(s.backend.get());
    if (k == nullptr) throw std::runtime_error("a state without kept rows");
    return *k;
  }
  CpuBackend cpu_;
};

struct EngineRun {
  std::vector<Reply> replies;
  std::vector<std::vector<int32_t>> proposals;
  EngineStats stats;
};

// Each request alone, then a second turn that resumes from the first's warm-pass mark.
EngineRun run_requests(const std::shared_ptr<const ModelBackend>& backend,
                       const std::vector<GenerationRequest>& rs, int depth) {
  auto head = std::make_shared<test::HeadOnly>(*backend);
  EngineRun run;
  {
    EngineOptions o;
    o.parallel = 1;
    o.draft_depth = depth;
    o.draft_source = head;
    Engine engine(backend, o);
    for (const GenerationRequest& r : rs) {
      run.replies.push_back(test::run_on(engine, r));
      test::wait_warm(engine);
    }
    auto second = rs[0];
    second.prompt.insert(second.prompt.end(), run.replies[0].tokens.begin(), run.replies[0].tokens.end());
    second.prompt.push_back(5);
    run.replies.push_back(test::run_on(engine, second));
    EXPECT_GT(run.replies.back().final.cached_tokens, 0) << "the second turn did not resume from a mark";
    run.stats = engine.stats();
  }  // the engine's thread has ended: the proposals are all in
  run.proposals = head->proposals;
  return run;
}

TEST(EngineKeptHidden, SameDraftsAsHostRowsAndRepliesEqualPlain) {
  for (const std::string name : {"qwen4exp_mtp", "qwen3next_mtp"}) {
    const Model m(test::fixture(name));
    ASSERT_TRUE(m.has_mtp()) << name;
    const int64_t V = m.config().vocab_size;
    std::vector<GenerationRequest> rs;
    for (uint32_t i : {2u, 3u, 6u})
      rs.push_back(test::make_request(test::random_prompt(100 + 7 * i, V, 70 + i), 40, i % 2 == 1, 300 + i));
    for (int depth : {3, 0}) {
      const std::string what = name + " depth " + std::to_string(depth);
      auto kept = std::make_shared<KeptRowsBackend>(m);
      const EngineRun got = run_requests(kept, rs, depth);
      const EngineRun host = run_requests(std::make_shared<CpuBackend>(m), rs, depth);
      ASSERT_EQ(got.replies.size(), rs.size() + 1) << what;
      for (size_t i = 0; i < rs.size(); ++i)
        expect_same(got.replies[i], run_plain(m, rs[i]), what + " request " + std::to_string(i));
      for (size_t i = 0; i < got.replies.size(); ++i)
        expect_same(got.replies[i], host.replies[i], what + " against host rows, reply " + std::to_string(i));
      EXPECT_GT(kept->kept_row_reads, 0) << what;
      // The depth policy's tables, published for receipts: widths 1..max_drafts + 1, chains over 1..2 streams
      // (one slot); none at a fixed depth (no calibration).
      const size_t widths = static_cast<size_t>(EngineOptions{}.max_drafts) + 1;
      EXPECT_EQ(got.stats.draft_round_ms.size(), depth == 0 ? widths : 0) << what;
      EXPECT_EQ(got.stats.draft_catch_up_ms.size(), depth == 0 ? widths : 0) << what;
      EXPECT_EQ(got.stats.draft_chain_ms.size(), depth == 0 ? 2u : 0u) << what;
      if (depth == 0) continue;  // depths by measured cost: the drafts differ from run to run
      EXPECT_EQ(kept->given_calls, 0) << what << ": the head was given host rows";
      // The same rows reach the head: it proposes the same drafts, chained ones included.
      EXPECT_EQ(got.proposals, host.proposals) << what;
      EXPECT_GT(kept->kept_output_reads, 0) << what << ": no chained draft read a kept output";
      int64_t drafted = 0;
      for (const Reply& r : got.replies) drafted += r.final.drafted_tokens;
      EXPECT_GT(drafted, 0) << what;
    }
  }
}

// The drafter's catch-up calls refine the depth policy's catch-up cost table by the rows they ran, kept rows
// as host rows (kept ones used to count as none: the table stayed as calibrated).
TEST(EngineKeptHidden, HeadCatchUpsRefineTheirCostTable) {
  const Model m(test::fixture("qwen4exp_mtp"));
  const std::vector<int32_t> prompt{5, 6, 7, 8}, reply{9};  // the state stands before the reply's last token
  for (const bool keeps : {false, true}) {
    std::shared_ptr<const ModelBackend> backend;
    if (keeps)
      backend = std::make_shared<KeptRowsBackend>(m);
    else
      backend = std::make_shared<CpuBackend>(m);
    HeadCosts costs;
    constexpr double kCalibrated = 1e9;  // ms: any real call is faster
    costs.catch_up.calibrate(
        8, [](int64_t) { return kCalibrated; }, 1);
    MtpDrafter drafter(*backend, NgramOptions{}, &costs);
    StreamState state = backend->new_state();
    std::vector<float> hidden(prompt.size() * static_cast<size_t>(backend->mtp_hidden_width()));
    ForwardSegment seg{&state, prompt, true};
    if (keeps)
      seg.keep_hidden = true;
    else
      seg.hidden = hidden.data();
    backend->forward({&seg, 1});
    add_head_rows(*backend, state, hidden, static_cast<int64_t>(prompt.size()));
    DraftAsk ask{prompt, reply, &state, 2, 2, {}};
    drafter.propose({&ask, 1});
    EXPECT_EQ(state.mtp_position, 4) << "keeps " << keeps << ": the head caught up";
    EXPECT_LT(costs.catch_up.table()[prompt.size() - 1], kCalibrated) << "keeps " << keeps;
  }
}

// The CPU model takes hidden rows as floats only: asking it to keep them is an error naming the field.
TEST(EngineKeptHidden, TheCpuModelRefusesKeptRows) {
  const Model m(test::fixture("qwen4exp_mtp"));
  StreamState s = m.new_state();
  const std::vector<int32_t> tokens{5, 6};
  ForwardSegment seg{&s, tokens};
  seg.keep_hidden = true;
  EXPECT_THROW(m.forward({&seg, 1}), Error);
  MtpSegment head{&s, {}, tokens, 0};
  head.input = MtpInput::KeptRows;
  EXPECT_THROW(m.mtp_forward({&head, 1}), Error);
}

}  // namespace
}  // namespace ds
