#pragma once
// Gated attention with partial RoPE and, for qwen4_exp, the QSA indexer that picks the blocks each query
// sees.
#include "model/layers/batch.h"
#include "model/layers/rope.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

void attention_forward(const ModelConfig& cfg, const AttentionWeights& w, const Rope& rope, int layer,
                       const float* x, const Batch& batch, float* out);

// The token positions a query at `position` attends to: the top blocks by indexer score plus the tail after
// the last complete block; every visible position when there are no more complete blocks than the budget.
// `q` holds the query's normed, rotated indexer heads; `blocks` the pooled block keys.
std::vector<int64_t> indexer_select(const ModelConfig& cfg, const float* q, const float* blocks,
                                    int64_t position);

}  // namespace ds
