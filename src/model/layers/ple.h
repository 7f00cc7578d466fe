#pragma once
// PLE: the hashed n-gram embedding injected into every hyper-connection stream on listed DeltaNet layers.
#include <cstdint>
#include <vector>

#include "model/layers/batch.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

// Table rows (one per n-gram head) for every token of a segment, given the stream's last ngram_size-1 tokens.
std::vector<int64_t> ple_rows(const ModelConfig& cfg, const PleWeights& w,
                              const std::vector<int32_t>& context, const int32_t* tokens, int64_t count);
// H [n, S*D] += PLE(H, tokens) for every segment of the batch.
void ple_forward(const ModelConfig& cfg, const PleWeights& w, int layer, const Batch& batch, float* H);
// The context after consuming `tokens`: the last ngram_size-1 tokens.
void ple_advance_context(std::vector<int32_t>& context, const int32_t* tokens, int64_t count);

}  // namespace ds
