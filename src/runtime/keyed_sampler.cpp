#include "runtime/keyed_sampler.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "runtime/keyed_noise.h"
#include "runtime/softmax_mass.h"

namespace ds {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kBlock = LogitRow::kBlock;

struct Best {
  double score = -std::numeric_limits<double>::infinity();
  int32_t id = -1;
  void offer(double s, int32_t i) {
    if (s > score || (s == score && i < id)) score = s, id = i;
  }
};

// Exact Gumbel score s + g of one token, skipping the logs when its bucket bound cannot reach `best`.
inline void offer_token(Best& best, double s, uint64_t bits, int32_t id, const double* bounds) {
  if (s + bounds[bits >> 52] < best.score) return;
  best.offer(s + gumbel_of_bits(bits), id);
}

// Gumbel-max over every min-p survivor of the row, in one pass over blocks. Most tokens are ruled out by a
// vectorisable test on their logit and the top bits of their noise; only a few pay for the two logs.
int32_t gumbel_dense(const LogitRow& row, std::span<const float> block_max, const ScaledRow& sc, uint64_t key,
                     RowMax top) {
  const double* bounds = gumbel_bucket_bounds();
  const double noise_max = gumbel_max(), noise_below_top = gumbel_max_below_top_bucket();
  Best best;
  offer_token(best, sc.scaled(top.z), token_bits(key, top.id), top.id, bounds);
  LogitRow::Reader reader(row);
  alignas(64) float z[kBlock];
  alignas(64) uint64_t bits[kBlock];
  alignas(64) uint8_t maybe[kBlock];
  for (int64_t b = 0; b < row.blocks(); ++b) {
    if (sc.scaled(block_max[static_cast<size_t>(b)]) + noise_max < best.score) continue;
    reader.load(b, z);
    const uint64_t first = key + (static_cast<uint64_t>(b * kBlock) + 1) * kGolden;
    for (int j = 0; j < kBlock; ++j) bits[j] = mix64(first + static_cast<uint64_t>(j) * kGolden);
    const double floor = best.score;  // only grows, so an older floor is a safe (weaker) test
    for (int j = 0; j < kBlock; ++j) {
      const double s = sc.scaled(z[j]);
      const bool top_bucket = (bits[j] >> 52) == kNoiseBuckets - 1;
      maybe[j] = (s + noise_max >= floor) & (top_bucket | (s + noise_below_top >= floor)) &
                 (s - sc.max_s >= sc.log_min_p);
    }
    for (int j = 0; j < kBlock; ++j)
      if (maybe[j]) offer_token(best, sc.scaled(z[j]), bits[j], static_cast<int32_t>(b * kBlock + j), bounds);
  }
  return best.id;
}

// Gumbel-max over an explicit candidate list (after top-k / top-p); the argmax is always in it.
int32_t gumbel_list(std::span<const Candidate> kept, const ScaledRow& sc, uint64_t key, RowMax top) {
  const double* bounds = gumbel_bucket_bounds();
  const double noise_max = gumbel_max();
  Best best;
  offer_token(best, sc.scaled(top.z), token_bits(key, top.id), top.id, bounds);
  for (const Candidate& c : kept) {
    const double s = sc.scaled(c.z);
    if (s + noise_max < best.score) continue;
    offer_token(best, s, token_bits(key, c.id), c.id, bounds);
  }
  return best.id;
}

}  // namespace

int32_t KeyedSampler::sample(std::span<const float> logits, const SamplingParams& params, int64_t position,
                             const TokenCounts& history, std::span<const uint64_t> mask) {
  params.validate();
  if (logits.size() > static_cast<size_t>(kMaxSampledVocab))
    fail("vocabulary of {} exceeds the sampler's limit of {}", logits.size(), kMaxSampledVocab);
  const Penalties penalties{params.presence_penalty, params.frequency_penalty, params.repetition_penalty};
  const LogitRow row(logits, mask, &history, penalties);
  const RowMax top = scan_max(row, block_max_);
  if (params.greedy()) return top.id;

  ScaledRow sc;
  sc.inv_t = 1.0 / static_cast<double>(params.temperature);
  sc.max_s = sc.scaled(top.z);
  sc.log_min_p = params.min_p_active() ? std::log(static_cast<double>(params.min_p))
                                       : -std::numeric_limits<double>::infinity();
  const uint64_t key = draw_key(params.seed, position);
  if (params.top_k_active()) {
    select_top_k(row, block_max_, sc, params.top_k, kept_);
    if (params.top_p_active()) cut_top_p(kept_, sc, params.top_p);
    return gumbel_list(kept_, sc, key, top);
  }
  if (params.top_p_active()) {
    select_top_p(row, block_max_, sc, params.top_p, kept_, boundary_);
    return gumbel_list(kept_, sc, key, top);
  }
  return gumbel_dense(row, block_max_, sc, key, top);
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, int64_t position,
                     const TokenCounts& history, std::span<const uint64_t> mask) {
  KeyedSampler sampler;
  return sampler.sample(logits, params, position, history, mask);
}

}  // namespace ds
