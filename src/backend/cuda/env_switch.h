#pragma once
// A 1|0 process switch from the environment (host code): the kernels' and the model's DS_CUDA_* switches.
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_error.h"

namespace ds::cuda {

// `name` unset or empty: `fallback`; "1": true; "0": false; anything else an ArgumentError naming the
// variable.
inline bool env_on_off(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  const std::string value = v != nullptr ? v : "";
  if (value.empty()) return fallback;
  if (value != "1" && value != "0")
    throw ArgumentError(std::string(name) + " must be 1 or 0 (got '" + value + "')");
  return value == "1";
}

}  // namespace ds::cuda
