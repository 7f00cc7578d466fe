#include "model/layers/ple.h"

#include <cmath>

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "model/layers/row_math.h"

namespace ds {

std::vector<int64_t> ple_rows(const ModelConfig& c, const PleWeights& w, const std::vector<int32_t>& context,
                              const int32_t* tokens, int64_t count) {
  const int64_t ctx = c.ngram_size - 1, nh = c.ple_heads(), hpn = c.heads_per_ngram;
  const int32_t eos = c.eos();
  std::vector<int64_t> hist(context.begin(), context.end());
  hist.insert(hist.end(), tokens, tokens + count);
  std::vector<int64_t> rows(count * nh);
  std::vector<int64_t> s(c.ngram_size);
  for (int64_t t = 0; t < count; ++t) {
    int64_t i = ctx + t;
    // A token before the segment that starts after the latest EOS strictly before i reads as EOS.
    int64_t last_eos = -1;
    for (int64_t j = i - 1; j >= 0 && j >= i - ctx; --j)
      if (hist[j] == eos) {
        last_eos = j;
        break;
      }
    for (int64_t k = 0; k < c.ngram_size; ++k) s[k] = (k == 0 || i - k > last_eos) ? hist[i - k] : eos;
    for (int64_t n = 2; n <= c.ngram_size; ++n) {
      int64_t mixed = s[0] * w.multipliers[0];
      for (int64_t k = 1; k < n; ++k) mixed ^= s[k] * w.multipliers[k];
      for (int64_t j = 0; j < hpn; ++j) {
        int64_t h = (n - 2) * hpn + j;
        int64_t m = mixed % w.head_vocab[h];
        if (m < 0) m += w.head_vocab[h];
        rows[t * nh + h] = m + w.head_offset[h];
      }
    }
  }
  return rows;
}

void ple_advance_context(std::vector<int32_t>& context, const int32_t* tokens, int64_t count) {
  size_t ctx = context.size();
  std::vector<int32_t> hist(context);
  hist.insert(hist.end(), tokens, tokens + count);
  context.assign(hist.end() - static_cast<int64_t>(ctx), hist.end());
}

void ple_forward(const ModelConfig& c, const PleWeights& w, int layer, const Batch& batch, float* H) {
  const int64_t n = batch.rows, S = c.hc_count, D = c.hidden, SD = S * D, E = c.ple_embed_dim,
                nh = c.ple_heads();
  const int64_t hw = w.head_width;
  std::vector<float> emb(n * E);
  for (const auto& seg : batch.segments) {
    std::vector<int64_t> rows = ple_rows(c, w, seg.state->ple_context, seg.tokens, seg.count);
    for (int64_t t = 0; t < seg.count; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        int64_t row = rows[t * nh + h];
        size_t shard = w.shard_first_row.size() - 1;
        while (w.shard_first_row[shard] > row) --shard;
        int32_t local = static_cast<int32_t>(row - w.shard_first_row[shard]);
        gather_rows(w.table_shards[shard], &local, 1, emb.data() + (seg.row0 + t) * E + h * hw);
      }
  }
  std::vector<float> key(n * SD), value(n * D);
  matmul(w.key, emb.data(), n, E, key.data(), SD);
  matmul(w.value, emb.data(), n, E, value.data(), D);
  std::vector<float> gated(n * SD), gated_normed(n * SD), q(SD);
  const double inv_sqrt_d = 1.0 / std::sqrt(static_cast<double>(D));
  for (int64_t r = 0; r < n; ++r) {
    float* kr = key.data() + r * SD;
    rowmath::grouped_rms_norm(kr, w.norm_key.data(), S, D, c.rms_eps, kr);
    rowmath::grouped_rms_norm(H + r * SD, w.norm_query.data(), S, D, c.rms_eps, q.data());
    for (int64_t s = 0; s < S; ++s) {
      double g = rowmath::dot(kr + s * D, q.data() + s * D, D) * inv_sqrt_d;
      // sign(g) * sqrt(max(|g|, 1e-6)): a signed square root that keeps the gate's sign.
      double mag = std::sqrt(std::max(std::fabs(g), 1e-6));
      float gate = rowmath::sigmoid(static_cast<float>(g > 0 ? mag : (g < 0 ? -mag : 0.0)));
      for (int64_t d = 0; d < D; ++d) gated[r * SD + s * D + d] = gate * value[r * D + d];
    }
    rowmath::grouped_rms_norm(gated.data() + r * SD, w.norm_conv.data(), S, D, c.rms_eps,
                              gated_normed.data() + r * SD);
  }
  // Dilated causal depthwise conv over the normed gated rows, with the stream's history rows.
  const int64_t K = c.ple_conv_kernel, dil = c.ngram_size, hist = (K - 1) * dil;
  for (const auto& seg : batch.segments) {
    std::vector<float>& state = seg.state->ple[layer].conv;
    std::vector<float> window((hist + seg.count) * SD);
    std::copy(state.begin(), state.end(), window.begin());
    std::copy(gated_normed.begin() + seg.row0 * SD, gated_normed.begin() + (seg.row0 + seg.count) * SD,
              window.begin() + hist * SD);
    for (int64_t t = 0; t < seg.count; ++t) {
      float* h = H + (seg.row0 + t) * SD;
      const float* gr = gated.data() + (seg.row0 + t) * SD;
      for (int64_t ch = 0; ch < SD; ++ch) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc += w.conv[ch * K + k] * window[(t + k * dil) * SD + ch];
        h[ch] += gr[ch] + rowmath::silu(acc);
      }
    }
    std::copy(window.end() - hist * SD, window.end(), state.begin());
    if (seg.record) seg.record->ple_conv[layer] = std::move(window);  // for draft rollback
  }
}

}  // namespace ds
