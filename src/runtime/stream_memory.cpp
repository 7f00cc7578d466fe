#include "runtime/stream_memory.h"

#include <algorithm>

namespace ds {
namespace {

constexpr auto kFloat = static_cast<int64_t>(sizeof(float));

// Floats an attention layer's cache grows by per token: K/V, indexer keys and (at most as many) block keys.
int64_t attention_floats_per_token(const ModelConfig& c) {
  return 2 * c.n_kv_heads * c.head_dim + (c.indexer_heads > 0 ? 2 * c.indexer_head_dim : 0);
}

}  // namespace

int64_t window_record_floats(const ModelConfig& c, int64_t rows) {
  int64_t floats = 0;
  for (int64_t l = 0; l < c.layers; ++l) {
    if (c.layer_kinds[l] == LayerKind::LinearAttention)
      floats +=
          (c.conv_kernel - 1 + rows) * c.linear_conv_dim() + rows * c.lin_v_heads * c.lin_k_dim * c.lin_v_dim;
    if (c.family == ModelFamily::Qwen4Exp && c.ple_index(static_cast<int>(l)) >= 0)
      floats += ((c.ple_conv_kernel - 1) * c.ngram_size + rows) * c.stream_width();
  }
  // Tokens and the PLE n-gram context, as floats' worth of int32.
  return floats + rows + c.ngram_size;
}

StreamMemory stream_memory(const ModelBackend& model, int max_drafts, bool head_follows,
                           int64_t idle_head_rows) {
  const ModelConfig& c = model.config();
  StreamMemory m;
  m.fresh = static_cast<int64_t>(model.new_state().bytes());
  for (auto kind : c.layer_kinds)
    if (kind == LayerKind::Attention) m.per_token += attention_floats_per_token(c) * kFloat;
  const bool head = head_follows && model.has_mtp();
  if (head) m.head_per_token = c.mtp_layers * attention_floats_per_token(c) * kFloat;
  if (max_drafts > 0) {
    const int64_t rows = static_cast<int64_t>(max_drafts) + 1;
    m.drafting = window_record_floats(c, rows) * kFloat;
    // The window's logits rows beyond the one a plain step returns.
    m.drafting += static_cast<int64_t>(max_drafts) * c.vocab_size * kFloat;
    // Pending H rows: at most the idle limit plus one window's kept rows, and the chain's hidden rows.
    // and the head's cache running max_drafts positions ahead while it chains.
    if (head)
      m.drafting +=
          (idle_head_rows + 2 * rows) * model.mtp_hidden_width() * kFloat + max_drafts * m.head_per_token;
  }
  return m;
}

int64_t StreamMemory::reserve(int64_t tokens, int64_t prompt_tokens, bool drafts) const {
  const int64_t head_tokens = drafts ? tokens : std::min(prompt_tokens, tokens);
  return fresh + tokens * per_token + head_tokens * head_per_token + (drafts ? drafting : 0);
}

}  // namespace ds
