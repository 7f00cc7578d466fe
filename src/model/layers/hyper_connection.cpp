#include "model/layers/hyper_connection.h"

#include <vector>

#include "backend/cpu/matmul.h"
#include "model/layers/row_math.h"

namespace ds {

void hc_mix(const ModelConfig& c, const HyperConnectionWeights& w, const float* H, int64_t n, float* x,
            float* iota) {
  const int64_t S = c.hc_count, D = c.hidden, SD = S * D, R = c.hc_rank;
  std::vector<float> normed(n * SD), low(n * R), mix(n * SD);
  for (int64_t r = 0; r < n; ++r)
    rowmath::grouped_rms_norm(H + r * SD, w.norm.data(), S, D, c.rms_eps, normed.data() + r * SD);
  // The injection weights read the same normed rows: one parallel region for both products.
  std::vector<MatmulTask> proj{{&w.down, normed.data(), n, SD, low.data(), R}};
  if (iota != nullptr) proj.push_back({&w.inject, normed.data(), n, SD, iota, S});
  matmul_many(proj);
  const float inv_s = 1.0f / static_cast<float>(S);
  for (auto& v : low) v = rowmath::silu(v * inv_s);
  matmul(w.up, low.data(), n, R, mix.data(), SD);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t d = 0; d < D; ++d) {
      float s = 0.0f;
      for (int64_t k = 0; k < S; ++k)
        s += rowmath::sigmoid(mix[r * SD + k * D + d]) * normed[r * SD + k * D + d];
      x[r * D + d] = s * inv_s;
    }
  if (iota != nullptr) {
    for (int64_t i = 0; i < n * S; ++i) iota[i] = 2.0f * rowmath::sigmoid(iota[i] * inv_s);
  }
}

void hc_inject(const ModelConfig& c, const float* iota, const float* y, int64_t n, float* H) {
  const int64_t S = c.hc_count, D = c.hidden;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < S; ++k)
      for (int64_t d = 0; d < D; ++d) H[r * S * D + k * D + d] += iota[r * S + k] * y[r * D + d];
}

}  // namespace ds
