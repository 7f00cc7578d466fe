#include "formats/checkpoint.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"

namespace ds {

namespace fs = std::filesystem;
using nlohmann::json;

std::string module_of_tensor(const std::string& tensor) {
  return tensor.ends_with(".weight") ? tensor.substr(0, tensor.size() - 7) : tensor;
}

namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Mapped data need not be aligned for its dtype, so every element is read by memcpy.
template <typename T>
T load(const void* base, int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const uint8_t*>(base) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

// RMSNorm weights applied as 1 + w; `linear_attn.norm` is a gated norm used as stored, so it is not here.
const std::set<std::string> kCentredNormLeaves = {"q_norm",
                                                  "k_norm",
                                                  "q_layernorm",
                                                  "k_layernorm",
                                                  "hc_norm",
                                                  "norm_key",
                                                  "norm_query",
                                                  "norm_conv",
                                                  "input_layernorm",
                                                  "post_attention_layernorm",
                                                  "pre_fc_norm_hidden",
                                                  "pre_fc_norm_embedding"};

// Vision towers have norms of their own conventions; only the text model decides.
bool is_vision(const std::string& name) {
  return name.starts_with("model.visual.") || name.starts_with("visual.") ||
         name.starts_with("vision_tower.");
}

json read_config(const fs::path& file) {
  if (!fs::exists(file)) fail("{}: missing (a checkpoint needs config.json)", file.string());
  std::ifstream in(file);
  if (!in) fail("{}: cannot open", file.string());
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", file.string(), e.what());
  }
  if (!config.is_object()) fail("{}: not a JSON object", file.string());
  return config;
}

}  // namespace

Checkpoint::Checkpoint(const fs::path& dir) : dir_(dir) {
  const fs::path config_file = dir / "config.json";
  config_ = read_config(config_file);
  quant_ = AffineQuantization(config_, config_file.string());
  store_ = std::make_unique<TensorStore>(dir);
  detect_layout();
}

Checkpoint::Checkpoint(json config, std::unique_ptr<TensorStore> store)
    : dir_(store->dir()), config_(std::move(config)), store_(std::move(store)) {
  if (!config_.is_object()) fail("{}: config is not a JSON object", dir_.string());
  quant_ = AffineQuantization(config_, dir_.string() + " config");
  detect_layout();
}

void Checkpoint::detect_layout() {
  bool mlx_vlm = false, multimodal = false, mlx_marks = false;
  for (const auto& name : store_->names()) {
    mlx_vlm |= name.starts_with("language_model.");
    multimodal |= name.starts_with("model.language_model.");
    mlx_marks |= name.ends_with(".scales") || name.find(".switch_mlp.") != std::string::npos;
  }
  // The empty prefix comes last: it finds top-level tensors (HF `lm_head`, `mtp.*`) and full stored names.
  if (mlx_vlm) {
    layout_ = CheckpointLayout::MLX;
    prefixes_ = {"language_model.model.", "language_model.", ""};
  } else if (multimodal) {
    layout_ = CheckpointLayout::HFMultimodal;
    prefixes_ = {"model.language_model.", ""};
  } else {
    // mlx-lm writes text models with the HF `model.` prefix; its quantization or stacked experts give it
    // away.
    layout_ = mlx_marks || quant_.present() ? CheckpointLayout::MLX : CheckpointLayout::HF;
    prefixes_ = {"model.", ""};
  }
  norms_shifted_ = detect_shifted_norms();
}

const json& Checkpoint::text_config() const {
  if (config_.contains("text_config") && config_["text_config"].is_object()) return config_["text_config"];
  return config_;
}

std::optional<std::string> Checkpoint::resolve(const std::string& logical_tensor) const {
  for (const auto& p : prefixes_)
    if (store_->has(p + logical_tensor)) return p + logical_tensor;
  return std::nullopt;
}

std::string Checkpoint::logical_of(const std::string& stored) const {
  for (const auto& p : prefixes_)
    if (!p.empty() && stored.starts_with(p)) return stored.substr(p.size());
  return stored;
}

