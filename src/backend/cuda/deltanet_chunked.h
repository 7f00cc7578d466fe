#pragma once
// The chunked (C = 64) gated delta rule of prompt passes (docs/cuda-model.md "Prompt path"): the
// UT-transform form of src/model/layers/delta_rule.cpp (delta_rule_chunk) on the GPU, chunks ending at
// absolute multiples of 64 positions as on the CPU, so a prompt cut at multiples of 64 gives the same bits as
// one pass.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/deltanet_decode.h"

namespace ds::cuda {

constexpr int kDeltaRuleChunk = 64;

// Device scratch the chunked rule needs for a step of n_rows rows (per row and value head: W [dk], U [dv],
// the intra-chunk q.k decay row [64], the cumulative log decay).
size_t deltanet_chunked_scratch_bytes(const DeltaNetShape& shape, int n_rows);

// Enqueues the rule (2 launches) over the conv'd, normalised q|k|v in `mixed` (row stride lm) and the gates
// (beta | g per row, as deltanet_decode's conv kernel writes them): core receives the ungated output, each
// window's state is updated. First, per (chunk, value head), in parallel: A = strict lower beta_i (k_i.k_j)
// exp(cum_i - cum_j), U = (I + A)^-1 beta v, W = (I + A)^-1 beta k exp(cum), P = (q_i.k_j) exp(cum_i -
// cum_j) for j <= i. Then per (window, value head, 32 value columns), chunk after chunk with the state slice
// in shared memory: vnew = U - W S, o = exp(cum) q S + P vnew, S = exp(cum_last) S + (k exp(cum_last -
// cum))^T vnew. Every sum runs in one fixed order over indices inside the chunk.
void delta_rule_chunked(const DeltaNetShape& shape, const DeltaNetWindow* windows, int n_windows,
                        const float* mixed, int64_t lm, const float* gates, float* core, int n_rows,
                        const DeltaRuleChunks& chunks, cudaStream_t stream);

}  // namespace ds::cuda
