#pragma once
// The text model's configuration, read from config.json (flat, or nested under `text_config`), for the three
// families the engine runs. Every size the forward needs comes from here.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ds {

enum class ModelFamily { Qwen4Exp, Qwen3Next, Qwen35Moe };
enum class LayerKind { LinearAttention, Attention };

struct ModelConfig {
  ModelFamily family = ModelFamily::Qwen4Exp;
  std::string model_type;
  int64_t vocab_size = 0, hidden = 0, layers = 0;
  float rms_eps = 1e-6f;
  std::vector<LayerKind> layer_kinds;
  std::vector<int32_t> eos_ids;

  // attention
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  double rope_theta = 10000.0;
  // QSA indexer (qwen4_exp); indexer_heads == 0 means dense attention
  int64_t indexer_heads = 0, indexer_head_dim = 0, indexer_budget = 0, indexer_ratio = 0;

  // Gated DeltaNet
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, conv_kernel = 4;
  bool output_gate_sigmoid = false;  // else SiLU

  // MoE
  int64_t n_experts = 0, experts_per_tok = 0, moe_inter = 0, shared_inter = 0, dense_inter = 0;
  bool norm_topk_prob = true;
  std::vector<bool> dense_mlp_layers;  // qwen3_next mlp_only_layers / decoder_sparse_step

  // hyper-connections (qwen4_exp)
  int64_t hc_count = 1, hc_rank = 0;

  // PLE hashed n-gram embedding (qwen4_exp)
  std::vector<int> ple_layer_ids;  // 1-based, sorted
  int64_t ple_embed_dim = 0, ple_conv_kernel = 4, ngram_size = 3, heads_per_ngram = 0;
  int64_t ngram_vocab_base = 0, ngram_vocab_divisor = 128;
  uint64_t ple_seed = 1234;

  // MTP draft head (docs/mtp.md): layers the config declares (`mtp_num_hidden_layers`, else
  // `num_nextn_predict_layers`) and layers the model bound (0 or 1, set by Model from the checkpoint).
  int64_t mtp_declared = 0, mtp_layers = 0;

  int64_t max_positions = 0;
  bool tie_embeddings = false;

  static ModelConfig from_json(const nlohmann::json& config);  // throws naming the field
  int64_t linear_key_dim() const { return lin_k_heads * lin_k_dim; }
  int64_t linear_value_dim() const { return lin_v_heads * lin_v_dim; }
  int64_t linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }
  int64_t stream_width() const { return hc_count * hidden; }  // S * D
  int64_t ple_heads() const { return (ngram_size - 1) * heads_per_ngram; }
  int ple_index(int layer) const;  // index into ple_layer_ids for a 0-based layer, or -1
  int32_t eos() const { return eos_ids.empty() ? -1 : eos_ids.front(); }
  std::string family_name() const;
  std::string describe() const;  // multi-line human summary for `deltaserve info`
};

}  // namespace ds
