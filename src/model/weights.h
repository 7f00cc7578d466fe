#pragma once
// The model's weights bound from a checkpoint: matrices stay in their checkpoint encoding (mmapped), small
// vectors (norms, gates, conv taps) are copied to f32, centred norms as their effective multiplier 1 + w.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "formats/checkpoint.h"
#include "formats/matrix_weight.h"
#include "model/model_config.h"

namespace ds {

struct HyperConnectionWeights {
  std::vector<float> norm;        // S*D, effective multiplier
  MatrixWeight down, up, inject;  // inject invalid for the final mixer
};

struct DeltaNetWeights {
  MatrixWeight qkv, z, b, a;  // qwen4_exp / qwen3_5_moe split projections
  MatrixWeight qkvz, ba;      // qwen3_next fused projections (reordered per key-head group)
  MatrixWeight out;
  std::vector<float> conv;  // [conv_dim, K]
  std::vector<float> a_log, dt_bias;
  std::vector<float> norm;  // [v_dim] gated norm weight, used as stored
};

struct IndexerWeights {
  MatrixWeight qk;                    // [(n_idx + 1) * idx_hd, D]
  std::vector<float> q_norm, k_norm;  // effective multipliers
};

struct AttentionWeights {
  MatrixWeight q, k, v, o;
  std::vector<float> q_norm, k_norm;
  bool has_indexer = false;
  IndexerWeights indexer;
};

struct MlpWeights {
  MatrixWeight gate, up, down;
};

struct MoeWeights {
  MatrixWeight router;              // [E, D]
  std::vector<MlpWeights> experts;  // E
  bool has_shared = false;
  MlpWeights shared;
  MatrixWeight shared_gate;  // [1, D]
  bool dense = false;        // qwen3_next dense layers use `dense_mlp` only
  MlpWeights dense_mlp;
};

struct PleWeights {
  std::vector<MatrixWeight> table_shards;  // concatenated in order: the n-gram table
  std::vector<int64_t> shard_first_row;    // first global row of each shard
  int64_t head_width = 0;
  MatrixWeight key, value;
  std::vector<float> norm_key, norm_query, norm_conv;  // effective multipliers, S*D
  std::vector<float> conv;                             // [S*D, K]
  std::vector<int64_t> multipliers;                    // ngram_size
  std::vector<int64_t> head_vocab, head_offset;        // per n-gram head
};

struct LayerWeights {
  LayerKind kind = LayerKind::LinearAttention;
  DeltaNetWeights deltanet;
  AttentionWeights attention;
  MoeWeights moe;
  // qwen4_exp
  HyperConnectionWeights hc_attn, hc_mlp;
  bool has_ple = false;
  PleWeights ple;
  // qwen3_next / qwen3_5_moe pre-norm residuals
  std::vector<float> input_norm, post_attention_norm;
};

struct ModelWeights {
  MatrixWeight embed, lm_head;
  std::vector<LayerWeights> layers;
  HyperConnectionWeights final_mixer;  // qwen4_exp
  std::vector<float> final_norm;       // qwen3_next / qwen3_5_moe
};

// Binds every tensor the config calls for; throws ds::Error naming the missing or mis-shaped tensor.
ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& cfg);

// Pieces of bind_weights, reused by the MTP head; each throws naming the tensor whose shape disagrees.
MatrixWeight bind_matrix(const Checkpoint& ckpt, const std::string& module, int64_t rows, int64_t cols);
std::vector<float> bind_centred_norm(const Checkpoint& ckpt, const std::string& module, int64_t n);
HyperConnectionWeights bind_hyper_connection(const Checkpoint& ckpt, const ModelConfig& cfg,
                                             const std::string& module, bool inject);
// One decoder layer at module path `module` ("layers.3", "mtp.layers.0"), without PLE: its mixer, MLP (dense
// or MoE), and hyper-connections (qwen4_exp) or pre-norms.
LayerWeights bind_layer(const Checkpoint& ckpt, const ModelConfig& cfg, const std::string& module,
                        LayerKind kind, bool dense_mlp);

// The PLE constants derived from the config (multipliers, primes, offsets), as the reference computes them.
void derive_ple_constants(const ModelConfig& cfg, int ple_index, std::vector<int64_t>& multipliers,
                          std::vector<int64_t>& head_vocab, std::vector<int64_t>& head_offset);

}  // namespace ds
