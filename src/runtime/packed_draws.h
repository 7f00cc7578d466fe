#pragma once
// Draw requests packed for a device sampler (src/backend/cuda/sampling/): plain data, one entry per logits
// row to draw, with the penalty histories and structured-output masks in shared arrays. Built by pack_draws
// (runtime/row_draws.h) from the same inputs KeyedSampler::sample takes.
#include <cstdint>
#include <vector>

#include "runtime/token_counts.h"

namespace ds {

enum class DrawMode : int32_t {
  Greedy = 0,    // argmax, ties to the lower id
  Dense = 1,     // Gumbel-max over every allowed finite token (temperature alone)
  Filtered = 2,  // min-p, then top-k, then top-p, then Gumbel-max over the kept set
};

// A device draw's result when every allowed logit is -inf or not finite (where KeyedSampler fails).
inline constexpr int32_t kNothingDrawable = -1;

struct PackedRow {
  int64_t row = 0;       // the logits row (of the backend's call) to draw from
  uint64_t key = 0;      // draw_key(seed, position)
  double inv_t = 0;      // 1 / T in double, as KeyedSampler computes it (0 for greedy)
  double log_min_p = 0;  // portable_log(min_p), or -inf when min-p is off
  DrawMode mode = DrawMode::Greedy;
  int32_t top_k = 0;  // 0: off
  float top_p = 1;    // 1: off
  float presence = 0, frequency = 0, repetition = 1;
  int32_t entries_begin = 0, entries_count = 0;  // history entries in PackedDraws::entries (0: no penalties)
  int64_t mask_begin = -1;                       // first word in PackedDraws::mask_words, -1: every token
};

struct PackedDraws {
  std::vector<PackedRow> rows;
  std::vector<TokenCounts::Entry> entries;  // each row's history, ascending ids, drafts counted as generated
  std::vector<uint64_t> mask_words;
};

}  // namespace ds
