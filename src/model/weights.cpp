#include "model/weights.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace ds {

namespace {

MatrixWeight matrix(const Checkpoint& ck, const std::string& module, int64_t rows, int64_t cols) {
  MatrixWeight w = ck.matrix(module);
  if (w.rows != rows || w.cols != cols)
    fail("tensor '{}' has shape [{}, {}] but the config implies [{}, {}]", w.name, w.rows, w.cols, rows,
         cols);
  return w;
}

std::vector<float> vec(const Checkpoint& ck, const std::string& name, int64_t n) {
  std::vector<float> v = ck.floats(name);
  if (static_cast<int64_t>(v.size()) != n)
    fail("tensor '{}' has {} values but the config implies {}", name, v.size(), n);
  return v;
}

std::vector<float> centred(const Checkpoint& ck, const std::string& module, int64_t n) {
  std::vector<float> v = ck.centred_norm(module);
  if (static_cast<int64_t>(v.size()) != n)
    fail("norm '{}' has {} values but the config implies {}", module, v.size(), n);
  return v;
}

// Plain (not centred) RMSNorm weights of qwen3_next / qwen3_5_moe decoder layers are centred too: (1 + w).
HyperConnectionWeights bind_hc(const Checkpoint& ck, const ModelConfig& c, const std::string& p,
                               bool inject) {
  HyperConnectionWeights h;
  int64_t sd = c.stream_width();
  h.norm = centred(ck, p + ".hc_norm", sd);
  h.down = matrix(ck, p + ".input_mix_weight_down", c.hc_rank, sd);
  h.up = matrix(ck, p + ".input_mix_weight_up", sd, c.hc_rank);
  if (inject) h.inject = matrix(ck, p + ".block_inject_weight", c.hc_count, sd);
  return h;
}

MlpWeights bind_mlp(const Checkpoint& ck, const std::string& p, int64_t d, int64_t inter) {
  return {matrix(ck, p + ".gate_proj", inter, d), matrix(ck, p + ".up_proj", inter, d),
          matrix(ck, p + ".down_proj", d, inter)};
}

DeltaNetWeights bind_deltanet(const Checkpoint& ck, const ModelConfig& c, const std::string& p) {
  DeltaNetWeights w;
  int64_t d = c.hidden, kd = c.linear_key_dim(), vd = c.linear_value_dim(), nv = c.lin_v_heads;
  if (c.family == ModelFamily::Qwen3Next) {
    w.qkvz = matrix(ck, p + ".in_proj_qkvz", 2 * kd + 2 * vd, d);
    w.ba = matrix(ck, p + ".in_proj_ba", 2 * nv, d);
  } else {
    w.qkv = matrix(ck, p + ".in_proj_qkv", 2 * kd + vd, d);
    w.z = matrix(ck, p + ".in_proj_z", vd, d);
    w.b = matrix(ck, p + ".in_proj_b", nv, d);
    w.a = matrix(ck, p + ".in_proj_a", nv, d);
  }
  w.out = matrix(ck, p + ".out_proj", d, vd);
  w.conv = vec(ck, p + ".conv1d", c.linear_conv_dim() * c.conv_kernel);
  w.a_log = vec(ck, p + ".A_log", nv);
  w.dt_bias = vec(ck, p + ".dt_bias", nv);
  w.norm = vec(ck, p + ".norm", c.lin_v_dim);
  return w;
}

AttentionWeights bind_attention(const Checkpoint& ck, const ModelConfig& c, const std::string& p) {
  AttentionWeights w;
  int64_t d = c.hidden, hd = c.head_dim;
  w.q = matrix(ck, p + ".q_proj", c.n_heads * hd * 2, d);
  w.k = matrix(ck, p + ".k_proj", c.n_kv_heads * hd, d);
  w.v = matrix(ck, p + ".v_proj", c.n_kv_heads * hd, d);
  w.o = matrix(ck, p + ".o_proj", d, c.n_heads * hd);
  w.q_norm = centred(ck, p + ".q_norm", hd);
  w.k_norm = centred(ck, p + ".k_norm", hd);
  if (c.indexer_heads > 0) {
    w.has_indexer = true;
    int64_t ihd = c.indexer_head_dim;
    w.indexer.qk = matrix(ck, p + ".indexer.index_qk_proj", (c.indexer_heads + 1) * ihd, d);
    w.indexer.q_norm = centred(ck, p + ".indexer.q_layernorm", ihd);
    w.indexer.k_norm = centred(ck, p + ".indexer.k_layernorm", ihd);
  }
  return w;
}

MoeWeights bind_moe(const Checkpoint& ck, const ModelConfig& c, const std::string& p, bool dense) {
  MoeWeights m;
  int64_t d = c.hidden;
  if (dense) {
    m.dense = true;
    m.dense_mlp = bind_mlp(ck, p, d, c.dense_inter);
    return m;
  }
  m.router = matrix(ck, p + ".gate", c.n_experts, d);
  for (int e = 0; e < c.n_experts; ++e) {
    MlpWeights ew{ck.expert_matrix(p, e, "gate_proj"), ck.expert_matrix(p, e, "up_proj"),
                  ck.expert_matrix(p, e, "down_proj")};
    if (ew.gate.rows != c.moe_inter || ew.gate.cols != d || ew.up.rows != c.moe_inter || ew.up.cols != d ||
        ew.down.rows != d || ew.down.cols != c.moe_inter)
      fail("expert {} of '{}' ('{}') does not have the shapes [{}, {}] / [{}, {}] the config implies", e, p,
           ew.gate.name, c.moe_inter, d, d, c.moe_inter);
    m.experts.push_back(ew);
  }
  if (c.shared_inter > 0 && ck.has(p + ".shared_expert.gate_proj")) {
    m.has_shared = true;
    m.shared = bind_mlp(ck, p + ".shared_expert", d, c.shared_inter);
    m.shared_gate = matrix(ck, p + ".shared_expert_gate", 1, d);
  }
  return m;
}

PleWeights bind_ple(const Checkpoint& ck, const ModelConfig& c, int layer, int ple_index) {
  PleWeights w;
  std::string p = fmt::format("layers.{}.ple", layer);
  int64_t sd = c.stream_width(), e = c.ple_embed_dim;
  w.head_width = e / c.ple_heads();
  derive_ple_constants(c, ple_index, w.multipliers, w.head_vocab, w.head_offset);
  // The checkpoint's own constants must equal the derived ones: a mismatch means a different hash.
  auto check = [&](const char* leaf, const std::vector<int64_t>& want) {
    std::string name = p + ".ple_embedding." + leaf;
    if (!ck.resolve(name)) return;
    if (ck.ints(name) != want) fail("tensor '{}' differs from the values derived from config.json", name);
  };
  check("layer_multipliers", w.multipliers);
  check("ngram_heads_vocab_sizes", w.head_vocab);
  check("ngram_heads_offsets", w.head_offset);
  int64_t total = w.head_offset.back() + w.head_vocab.back();
  int64_t rows = 0;
  for (int s = 0;; ++s) {
    std::string shard = fmt::format("{}.ple_embedding.ngram_embedding.shard_{}", p, s);
    if (!ck.has(shard)) {
      if (s == 0 && ck.has(p + ".ple_embedding.ngram_embedding"))
        shard = p + ".ple_embedding.ngram_embedding";
      else
        break;
    }
    MatrixWeight t = ck.matrix(shard);
    if (t.cols != w.head_width)
      fail("tensor '{}' has rows of {} values but ple_embed_dim / heads is {}", t.name, t.cols, w.head_width);
    w.shard_first_row.push_back(rows);
    rows += t.rows;
    w.table_shards.push_back(t);
    if (shard == p + ".ple_embedding.ngram_embedding") break;
  }
  if (w.table_shards.empty())
    fail("layer {}: no PLE n-gram table found ('{}.ple_embedding.ngram_embedding')", layer, p);
  if (rows < total)
    fail("layer {}: the PLE n-gram table has {} rows but the hashed heads need {}", layer, rows, total);
  w.key = matrix(ck, p + ".key_proj", sd, e);
  w.value = matrix(ck, p + ".value_proj", c.hidden, e);
  w.norm_key = centred(ck, p + ".norm_key", sd);
  w.norm_query = centred(ck, p + ".norm_query", sd);
  w.norm_conv = centred(ck, p + ".norm_conv", sd);
  w.conv = vec(ck, p + ".conv1d", sd * c.ple_conv_kernel);
  return w;
}

}  // namespace

