#pragma once
// Hyper-connections: S residual streams mixed into one layer input, and the layer output injected back per
// stream.
#include <cstdint>

#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

// From streams H [n, S*D]: x [n, D] = mean_s(m_s * norm(H)_s) and, when the HC injects, iota [n, S].
void hc_mix(const ModelConfig& cfg, const HyperConnectionWeights& w, const float* H, int64_t n, float* x,
            float* iota);
// H_s += iota_s * y for every stream s.
void hc_inject(const ModelConfig& cfg, const float* iota, const float* y, int64_t n, float* H);

}  // namespace ds
