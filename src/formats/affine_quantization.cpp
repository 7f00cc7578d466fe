#include "formats/affine_quantization.h"

#include "core/error.h"

namespace ds {

using nlohmann::json;

namespace {

const json* find_section(const json& config) {
  for (const char* key : {"quantization", "quantization_config"}) {
    if (config.contains(key) && config[key].is_object()) return &config[key];
  }
  return nullptr;
}

bool supported_bits(int b) {
  return b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8;
}
bool supported_group(int g) {
  return g == 32 || g == 64 || g == 128;
}

// Only affine codes carry biases; other MLX modes (mxfp4, nvfp4, ...) decode differently.
void check_mode(const json& settings, const std::string& where, const std::string& tensor) {
  if (settings.contains("mode") && settings["mode"] != "affine")
    fail("{}: quantization mode {} for tensor '{}' is not supported (only affine)", where,
         settings["mode"].dump(), tensor);
}

}  // namespace

bool affine_params_supported(AffineParams p) {
  return supported_bits(p.bits) && supported_group(p.group);
}

AffineQuantization::AffineQuantization(const json& config, std::string config_file)
    : config_file_(std::move(config_file)) {
  const json* s = find_section(config);
  if (s == nullptr && config.contains("text_config") && config["text_config"].is_object())
    s = find_section(config["text_config"]);
  if (s != nullptr) section_ = *s;
}

std::optional<AffineParams> AffineQuantization::global() const {
  if (!present() || !section_.contains("bits") || !section_.contains("group_size")) return std::nullopt;
  if (!section_["bits"].is_number_integer() || !section_["group_size"].is_number_integer())
    return std::nullopt;
  return AffineParams{section_["bits"].get<int>(), section_["group_size"].get<int>()};
}

std::optional<AffineParams> AffineQuantization::lookup(const std::string& stored_module,
                                                       const std::string& logical_module,
                                                       const std::string& tensor) const {
  if (!present())
    fail("{}: tensor '{}' is affine-quantized (it has scales) but config.json has no quantization section",
         config_file_, tensor);
  check_mode(section_, config_file_, tensor);
  json bits = section_.value("bits", json());
  json group = section_.value("group_size", json());
  for (const std::string& key : {stored_module, logical_module}) {
    if (!section_.contains(key)) continue;
    const json& o = section_[key];
    if (o.is_boolean()) {
      if (!o.get<bool>()) return std::nullopt;
      break;  // true: the global settings apply
    }
    if (!o.is_object())
      fail("{}: quantization override '{}' for tensor '{}' must be an object or false, not {}", config_file_,
           key, tensor, o.dump());
    check_mode(o, config_file_, tensor);
    if (o.contains("bits")) bits = o["bits"];
    if (o.contains("group_size")) group = o["group_size"];
    break;
  }
  if (!bits.is_number_integer() || !group.is_number_integer())
    fail("{}: no integer bits and group_size for quantized tensor '{}' (bits {}, group_size {})",
         config_file_, tensor, bits.dump(), group.dump());
  AffineParams p{bits.get<int>(), group.get<int>()};
  if (!supported_bits(p.bits))
    fail("{}: tensor '{}' uses {}-bit codes; supported are 2, 3, 4, 5, 6, 8", config_file_, tensor, p.bits);
  if (!supported_group(p.group))
    fail("{}: tensor '{}' uses group size {}; supported are 32, 64, 128", config_file_, tensor, p.group);
  return p;
}

}  // namespace ds
