#include "model/model_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"

namespace ds {

namespace {

using nlohmann::json;

template <typename T>
T need(const json& c, const char* key) {
  if (!c.contains(key) || c[key].is_null()) fail("config.json: missing required field '{}'", key);
  try {
    return c[key].get<T>();
  } catch (const json::exception& e) {
    fail("config.json: field '{}' has the wrong type ({})", key, e.what());
  }
}

template <typename T>
T get_or(const json& c, const char* key, T fallback) {
  if (!c.contains(key) || c[key].is_null()) return fallback;
  try {
    return c[key].get<T>();
  } catch (const json::exception& e) {
    fail("config.json: field '{}' has the wrong type ({})", key, e.what());
  }
}

}  // namespace

ModelConfig ModelConfig::from_json(const json& root) {
  const json& c =
      root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  ModelConfig m;
  m.model_type = get_or<std::string>(c, "model_type", get_or<std::string>(root, "model_type", ""));
  if (m.model_type == "qwen4_exp_text" || m.model_type == "qwen4_exp")
    m.family = ModelFamily::Qwen4Exp;
  else if (m.model_type == "qwen3_next")
    m.family = ModelFamily::Qwen3Next;
  else if (m.model_type == "qwen3_5_moe_text" || m.model_type == "qwen3_5_moe")
    m.family = ModelFamily::Qwen35Moe;
  else
    fail(
        "config.json: unsupported model_type '{}' (expected qwen4_exp, qwen4_exp_text, qwen3_next, "
        "qwen3_5_moe or qwen3_5_moe_text)",
        m.model_type);

  m.vocab_size = need<int64_t>(c, "vocab_size");
  m.hidden = need<int64_t>(c, "hidden_size");
  m.layers = need<int64_t>(c, "num_hidden_layers");
  m.rms_eps = get_or<float>(c, "rms_norm_eps", 1e-6f);
  m.max_positions = get_or<int64_t>(c, "max_position_embeddings", 32768);
  m.tie_embeddings = get_or<bool>(c, "tie_word_embeddings", get_or<bool>(root, "tie_word_embeddings", false));

  const json& eos = c.contains("eos_token_id") ? c["eos_token_id"] : root.value("eos_token_id", json());
  if (eos.is_number_integer()) m.eos_ids.push_back(eos.get<int32_t>());
  if (eos.is_array())
    for (const auto& e : eos) m.eos_ids.push_back(e.get<int32_t>());

  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    for (const auto& t : c["layer_types"]) {
      std::string s = t.get<std::string>();
      if (s == "linear_attention")
        m.layer_kinds.push_back(LayerKind::LinearAttention);
      else if (s == "full_attention" || s == "qwen_sparse_attention" || s == "indexed_attention")
        m.layer_kinds.push_back(LayerKind::Attention);
      else
        fail("config.json: layer_types has unsupported entry '{}'", s);
    }
  } else {
    int64_t interval = get_or<int64_t>(c, "full_attention_interval", 4);
    for (int64_t i = 0; i < m.layers; ++i)
      m.layer_kinds.push_back((i + 1) % interval ? LayerKind::LinearAttention : LayerKind::Attention);
  }
  if (static_cast<int64_t>(m.layer_kinds.size()) != m.layers)
    fail("config.json: layer_types has {} entries but num_hidden_layers is {}", m.layer_kinds.size(),
         m.layers);

  m.n_heads = need<int64_t>(c, "num_attention_heads");
  m.n_kv_heads = need<int64_t>(c, "num_key_value_heads");
  m.head_dim = get_or<int64_t>(c, "head_dim", m.hidden / m.n_heads);
  json rope = c.value("rope_parameters", json::object());
  if (rope.is_null()) rope = json::object();
  double partial = rope.value("partial_rotary_factor", c.value("partial_rotary_factor", 1.0));
  if (m.family == ModelFamily::Qwen3Next && !rope.contains("partial_rotary_factor") &&
      !c.contains("partial_rotary_factor"))
    partial = 0.25;  // transformers' default for qwen3_next
  m.rope_theta = rope.value("rope_theta", c.value("rope_theta", 10000.0));
  std::string rope_type = rope.value("rope_type", std::string("default"));
  if (rope_type != "default")
    fail("config.json: rope_type '{}' is not supported (only 'default')", rope_type);
  m.rotary_dim = static_cast<int64_t>(static_cast<double>(m.head_dim) * partial);