std::optional<std::string> Checkpoint::resolve_weight(const std::string& module) const {
  if (auto w = resolve(module + ".weight")) return w;
  if (module == "lm_head" && text_config().value("tie_word_embeddings", false))
    return resolve("embed_tokens.weight");
  return std::nullopt;
}

std::string Checkpoint::find_tensor(const std::string& name) const {
  if (auto t = resolve(name)) return *t;
  if (auto t = resolve_weight(name)) return *t;
  fail("tensor '{}' (or '{}.weight') not found in {} under prefixes '{}'", name, name, dir_.string(),
       fmt::join(prefixes_, "', '"));
}

bool Checkpoint::has(const std::string& module) const {
  return resolve_weight(module).has_value() || resolve(module).has_value();
}

MatrixWeight Checkpoint::view(const std::string& stored, const std::string& logical_module) const {
  const TensorInfo& w = store_->get(stored);
  const std::string file = w.file.string();
  if (w.shape.size() < 2)
    fail("{}: tensor '{}' has shape {}; a matrix needs 2 dimensions", file, stored, shape_str(w.shape));
  MatrixWeight m;
  m.name = stored;
  m.data = w.data;
  m.rows = 1;
  for (size_t i = 0; i + 1 < w.shape.size(); ++i) m.rows *= w.shape[i];
  const int64_t last = w.shape.back();

  const std::string module = module_of_tensor(stored);
  const std::string scales_name = module + ".scales", biases_name = module + ".biases";
  if (!store_->has(scales_name)) {
    switch (w.dtype) {
      case DType::F32:
        m.encoding = MatrixEncoding::F32;
        break;
      case DType::BF16:
        m.encoding = MatrixEncoding::BF16;
        break;
      case DType::F16:
        m.encoding = MatrixEncoding::F16;
        break;
      default:
        fail("{}: tensor '{}' has dtype {}; a matrix must be F32, BF16 or F16, or U32 with '{}'", file,
             stored, dtype_name(w.dtype), scales_name);
    }
    m.cols = last;
    return m;
  }

  if (!store_->has(biases_name))
    fail("{}: tensor '{}' has '{}' but no '{}'; only MLX affine quantization (with biases) is supported",
         file, stored, scales_name, biases_name);
  const TensorInfo& s = store_->get(scales_name);
  const TensorInfo& b = store_->get(biases_name);
  auto params = quant_.lookup(module, module_of_tensor(logical_module), stored);
  if (!params)
    fail("{}: config.json marks module '{}' unquantized (false) but tensor '{}' has '{}'", file, module,
         stored, scales_name);
  if (w.dtype != DType::U32)
    fail("{}: quantized tensor '{}' has dtype {}; affine codes are U32", file, stored, dtype_name(w.dtype));
  if (s.dtype != b.dtype || (s.dtype != DType::BF16 && s.dtype != DType::F16 && s.dtype != DType::F32))
    fail("{}: '{}' is {} and '{}' is {}; both must be one of BF16, F16, F32", file, scales_name,
         dtype_name(s.dtype), biases_name, dtype_name(b.dtype));
  if (s.shape != b.shape || s.shape.size() != w.shape.size() ||
      !std::equal(w.shape.begin(), w.shape.end() - 1, s.shape.begin()))
    fail("{}: '{}' {} and '{}' {} do not match weight '{}' {} in their leading dimensions", file, scales_name,
         shape_str(s.shape), biases_name, shape_str(b.shape), stored, shape_str(w.shape));
  const int64_t groups = s.shape.back();
  const int64_t cols = groups * params->group;
  if (last * 32 != cols * params->bits)
    fail(
        "{}: tensor '{}' has {} uint32 words per row ({} bits) but {} {}-bit codes ({} groups of {} in '{}') "
        "need {} bits",
        file, stored, last, last * 32, cols, params->bits, groups, params->group, scales_name,
        cols * params->bits);
  m.encoding = MatrixEncoding::Affine;
  m.cols = cols;
  m.bits = params->bits;
  m.group = params->group;
  m.scale_dtype = s.dtype;
  m.scales = s.data;
  m.biases = b.data;
  return m;
}

