#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/thread_pool.h"
#include "model/layers/row_math.h"

namespace ds {

namespace {

// Completes every indexer block whose last token is now cached: mean of raw keys (f32), centred norm, RoPE at
// the block's first position.
void complete_blocks(const ModelConfig& c, const IndexerWeights& w, const Rope& rope, AttentionState& st) {
  int64_t ihd = c.indexer_head_dim, ratio = c.indexer_ratio;
  int64_t have = static_cast<int64_t>(st.index_blocks.size()) / ihd;
  int64_t cached = static_cast<int64_t>(st.index_keys.size()) / ihd;
  std::vector<float> pooled(ihd);
  for (int64_t b = have; (b + 1) * ratio <= cached; ++b) {
    for (int64_t i = 0; i < ihd; ++i) {
      float s = 0.0f;
      for (int64_t t = 0; t < ratio; ++t) s += st.index_keys[(b * ratio + t) * ihd + i];
      pooled[i] = s / static_cast<float>(ratio);
    }
    rowmath::rms_norm(pooled.data(), w.k_norm.data(), ihd, c.rms_eps, pooled.data());
    rope.apply(pooled.data(), b * ratio);
    st.index_blocks.insert(st.index_blocks.end(), pooled.begin(), pooled.end());
  }
}

}  // namespace

std::vector<int64_t> indexer_select(const ModelConfig& c, const float* q, const float* blocks,
                                    int64_t position) {
  int64_t ihd = c.indexer_head_dim, ratio = c.indexer_ratio, top = c.indexer_budget / c.indexer_ratio;
  int64_t visible = position + 1, complete = visible / ratio;
  std::vector<int64_t> tokens;
  if (complete <= top) {
    tokens.resize(visible);
    std::iota(tokens.begin(), tokens.end(), 0);
    return tokens;
  }
  std::vector<float> score(complete);
  for (int64_t b = 0; b < complete; ++b) {
    double s = 0;
    for (int64_t h = 0; h < c.indexer_heads; ++h)
      s += std::max(0.0f, rowmath::dot(q + h * ihd, blocks + b * ihd, ihd));
    score[b] = static_cast<float>(s / std::sqrt(static_cast<double>(ihd)));
  }
  std::vector<int64_t> order(complete);
  std::iota(order.begin(), order.end(), 0);
  // Highest scores first; equal scores toward the earlier block.
  std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int64_t a, int64_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  order.resize(top);
  std::sort(order.begin(), order.end());
  for (int64_t b : order)
    for (int64_t t = 0; t < ratio; ++t) tokens.push_back(b * ratio + t);
  for (int64_t t = complete * ratio; t < visible; ++t) tokens.push_back(t);
  return tokens;
}

void attention_forward(const ModelConfig& c, const AttentionWeights& w, const Rope& rope, int layer,
                       const float* x, const Batch& batch, float* out) {
  const int64_t n = batch.rows, D = c.hidden, nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim;
  const int64_t qw = nh * hd * 2, kvw = nkv * hd;
  std::vector<float> qg(n * qw), k(n * kvw), v(n * kvw);
  std::vector<MatmulTask> proj{
      {&w.q, x, n, D, qg.data(), qw}, {&w.k, x, n, D, k.data(), kvw}, {&w.v, x, n, D, v.data(), kvw}};

  const int64_t ihd = c.indexer_head_dim, idx_w = (c.indexer_heads + 1) * ihd;
  std::vector<float> idx;
  if (w.has_indexer) {
    idx.resize(n * idx_w);
    proj.push_back({&w.indexer.qk, x, n, D, idx.data(), idx_w});
  }
  matmul_many(proj);  // one parallel region for every projection of x

  // Per row: norms and RoPE at the row's absolute position; cache keys, values and raw indexer keys in order.
  for (const auto& seg : batch.segments) {
    AttentionState& st = seg.state->attention[layer];
    for (int64_t t = 0; t < seg.count; ++t) {
      int64_t r = seg.row0 + t, pos = seg.pos0 + t;
      for (int64_t h = 0; h < nh; ++h) {
        float* qh = qg.data() + r * qw + h * 2 * hd;
        rowmath::rms_norm(qh, w.q_norm.data(), hd, c.rms_eps, qh);
        rope.apply(qh, pos);
      }
      for (int64_t h = 0; h < nkv; ++h) {
        float* kh = k.data() + r * kvw + h * hd;
        rowmath::rms_norm(kh, w.k_norm.data(), hd, c.rms_eps, kh);
        rope.apply(kh, pos);
      }
      st.keys.insert(st.keys.end(), k.begin() + r * kvw, k.begin() + (r + 1) * kvw);
      st.values.insert(st.values.end(), v.begin() + r * kvw, v.begin() + (r + 1) * kvw);
      if (w.has_indexer) {
        float* iq = idx.data() + r * idx_w;
        for (int64_t h = 0; h < c.indexer_heads; ++h) {
          rowmath::rms_norm(iq + h * ihd, w.indexer.q_norm.data(), ihd, c.rms_eps, iq + h * ihd);
          rope.apply(iq + h * ihd, pos);
        }
        const float* raw = iq + c.indexer_heads * ihd;
        st.index_keys.insert(st.index_keys.end(), raw, raw + ihd);
      }
    }
    if (w.has_indexer) complete_blocks(c, w.indexer, rope, st);
  }

  // Each (row, head) attends over its selected keys; rows are independent, so split them over threads.
  std::vector<float> attn(n * nh * hd);
  std::vector<std::pair<const SegmentRows*, int64_t>> rows;
  for (const auto& seg : batch.segments)
    for (int64_t t = 0; t < seg.count; ++t) rows.push_back({&seg, t});
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  ThreadPool::global().parallel_for(static_cast<int64_t>(rows.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<double> p;
    for (int64_t i = i0; i < i1; ++i) {
      const SegmentRows& seg = *rows[i].first;
      int64_t t = rows[i].second, r = seg.row0 + t, pos = seg.pos0 + t;
      const AttentionState& st = seg.state->attention[layer];
      std::vector<int64_t> sel;
      if (w.has_indexer) {
        sel = indexer_select(c, idx.data() + r * idx_w, st.index_blocks.data(), pos);
      } else {
        sel.resize(pos + 1);
        std::iota(sel.begin(), sel.end(), 0);
      }
      p.resize(sel.size());
      for (int64_t h = 0; h < nh; ++h) {
        const float* qh = qg.data() + r * qw + h * 2 * hd;
        const float* gate = qh + hd;
        int64_t kvh = h / (nh / nkv);
        double mx = -INFINITY;
        for (size_t j = 0; j < sel.size(); ++j) {
          p[j] = rowmath::dot(qh, st.keys.data() + sel[j] * kvw + kvh * hd, hd) * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (auto& e : p) sum += (e = std::exp(e - mx));
        float* o = attn.data() + r * nh * hd + h * hd;
        for (int64_t d = 0; d < hd; ++d) {
          double s = 0;
          for (size_t j = 0; j < sel.size(); ++j) s += p[j] * st.values[sel[j] * kvw + kvh * hd + d];
          o[d] = static_cast<float>(s / sum) * rowmath::sigmoid(gate[d]);
        }
      }
    }
  });
  matmul(w.o, attn.data(), n, nh * hd, out, D);
}

}  // namespace ds
