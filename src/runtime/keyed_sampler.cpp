#include "runtime/keyed_sampler.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "runtime/block_simd.h"
#include "runtime/keyed_noise.h"
#include "runtime/softmax_mass.h"

namespace ds {
namespace {

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

// A float t with z >= t whenever double(z) * inv_t >= s_min: a conservative one-compare test on raw logits.
float logit_floor(double s_min, double inv_t) {
  if (s_min == -std::numeric_limits<double>::infinity()) return -std::numeric_limits<float>::infinity();
  const double z_min = (s_min - 1e-9 * std::fabs(s_min)) / inv_t;  // margin far above double rounding
  float t = static_cast<float>(z_min);
  if (static_cast<double>(t) > z_min) t = std::nextafter(t, -std::numeric_limits<float>::infinity());
  return t;
}

bool any_at_least(const float* z, float t) {
  simd::v8i hit = {};
  for (int j = 0; j < kBlock; j += 8) {
    simd::v8f v;
    simd::load(v, z + j);
    hit |= v >= t;
  }
  return (hit[0] | hit[1] | hit[2] | hit[3] | hit[4] | hit[5] | hit[6] | hit[7]) != 0;
}

// Gumbel-max over the kept tokens of the row in one pass over blocks: the min-p survivors, and when `last` is
// given only those ranked at or ahead of it. Float tests on a block's logits against the best score so far,
// then on the top bits of its noise, rule out most blocks; only a few tokens pay for the two logs. Needs no
// block maxima, so a plain draw reads the row once.
int32_t gumbel_dense(const LogitRow& row, const ScaledRow& sc, uint64_t key, const Candidate* last) {
  const double* bounds = gumbel_bucket_bounds();
  const double noise_max = gumbel_max(), noise_below_top = gumbel_max_below_top_bucket();
  // Tokens must reach min-p and `last` whatever their noise.
  const float kept_floor =
      std::max(logit_floor(sc.max_s + sc.log_min_p - 1e-9 * std::fabs(sc.max_s), sc.inv_t),
               last ? last->z : -std::numeric_limits<float>::infinity());
  Best best;
  LogitRow::Reader reader(row);
  alignas(64) float z[kBlock];
  alignas(64) uint64_t bits[kBlock];
  for (int64_t b = 0; b < row.blocks(); ++b) {
    reader.load(b, z);
    const double slack = 1e-9 * (std::fabs(best.score) + noise_max);  // covers the roundings of s + g
    const float any_noise = std::max(kept_floor, logit_floor(best.score - noise_max - slack, sc.inv_t));
    if (!any_at_least(z, any_noise)) continue;  // even the largest possible noise cannot reach the best
    const uint64_t first = key + (static_cast<uint64_t>(b * kBlock) + 1) * kGolden;
    for (int j = 0; j < kBlock; ++j) bits[j] = mix64(first + static_cast<uint64_t>(j) * kGolden);
    const float usual_noise =
        std::max(kept_floor, logit_floor(best.score - noise_below_top - slack, sc.inv_t));
    if (!any_at_least(z, usual_noise)) {
      // Only a token whose noise is in the top bucket can still win.
      simd::v4i top = {0, 0, 0, 0};
      for (int j = 0; j < kBlock; j += 4) {
        simd::v4u noise;
        simd::load(noise, bits + j);
        top |= (noise >> 52) == static_cast<uint64_t>(kNoiseBuckets - 1);
      }
      if (!simd::any(top)) continue;
    }
    for (int j = 0; j < kBlock; ++j) {
      const int32_t id = static_cast<int32_t>(b * kBlock + j);
      const double s = sc.scaled(z[j]);
      if (z[j] == -std::numeric_limits<float>::infinity() || !(s - sc.max_s >= sc.log_min_p)) continue;
      if (last && !at_or_ahead(z[j], id, *last)) continue;
      if (s + noise_max < best.score) continue;
      offer_token(best, s, bits[j], id, bounds);
    }
  }
  if (best.id < 0) fail("no token can be drawn: every allowed logit is -inf or not finite");
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
  const bool filtered = params.top_k_active() || params.top_p_active() || params.min_p_active();
  ScaledRow sc{1.0 / static_cast<double>(params.temperature), 0.0, -std::numeric_limits<double>::infinity()};
  const uint64_t key = draw_key(params.seed, position);
  // Temperature alone needs no max: the draw is one pass (max_s only shifts offsets that nothing reads).
  if (!params.greedy() && !filtered) return gumbel_dense(row, sc, key, nullptr);

  const RowMax top = scan_max(row, block_max_);
  if (params.greedy()) return top.id;
  sc.max_s = sc.scaled(top.z);
  if (params.min_p_active()) sc.log_min_p = portable_log(static_cast<double>(params.min_p));
  if (params.top_k_active()) {
    select_top_k(row, block_max_, sc, params.top_k, kept_);
    if (params.top_p_active()) cut_top_p(kept_, sc, params.top_p);
    return gumbel_list(kept_, sc, key, top);
  }
  if (params.top_p_active()) {
    const KeptSet set = select_top_p(row, block_max_, sc, params.top_p, kept_, boundary_);
    return set.listed ? gumbel_list(kept_, sc, key, top) : gumbel_dense(row, sc, key, &set.last);
  }
  return gumbel_dense(row, sc, key, nullptr);
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params, int64_t position,
                     const TokenCounts& history, std::span<const uint64_t> mask) {
  KeyedSampler sampler;
  return sampler.sample(logits, params, position, history, mask);
}

}  // namespace ds
