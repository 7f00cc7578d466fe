#pragma once
// One logits row as the sampler sees it: the structured-output mask and the penalties applied, non-finite
// values read as -inf, delivered in blocks of 64 tokens so no full copy of the row is ever made.
#include <cstdint>
#include <span>
#include <vector>

#include "core/host_device.h"
#include "runtime/token_counts.h"

namespace ds {

struct Penalties {
  float presence = 0, frequency = 0, repetition = 1;
  bool active() const { return presence != 0 || frequency != 0 || repetition != 1; }
};

// vLLM's order and float arithmetic: repetition (prompt or generated), then frequency, then presence
// (generated).
DS_HOST_DEVICE inline float penalize(float logit, const TokenCounts::Entry& e, const Penalties& p) {
  float z = logit;
  if (p.repetition != 1) z = z > 0 ? z / p.repetition : z * p.repetition;
  if (e.generated > 0) {
    z = z - p.frequency * static_cast<float>(e.generated);
    z = z - p.presence;
  }
  return z;
}

// Mask words: bit (id % 64) of word id / 64 set = allowed; an empty span allows every token.
inline bool mask_allows(std::span<const uint64_t> mask, int32_t id) {
  return mask.empty() || ((mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1);
}

class LogitRow {
 public:
  static constexpr int kBlock = 64;

  // Throws when the mask is too short or the history names an id outside the vocabulary.
  LogitRow(std::span<const float> logits, std::span<const uint64_t> mask, const TokenCounts* history,
           Penalties penalties);

  int32_t vocab() const { return vocab_; }
  int64_t blocks() const { return (vocab_ + kBlock - 1) / kBlock; }
  // The prepared value of one token (-inf when masked or not finite).
  float at(int32_t id) const;

  // Reads blocks in increasing order (skipping is fine); it walks the history entries alongside.
  class Reader {
   public:
    explicit Reader(const LogitRow& row) : row_(row) {}
    // Fills out[0..64) for ids [64 * block, 64 * block + 64), -inf past the vocabulary; returns the count.
    int load(int64_t block, float* out);

   private:
    const LogitRow& row_;
    size_t next_ = 0;  // first history entry not yet behind the cursor
  };

 private:
  std::span<const float> logits_;
  std::span<const uint64_t> mask_;
  std::span<const TokenCounts::Entry> entries_;  // empty when penalties are off
  Penalties penalties_;
  int32_t vocab_;
};

struct RowMax {
  float z;     // largest prepared logit
  int32_t id;  // its lowest id
};

// Fills block_max with each block's largest prepared logit and returns the row's argmax (ties to the lower
// id); throws when no token is allowed and finite.
RowMax scan_max(const LogitRow& row, std::vector<float>& block_max);

}  // namespace ds
