#pragma once
// The MLX affine quantization settings of a checkpoint: config.json `quantization` (or
// `quantization_config`), a global {bits, group_size} plus per-module overrides keyed by module path ({bits,
// group_size} or false).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace ds {

struct AffineParams {
  int bits = 0;
  int group = 0;
  bool operator==(const AffineParams&) const = default;
};

// Whether MLX affine kernels exist for these settings: bits 2, 3, 4, 5, 6, 8; group 32, 64, 128.
bool affine_params_supported(AffineParams p);

class AffineQuantization {
 public:
  AffineQuantization() = default;
  // `config` is the whole config.json (looked up at top level, then under text_config); `config_file` names
  // it.
  AffineQuantization(const nlohmann::json& config, std::string config_file);

  // Whether config.json has a quantization section at all.
  bool present() const { return !section_.is_null(); }
  // The global settings, when the section has both bits and group_size.
  std::optional<AffineParams> global() const;
  // Settings for the module stored as `stored_module` (logical name `logical_module`): an override keyed by
  // the stored path, else by the logical name, else the global. nullopt when an override says false
  // (unquantized). Throws naming `tensor` when the settings are missing, of another mode, or unsupported.
  std::optional<AffineParams> lookup(const std::string& stored_module, const std::string& logical_module,
                                     const std::string& tensor) const;

 private:
  nlohmann::json section_;
  std::string config_file_;
};

}  // namespace ds
