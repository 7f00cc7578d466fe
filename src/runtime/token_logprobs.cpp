#include "runtime/token_logprobs.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/block_simd.h"
#include "runtime/logit_row.h"
#include "runtime/sampling_filters.h"
#include "runtime/softmax_mass.h"

namespace ds {

LogprobReport raw_logprobs(std::span<const float> logits, std::span<const uint64_t> mask, int32_t chosen,
                           int top_n) {
  if (top_n < 0 || top_n > 20) fail("top_logprobs must be in [0, 20], got {}", top_n);
  if (logits.size() > static_cast<size_t>(kMaxSampledVocab))
    fail("vocabulary of {} exceeds the sampler's limit of {}", logits.size(), kMaxSampledVocab);
  if (chosen < 0 || static_cast<size_t>(chosen) >= logits.size())
    fail("chosen token id {} is outside the vocabulary of {}", chosen, logits.size());
  const LogitRow row(logits, mask, nullptr, Penalties{});
  std::vector<float> block_max;
  const RowMax top = scan_max(row, block_max);
  const ScaledRow sc{1.0, static_cast<double>(top.z), -std::numeric_limits<double>::infinity()};

  // The same fixed-point masses as top-p: an order-free sum, exact to 2^-44 of the top token's weight.
  uint64_t total = 0;
  LogitRow::Reader reader(row);
  alignas(64) float z[LogitRow::kBlock];
  alignas(64) uint64_t mass[LogitRow::kBlock];
  for (int64_t b = 0; b < row.blocks(); ++b) {
    if (sc.offset(block_max[static_cast<size_t>(b)]) < kMassFloor) continue;
    reader.load(b, z);
    total += simd::mass_block(z, sc.inv_t, sc.max_s, sc.log_min_p, mass);
  }
  const double log_total = std::log(static_cast<double>(total)) - kMassBits * std::log(2.0);
  auto logprob = [&](float v) { return static_cast<float>(sc.offset(v) - log_total); };

  LogprobReport report{logprob(row.at(chosen)), {}};
  if (top_n > 0) {
    std::vector<Candidate> best;
    select_top_k(row, block_max, sc, top_n, best);
    std::sort(best.begin(), best.end(), ahead);
    for (const Candidate& c : best) report.top.push_back({c.id, logprob(c.z)});
  }
  return report;
}

}  // namespace ds
