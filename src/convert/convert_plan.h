#pragma once
// What `deltaserve convert` writes for each input tensor: the MLX name, the transform (copy, norm stored as
// 1 + w, experts stacked as switch_mlp [E, out, in]) and, for linear weights, the affine settings chosen by
// the defaults (mlx-lm's rules plus the exclusions in docs/convert.md) and the user's --override rules.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert/affine_quantize.h"
#include "core/dtype.h"
#include "formats/affine_quantization.h"
#include "formats/checkpoint.h"

namespace ds {

// `--override GLOB=BITS:GROUP` or `GLOB=none` (params nullopt: keep unquantized).
struct ModuleOverride {
  std::string glob;
  std::optional<AffineParams> params;
  std::string text;  // as given, for messages
};
// Parses one --override argument; throws naming it when malformed or unsupported.
ModuleOverride parse_module_override(const std::string& arg);

struct ConvertOptions {
  AffineParams global{4, 64};
  std::vector<ModuleOverride> overrides;  // the last matching rule wins
  int min_rows = 16;  // linear weights with fewer output rows (small gates) stay as stored
  size_t max_shard_bytes = size_t{5} << 30;
  bool force = false;  // write into a non-empty output directory
  MlxRounding rounding = MlxRounding::Metal;
};

// Bytes of the input read, in order, to form one output tensor (several for stacked experts).
struct TensorSource {
  DType dtype = DType::BF16;
  std::vector<std::pair<const uint8_t*, size_t>> ranges;
  std::vector<std::string> inputs;  // the input tensor names, for messages
};

enum class Transform { Copy, ShiftNorm };

struct PlannedModule {
  std::string logical;     // the HF text name without prefix: "layers.0.mlp.switch_mlp.gate_proj", "lm_head"
  std::string out_tensor;  // the stored name when written unquantized ("model.norm.weight", "mtp.fc.weight")
  std::vector<int64_t> shape;  // output shape ([E, out, in] for stacked experts)
  TensorSource source;
  Transform transform = Transform::Copy;
  bool linear = false;                // a linear/embedding weight: a quantization candidate
  std::optional<AffineParams> quant;  // chosen settings (linear only); nullopt: written as stored
  std::string reason;                 // why a linear stays unquantized
  // The stored module path: out_tensor without ".weight" (the key of config `quantization`).
  std::string out_module() const;
  int64_t rows() const;  // all leading dimensions folded
  int64_t cols() const { return shape.back(); }
};

struct ConvertPlan {
  std::vector<PlannedModule> modules;
  bool multimodal = false;  // mlx-vlm names (language_model.model.) instead of mlx-lm names (model.)
};

// Plans the conversion of `ck` (HF or HF multimodal layout). Throws naming the tensor or override when an
// override matches nothing, names an unsupported width, or its group does not divide the input width.
ConvertPlan plan_conversion(const Checkpoint& ck, const ConvertOptions& options);

}  // namespace ds
