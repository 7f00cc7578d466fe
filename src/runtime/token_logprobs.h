#pragma once
// Logprobs as the OpenAI API reports them. We follow vLLM's default (logprobs_mode "raw_logprobs"):
// log_softmax of the model's logits, after the structured-output mask (vLLM applies the grammar bitmask
// before its sampler) but before penalties, temperature and the top-k / top-p / min-p filters.
#include <cstdint>
#include <span>
#include <vector>

namespace ds {

struct TokenLogprob {
  int32_t id;
  float logprob;
};

struct LogprobReport {
  float chosen;                   // the drawn token's logprob (-inf if the mask excludes it)
  std::vector<TokenLogprob> top;  // the top_n most likely allowed tokens, best first, ties to the lower id
};

// top_n in [0, 20] (the API's top_logprobs); throws naming the field otherwise.
LogprobReport raw_logprobs(std::span<const float> logits, std::span<const uint64_t> mask, int32_t chosen,
                           int top_n);

}  // namespace ds
