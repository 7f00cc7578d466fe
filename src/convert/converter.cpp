#include "convert/converter.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>

#include "convert/affine_quantize.h"
#include "core/error.h"
#include "formats/safetensors_writer.h"

namespace ds {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Tokenizer, chat template and generation files travel with the weights (what mlx-lm's convert copies).
bool is_companion_file(const std::string& name) {
  for (const char* prefix :
       {"tokenizer", "chat_template", "special_tokens_map", "added_tokens", "generation_config",
        "preprocessor_config", "processor_config", "vocab.", "merges."})
    if (name.rfind(prefix, 0) == 0) return true;
  return name.size() > 6 && name.compare(name.size() - 6, 6, ".jinja") == 0;
}

void concat(const TensorSource& s, uint8_t* out) {
  for (const auto& [ptr, n] : s.ranges) {
    std::memcpy(out, ptr, n);
    out += n;
  }
}

std::vector<float> source_floats(const TensorSource& s) {
  size_t bytes = 0;
  for (const auto& r : s.ranges) bytes += r.second;
  std::vector<uint8_t> raw(bytes);
  concat(s, raw.data());
  const size_t n = bytes / dtype_size(s.dtype);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (s.dtype == DType::F32) {
      std::memcpy(&out[i], raw.data() + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      out[i] = s.dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  }
  return out;
}

// A centred norm stored as 1 + w, rounded to the tensor's own dtype as MLX's `v + 1.0` does.
void shift_norm(DType dtype, uint8_t* data, size_t bytes) {
  for (size_t off = 0; off < bytes; off += dtype_size(dtype)) {
    if (dtype == DType::F32) {
      float f;
      std::memcpy(&f, data + off, 4);
      f += 1.0f;
      std::memcpy(data + off, &f, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, data + off, 2);
      h = dtype == DType::BF16 ? f32_to_bf16(bf16_to_f32(h) + 1.0f) : f32_to_f16(f16_to_f32(h) + 1.0f);
      std::memcpy(data + off, &h, 2);
    }
  }
}

// One quantized module: computed when its first tensor (biases, scales or weight) is written, dropped after
// the third, so only the modules being written are held in memory.
struct QuantizedModule {
  const PlannedModule* plan = nullptr;
  ModuleReport* report = nullptr;
  MlxRounding rounding = MlxRounding::Metal;
  std::optional<AffineQuantized> q;
  int written = 0;

  const AffineQuantized& get() {
    if (!q) {
      const std::vector<float> w = source_floats(plan->source);
      q = affine_quantize(w.data(), plan->rows(), plan->cols(), *plan->quant, rounding);
      const QuantizationError e = quantization_error(*q, w.data());
      report->rel_rms = e.rel_rms;
      report->max_abs = e.max_abs;
    }
    return *q;
  }
  void done() {
    if (++written == 3) q.reset();
  }
};

void check_output_dir(const fs::path& out, bool force) {
  if (fs::exists(out)) {
    if (!fs::is_directory(out)) fail("{}: exists and is not a directory", out.string());
    if (!fs::is_empty(out) && !force)
      fail("{}: output directory is not empty (pass --force to write into it)", out.string());
    // Stale shards of an earlier conversion would be read alongside the new ones.
    for (const auto& entry : fs::directory_iterator(out)) {
      const std::string name = entry.path().filename().string();
      if (entry.path().extension() == ".safetensors" || name == "model.safetensors.index.json")
        fs::remove(entry.path());
    }
  }
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) fail("{}: cannot create the output directory: {}", out.string(), ec.message());
}

json quantization_block(const ConvertPlan& plan, AffineParams global) {
  json q = {{"group_size", global.group}, {"bits", global.bits}, {"mode", "affine"}};
  for (const PlannedModule& m : plan.modules) {
    if (!m.linear) continue;
    if (!m.quant)
      q[m.out_module()] = false;
    else if (!(*m.quant == global))
      q[m.out_module()] = {{"group_size", m.quant->group}, {"bits", m.quant->bits}};
  }
  return q;
}

}  // namespace

ConvertReport convert_checkpoint(const fs::path& in, const fs::path& out, const ConvertOptions& options) {
  if (!fs::exists(in)) fail("{}: no such checkpoint directory", in.string());
  if (!fs::is_directory(in)) fail("{}: not a directory (convert reads a checkpoint directory)", in.string());
  if (!affine_params_supported(options.global))
    fail("--bits {} --group-size {}: not supported (bits 2, 3, 4, 5, 6, 8; group size 32, 64, 128)",
         options.global.bits, options.global.group);
  if (fs::exists(out) && fs::equivalent(in, out)) fail("{}: the output directory is the input", out.string());
  const Checkpoint ck(in);
  const ConvertPlan plan = plan_conversion(ck, options);
  check_output_dir(out, options.force);

  ConvertReport report;
  report.global = options.global;
  size_t linear = 0;
  for (const PlannedModule& m : plan.modules) linear += m.linear ? 1 : 0;
  report.modules.reserve(linear);  // pointers into it stay valid while tensors are written
  std::vector<std::unique_ptr<QuantizedModule>> quantized;
  std::vector<PlannedTensor> tensors;
  for (const PlannedModule& m : plan.modules) {
    size_t before = 0;
    for (const auto& r : m.source.ranges) before += r.second;
    report.bytes_before += before;
    ModuleReport* entry = nullptr;
    if (m.linear) {
      report.modules.push_back(ModuleReport{m.out_module(), m.shape, m.quant, m.reason, 0, 0, before, 0});
      entry = &report.modules.back();
    }
    if (!m.quant) {
      tensors.push_back({m.out_tensor, m.source.dtype, m.shape, [&m](uint8_t* dst) {
                           concat(m.source, dst);
                           size_t bytes = 0;
                           for (const auto& r : m.source.ranges) bytes += r.second;
                           if (m.transform == Transform::ShiftNorm) shift_norm(m.source.dtype, dst, bytes);
                         }});
      if (entry) entry->bytes_after = tensors.back().nbytes();
      continue;
    }
    quantized.push_back(
        std::make_unique<QuantizedModule>(QuantizedModule{&m, entry, options.rounding, std::nullopt, 0}));
    QuantizedModule* qm = quantized.back().get();
    std::vector<int64_t> wshape = m.shape, sshape = m.shape;
    wshape.back() = m.cols() * m.quant->bits / 32;
    sshape.back() = m.cols() / m.quant->group;
    const std::string base = m.out_module();
    tensors.push_back({base + ".weight", DType::U32, wshape, [qm](uint8_t* dst) {
                         const auto& q = qm->get();
                         std::memcpy(dst, q.words.data(), q.words.size() * 4);
                         qm->done();
                       }});
    tensors.push_back({base + ".scales", DType::BF16, sshape, [qm](uint8_t* dst) {
                         const auto& q = qm->get();
                         std::memcpy(dst, q.scales.data(), q.scales.size() * 2);
                         qm->done();
                       }});
    tensors.push_back({base + ".biases", DType::BF16, sshape, [qm](uint8_t* dst) {
                         const auto& q = qm->get();
                         std::memcpy(dst, q.biases.data(), q.biases.size() * 2);
                         qm->done();
                       }});
    entry->bytes_after = tensors[tensors.size() - 3].nbytes() + 2 * tensors.back().nbytes();
  }
  for (const PlannedTensor& t : tensors) report.bytes_after += t.nbytes();

  const ShardedWriteResult written =
      write_sharded_safetensors(out, std::move(tensors), options.max_shard_bytes, {{"format", "mlx"}});
  report.shards = written.shard_files;
  std::sort(report.modules.begin(), report.modules.end(),
            [](const ModuleReport& a, const ModuleReport& b) { return a.module < b.module; });

  json config = ck.config();
  const json q = quantization_block(plan, options.global);
  config["quantization"] = q;
  config["quantization_config"] = q;  // mlx-lm writes both; transformers-era readers look for the second
  std::ofstream cfg(out / "config.json", std::ios::trunc);
  cfg << config.dump(4) << "\n";
  if (!cfg) fail("{}: write failed", (out / "config.json").string());

  std::vector<fs::path> companions;
  for (const auto& entry : fs::directory_iterator(in))
    if (entry.is_regular_file() && is_companion_file(entry.path().filename().string()))
      companions.push_back(entry.path());
  std::sort(companions.begin(), companions.end());
  for (const fs::path& p : companions) {
    std::error_code ec;
    fs::copy_file(p, out / p.filename(), fs::copy_options::overwrite_existing, ec);
    if (ec) fail("{}: cannot copy to {}: {}", p.string(), out.string(), ec.message());
    report.copied_files.push_back(p.filename().string());
  }
  return report;
}

}  // namespace ds
