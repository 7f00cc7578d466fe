#include "convert/convert_plan.h"

#include <fnmatch.h>

#include <map>
#include <regex>
#include <set>

#include "core/error.h"

namespace ds {

namespace {

bool is_float(DType t) {
  return t == DType::BF16 || t == DType::F16 || t == DType::F32;
}
int parse_int(const std::string& s, const std::string& arg) {
  try {
    size_t used = 0;
    int v = std::stoi(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  fail("--override '{}': '{}' is not an integer (expected GLOB=BITS:GROUP or GLOB=none)", arg, s);
}

// Where the text model's tensors live in the input and in the output.
struct Names {
  std::string in_text, out_text, out_lm_head;
};

// An output tensor read as one whole input tensor.
PlannedModule whole(std::string logical, std::string out, const TensorInfo& t) {
  PlannedModule p;
  p.logical = std::move(logical);
  p.out_tensor = std::move(out);
  p.shape = t.shape;
  p.source = {t.dtype, {{static_cast<const uint8_t*>(t.data), t.nbytes}}, {t.name}};
  return p;
}

}  // namespace

std::string PlannedModule::out_module() const {
  return module_of_tensor(out_tensor);
}

int64_t PlannedModule::rows() const {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

ModuleOverride parse_module_override(const std::string& arg) {
  const size_t eq = arg.rfind('=');
  if (eq == std::string::npos || eq == 0) fail("--override '{}': expected GLOB=BITS:GROUP or GLOB=none", arg);
  ModuleOverride o{arg.substr(0, eq), std::nullopt, arg};
  const std::string value = arg.substr(eq + 1);
  if (value == "none") return o;
  const size_t colon = value.find(':');
  if (colon == std::string::npos) fail("--override '{}': expected GLOB=BITS:GROUP or GLOB=none", arg);
  AffineParams p{parse_int(value.substr(0, colon), arg), parse_int(value.substr(colon + 1), arg)};
  if (!affine_params_supported(p))
    fail("--override '{}': {}-bit group {} is not supported (bits 2, 3, 4, 5, 6, 8; group 32, 64, 128)", arg,
         p.bits, p.group);
  o.params = p;
  return o;
}

namespace {

class Planner {
 public:
  Planner(const Checkpoint& ck, const ConvertOptions& o) : ck_(ck), o_(o), used_(o.overrides.size(), false) {}

  ConvertPlan run() {
    if (ck_.layout() == CheckpointLayout::MLX)
      fail("{}: already in an MLX layout; convert reads HF checkpoints (model.* or model.language_model.*)",
           ck_.store().dir().string());
    plan_.multimodal = ck_.layout() == CheckpointLayout::HFMultimodal;
    names_ = plan_.multimodal ? Names{"model.language_model.", "language_model.model.", "language_model."}
                              : Names{"model.", "model.", ""};
    const nlohmann::json& text = ck_.text_config();
    const bool tied = text.value("tie_word_embeddings", false);
    static const std::regex expert(
        R"(^layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$)");
    static const std::regex fused(R"(^layers\.(\d+)\.mlp\.experts\.(gate_up_proj|down_proj)(\.weight)?$)");
    // (layer, proj) -> expert -> input tensor name
    std::map<std::pair<int, std::string>, std::map<int, std::string>> experts;
    for (const std::string& name : ck_.store().names()) {
      const TensorInfo& t = ck_.store().get(name);
      std::string logical, out;
      if (name.starts_with(names_.in_text)) {
        logical = name.substr(names_.in_text.size());
        out = names_.out_text + logical;
      } else if (name.starts_with("lm_head.")) {
        if (tied) continue;  // the head is embed_tokens; mlx-lm drops the copy
        logical = name;
        out = names_.out_lm_head + name;
      } else if (name.starts_with("mtp.")) {
        logical = out = name;  // the draft head keeps its HF names (resolved without prefix in every layout)
      } else {
        add(whole(name, name, t));  // vision tower and the like: carried over as stored
        continue;
      }
      std::smatch m;
      if (std::regex_match(logical, m, expert)) {
        experts[{std::stoi(m[1]), m[3]}][std::stoi(m[2])] = name;
        continue;
      }
      if (std::regex_match(logical, m, fused) && t.shape.size() == 3) {
        add_fused(std::stoi(m[1]), m[2], t);
        continue;
      }
      PlannedModule p = whole(logical, out, t);
      const std::string module = module_of_tensor(logical);
      if (t.shape.size() == 1 && is_float(t.dtype) && name.ends_with(".weight") &&
          is_centred_norm_module(module))
        p.transform = Transform::ShiftNorm;
      if (t.shape.size() == 3 && module.ends_with("conv1d") && t.shape[1] == 1)
        p.shape = {t.shape[0], t.shape[2], 1};  // [C, 1, K] -> [C, K, 1]: same bytes, MLX's shape
      p.linear = t.shape.size() == 2 && is_float(t.dtype) && name.ends_with(".weight");
      add(std::move(p));
    }
    for (const auto& [key, per_expert] : experts) add_stacked(key.first, key.second, per_expert);
    for (size_t i = 0; i < used_.size(); ++i)
      if (!used_[i])
        fail(
            "--override '{}': matches no quantizable module (linear weights are named like "
            "'layers.0.mlp.switch_mlp.gate_proj', 'layers.0.self_attn.q_proj', 'embed_tokens', 'lm_head', "
            "or by their stored names)",
            o_.overrides[i].text);
    return std::move(plan_);
  }

 private:
  const Checkpoint& ck_;
  const ConvertOptions& o_;
  std::vector<bool> used_;
  Names names_;
  ConvertPlan plan_;

  void add(PlannedModule p) {
    if (p.linear) choose(p);
    plan_.modules.push_back(std::move(p));
  }

  std::string stacked_name(int layer, const std::string& proj) const {
    return "layers." + std::to_string(layer) + ".mlp.switch_mlp." + proj;
  }

  void add_stacked(int layer, const std::string& proj, const std::map<int, std::string>& per_expert) {
    PlannedModule p;
    p.logical = stacked_name(layer, proj);
    p.out_tensor = names_.out_text + p.logical + ".weight";
    p.linear = true;
    const int count = static_cast<int>(per_expert.size());
    for (int e = 0; e < count; ++e) {
      auto it = per_expert.find(e);
      if (it == per_expert.end())
        fail("{}: layer {} {}: expert {} is missing (found {} experts with ids up to {})",
             ck_.store().dir().string(), layer, proj, e, count, per_expert.rbegin()->first);
      const TensorInfo& t = ck_.store().get(it->second);
      if (e == 0) {
        p.shape = {count, t.shape.size() == 2 ? t.shape[0] : 0, t.shape.size() == 2 ? t.shape[1] : 0};
        p.source.dtype = t.dtype;
      }
      if (t.shape.size() != 2 || t.shape[0] != p.shape[1] || t.shape[1] != p.shape[2] ||
          t.dtype != p.source.dtype)
        fail("tensor '{}': every expert of layer {} {} must share expert 0's 2-D shape and dtype", t.name,
             layer, proj);
      p.source.ranges.push_back({static_cast<const uint8_t*>(t.data), t.nbytes});
      p.source.inputs.push_back(t.name);
    }
    if (!is_float(p.source.dtype)) p.linear = false;
    add(std::move(p));
  }

  // transformers-5 fused experts: gate_up_proj [E, 2I, H] splits into gate (rows 0..I-1) and up.
  void add_fused(int layer, const std::string& which, const TensorInfo& t) {
    const int64_t E = t.shape[0], rows = t.shape[1], cols = t.shape[2];
    const size_t es = dtype_size(t.dtype);
    const auto* base = static_cast<const uint8_t*>(t.data);
    auto part = [&](const std::string& proj, int64_t first, int64_t count) {
      PlannedModule p;
      p.logical = stacked_name(layer, proj);
      p.out_tensor = names_.out_text + p.logical + ".weight";
      p.shape = {E, count, cols};
      p.source.dtype = t.dtype;
      p.source.inputs = {t.name};
      for (int64_t e = 0; e < E; ++e)
        p.source.ranges.push_back(
            {base + ((e * rows + first) * cols) * es, static_cast<size_t>(count * cols) * es});
      p.linear = is_float(t.dtype);
      add(std::move(p));
    };
    if (which == "down_proj") {
      part("down_proj", 0, rows);
    } else {
      if (rows % 2 != 0) fail("tensor '{}': gate_up_proj has an odd row count {}", t.name, rows);
      part("gate_proj", 0, rows / 2);
      part("up_proj", rows / 2, rows / 2);
    }
  }

  // mlx-lm's choice (global settings; routers and the shared-expert gate at 8-bit g64), the exclusions, then
  // the overrides, the last matching one winning.
  void choose(PlannedModule& p) {
    const std::string module = module_of_tensor(p.logical);
    std::optional<AffineParams> q = o_.global;
    if (module.find("ngram_embedding") != std::string::npos) {
      q.reset();
      p.reason = "PLE n-gram table";
    } else if (p.rows() < o_.min_rows) {
      q.reset();
      p.reason =
          "small gate: " + std::to_string(p.rows()) + " rows < --min-rows " + std::to_string(o_.min_rows);
    } else if (module.ends_with("mlp.gate") || module.ends_with("shared_expert_gate")) {
      q = AffineParams{8, 64};
    }
    const ModuleOverride* rule = nullptr;
    for (size_t i = 0; i < o_.overrides.size(); ++i) {
      const ModuleOverride& o = o_.overrides[i];
      if (fnmatch(o.glob.c_str(), module.c_str(), 0) == 0 ||
          fnmatch(o.glob.c_str(), p.out_module().c_str(), 0) == 0) {
        used_[i] = true;
        rule = &o;
      }
    }
    if (rule != nullptr) {
      q = rule->params;
      p.reason = q ? "" : "--override " + rule->text;
    }
    if (q && p.cols() % q->group != 0) {
      if (rule != nullptr)
        fail("--override '{}': group size {} does not divide the input width {} of tensor '{}'", rule->text,
             q->group, p.cols(), p.source.inputs.front());
      p.reason =
          "input width " + std::to_string(p.cols()) + " not divisible by group " + std::to_string(q->group);
      q.reset();
    }
    p.quant = q;
  }
};

}  // namespace

ConvertPlan plan_conversion(const Checkpoint& ck, const ConvertOptions& options) {
  return Planner(ck, options).run();
}

}  // namespace ds
