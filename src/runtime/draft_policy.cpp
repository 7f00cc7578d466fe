#include "runtime/draft_policy.h"

#include <algorithm>

namespace ds {
namespace {

constexpr int64_t kRerunEvidence = 4;  // windows a stream drafts before the re-run pass is priced in

}  // namespace

void LandingRates::record(int offered, int landed) {
  if (static_cast<int>(tries_.size()) < offered) {
    tries_.resize(offered, 0);
    lands_.resize(offered, 0);
  }
  // Draft i was tried when every earlier draft landed.
  for (int i = 0; i < offered && i <= landed; ++i) {
    ++tries_[i];
    if (i < landed) ++lands_[i];
  }
}

double LandingRates::expected_tokens(int depth) const {
  double total = 1.0, chain = 1.0;
  for (int i = 0; i < depth; ++i) {
    const int64_t t = i < static_cast<int>(tries_.size()) ? tries_[i] : 0;
    const int64_t l = i < static_cast<int>(lands_.size()) ? lands_[i] : 0;
    // Laplace's rule: an untried depth counts as an even chance, so new streams try a draft or two.
    chain *= (static_cast<double>(l) + 1.0) / (static_cast<double>(t) + 2.0);
    total += chain;
  }
  return total;
}

void RoundCosts::calibrate(int64_t max_rows, const std::function<double(int64_t)>& time_ms, int passes) {
  // Built aside and kept only when every timing returned: a call that throws leaves the table uncalibrated.
  std::vector<double> ms(static_cast<size_t>(std::max<int64_t>(max_rows, 2)), 0.0);
  for (int pass = 0; pass < std::max(passes, 1); ++pass)
    for (int64_t r = 1; r <= static_cast<int64_t>(ms.size()); ++r) {
      const double t = time_ms(r);
      ms[r - 1] = pass == 0 ? t : std::min(ms[r - 1], t);
    }
  // Costs never fall with more rows; timing noise must not make a wider window look cheaper.
  for (size_t i = 1; i < ms.size(); ++i) ms[i] = std::max(ms[i], ms[i - 1]);
  ms_ = std::move(ms);
}

void RoundCosts::observe(int64_t rows, double ms) {
  if (rows < 1 || rows > static_cast<int64_t>(ms_.size())) return;
  double& c = ms_[rows - 1];
  c = 0.8 * c + 0.2 * ms;
}

double RoundCosts::cost(int64_t rows) const {
  const int64_t n = static_cast<int64_t>(ms_.size());
  if (n == 0) return static_cast<double>(rows);
  if (rows <= n) return ms_[std::max<int64_t>(rows, 1) - 1];
  const double slope = std::max(0.0, ms_[n - 1] - ms_[n - 2]);
  return ms_[n - 1] + slope * static_cast<double>(rows - n);
}

void DraftGuard::observe(bool drafting, int64_t streams, int64_t tokens, double ms,
                         double plain_estimate_ms) {
  if (streams < 1 || tokens < 1) return;
  if (static_cast<int64_t>(plain_ms_.size()) <= streams)
    plain_ms_.resize(static_cast<size_t>(streams) + 1, 0.0);
  double& plain = plain_ms_[static_cast<size_t>(streams)];
  if (!drafting) {
    plain = plain == 0.0 ? ms : std::min(ms, 0.9 * plain + 0.1 * ms);
    if (rest_ > 0) --rest_;
    return;
  }
  // A plain round makes one token a stream: what these tokens would have cost without drafts.
  const double per_token = (plain > 0.0 ? plain : plain_estimate_ms) / static_cast<double>(streams);
  probe_ms_ += ms;
  probe_plain_ms_ += per_token * static_cast<double>(tokens);
  if (++probe_rounds_ < kProbeRounds) return;
  if (probe_ms_ > probe_plain_ms_) {
    rest_ = next_rest_;
    next_rest_ = std::min(2 * next_rest_, kMaxRest);
    ++rests_;
  } else {
    next_rest_ = kFirstRest;
  }
  probe_ms_ = probe_plain_ms_ = 0;
  probe_rounds_ = 0;
}

double HeadCosts::cost(std::span<const int> depths, std::span<const int64_t> rows) const {
  if (!calibrated()) return 0.0;
  int64_t catch_rows = 0;
  int deepest = 0;
  for (size_t i = 0; i < depths.size(); ++i)
    if (depths[i] > 0 && rows[i] > 0) {
      catch_rows += rows[i];
      deepest = std::max(deepest, depths[i]);
    }
  double ms = catch_rows > 0 ? catch_up.cost(catch_rows) : 0.0;
  // Draft d (d >= 2) is one call over every stream drafting at least d deep.
  for (int d = 2; d <= deepest; ++d) {
    int64_t n = 0;
    for (size_t i = 0; i < depths.size(); ++i) n += depths[i] >= d && rows[i] > 0 ? 1 : 0;
    ms += chain.cost(n);
  }
  return ms;
}

void choose_depths(const RoundCosts& costs, std::span<DepthChoice> choices, int64_t base_rows,
                   const HeadCosts* head, bool rewind_reruns, bool reruns_as_rows) {
  int64_t rows = base_rows + static_cast<int64_t>(choices.size());
  double tokens = 0;
  std::vector<int> depths(choices.size(), 0);
  std::vector<int64_t> head_rows(choices.size(), 0);
  for (size_t i = 0; i < choices.size(); ++i) {
    choices[i].depth = 0;
    head_rows[i] = choices[i].head_rows;
    tokens += 1.0;
  }
  // The re-run after a missed draft: taken unless every drafting window lands whole (chance: the product of
  // each window's all-land chance), over about the rows those windows keep; a pass of its own, or (rows
  // joining the next round's windows) those rows more in a round of `r` rows.
  auto rerun_ms = [&](int64_t r) {
    double all_land = 1.0, kept = 0.0;
    for (size_t i = 0; i < choices.size(); ++i) {
      if (depths[i] == 0) continue;
      const LandingRates& r = *choices[i].rates;
      // A stream that has barely tried drafts is exploring: priced at the even-chance prior, the re-run
      // would keep every new stream from ever trying one (and so from ever learning that they land).
      if (r.tries(0) < kRerunEvidence) continue;
      all_land *= r.expected_tokens(depths[i]) - r.expected_tokens(depths[i] - 1);
      kept += r.expected_tokens(depths[i]);
    }
    if (kept == 0.0) return 0.0;
    const int64_t kept_rows = std::max<int64_t>(1, static_cast<int64_t>(kept + 0.5));
    const double ms = reruns_as_rows ? costs.cost(r + kept_rows) - costs.cost(r) : costs.cost(kept_rows);
    return (1.0 - all_land) * ms;
  };
  auto round_ms = [&](int64_t r) {
    return costs.cost(r) + (head ? head->cost(depths, head_rows) : 0.0) + (rewind_reruns ? rerun_ms(r) : 0.0);
  };
  // Greedy: deepen the one stream whose deepening gives the best rate, while the rate improves.
  for (;;) {
    const double now = tokens / round_ms(rows);
    double best = now;
    size_t best_i = 0;
    int best_depth = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
      const DepthChoice& c = choices[i];
      const double have = c.rates->expected_tokens(c.depth);
      for (int d = c.depth + 1; d <= c.offered; ++d) {
        depths[i] = d;
        const double rate = (tokens - have + c.rates->expected_tokens(d)) / round_ms(rows + d - c.depth);
        if (rate > best) {
          best = rate;
          best_i = i;
          best_depth = d;
        }
      }
      depths[i] = c.depth;
    }
    if (best <= now) return;
    DepthChoice& c = choices[best_i];
    tokens += c.rates->expected_tokens(best_depth) - c.rates->expected_tokens(c.depth);
    rows += best_depth - c.depth;
    c.depth = best_depth;
    depths[best_i] = best_depth;
  }
}

}  // namespace ds
