#pragma once
// How many drafts each stream verifies this round: the depths that give the most expected tokens per
// millisecond, from measured round costs and each stream's landing rates. Never affects a reply, only speed.
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace ds {

// A stream's landing record per draft index: how often draft i landed when drafts 1..i-1 had landed.
class LandingRates {
 public:
  // A window offered `offered` drafts of which the first `landed` equalled the drawn tokens.
  void record(int offered, int landed);
  // Expected tokens from a window with `depth` drafts: 1 (the verify row's own draw) + sum over i of the
  // chance that drafts 1..i all land.
  double expected_tokens(int depth) const;
  // Windows that tried draft `index` (0 = the first draft).
  int64_t tries(int index) const {
    return index < static_cast<int>(tries_.size()) ? tries_[static_cast<size_t>(index)] : 0;
  }

 private:
  std::vector<int64_t> tries_, lands_;  // per draft index (0 = the first draft)
};

// Milliseconds of one forward round by its decode rows: calibrated at first use, refined by observed rounds.
class RoundCosts {
 public:
  bool calibrated() const { return !ms_.empty(); }
  // Times widths 1..max_rows with `time_ms(rows)`, `passes` times over all widths in turn, keeping each
  // width's fastest: a burst of load then spoils one pass of every width, not every pass of one.
  void calibrate(int64_t max_rows, const std::function<double(int64_t)>& time_ms, int passes = 1);
  // A round of `rows` decode rows (and nothing else) took `ms`.
  void observe(int64_t rows, double ms);
  // The estimate for `rows` (extrapolated linearly past the measured widths).
  double cost(int64_t rows) const;
  const std::vector<double>& table() const { return ms_; }  // ms by width, for receipts

 private:
  std::vector<double> ms_;  // ms_[r - 1]: rounds of r rows
};

// Milliseconds of the MTP head's own calls in a round: one call catching up the streams' pending rows (the
// last row's logits give draft 1), then one call per further draft depth over the streams chaining that deep.
struct HeadCosts {
  RoundCosts catch_up;  // by head rows in the call
  RoundCosts chain;     // by chaining streams (one row each, with logits)
  bool calibrated() const { return catch_up.calibrated() && chain.calibrated(); }
  // The head's cost when streams draft `depths` deep and catch up `rows` (0 rows: that stream's drafts
  // cost no head call, e.g. copies).
  double cost(std::span<const int> depths, std::span<const int64_t> rows) const;
};

// Drafting's realized speed against plain decoding's, over whole rounds (head calls, windows, draws, the
// host's work): the cost tables price each part, this checks the sum. After every few drafting rounds their
// milliseconds per token are compared with what plain rounds of the same streams take; drafting that came out
// slower rests (plain rounds only) for a while, twice as long after each failed try, so a mispriced policy
// costs a few rounds in many. Plain rounds' figure per stream count falls to any faster round at once and
// rises slowly, so the one-off cost of a first round of a shape does not make plain look dear.
// (EngineOptions::draft_guard; first written on branch drafts, 4d7cb29, and dropped there while plain rounds
// cost more with the head following: its hidden rows' round trip through the host.)
class DraftGuard {
 public:
  static constexpr int64_t kProbeRounds = 8;  // drafting rounds per comparison
  static constexpr int64_t kFirstRest = 16;   // plain rounds after a failed comparison, doubled each time
  static constexpr int64_t kMaxRest = 1024;
  // Whether this round must be plain (no head calls, no windows).
  bool resting() const { return rest_ > 0; }
  // A decode round (no prompt rows) of `streams` streams that made `tokens` tokens in `ms`, drafting or not.
  // `plain_estimate_ms`: a plain round's cost for these streams when none was measured yet.
  void observe(bool drafting, int64_t streams, int64_t tokens, double ms, double plain_estimate_ms);
  // A round of the rest in which the head caught up (a plain round plus a head call): it runs the rest down
  // as a plain round does, but its time is not a plain round's.
  void observe_catch_up() {
    if (rest_ > 0) --rest_;
  }
  // The plain-round figure drafting rounds of `streams` streams are judged against (ms; 0: none measured).
  double plain_ms(int64_t streams) const {
    return streams >= 0 && streams < static_cast<int64_t>(plain_ms_.size())
               ? plain_ms_[static_cast<size_t>(streams)]
               : 0.0;
  }
  int64_t rests() const { return rests_; }  // comparisons that drafting lost

 private:
  std::vector<double> plain_ms_;  // [streams]: ms per plain round, 0 = not measured
  double probe_ms_ = 0, probe_plain_ms_ = 0;
  int64_t probe_rounds_ = 0, rest_ = 0, next_rest_ = kFirstRest, rests_ = 0;
};

// One stream's candidate: its rates and the drafts on offer (depth at most offered).
struct DepthChoice {
  const LandingRates* rates = nullptr;
  int offered = 0;
  int64_t head_rows = 0;  // rows the MTP head runs before drafting for this stream; 0: no head call
  int depth = 0;          // out
};

// Sets every choice's depth to maximise (sum of expected tokens) / (cost(total rows) + the head's cost);
// depth 0 everywhere when drafting does not pay. `base_rows`: rows in the round besides the windows' first
// rows. `head`: the head's call costs (null: drafts cost nothing to make, as copies or drafts already made).
// `rewind_reruns`: a window whose drafts do not all land costs one more pass over the kept rows (the
// backend's rollback re-runs them: ModelBackend::rewind_reruns), counted at the chance that any window
// misses. `reruns_as_rows`: the kept rows ride in the next round (ModelBackend::reruns_join_next_window), so
// they cost the rows they add to a round, not a pass.
void choose_depths(const RoundCosts& costs, std::span<DepthChoice> choices, int64_t base_rows = 0,
                   const HeadCosts* head = nullptr, bool rewind_reruns = false, bool reruns_as_rows = false);

}  // namespace ds
