#include "cli/backend_choice.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "runtime/cpu_backend.h"

#ifdef DELTASERVE_HAS_CUDA
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda/engine/cuda_backend.h"
#endif

namespace ds::cli {

namespace {

LoadedBackend load_cpu(const std::string& dir, int64_t context) {
  LoadedBackend b;
  b.host = std::make_unique<Model>(dir);
  b.backend = std::make_shared<CpuBackend>(*b.host);
  b.context = context > 0 ? context : b.host->config().max_positions;
  return b;
}

#ifdef DELTASERVE_HAS_CUDA
LoadedBackend load_cuda(const std::string& dir, int64_t context, bool prompt_path,
                        const std::string& products) {
  LoadedBackend b;
  b.host = std::make_unique<Model>(dir, /*cpu_weight_tiles=*/false);  // the GPU reads its tables from it
  const int64_t max_pos = b.host->config().max_positions;
  b.context =
      context > 0 ? context : (max_pos > 0 ? std::min(max_pos, kCudaDefaultContext) : kCudaDefaultContext);
  cuda::CudaModelOptions opt;
  opt.max_context = b.context;
  cuda::set_decode_products(opt, products, "--cuda-products");
  b.products = products;
  try {
    b.backend = std::make_shared<cuda::CudaBackend>(
        std::make_unique<cuda::CudaModel>(b.host->config(), b.host->weights(), opt,
                                          b.host->has_mtp() ? &b.host->mtp_weights() : nullptr),
        prompt_path);
  } catch (const cuda::CudaError& e) {
    fail("--backend cuda: {}", e.what());
  } catch (const cuda::ArgumentError& e) {
    fail("--backend cuda: {}", e.what());
  }
  return b;
}
#endif

}  // namespace

#ifdef DELTASERVE_HAS_CUDA
std::unique_ptr<cuda::CudaModel> dummy_cuda_model(const std::string& config_file, uint64_t seed,
                                                  const cuda::CudaModelOptions& opt) {
  using nlohmann::json;
  std::ifstream in(config_file);
  if (!in) fail("{}: cannot open", config_file);
  json config;
  try {
    config = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", config_file, e.what());
  }
  // Every field checked here, naming it: nlohmann's own type errors name neither the file nor the field,
  // and a group_size of 0 reached random_matrix's `cols % group` (a division by zero).
  if (!config.is_object()) fail("{}: the config must be a JSON object", config_file);
  const json* text = &config;
  if (config.contains("text_config")) {
    if (!config["text_config"].is_object()) fail("{}: text_config must be an object", config_file);
    text = &config["text_config"];
  }
  const json* q = text->contains("quantization")    ? &(*text)["quantization"]
                  : config.contains("quantization") ? &config["quantization"]
                                                    : nullptr;
  if (q != nullptr && !q->is_object())
    fail("{}: quantization must be an object with bits and group_size (got {})", config_file, q->dump());
  auto field = [&](const char* name, int64_t fallback) {
    if (q == nullptr || !q->contains(name)) return fallback;
    const json& v = (*q)[name];
    if (!v.is_number_integer())
      fail("{}: quantization.{} must be an integer (got {})", config_file, name, v.dump());
    return v.get<int64_t>();
  };
  // Random weights at the config's bits and group_size (MLX affine), else dense bf16.
  const int64_t bits = field("bits", 0), group = field("group_size", 64);
  if (bits != 0 && bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8)
    fail("{}: quantization.bits must be 2, 3, 4, 5, 6 or 8 (got {})", config_file, bits);
  if (bits != 0 && group != 32 && group != 64 && group != 128)
    fail("{}: quantization.group_size must be 32, 64 or 128 (got {})", config_file, group);
  cuda::DummySpec spec;
  spec.seed = seed;
  spec.expert_bits = spec.other_bits = static_cast<int>(bits);
  spec.expert_group = spec.other_group = static_cast<int>(group);
  return std::make_unique<cuda::CudaModel>(ModelConfig::from_json(config), spec, opt);
}
#endif

void add_backend_options(CLI::App& cmd, std::string& backend, bool& cuda_prompt_passes, bool& cuda_drafts,
                         std::string& cuda_products) {
  cmd.add_option("--backend", backend, "cpu, or cuda (the GPU; a -DDELTASERVE_CUDA=ON build)");
  cmd.add_flag("--cuda-prompt-passes", cuda_prompt_passes,
               "cuda: prompts as tensor-core prompt passes (docs/cuda-model.md \"Prompt path\"; default; "
               "=false: as decode windows)");
  cmd.add_flag("--cuda-drafts", cuda_drafts,
               kCudaDraftsByDefault
                   ? "cuda: draft (the default on CUDA too; --no-drafts turns drafts off)"
                   : "cuda: draft as on the CPU (off by default on CUDA until drafts measure faster "
                     "there in every case; docs/receipts/speculative.md)");
  cmd.add_option(
      "--cuda-products", cuda_products,
      "cuda: the decode products' family for the process: auto (tensor cores when --parallel >= 16, "
      "else fma), fma, tensor, tensor-tall (docs/cuda-products.md \"Decode products on the tensor "
      "cores\")");
}

std::string cuda_products_for(const std::string& choice, int parallel) {
  if (choice != "auto") return choice;
  if (const char* env = std::getenv("DS_CUDA_DECODE_PRODUCTS"); env != nullptr && *env != '\0') return env;
  return parallel >= kTensorParallel ? "tensor" : "fma";
}

bool drafts_on(const std::string& backend, bool no_drafts, bool cuda_drafts) {
  return !no_drafts && (backend != "cuda" || cuda_drafts || kCudaDraftsByDefault);
}

LoadedBackend load_backend(const std::string& name, const std::string& model_dir, int64_t context,
                           [[maybe_unused]] bool cuda_prompt_path,
                           [[maybe_unused]] const std::string& cuda_products, [[maybe_unused]] int parallel) {
  // Checked before anything loads; a negative count was once taken silently as the default.
  if (context < 0)
    fail("--context must be a positive number of positions (0 or absent: the backend's default), got {}",
         context);
  if (name == "cpu") return load_cpu(model_dir, context);  // --cuda-prompt-passes is the CUDA backend's alone
  if (name != "cuda") fail("--backend '{}' is not one of cpu, cuda", name);
#ifdef DELTASERVE_HAS_CUDA
  return load_cuda(model_dir, context, cuda_prompt_path, cuda_products_for(cuda_products, parallel));
#else
  fail(
      "--backend cuda: this deltaserve was built without the CUDA backend (configure with "
      "-DDELTASERVE_CUDA=ON)");
#endif
}

}  // namespace ds::cli
