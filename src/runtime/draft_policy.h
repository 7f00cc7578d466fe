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

 private:
  std::vector<int64_t> tries_, lands_;  // per draft index (0 = the first draft)
};

// Milliseconds of one forward round by its decode rows: calibrated at first use, refined by observed rounds.
class RoundCosts {
 public:
  bool calibrated() const { return !ms_.empty(); }
  // Times widths 1..max_rows with `time_ms(rows)`.
  void calibrate(int64_t max_rows, const std::function<double(int64_t)>& time_ms);
  // A round of `rows` decode rows (and nothing else) took `ms`.
  void observe(int64_t rows, double ms);
  // The estimate for `rows` (extrapolated linearly past the measured widths).
  double cost(int64_t rows) const;

 private:
  std::vector<double> ms_;  // ms_[r - 1]: rounds of r rows
};

// One stream's candidate: its rates and the drafts on offer (depth at most offered).
struct DepthChoice {
  const LandingRates* rates = nullptr;
  int offered = 0;
  int depth = 0;  // out
};

// Sets every choice's depth to maximise (sum of expected tokens) / cost(total rows); depth 0 everywhere when
// drafting does not pay. `base_rows`: rows in the round besides the windows' first rows.
void choose_depths(const RoundCosts& costs, std::span<DepthChoice> choices, int64_t base_rows = 0);

}  // namespace ds