  m.lin_k_heads = need<int64_t>(c, "linear_num_key_heads");
  m.lin_v_heads = need<int64_t>(c, "linear_num_value_heads");
  m.lin_k_dim = need<int64_t>(c, "linear_key_head_dim");
  m.lin_v_dim = need<int64_t>(c, "linear_value_head_dim");
  m.conv_kernel = get_or<int64_t>(c, "linear_conv_kernel_dim", 4);
  if (m.lin_v_heads % m.lin_k_heads != 0)
    fail("config.json: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})",
         m.lin_v_heads, m.lin_k_heads);
  std::string act = get_or<std::string>(c, "hidden_act", "silu");
  std::string gate =
      m.family == ModelFamily::Qwen4Exp ? get_or<std::string>(c, "output_gate_type", act) : "silu";
  if (gate != "silu" && gate != "sigmoid")
    fail("config.json: output_gate_type '{}' is not silu or sigmoid", gate);
  m.output_gate_sigmoid = gate == "sigmoid";
  if (act != "silu") fail("config.json: hidden_act '{}' is not supported (only silu)", act);

  m.n_experts = need<int64_t>(c, "num_experts");
  m.experts_per_tok = need<int64_t>(c, "num_experts_per_tok");
  m.moe_inter = need<int64_t>(c, "moe_intermediate_size");
  m.shared_inter = get_or<int64_t>(c, "shared_expert_intermediate_size", 0);
  m.norm_topk_prob = get_or<bool>(c, "norm_topk_prob", true);
  m.dense_inter = get_or<int64_t>(c, "intermediate_size", 0);
  m.dense_mlp_layers.assign(m.layers, false);
  if (m.family == ModelFamily::Qwen3Next) {
    auto only = get_or<std::vector<int64_t>>(c, "mlp_only_layers", {});
    int64_t step = get_or<int64_t>(c, "decoder_sparse_step", 1);
    for (int64_t i = 0; i < m.layers; ++i) {
      bool sparse =
          std::find(only.begin(), only.end(), i) == only.end() && m.n_experts > 0 && (i + 1) % step == 0;
      m.dense_mlp_layers[i] = !sparse;
    }
  }
  if (m.experts_per_tok <= 0 || m.experts_per_tok > m.n_experts)
    fail("config.json: num_experts_per_tok ({}) must be in [1, num_experts={}]", m.experts_per_tok,
         m.n_experts);

  for (const char* key : {"mtp_num_hidden_layers", "num_nextn_predict_layers"})
    if (c.contains(key) && !c[key].is_null()) {
      m.mtp_declared = need<int64_t>(c, key);
      break;
    }
  if (m.mtp_declared < 0) fail("config.json: the MTP layer count must be >= 0, got {}", m.mtp_declared);

  if (m.family == ModelFamily::Qwen4Exp) {
    m.hc_count = need<int64_t>(c, "hc_count");
    m.hc_rank = need<int64_t>(c, "hc_lowrank");
    if (m.hc_count <= 1) fail("config.json: hc_count must be > 1 for qwen4_exp, got {}", m.hc_count);
    m.ple_layer_ids = get_or<std::vector<int>>(c, "ple_layer_ids", {});
    std::sort(m.ple_layer_ids.begin(), m.ple_layer_ids.end());
    m.ple_layer_ids.erase(std::unique(m.ple_layer_ids.begin(), m.ple_layer_ids.end()), m.ple_layer_ids.end());
    m.ple_embed_dim = get_or<int64_t>(c, "ple_embed_dim", m.hidden);
    m.ple_conv_kernel = get_or<int64_t>(c, "ple_conv_kernel_size", 4);
    m.ngram_size = get_or<int64_t>(c, "ngram_size", 3);
    m.heads_per_ngram = get_or<int64_t>(c, "heads_per_ngram", 8);
    m.ngram_vocab_base = get_or<int64_t>(c, "ngram_vocab_size_base", 20000000);
    m.ngram_vocab_divisor = get_or<int64_t>(c, "make_ngram_vocab_size_divisible_by", 128);
    m.ple_seed = get_or<uint64_t>(c, "seed", 1234);
    for (int id : m.ple_layer_ids) {
      if (id < 1 || id > m.layers)
        fail("config.json: ple_layer_ids entry {} is outside [1, {}]", id, m.layers);
      if (m.layer_kinds[id - 1] != LayerKind::LinearAttention)
        fail("config.json: ple_layer_ids entry {} is not a linear_attention layer", id);
    }
    if (!m.ple_layer_ids.empty()) {
      if (m.eos_ids.empty()) fail("config.json: eos_token_id must be set when ple_layer_ids is non-empty");
      if (m.ple_heads() <= 0 || m.ple_embed_dim % m.ple_heads() != 0)
        fail("config.json: ple_embed_dim ({}) must be divisible by (ngram_size-1)*heads_per_ngram ({})",
             m.ple_embed_dim, m.ple_heads());
    }
    if (c.contains("indexer_n_heads") && !c["indexer_n_heads"].is_null()) {
      m.indexer_heads = need<int64_t>(c, "indexer_n_heads");
      m.indexer_head_dim = need<int64_t>(c, "indexer_head_dim");
      m.indexer_budget = need<int64_t>(c, "indexer_budget");
      m.indexer_ratio = need<int64_t>(c, "indexer_compress_ratio");
      if (get_or<int64_t>(c, "indexer_kv_heads", 1) != 1) fail("config.json: indexer_kv_heads must be 1");
      if (m.indexer_budget % m.indexer_ratio != 0)
        fail("config.json: indexer_budget ({}) must be divisible by indexer_compress_ratio ({})",
             m.indexer_budget, m.indexer_ratio);
      if (m.rotary_dim > m.indexer_head_dim)
        fail("config.json: rotary dim {} exceeds indexer_head_dim {}", m.rotary_dim, m.indexer_head_dim);
    }
  }
  return m;
}

