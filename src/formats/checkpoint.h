#pragma once
// A model checkpoint as users download it: config.json plus safetensors, in the HF layout
// (`model.`), the multimodal layout (`model.language_model.`), or an MLX layout (`language_model.model.`,
// stacked `switch_mlp` experts, affine-quantized modules, norms stored as 1 + w).
// Model code asks for weights by their HF text-model names without prefix, e.g.
// "layers.3.linear_attn.in_proj_qkv" or "embed_tokens"; "lm_head" is the output head.
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/affine_quantization.h"
#include "formats/matrix_weight.h"
#include "formats/safetensors.h"

namespace ds {

enum class CheckpointLayout { HF, HFMultimodal, MLX };

// The module a tensor belongs to: its name without a trailing ".weight" ("a.b.weight" -> "a.b").
std::string module_of_tensor(const std::string& tensor);

class Checkpoint {
 public:
  // Reads DIR/config.json and the tensors; throws ds::Error naming the file on failure.
  explicit Checkpoint(const std::filesystem::path& dir);
  // A checkpoint over tensors built elsewhere (dummy weights in memory); `config` is its config.json and
  // the store's dir() names it in errors. Layout, prefixes and norm convention are detected as for files.
  Checkpoint(nlohmann::json config, std::unique_ptr<TensorStore> store);

  const nlohmann::json& config() const { return config_; }
  // The text model's config: config["text_config"] when nested, else config itself.
  const nlohmann::json& text_config() const;
  CheckpointLayout layout() const { return layout_; }
  const TensorStore& store() const { return *store_; }

  // True when the module's weight exists (quantized or not).
  bool has(const std::string& module) const;
  // The module's `.weight` as a matrix (2-D; a 3-D stacked tensor is an error here), affine when the module
  // has `.scales`/`.biases`, with bits/group from config `quantization` (per-module override, else global);
  // throws naming the tensor when missing or when shapes disagree with the quantization.
  MatrixWeight matrix(const std::string& module) const;
  // Expert `expert` of layer `layer`'s MoE, proj one of "gate_proj", "up_proj", "down_proj": per-expert HF
  // tensors (mlp.experts.E.proj), stacked MLX `mlp.switch_mlp.proj` [E, out, in], or fused HF
  // `mlp.experts.gate_up_proj` [E, 2I, H] / `mlp.experts.down_proj` [E, H, I].
  MatrixWeight expert_matrix(int layer, int expert, const std::string& proj) const;
  // The same for the MoE at module path `mlp` (e.g. "mtp.layers.0.mlp").
  MatrixWeight expert_matrix(const std::string& mlp, int expert, const std::string& proj) const;
  // Any tensor (`module.weight`, or a full tensor name when `module` names a non-weight tensor such as
  // "layers.0.linear_attn.A_log") as f32 values in row-major order, dequantized when affine. Depthwise conv
  // weights are [C, 1, K] in HF and [C, K, 1] in MLX; both flatten to c*K + k, so callers need not care.
  std::vector<float> floats(const std::string& name) const;
  // A centred RMSNorm weight as the multiplier it applies: 1 + w, whether stored around 0 or as 1 + w.
  std::vector<float> centred_norm(const std::string& module) const;
  // Whether centred-norm weights are stored as 1 + w (detected from the stored values; MLX conversions do).
  bool norms_stored_shifted() const { return norms_shifted_; }
  // The stored tensor name for a logical name (with `.weight` etc. appended by the caller), or nullopt.
  std::optional<std::string> resolve(const std::string& logical_tensor) const;
  // Integer tensor values (I64/I32), for constants such as PLE `layer_multipliers`.
  std::vector<int64_t> ints(const std::string& name) const;
  // One-line description of the quantization found ("bf16", "mlx affine 4-bit g64 with overrides ...").
  std::string quantization_summary() const;

 private:
  std::filesystem::path dir_;
  nlohmann::json config_;
  std::unique_ptr<TensorStore> store_;
  CheckpointLayout layout_ = CheckpointLayout::HF;
  std::vector<std::string> prefixes_;  // tried in order when resolving a logical name
  bool norms_shifted_ = false;
  AffineQuantization quant_;

  // The stored name of `name` as given, else of `name.weight`; throws naming `name` when neither exists.
  std::string find_tensor(const std::string& name) const;
  // The stored `.weight` of a module; "lm_head" falls back to "embed_tokens" when tie_word_embeddings is set.
  std::optional<std::string> resolve_weight(const std::string& module) const;
  // A stored weight as a matrix, leading dimensions folded into rows ([E, out, in] -> [E*out, in]).
  MatrixWeight view(const std::string& stored, const std::string& logical_module) const;
  // The stored name with its layout prefix removed (the logical name), for override lookups.
  std::string logical_of(const std::string& stored) const;
  std::vector<float> stored_floats(const std::string& stored) const;
  bool detect_shifted_norms() const;
  // Layout and prefixes from the stored names, then the norm convention; both constructors end here.
  void detect_layout();
};

// Whether a module (logical name, e.g. "layers.0.self_attn.q_norm") is a centred RMSNorm applied as 1 + w.
bool is_centred_norm_module(const std::string& logical_module);

}  // namespace ds
