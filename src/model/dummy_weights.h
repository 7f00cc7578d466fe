#pragma once
// Random ("dummy") weights for a config.json, built in memory with the tensor names of a real checkpoint so
// that `bind_weights` binds them exactly as it binds files. For benches and tests, never for outputs.
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "formats/checkpoint.h"

namespace ds {

struct DummyWeightsPlan {
  uint64_t total_bytes = 0;  // every tensor
  uint64_t ple_bytes = 0;    // the PLE n-gram tables alone
  int64_t tensors = 0;
};

// What dummy_checkpoint(config) would allocate; throws naming the config field when it is unusable.
DummyWeightsPlan plan_dummy_weights(const nlohmann::json& config);

// A checkpoint of random weights for `config` (qwen4_exp, qwen3_next or qwen3_5_moe; MLX affine when the
// config has a `quantization` block with bits and group_size). Values depend only on (config, seed).
// Refuses, naming the sizes, when the weights would not fit in available memory; warns on stderr when the
// PLE tables alone exceed 1 GiB.
std::unique_ptr<Checkpoint> dummy_checkpoint(const nlohmann::json& config, uint64_t seed);

}  // namespace ds