MatrixWeight Checkpoint::matrix(const std::string& module) const {
  auto stored = resolve_weight(module);
  if (!stored)
    fail("tensor '{}.weight' not found in {} under prefixes '{}'", module, dir_.string(),
         fmt::join(prefixes_, "', '"));
  const TensorInfo& w = store_->get(*stored);
  if (w.shape.size() != 2)
    fail("{}: tensor '{}' has shape {}; matrix() needs 2-D (stacked experts go through expert_matrix)",
         w.file.string(), *stored, shape_str(w.shape));
  return view(*stored, logical_of(*stored));
}

MatrixWeight Checkpoint::expert_matrix(int layer, int expert, const std::string& proj) const {
  return expert_matrix(fmt::format("layers.{}.mlp", layer), expert, proj);
}

MatrixWeight Checkpoint::expert_matrix(const std::string& mlp, int expert, const std::string& proj) const {
  if (proj != "gate_proj" && proj != "up_proj" && proj != "down_proj")
    fail("expert projection '{}' is not one of gate_proj, up_proj, down_proj", proj);
  const std::string per_expert = fmt::format("{}.experts.{}.{}", mlp, expert, proj);
  if (resolve(per_expert + ".weight")) return matrix(per_expert);

  // Stacked [E, out, in]: expert e is rows [e*part_rows*parts + part*part_rows, ...) of the folded view.
  auto slice = [&](const std::string& stored, int parts, int part) {
    const TensorInfo& w = store_->get(stored);
    if (w.shape.size() != 3)
      fail("{}: stacked expert tensor '{}' has shape {}; expected [experts, out, in]", w.file.string(),
           stored, shape_str(w.shape));
    if (expert < 0 || expert >= w.shape[0])
      fail("{}: expert {} out of range for '{}' with {} experts", w.file.string(), expert, stored,
           w.shape[0]);
    if (w.shape[1] % parts != 0)
      fail("{}: fused tensor '{}' has {} rows per expert, not divisible into {} parts", w.file.string(),
           stored, w.shape[1], parts);
    const int64_t part_rows = w.shape[1] / parts;
    MatrixWeight m =
        view(stored, logical_of(stored)).row_slice(expert * w.shape[1] + part * part_rows, part_rows);
    m.name = fmt::format("{}[expert {}{}]", stored, expert, parts > 1 ? (part == 0 ? ", gate" : ", up") : "");
    return m;
  };
  if (auto s = resolve(fmt::format("{}.switch_mlp.{}.weight", mlp, proj))) return slice(*s, 1, 0);
  const std::string fused = mlp + ".experts." + (proj == "down_proj" ? "down_proj" : "gate_up_proj");
  auto f = resolve(fused);
  if (!f) f = resolve(fused + ".weight");
  if (f) return proj == "down_proj" ? slice(*f, 1, 0) : slice(*f, 2, proj == "gate_proj" ? 0 : 1);
  fail("{} expert {} {}: none of '{}.weight', '{}.switch_mlp.{}.weight', '{}' found in {}", mlp, expert, proj,
       per_expert, mlp, proj, fused, dir_.string());
}

std::vector<float> Checkpoint::stored_floats(const std::string& stored) const {
  const TensorInfo& t = store_->get(stored);
  if (stored.ends_with(".weight") && store_->has(module_of_tensor(stored) + ".scales")) {
    MatrixWeight m = view(stored, logical_of(stored));
    std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) dequantize_row_reference(m, r, out.data() + r * m.cols);
    return out;
  }
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.dtype) {
    case DType::F32:
      std::memcpy(out.data(), t.data, t.nbytes);
      break;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(t.data, i));
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load<uint16_t>(t.data, i));
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(load<uint16_t>(t.data, i));
      break;
    default:
      fail("{}: tensor '{}' has dtype {}, not a float type (use ints() for integers)", t.file.string(),
           stored, dtype_name(t.dtype));
  }
  return out;
}

std::vector<float> Checkpoint::floats(const std::string& name) const {
  return stored_floats(find_tensor(name));
}

std::vector<float> Checkpoint::centred_norm(const std::string& module) const {
  std::vector<float> w = floats(module);
  if (!norms_shifted_)
    for (float& v : w) v += 1.0f;
  return w;
}

