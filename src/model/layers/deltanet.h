#pragma once
// Gated DeltaNet (linear attention) over a batch of rows: projections, causal conv, the delta rule per value
// head (per-token recurrence for decode windows, 64-aligned chunked form for prompt passes), gated norm,
// output.
#include "model/layers/batch.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

void deltanet_forward(const ModelConfig& cfg, const DeltaNetWeights& w, int layer, const float* x,
                      const Batch& batch, float* out);

// The delta rule for one value head over L rows, in place on the state S [dk, dv]. q, k: [L, dk] (normalised,
// q scaled); v: [L, dv]; g: log decay; beta. Writes o: [L, dv].
void delta_rule_recurrent(int64_t L, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* S, float* o);
// The same function in the chunked (UT transform) form for one chunk of L <= 64 rows.
void delta_rule_chunk(int64_t L, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                      const float* g, const float* beta, float* S, float* o);

}  // namespace ds
