#pragma once
// A plain full-sort reference of keyed sampling, written from docs/sampler.md and checkable by eye. It shares
// only the documented primitives (noise hash, exp, fixed-point mass, exact ceil) with the fast sampler.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "runtime/keyed_noise.h"
#include "runtime/sampling_params.h"
#include "runtime/softmax_mass.h"

namespace ds::reference {

inline constexpr float kInf = std::numeric_limits<float>::infinity();

struct History {
  std::vector<int32_t> prompt, generated;
};

// Logits after mask and penalties (vLLM formulas), non-finite values read as -inf.
inline std::vector<float> prepared_logits(const std::vector<float>& logits, const SamplingParams& p,
                                          const History& h, const std::vector<uint64_t>& mask) {
  std::vector<float> z(logits);
  for (size_t i = 0; i < z.size(); ++i)
    if (!mask.empty() && !((mask[i / 64] >> (i % 64)) & 1)) z[i] = -kInf;
  std::map<int32_t, uint32_t> seen, generated;
  for (int32_t t : h.prompt) ++seen[t];
  for (int32_t t : h.generated) ++seen[t], ++generated[t];
  if (p.penalties_active()) {
    for (auto [id, count] : seen) {
      float& v = z[static_cast<size_t>(id)];
      if (v == -kInf) continue;
      if (p.repetition_penalty != 1) v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
      auto g = generated.find(id);
      if (g != generated.end()) {
        v = v - p.frequency_penalty * static_cast<float>(g->second);
        v = v - p.presence_penalty;
      }
    }
  }
  for (float& v : z)
    if (!(v < kInf)) v = -kInf;
  return z;
}

inline bool ranks_ahead(const std::vector<float>& z, int32_t a, int32_t b) {
  return z[a] > z[b] || (z[a] == z[b] && a < b);
}

// The kept set after min-p, top-k and top-p, in ranking order (a full sort of all candidates).
inline std::vector<int32_t> kept_tokens(const std::vector<float>& z, const SamplingParams& p) {
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  double max_s = -std::numeric_limits<double>::infinity();
  for (float v : z)
    if (v != -kInf) max_s = std::max(max_s, static_cast<double>(v) * inv_t);
  const double log_min_p = p.min_p > 0 ? std::log(static_cast<double>(p.min_p)) : -INFINITY;
  std::vector<int32_t> order;
  for (int32_t i = 0; i < static_cast<int32_t>(z.size()); ++i)
    if (z[i] != -kInf && static_cast<double>(z[i]) * inv_t - max_s >= log_min_p) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return ranks_ahead(z, a, b); });
  if (p.top_k > 0 && order.size() > static_cast<size_t>(p.top_k)) order.resize(static_cast<size_t>(p.top_k));
  if (p.top_p < 1) {
    std::vector<uint64_t> mass;
    uint64_t total = 0;
    for (int32_t i : order) {
      mass.push_back(mass_of(static_cast<double>(z[i]) * inv_t - max_s));
      total += mass.back();
    }
    const uint64_t need = ceil_fraction(p.top_p, total);
    uint64_t cum = 0;
    for (size_t n = 0; n < order.size(); ++n) {
      cum += mass[n];
      if (cum >= need) {
        order.resize(n + 1);
        break;
      }
    }
  }
  return order;
}

inline int32_t sample(const std::vector<float>& logits, const SamplingParams& p, int64_t position,
                      const History& h, const std::vector<uint64_t>& mask) {
  const std::vector<float> z = prepared_logits(logits, p, h, mask);
  if (p.greedy()) {
    int32_t best = -1;
    for (int32_t i = 0; i < static_cast<int32_t>(z.size()); ++i)
      if (z[i] != -kInf && (best < 0 || z[i] > z[best])) best = i;
    return best;
  }
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  const uint64_t key = draw_key(p.seed, position);
  int32_t best = -1;
  double best_score = 0;
  for (int32_t i : kept_tokens(z, p)) {
    const double score = static_cast<double>(z[i]) * inv_t + gumbel_of_bits(token_bits(key, i));
    if (best < 0 || score > best_score || (score == best_score && i < best)) best = i, best_score = score;
  }
  return best;
}

}  // namespace ds::reference
