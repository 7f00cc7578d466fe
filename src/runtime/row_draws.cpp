#include "runtime/row_draws.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/portable_log.h"
#include "runtime/keyed_noise.h"
#include "runtime/keyed_sampler.h"
#include "runtime/softmax_mass.h"

namespace ds {
namespace {

// The row's history with the window's earlier drafts counted as generated.
TokenCounts history_with_drafts(const RowDraw& r) {
  TokenCounts h = r.history != nullptr ? *r.history : TokenCounts{};
  for (int32_t t : r.drafted) h.add_generated(t);
  return h;
}

// Whether the device can draw the row as KeyedSampler::sample would, without an error to report.
bool device_can_draw(const RowDraw& r, int64_t vocab) {
  if (r.params == nullptr) return false;
  try {
    r.params->validate();
  } catch (const Error&) {
    return false;
  }
  if (!r.mask.empty() && r.mask.size() < static_cast<size_t>((vocab + 63) / 64)) return false;
  if (r.params->penalties_active()) {
    int32_t max_id = r.history != nullptr ? r.history->max_id() : -1;
    for (int32_t t : r.drafted) max_id = std::max(max_id, t);
    if (max_id >= vocab) return false;
  }
  for (int32_t t : r.drafted)
    if (t < 0) return false;
  return true;
}

}  // namespace

PackedDraws pack_draws(std::span<RowDraw> rows, int64_t vocab) {
  PackedDraws out;
  const bool vocab_ok = vocab > 0 && vocab <= kMaxSampledVocab;
  for (size_t i = 0; i < rows.size(); ++i) {
    RowDraw& r = rows[i];
    if (r.use != RowUse::Draw) continue;
    if (!vocab_ok || !device_can_draw(r, vocab)) {
      r.use = RowUse::Host;
      continue;
    }
    const SamplingParams& p = *r.params;
    PackedRow pr;
    pr.row = static_cast<int64_t>(i);
    pr.key = draw_key(p.seed, r.position);
    const bool filtered = p.top_k_active() || p.top_p_active() || p.min_p_active();
    pr.mode = p.greedy() ? DrawMode::Greedy : filtered ? DrawMode::Filtered : DrawMode::Dense;
    pr.inv_t = p.greedy() ? 0.0 : 1.0 / static_cast<double>(p.temperature);
    pr.log_min_p = p.min_p_active() ? portable_log(static_cast<double>(p.min_p))
                                    : -std::numeric_limits<double>::infinity();
    pr.top_k = p.top_k_active() ? p.top_k : 0;
    pr.top_p = p.top_p;
    if (p.penalties_active()) {
      pr.presence = p.presence_penalty, pr.frequency = p.frequency_penalty,
      pr.repetition = p.repetition_penalty;
      const TokenCounts merged = history_with_drafts(r);
      pr.entries_begin = static_cast<int32_t>(out.entries.size());
      pr.entries_count = static_cast<int32_t>(merged.entries().size());
      out.entries.insert(out.entries.end(), merged.entries().begin(), merged.entries().end());
    }
    if (!r.mask.empty()) {
      pr.mask_begin = static_cast<int64_t>(out.mask_words.size());
      out.mask_words.insert(out.mask_words.end(), r.mask.begin(), r.mask.begin() + (vocab + 63) / 64);
    }
    out.rows.push_back(pr);
  }
  return out;
}

DrawnRows draw_rows_on_host(std::span<const float> logits, int64_t vocab, std::span<const RowDraw> rows) {
  if (logits.size() != rows.size() * static_cast<size_t>(vocab))
    fail("forward_rows: {} logits floats for {} rows of {}", logits.size(), rows.size(), vocab);
  DrawnRows out;
  out.tokens.assign(rows.size(), kRowSkipped);
  KeyedSampler sampler;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowDraw& r = rows[i];
    const std::span<const float> row =
        logits.subspan(i * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
    if (r.use == RowUse::Skip) continue;
    if (r.use == RowUse::Draw && r.params != nullptr) {
      try {
        out.tokens[i] = sampler.sample(row, *r.params, r.position, history_with_drafts(r), r.mask);
        continue;
      } catch (const Error&) {
        // The engine's own draw of the row reports the error.
      }
    }
    out.tokens[i] = kRowOnHost;
    out.logits.insert(out.logits.end(), row.begin(), row.end());
  }
  return out;
}

}  // namespace ds
