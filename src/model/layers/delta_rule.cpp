// The gated delta rule for one value head: the per-token recurrence (decode windows) and the chunked
// UT-transform form (prompt passes). Both follow transformers' torch_recurrent_gated_delta_rule /
// torch_chunk_gated_delta_rule.
#include <cmath>
#include <vector>

#include "model/layers/deltanet.h"

namespace ds {

void delta_rule_recurrent(int64_t L, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                          const float* g, const float* beta, float* S, float* o) {
  std::vector<float> kv(dv);
  for (int64_t t = 0; t < L; ++t) {
    const float* qt = q + t * dk;
    const float* kt = k + t * dk;
    const float* vt = v + t * dv;
    float decay = std::exp(g[t]);
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay;
    // kv = k^T S: what the state already predicts for this key.
    for (int64_t c = 0; c < dv; ++c) kv[c] = 0.0f;
    for (int64_t r = 0; r < dk; ++r)
      for (int64_t c = 0; c < dv; ++c) kv[c] += kt[r] * S[r * dv + c];
    for (int64_t c = 0; c < dv; ++c) kv[c] = (vt[c] - kv[c]) * beta[t];
    for (int64_t r = 0; r < dk; ++r)
      for (int64_t c = 0; c < dv; ++c) S[r * dv + c] += kt[r] * kv[c];
    float* ot = o + t * dv;
    for (int64_t c = 0; c < dv; ++c) ot[c] = 0.0f;
    for (int64_t r = 0; r < dk; ++r)
      for (int64_t c = 0; c < dv; ++c) ot[c] += qt[r] * S[r * dv + c];
  }
}

void delta_rule_chunk(int64_t L, int64_t dk, int64_t dv, const float* q, const float* k, const float* v,
                      const float* g, const float* beta, float* S, float* o) {
  std::vector<float> cum(L), A(L * L, 0.0f), U(L * dv), W(L * dk), vnew(L * dv);
  float run = 0.0f;
  for (int64_t t = 0; t < L; ++t) cum[t] = run += g[t];
  // A[i][j] = beta_i (k_i . k_j) exp(cum_i - cum_j) for j < i: the strictly lower part of the UT system.
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j) {
      float d = 0.0f;
      for (int64_t r = 0; r < dk; ++r) d += k[i * dk + r] * k[j * dk + r];
      A[i * L + j] = beta[i] * d * std::exp(cum[i] - cum[j]);
    }
  // Forward substitution of (I + A) U = beta v and (I + A) W = beta k exp(cum).
  for (int64_t i = 0; i < L; ++i) {
    float ei = std::exp(cum[i]);
    for (int64_t c = 0; c < dv; ++c) U[i * dv + c] = beta[i] * v[i * dv + c];
    for (int64_t r = 0; r < dk; ++r) W[i * dk + r] = beta[i] * k[i * dk + r] * ei;
    for (int64_t j = 0; j < i; ++j) {
      float a = A[i * L + j];
      for (int64_t c = 0; c < dv; ++c) U[i * dv + c] -= a * U[j * dv + c];
      for (int64_t r = 0; r < dk; ++r) W[i * dk + r] -= a * W[j * dk + r];
    }
  }
  // vnew = U - W S: the part of the new values the incoming state does not already predict.
  for (int64_t i = 0; i < L; ++i)
    for (int64_t c = 0; c < dv; ++c) {
      float s = 0.0f;
      for (int64_t r = 0; r < dk; ++r) s += W[i * dk + r] * S[r * dv + c];
      vnew[i * dv + c] = U[i * dv + c] - s;
    }
  // o_i = exp(cum_i) q_i S + sum_{j<=i} (q_i . k_j) exp(cum_i - cum_j) vnew_j.
  for (int64_t i = 0; i < L; ++i) {
    float* oi = o + i * dv;
    float ei = std::exp(cum[i]);
    for (int64_t c = 0; c < dv; ++c) {
      float s = 0.0f;
      for (int64_t r = 0; r < dk; ++r) s += q[i * dk + r] * S[r * dv + c];
      oi[c] = s * ei;
    }
    for (int64_t j = 0; j <= i; ++j) {
      float d = 0.0f;
      for (int64_t r = 0; r < dk; ++r) d += q[i * dk + r] * k[j * dk + r];
      d *= std::exp(cum[i] - cum[j]);
      for (int64_t c = 0; c < dv; ++c) oi[c] += d * vnew[j * dv + c];
    }
  }
  // S = exp(cum_last) S + sum_j exp(cum_last - cum_j) k_j vnew_j^T.
  float last = cum[L - 1];
  float el = std::exp(last);
  for (int64_t i = 0; i < dk * dv; ++i) S[i] *= el;
  for (int64_t j = 0; j < L; ++j) {
    float dj = std::exp(last - cum[j]);
    for (int64_t r = 0; r < dk; ++r) {
      float kr = k[j * dk + r] * dj;
      for (int64_t c = 0; c < dv; ++c) S[r * dv + c] += kr * vnew[j * dv + c];
    }
  }
}

}  // namespace ds