int ModelConfig::ple_index(int layer) const {
  for (size_t i = 0; i < ple_layer_ids.size(); ++i)
    if (ple_layer_ids[i] == layer + 1) return static_cast<int>(i);
  return -1;
}

std::string ModelConfig::family_name() const {
  switch (family) {
    case ModelFamily::Qwen4Exp:
      return "qwen4_exp";
    case ModelFamily::Qwen3Next:
      return "qwen3_next";
    case ModelFamily::Qwen35Moe:
      return "qwen3_5_moe";
  }
  return "?";
}

std::string ModelConfig::describe() const {
  int64_t n_lin = std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::LinearAttention);
  std::string s = fmt::format("architecture: {} ({})\n", family_name(), model_type);
  s += fmt::format("layers: {} ({} Gated DeltaNet, {} attention), hidden {}, vocabulary {}\n", layers, n_lin,
                   layers - n_lin, hidden, vocab_size);
  s += fmt::format("attention: {} heads / {} kv heads of {}, rotary dim {}, theta {}", n_heads, n_kv_heads,
                   head_dim, rotary_dim, rope_theta);
  if (indexer_heads)
    s += fmt::format(", QSA indexer {} heads of {}, budget {} tokens in blocks of {}", indexer_heads,
                     indexer_head_dim, indexer_budget, indexer_ratio);
  s += fmt::format("\ndeltanet: {} key heads of {}, {} value heads of {}, conv {}, output gate {}\n",
                   lin_k_heads, lin_k_dim, lin_v_heads, lin_v_dim, conv_kernel,
                   output_gate_sigmoid ? "sigmoid" : "silu");
  s += fmt::format("moe: {} experts, top {}, width {}, shared width {}\n", n_experts, experts_per_tok,
                   moe_inter, shared_inter);
  if (family == ModelFamily::Qwen4Exp) {
    s += fmt::format("hyper-connections: {} streams, rank {}\n", hc_count, hc_rank);
    if (!ple_layer_ids.empty())
      s += fmt::format("ple: layers {}, embed {}, {}-grams x {} heads, base {}\n",
                       fmt::join(ple_layer_ids, ","), ple_embed_dim, ngram_size, heads_per_ngram,
                       ngram_vocab_base);
  }
  if (mtp_layers > 0)
    s += fmt::format("mtp: draft head present ({} form, {} layer)\n",
                     family == ModelFamily::Qwen4Exp ? "Flash Next" : "qwen3_next", mtp_layers);
  else if (mtp_declared == 0)
    s += "mtp: none\n";
  else if (mtp_declared > 1)
    s += fmt::format("mtp: none loaded ({} layers declared; only 1 is supported)\n", mtp_declared);
  else if (family == ModelFamily::Qwen35Moe)
    s += "mtp: none loaded (no head form for qwen3_5_moe yet)\n";
  else
    s += "mtp: none (config declares 1 layer; the checkpoint has no mtp.* tensors)\n";
  return s;
}

}  // namespace ds
