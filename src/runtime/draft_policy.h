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
