#include "model/decode_traffic.h"

#include <algorithm>

namespace ds {

uint64_t matrix_bytes(const MatrixWeight& w) {
  if (!w.valid()) return 0;
  uint64_t b = static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.row_bytes());
  if (w.encoding == MatrixEncoding::Affine)
    b += 2ull * static_cast<uint64_t>(w.rows * (w.cols / w.group)) * dtype_size(w.scale_dtype);
  return b;
}

namespace {

uint64_t row_bytes(const MatrixWeight& w) {
  return w.rows > 0 ? matrix_bytes(w) / w.rows : 0;
}

uint64_t mlp_bytes(const MlpWeights& m) {
  return matrix_bytes(m.gate) + matrix_bytes(m.up) + matrix_bytes(m.down);
}

uint64_t hc_bytes(const HyperConnectionWeights& h) {
  return matrix_bytes(h.down) + matrix_bytes(h.up) + matrix_bytes(h.inject);
}

}  // namespace

uint64_t DecodeTraffic::per_round(int64_t streams, uint64_t state_bytes) const {
  const int64_t touched = experts == 0 ? 0 : std::min(experts, streams * experts_per_tok);
  return dense_bytes + static_cast<uint64_t>(touched) * expert_bytes +
         static_cast<uint64_t>(streams) * lookup_row_bytes + state_bytes;
}

DecodeTraffic decode_traffic(const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  DecodeTraffic t;
  t.experts = c.n_experts;
  t.experts_per_tok = c.experts_per_tok;
  t.lookup_row_bytes = row_bytes(w.embed);
  t.dense_bytes = matrix_bytes(w.lm_head) + hc_bytes(w.final_mixer);
  for (const LayerWeights& lw : w.layers) {
    const DeltaNetWeights& d = lw.deltanet;
    for (const MatrixWeight* m : {&d.qkv, &d.z, &d.b, &d.a, &d.qkvz, &d.ba, &d.out})
      t.dense_bytes += matrix_bytes(*m);
    const AttentionWeights& a = lw.attention;
    for (const MatrixWeight* m : {&a.q, &a.k, &a.v, &a.o, &a.indexer.qk}) t.dense_bytes += matrix_bytes(*m);
    const MoeWeights& moe = lw.moe;
    t.dense_bytes += matrix_bytes(moe.router) + matrix_bytes(moe.shared_gate);
    if (moe.has_shared) t.dense_bytes += mlp_bytes(moe.shared);
    if (moe.dense) t.dense_bytes += mlp_bytes(moe.dense_mlp);
    if (!moe.experts.empty()) t.expert_bytes += mlp_bytes(moe.experts.front());
    t.dense_bytes += hc_bytes(lw.hc_attn) + hc_bytes(lw.hc_mlp);
    if (lw.has_ple) {
      t.dense_bytes += matrix_bytes(lw.ple.key) + matrix_bytes(lw.ple.value);
      // One table row per n-gram head.
      t.lookup_row_bytes +=
          static_cast<uint64_t>(lw.ple.head_vocab.size()) * row_bytes(lw.ple.table_shards[0]);
    }
  }
  return t;
}

}  // namespace ds
