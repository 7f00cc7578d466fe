#include "model/layers/deltanet.h"

#include <cmath>
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/thread_pool.h"
#include "model/layers/row_math.h"

namespace ds {

namespace {

// qwen3_next packs [q | k | v | z] per key-head group and [b | a] per group; unpack to the split layout.
void unpack_qwen3next(const ModelConfig& c, const float* qkvz, const float* ba, int64_t n, float* mixed,
                      float* z, float* b, float* a) {
  int64_t nk = c.lin_k_heads, dk = c.lin_k_dim, dv = c.lin_v_dim, per = c.lin_v_heads / nk;
  int64_t kd = c.linear_key_dim(), vd = c.linear_value_dim(), cd = c.linear_conv_dim();
  int64_t group = 2 * dk + 2 * per * dv;
  for (int64_t r = 0; r < n; ++r) {
    const float* src = qkvz + r * (2 * kd + 2 * vd);
    const float* sba = ba + r * 2 * c.lin_v_heads;
    for (int64_t h = 0; h < nk; ++h) {
      const float* gsrc = src + h * group;
      float* m = mixed + r * cd;
      for (int64_t i = 0; i < dk; ++i) m[h * dk + i] = gsrc[i];
      for (int64_t i = 0; i < dk; ++i) m[kd + h * dk + i] = gsrc[dk + i];
      for (int64_t i = 0; i < per * dv; ++i) m[2 * kd + h * per * dv + i] = gsrc[2 * dk + i];
      for (int64_t i = 0; i < per * dv; ++i) z[r * vd + h * per * dv + i] = gsrc[2 * dk + per * dv + i];
      for (int64_t i = 0; i < per; ++i) b[r * c.lin_v_heads + h * per + i] = sba[h * 2 * per + i];
      for (int64_t i = 0; i < per; ++i) a[r * c.lin_v_heads + h * per + i] = sba[h * 2 * per + per + i];
    }
  }
}

// Causal depthwise conv over the segment's rows with the stream's last K-1 rows as history, then SiLU.
// With a record, the whole pre-conv window (history + rows) is kept for draft rollback.
void causal_conv(const ModelConfig& c, const std::vector<float>& taps, std::vector<float>& history,
                 float* rows, int64_t count, std::vector<float>* record) {
  int64_t cd = c.linear_conv_dim(), K = c.conv_kernel;
  std::vector<float> window((K - 1 + count) * cd);
  std::copy(history.begin(), history.end(), window.begin());
  std::copy(rows, rows + count * cd, window.begin() + (K - 1) * cd);
  for (int64_t t = 0; t < count; ++t)
    for (int64_t ch = 0; ch < cd; ++ch) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s += taps[ch * K + k] * window[(t + k) * cd + ch];
      rows[t * cd + ch] = rowmath::silu(s);
    }
  if (record) *record = window;
  std::copy(window.end() - (K - 1) * cd, window.end(), history.begin());
}

}  // namespace