MatrixWeight bind_matrix(const Checkpoint& ck, const std::string& module, int64_t rows, int64_t cols) {
  return matrix(ck, module, rows, cols);
}

std::vector<float> bind_centred_norm(const Checkpoint& ck, const std::string& module, int64_t n) {
  return centred(ck, module, n);
}

HyperConnectionWeights bind_hyper_connection(const Checkpoint& ck, const ModelConfig& c, const std::string& p,
                                             bool inject) {
  return bind_hc(ck, c, p, inject);
}

LayerWeights bind_layer(const Checkpoint& ck, const ModelConfig& c, const std::string& p, LayerKind kind,
                        bool dense_mlp) {
  LayerWeights lw;
  lw.kind = kind;
  if (kind == LayerKind::LinearAttention)
    lw.deltanet = bind_deltanet(ck, c, p + ".linear_attn");
  else
    lw.attention = bind_attention(ck, c, p + ".self_attn");
  lw.moe = bind_moe(ck, c, p + ".mlp", dense_mlp);
  if (c.family == ModelFamily::Qwen4Exp) {
    lw.hc_attn = bind_hc(ck, c, p + ".attn_hyper_connection", true);
    lw.hc_mlp = bind_hc(ck, c, p + ".mlp_hyper_connection", true);
  } else {
    lw.input_norm = centred(ck, p + ".input_layernorm", c.hidden);
    lw.post_attention_norm = centred(ck, p + ".post_attention_layernorm", c.hidden);
  }
  return lw;
}

