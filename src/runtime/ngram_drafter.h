#pragma once
// N-gram copy drafts (prompt lookup decoding): find the longest earlier occurrence of the context's suffix
// and propose the tokens that followed it. Free to compute; lands on repetitive text (code, quoting, lists).
#include "runtime/draft_source.h"

namespace ds {

struct NgramOptions {
  int min_match = 2;        // suffix tokens that must match before a copy is proposed
  int max_match = 8;        // longer matches are not told apart
  int64_t lookback = 4096;  // only the most recent tokens (prompt + reply) are searched
};

class NgramDrafter final : public DraftSource {
 public:
  explicit NgramDrafter(NgramOptions options = {}) : options_(options) {}
  void propose(std::span<DraftAsk> asks) override;
  // The proposal for one context (prompt then reply), at most max tokens.
  std::vector<int32_t> propose_one(std::span<const int32_t> prompt, std::span<const int32_t> reply,
                                   int max) const;

 private:
  NgramOptions options_;
};

}  // namespace ds
