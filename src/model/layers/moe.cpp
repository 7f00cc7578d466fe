#include "model/layers/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/matmul.h"
#include "model/layers/row_math.h"

namespace ds {

void mlp_forward(const MlpWeights& w, const float* x, int64_t n, float* out) {
  int64_t inter = w.gate.rows, D = w.gate.cols;
  std::vector<float> g(n * inter), u(n * inter);
  matmul(w.gate, x, n, D, g.data(), inter);
  matmul(w.up, x, n, D, u.data(), inter);
  for (int64_t i = 0; i < n * inter; ++i) g[i] = rowmath::silu(g[i]) * u[i];
  matmul(w.down, g.data(), n, inter, out, D);
}

void route_row(const float* logits, int64_t E, int64_t k, bool renormalise, int32_t* ids, float* weights) {
  double mx = -INFINITY;
  for (int64_t e = 0; e < E; ++e) mx = std::max(mx, static_cast<double>(logits[e]));
  std::vector<double> p(E);
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += (p[e] = std::exp(logits[e] - mx));
  std::vector<int32_t> order(E);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  double top = 0;
  for (int64_t i = 0; i < k; ++i) top += p[order[i]];
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = order[i];
    weights[i] = static_cast<float>(renormalise ? p[order[i]] / top : p[order[i]] / sum);
  }
}

void moe_forward(const ModelConfig& c, const MoeWeights& w, const float* x, int64_t n, float* out) {
  const int64_t D = c.hidden;
  if (w.dense) {
    mlp_forward(w.dense_mlp, x, n, out);
    return;
  }
  const int64_t E = c.n_experts, K = c.experts_per_tok;
  std::vector<float> logits(n * E);
  matmul(w.router, x, n, D, logits.data(), E);
  std::vector<int32_t> ids(n * K);
  std::vector<float> weights(n * K);
  for (int64_t r = 0; r < n; ++r)
    route_row(logits.data() + r * E, E, K, c.norm_topk_prob, ids.data() + r * K, weights.data() + r * K);

  // Each expert runs once over the rows that chose it; results land in (row, rank) slots and are summed per
  // row in rank order, so a row's sum does not depend on the other rows.
  std::vector<float> slots(n * K * D);
  std::vector<std::vector<int64_t>> chosen(E);  // entries row * K + rank
  for (int64_t i = 0; i < n * K; ++i) chosen[ids[i]].push_back(i);
  std::vector<float> xin, yout;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = chosen[e];
    if (list.empty()) continue;
    int64_t m = static_cast<int64_t>(list.size());
    xin.resize(m * D);
    yout.resize(m * D);
    for (int64_t j = 0; j < m; ++j)
      std::copy(x + (list[j] / K) * D, x + (list[j] / K + 1) * D, xin.begin() + j * D);
    mlp_forward(w.experts[e], xin.data(), m, yout.data());
    for (int64_t j = 0; j < m; ++j)
      std::copy(yout.begin() + j * D, yout.begin() + (j + 1) * D, slots.begin() + list[j] * D);
  }
  std::vector<float> shared, gate;
  if (w.has_shared) {
    shared.resize(n * D);
    gate.resize(n);
    mlp_forward(w.shared, x, n, shared.data());
    matmul(w.shared_gate, x, n, D, gate.data(), 1);
  }
  for (int64_t r = 0; r < n; ++r) {
    float* o = out + r * D;
    for (int64_t d = 0; d < D; ++d) {
      float s = 0.0f;
      for (int64_t i = 0; i < K; ++i) s += weights[r * K + i] * slots[(r * K + i) * D + d];
      if (w.has_shared) s += rowmath::sigmoid(gate[r]) * shared[r * D + d];
      o[d] = s;
    }
  }
}

}  // namespace ds