void derive_ple_constants(const ModelConfig& c, int ple_index, std::vector<int64_t>& multipliers,
                          std::vector<int64_t>& head_vocab, std::vector<int64_t>& head_offset) {
  auto splitmix = [](uint64_t v) {
    v += 0x9E3779B97F4A7C15ull;
    v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
    v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
    return v ^ (v >> 31);
  };
  const uint64_t max_long = (1ull << 63) - 1;
  uint64_t half =
      std::max<uint64_t>(1, (max_long / static_cast<uint64_t>(std::max<int64_t>(c.vocab_size, 1))) / 2);
  uint64_t base_seed = c.ple_seed + 10007ull * static_cast<uint64_t>(ple_index);
  multipliers.clear();
  for (int64_t i = 0; i < c.ngram_size; ++i) {
    uint64_t v = base_seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(i + 1);
    multipliers.push_back(static_cast<int64_t>(2 * (splitmix(v) % half) + 1));
  }
  auto is_prime = [](int64_t v) {
    if (v < 2) return false;
    if (v % 2 == 0) return v == 2;
    for (int64_t d = 3; d * d <= v; d += 2)
      if (v % d == 0) return false;
    return true;
  };
  int64_t nh = c.ple_heads();
  head_vocab.clear();
  head_offset.clear();
  // Head h of PLE layer p uses the (p*NH + h + 1)-th prime >= base; walk the primes once.
  int64_t prime = c.ngram_vocab_base - 1, total = 0;
  for (int64_t g = 0; g < static_cast<int64_t>(ple_index) * nh + nh; ++g) {
    ++prime;
    while (!is_prime(prime)) ++prime;
    if (g >= static_cast<int64_t>(ple_index) * nh) {
      head_vocab.push_back(prime);
      head_offset.push_back(total);
      total += prime;
    }
  }
}

ModelWeights bind_weights(const Checkpoint& ck, const ModelConfig& c) {
  ModelWeights w;
  w.embed = matrix(ck, "embed_tokens", c.vocab_size, c.hidden);
  if (ck.has("lm_head"))
    w.lm_head = matrix(ck, "lm_head", c.vocab_size, c.hidden);
  else if (c.tie_embeddings)
    w.lm_head = w.embed;
  else
    fail("checkpoint has no 'lm_head' tensor and tie_word_embeddings is false");
  for (int l = 0; l < c.layers; ++l) {
    LayerWeights lw = bind_layer(ck, c, fmt::format("layers.{}", l), c.layer_kinds[l], c.dense_mlp_layers[l]);
    int pi = c.family == ModelFamily::Qwen4Exp ? c.ple_index(l) : -1;
    if (pi >= 0) {
      lw.has_ple = true;
      lw.ple = bind_ple(ck, c, l, pi);
    }
    w.layers.push_back(std::move(lw));
  }
  if (c.family == ModelFamily::Qwen4Exp)
    w.final_mixer = bind_hc(ck, c, "hyper_connection_mixer", false);
  else
    w.final_norm = centred(ck, "norm", c.hidden);
  return w;
}

}  // namespace ds
