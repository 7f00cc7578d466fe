#include "runtime/sampling_params.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace ds {

void SamplingParams::validate() const {
  // Written as negated comparisons so NaN fails every check.
  if (!(temperature >= 0 && std::isfinite(temperature)))
    fail("temperature must be a finite number >= 0, got {}", temperature);
  if (top_k < -1) fail("top_k must be -1 or 0 (off) or at least 1, got {}", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail("top_p must be in (0, 1], got {}", top_p);
  if (!(min_p >= 0 && min_p <= 1)) fail("min_p must be in [0, 1], got {}", min_p);
  if (!(presence_penalty >= -2 && presence_penalty <= 2))
    fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2))
    fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
  if (!(repetition_penalty > 0 && std::isfinite(repetition_penalty)))
    fail("repetition_penalty must be a finite number > 0, got {}", repetition_penalty);
}

uint64_t random_seed() {
  std::random_device device;
  const uint64_t high = device(), low = device();
  return ((high << 32) ^ low) & ((uint64_t{1} << 53) - 1);
}

}  // namespace ds
