#include "model/layers/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/matmul.h"
#include "model/layers/row_math.h"

namespace ds {

void mlps_forward(std::span<const MlpJob> jobs) {
  std::vector<int64_t> at(jobs.size() + 1, 0);  // offsets of each job's hidden rows in g and u
  for (size_t j = 0; j < jobs.size(); ++j) at[j + 1] = at[j] + jobs[j].n * jobs[j].w->gate.rows;
  std::vector<float> g(at.back()), u(at.back());
  std::vector<MatmulTask> tasks;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MlpJob& b = jobs[j];
    const int64_t inter = b.w->gate.rows, D = b.w->gate.cols;
    tasks.push_back({&b.w->gate, b.x, b.n, D, g.data() + at[j], inter});
    tasks.push_back({&b.w->up, b.x, b.n, D, u.data() + at[j], inter});
  }
  matmul_many(tasks);
  for (int64_t i = 0; i < at.back(); ++i) g[i] = rowmath::silu(g[i]) * u[i];
  tasks.clear();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const MlpJob& b = jobs[j];
    const int64_t inter = b.w->gate.rows;
    tasks.push_back({&b.w->down, g.data() + at[j], b.n, inter, b.out, b.w->down.rows});
  }
  matmul_many(tasks);
}

void mlp_forward(const MlpWeights& w, const float* x, int64_t n, float* out) {
  const MlpJob job{&w, x, n, out};
  mlps_forward(std::span<const MlpJob>(&job, 1));
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
  // The chosen experts' rows side by side; every expert (and the shared one) runs in the same two parallel
  // jobs instead of one fork/join per product.
  std::vector<int64_t> row0(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) row0[e + 1] = row0[e] + static_cast<int64_t>(chosen[e].size());
  std::vector<float> xin(row0[E] * D), yout(row0[E] * D);
  std::vector<MlpJob> jobs;
  for (int64_t e = 0; e < E; ++e) {
    const auto& list = chosen[e];
    if (list.empty()) continue;
    for (size_t j = 0; j < list.size(); ++j)
      std::copy(x + (list[j] / K) * D, x + (list[j] / K + 1) * D, xin.begin() + (row0[e] + j) * D);
    jobs.push_back({&w.experts[e], xin.data() + row0[e] * D, static_cast<int64_t>(list.size()),
                    yout.data() + row0[e] * D});
  }
  std::vector<float> shared, gate;
  if (w.has_shared) {
    shared.resize(n * D);
    gate.resize(n);
    jobs.push_back({&w.shared, x, n, shared.data()});
    matmul(w.shared_gate, x, n, D, gate.data(), 1);
  }
  mlps_forward(jobs);
  for (int64_t e = 0; e < E; ++e)
    for (size_t j = 0; j < chosen[e].size(); ++j)
      std::copy(yout.begin() + (row0[e] + j) * D, yout.begin() + (row0[e] + j + 1) * D,
                slots.begin() + chosen[e][j] * D);
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
