#pragma once
// The per-token DeltaNet step's conv and delta rule as prompt passes run them (deltanet_decode(..., staged)):
// the same arithmetic as deltanet_decode's kernels, operation for operation, so the same bits, organised for
// windows of thousands of tokens. The decode kernels walk a window token after token with one global round
// trip per token (and, in the conv, one block of 128 channels per head with three barriers a token); these
// cut the conv's window into token ranges (one warp each, a head's 128 channels four to a lane) and feed
// the rule from a shared-memory ring of 16-token stages filled by cp.async, one barrier a token.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/deltanet_decode.h"

namespace ds::cuda {

// Whether delta_rule_staged takes these rows (16-byte aligned q/k/v rows); otherwise the per-token kernel.
bool delta_rule_staged_supported(const DeltaNetShape& s, const float* mixed, int64_t lm);

// conv + SiLU, the q/k heads' L2 norm (q scaled) and the gates, as conv_norm_gates_kernel.
void conv_norm_gates_staged(const DeltaNetShape& s, DeltaNetWindow* windows, int n_windows, float* mixed,
                            int64_t lm, const float* taps, const float* b, const float* a, int64_t lba,
                            const float* a_log, const float* dt_bias, float* gates, float q_scale, int n_rows,
                            cudaStream_t stream);

// The per-token delta rule (ungated core), as delta_rule_kernel.
void delta_rule_staged(const DeltaNetShape& s, DeltaNetWindow* windows, int n_windows, const float* mixed,
                       int64_t lm, const float* gates, float* core, int n_rows, cudaStream_t stream);

}  // namespace ds::cuda
