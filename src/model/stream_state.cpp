#include "model/stream_state.h"

namespace ds {

StreamState StreamState::fresh(const ModelConfig& c) {
  StreamState s;
  s.deltanet.resize(c.layers);
  s.attention.resize(c.layers);
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
  return n;
}

}  // namespace ds