std::vector<int64_t> Checkpoint::ints(const std::string& name) const {
  const std::string stored = find_tensor(name);
  const TensorInfo& t = store_->get(stored);
  const int64_t n = t.numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
      case DType::I64:
        out[i] = load<int64_t>(t.data, i);
        break;
      case DType::I32:
        out[i] = load<int32_t>(t.data, i);
        break;
      case DType::I16:
        out[i] = load<int16_t>(t.data, i);
        break;
      case DType::I8:
        out[i] = load<int8_t>(t.data, i);
        break;
      case DType::U32:
        out[i] = load<uint32_t>(t.data, i);
        break;
      case DType::U16:
        out[i] = load<uint16_t>(t.data, i);
        break;
      case DType::U8:
        out[i] = load<uint8_t>(t.data, i);
        break;
      default:
        fail("{}: tensor '{}' has dtype {}, not an integer type that fits int64", t.file.string(), stored,
             dtype_name(t.dtype));
    }
  }
  return out;
}

bool Checkpoint::detect_shifted_norms() const {
  double sum = 0;
  int64_t count = 0;
  for (const auto& name : store_->names()) {
    if (!name.ends_with(".weight") || is_vision(name)) continue;
    const std::string logical = logical_of(module_of_tensor(name));
    if (!is_centred_norm_module(logical)) continue;
    const DType dt = store_->get(name).dtype;
    if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F16 && dt != DType::F64) continue;
    for (float v : stored_floats(name)) sum += v;
    count += store_->get(name).numel();
  }
  // Stored around 0 the mean is near 0; stored as 1 + w it is near 1.
  return count > 0 && sum / static_cast<double>(count) > 0.5;
}

std::string Checkpoint::quantization_summary() const {
  std::map<std::pair<int, int>, int> affine;  // (bits, group) -> modules
  std::map<std::string, std::pair<size_t, int>>
      dense;  // lower-case dtype -> (bytes, tensors) of dense weights
  for (const auto& name : store_->names()) {
    if (!name.ends_with(".weight")) continue;
    const TensorInfo& t = store_->get(name);
    if (store_->has(module_of_tensor(name) + ".scales")) {
      MatrixWeight m = view(name, logical_of(name));
      ++affine[{m.bits, m.group}];
    } else if (t.shape.size() >= 2) {
      std::string dt(dtype_name(t.dtype));
      std::transform(dt.begin(), dt.end(), dt.begin(), [](unsigned char c) { return std::tolower(c); });
      dense[dt].first += t.nbytes;
      ++dense[dt].second;
    }
  }
  // Dense weights: the dtype holding the most bytes, then the others with their tensor counts.
  std::string main_dtype;
  for (const auto& [dt, bn] : dense)
    if (main_dtype.empty() || bn.first > dense.at(main_dtype).first) main_dtype = dt;
  std::vector<std::string> others;
  for (const auto& [dt, bn] : dense)
    if (dt != main_dtype) others.push_back(fmt::format("{} {}", bn.second, dt));
  std::string dense_text = main_dtype.empty() ? "no dense weights" : main_dtype;
  if (!others.empty()) dense_text += fmt::format(" (also {} tensors)", fmt::join(others, ", "));
  if (affine.empty()) return dense_text;

  std::vector<std::string> parts;
  for (const auto& [bg, n] : affine) parts.push_back(fmt::format("{} at {}-bit g{}", n, bg.first, bg.second));
  std::string head = "mlx affine";
  if (auto g = quant_.global()) head += fmt::format(" {}-bit g{}", g->bits, g->group);
  std::string s = fmt::format("{}: modules {}", head, fmt::join(parts, ", "));
  if (!dense.empty()) s += "; unquantized weights " + dense_text;
  return s;
}

// Only the final `norm` counts among `*norm` modules: linear_attn.norm is a gated norm used as stored.
bool is_centred_norm_module(const std::string& logical_module) {
  const size_t dot = logical_module.rfind('.');
  const std::string leaf = dot == std::string::npos ? logical_module : logical_module.substr(dot + 1);
  // The final norms of the model and of the MTP draft head (`mtp.norm`, qwen3_next form).
  return logical_module == "norm" || logical_module == "mtp.norm" || kCentredNormLeaves.count(leaf) != 0;
}

}  // namespace ds