void deltanet_forward(const ModelConfig& c, const DeltaNetWeights& w, int layer, const float* x,
                      const Batch& batch, float* out) {
  const int64_t n = batch.rows, D = c.hidden, nk = c.lin_k_heads, nv = c.lin_v_heads, dk = c.lin_k_dim,
                dv = c.lin_v_dim, kd = c.linear_key_dim(), vd = c.linear_value_dim(),
                cd = c.linear_conv_dim();
  std::vector<float> mixed(n * cd), z(n * vd), b(n * nv), a(n * nv);
  if (c.family == ModelFamily::Qwen3Next) {
    std::vector<float> qkvz(n * (2 * kd + 2 * vd)), ba(n * 2 * nv);
    const MatmulTask proj[] = {{&w.qkvz, x, n, D, qkvz.data(), 2 * kd + 2 * vd},
                               {&w.ba, x, n, D, ba.data(), 2 * nv}};
    matmul_many(proj);
    unpack_qwen3next(c, qkvz.data(), ba.data(), n, mixed.data(), z.data(), b.data(), a.data());
  } else {
    // One parallel region for every projection of x.
    const MatmulTask proj[] = {{&w.qkv, x, n, D, mixed.data(), cd},
                               {&w.z, x, n, D, z.data(), vd},
                               {&w.b, x, n, D, b.data(), nv},
                               {&w.a, x, n, D, a.data(), nv}};
    matmul_many(proj);
  }
  for (const auto& seg : batch.segments)
    causal_conv(c, w.conv, seg.state->deltanet[layer].conv, mixed.data() + seg.row0 * cd, seg.count,
                seg.record ? &seg.record->deltanet_conv[layer] : nullptr);

  // Per row: L2-normalise q and k per key head (q also scaled by dk^-0.5); beta and the log decay g per value
  // head.
  std::vector<float> beta(n * nv), g(n * nv);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t r = 0; r < n; ++r) {
    float* m = mixed.data() + r * cd;
    for (int64_t h = 0; h < nk; ++h) {
      rowmath::l2_normalize(m + h * dk, dk, 1e-6f);
      rowmath::l2_normalize(m + kd + h * dk, dk, 1e-6f);
      for (int64_t i = 0; i < dk; ++i) m[h * dk + i] *= q_scale;
    }
    for (int64_t h = 0; h < nv; ++h) {
      beta[r * nv + h] = rowmath::sigmoid(b[r * nv + h]);
      g[r * nv + h] = -std::exp(w.a_log[h]) * rowmath::softplus(a[r * nv + h] + w.dt_bias[h]);
    }
  }

  std::vector<float> core(n * vd);
  const int64_t per = nv / nk;
  for (const auto& seg : batch.segments) {
    float* states = seg.state->deltanet[layer].state.data();
    const int64_t state_size = nv * dk * dv;
    float* kept = nullptr;  // the state after every row, for draft rollback
    if (seg.record) {
      seg.record->deltanet_state[layer].resize(seg.count * state_size);
      kept = seg.record->deltanet_state[layer].data();
    }
    ThreadPool::global().parallel_for(nv, 1, [&](int64_t h0, int64_t h1) {
      std::vector<float> qh(seg.count * dk), kh(seg.count * dk), vh(seg.count * dv), gh(seg.count),
          bh(seg.count), oh(seg.count * dv);
      for (int64_t h = h0; h < h1; ++h) {
        int64_t kh_index = h / per;
        for (int64_t t = 0; t < seg.count; ++t) {
          const float* m = mixed.data() + (seg.row0 + t) * cd;
          std::copy(m + kh_index * dk, m + (kh_index + 1) * dk, qh.begin() + t * dk);
          std::copy(m + kd + kh_index * dk, m + kd + (kh_index + 1) * dk, kh.begin() + t * dk);
          std::copy(m + 2 * kd + h * dv, m + 2 * kd + (h + 1) * dv, vh.begin() + t * dv);
          gh[t] = g[(seg.row0 + t) * nv + h];
          bh[t] = beta[(seg.row0 + t) * nv + h];
        }
        float* S = states + h * dk * dv;
        if (kept) {
          // One row at a time: the recurrence's bits do not change, and the state after each row is kept.
          for (int64_t t = 0; t < seg.count; ++t) {
            delta_rule_recurrent(1, dk, dv, qh.data() + t * dk, kh.data() + t * dk, vh.data() + t * dv,
                                 gh.data() + t, bh.data() + t, S, oh.data() + t * dv);
            std::copy(S, S + dk * dv, kept + t * state_size + h * dk * dv);
          }
        } else if (!seg.prompt) {
          delta_rule_recurrent(seg.count, dk, dv, qh.data(), kh.data(), vh.data(), gh.data(), bh.data(), S,
                               oh.data());
        } else {
          // Chunks end at absolute multiples of 64, so a prompt split at such multiples gives the same bits.
          int64_t t = 0;
          while (t < seg.count) {
            int64_t pos = seg.pos0 + t;
            int64_t len = std::min(seg.count - t, kDeltaNetChunk - pos % kDeltaNetChunk);
            delta_rule_chunk(len, dk, dv, qh.data() + t * dk, kh.data() + t * dk, vh.data() + t * dv,
                             gh.data() + t, bh.data() + t, S, oh.data() + t * dv);
            t += len;
          }
        }
        for (int64_t t = 0; t < seg.count; ++t)
          std::copy(oh.begin() + t * dv, oh.begin() + (t + 1) * dv,
                    core.begin() + (seg.row0 + t) * vd + h * dv);
      }
    });
  }

  // Gated RMSNorm per value head: (w * norm(o)) * act(z).
  for (int64_t r = 0; r < n; ++r)
    for (int64_t h = 0; h < nv; ++h) {
      float* o = core.data() + r * vd + h * dv;
      rowmath::rms_norm(o, w.norm.data(), dv, c.rms_eps, o);
      const float* zz = z.data() + r * vd + h * dv;
      for (int64_t i = 0; i < dv; ++i)
        o[i] *= c.output_gate_sigmoid ? rowmath::sigmoid(zz[i]) : rowmath::silu(zz[i]);
    }
  matmul(w.out, core.data(), n, vd, out, D);
}

}  // namespace ds
