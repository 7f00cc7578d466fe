#pragma once
// Keyed sampling: the token at absolute position p is argmax over the allowed, filtered tokens of
// z / T + gumbel(hash(seed, p, id)), so it depends only on (logits row, params, position, history, mask) and
// a verify row of a drafted window draws the same token as a plain decode row. Greedy is argmax, ties to the
// lower id.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling_filters.h"
#include "runtime/sampling_params.h"
#include "runtime/token_counts.h"

namespace ds {

class KeyedSampler {
 public:
  // Draws the token at absolute `position` (the position the drawn token will occupy). `history` holds the
  // prompt and generated tokens before it (penalties); `mask` is the structured-output bitset (empty = all
  // allowed). Throws ds::Error on invalid params, a short mask, or when no token is allowed.
  int32_t sample(std::span<const float> logits, const SamplingParams& params, int64_t position,
                 const TokenCounts& history, std::span<const uint64_t> mask = {});

 private:
  // Scratch reused across draws; never read before written, so results do not depend on earlier calls.
  std::vector<float> block_max_;
  std::vector<Candidate> kept_, boundary_;
};

// One-shot form of KeyedSampler::sample (allocates its scratch).
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, int64_t position,
                     const TokenCounts& history, std::span<const uint64_t> mask = {});

}  // namespace ds
