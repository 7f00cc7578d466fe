#pragma once
// The per-request sampling settings (OpenAI / vLLM request fields) and their range checks.
#include <cstdint>

namespace ds {

struct SamplingParams {
  float temperature = 1;                              // 0 = greedy
  int32_t top_k = 0;                                  // 0 or -1 = off (vLLM accepts both)
  float top_p = 1;                                    // 1 = off
  float min_p = 0;                                    // 0 = off
  float presence_penalty = 0, frequency_penalty = 0;  // over generated tokens only
  float repetition_penalty = 1;                       // over prompt + generated tokens
  uint64_t seed = 0;  // keys the noise; see random_seed() for requests without one

  bool greedy() const { return temperature == 0; }
  bool top_k_active() const { return top_k > 0; }
  bool top_p_active() const { return top_p < 1; }
  bool min_p_active() const { return min_p > 0; }
  bool penalties_active() const {
    return presence_penalty != 0 || frequency_penalty != 0 || repetition_penalty != 1;
  }
  // Throws ds::Error naming the first field out of range, e.g. "top_p must be in (0, 1], got 1.5".
  void validate() const;
};

// A fresh seed for a request that gave none; below 2^53 so it survives a JSON round trip through any client.
uint64_t random_seed();

}  // namespace ds
