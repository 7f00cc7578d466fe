#include "model/stream_state.h"

#include "core/error.h"

namespace ds {

StreamState StreamState::fresh(const ModelConfig& c) {
  StreamState s;
  s.deltanet.resize(c.layers);
  s.attention.resize(c.layers + c.mtp_layers);
  if (c.mtp_layers > 0 && c.indexer_heads > 0) s.mtp_index_ratio = c.indexer_ratio;
  s.ple.resize(c.layers);
  for (int64_t l = 0; l < c.layers; ++l) {
    if (c.layer_kinds[l] == LayerKind::LinearAttention) {
      s.deltanet[l].conv.assign((c.conv_kernel - 1) * c.linear_conv_dim(), 0.0f);
      s.deltanet[l].state.assign(c.lin_v_heads * c.lin_k_dim * c.lin_v_dim, 0.0f);
    }
    if (c.family == ModelFamily::Qwen4Exp && c.ple_index(static_cast<int>(l)) >= 0)
      s.ple[l].conv.assign((c.ple_conv_kernel - 1) * c.ngram_size * c.stream_width(), 0.0f);
  }
  if (!c.ple_layer_ids.empty()) s.ple_context.assign(c.ngram_size - 1, c.eos());
  return s;
}

size_t StreamState::bytes() const {
  size_t n = ple_context.size() * sizeof(int32_t);
  for (const auto& d : deltanet) n += (d.conv.size() + d.state.size()) * sizeof(float);
  for (const auto& a : attention)
    n += (a.keys.size() + a.values.size() + a.index_keys.size() + a.index_blocks.size()) * sizeof(float);
  for (const auto& p : ple) n += p.conv.size() * sizeof(float);
  return n + mtp_pending.size() * sizeof(float) + backend.bytes();
}

void StreamState::truncate_mtp(int64_t positions) {
  if (positions < 0 || positions > mtp_position)
    fail("truncate_mtp: {} positions requested but the MTP head's cache holds {}", positions, mtp_position);
  if (positions == mtp_position) return;
  auto keep = [](std::vector<float>& v, int64_t rows, int64_t of_rows) {
    if (of_rows > 0) v.resize(v.size() / static_cast<size_t>(of_rows) * static_cast<size_t>(rows));
  };
  for (size_t slot = deltanet.size(); slot < attention.size(); ++slot) {
    AttentionState& a = attention[slot];
    const int64_t blocks = mtp_index_ratio > 0 ? mtp_position / mtp_index_ratio : 0;
    const int64_t kept_blocks = mtp_index_ratio > 0 ? positions / mtp_index_ratio : 0;
    keep(a.index_blocks, kept_blocks, blocks);
    keep(a.keys, positions, mtp_position);
    keep(a.values, positions, mtp_position);
    keep(a.index_keys, positions, mtp_position);
  }
  mtp_position = positions;
}

}  // namespace ds
