#include "runtime/ngram_drafter.h"

#include <algorithm>

namespace ds {

void NgramDrafter::propose(std::span<DraftAsk> asks) {
  for (DraftAsk& a : asks) a.drafts = propose_one(a.prompt, a.reply, a.max);
}

std::vector<int32_t> NgramDrafter::propose_one(std::span<const int32_t> prompt,
                                               std::span<const int32_t> reply, int max) const {
  const int64_t np = static_cast<int64_t>(prompt.size()), n = np + static_cast<int64_t>(reply.size());
  // The context as one sequence, prompt then reply, without copying either.
  auto at = [&](int64_t i) { return i < np ? prompt[i] : reply[i - np]; };
  std::vector<int32_t> out;
  if (max <= 0 || n < options_.min_match + 1) return out;
  const int64_t first = std::max<int64_t>(0, n - options_.lookback);
  // Scan candidate ends e (the copy starts at e) from the most recent back; keep the longest match, the most
  // recent among equals.
  int64_t best_len = 0, best_end = -1;
  for (int64_t e = n - 1; e > first; --e) {
    int64_t len = 0;
    while (len < options_.max_match && e - 1 - len >= first && at(e - 1 - len) == at(n - 1 - len)) ++len;
    if (len > best_len) {
      best_len = len;
      best_end = e;
      if (len == options_.max_match) break;
    }
  }
  if (best_len < options_.min_match) return out;
  // Past the context's end the copy reads its own proposals, so a loop of period p is proposed in full.
  for (int64_t k = 0; static_cast<int>(out.size()) < max; ++k) {
    const int64_t i = best_end + k;
    out.push_back(i < n ? at(i) : out[i - n]);
  }
  return out;
}

}  // namespace ds
