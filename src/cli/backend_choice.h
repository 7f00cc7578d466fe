#pragma once
// `--backend cpu|cuda` for run and serve: the engine's backend over a checkpoint. cuda exists only in a
// -DDELTASERVE_CUDA=ON build; otherwise it is refused naming that option (as `bench --backend cuda` is).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"
#include "runtime/model_backend.h"

namespace ds::cli {

struct LoadedBackend {
  std::unique_ptr<Model> host;                  // the checkpoint: the CPU's model, or the GPU's host tables
  std::shared_ptr<const ModelBackend> backend;  // what the engine runs
  int64_t context = 0;                          // positions per stream the backend holds
  std::string products;  // cuda: the decode products' family this process runs (--cuda-products)
};

// Device caches hold this many positions per stream when --context is not given (the model's maximum would
// reserve that much device memory for every stream).
constexpr int64_t kCudaDefaultContext = 8192;

// `context` 0: the backend's default (the model's max positions on the CPU, kCudaDefaultContext on CUDA); a
// negative one is refused naming --context.
// `cuda_prompt_path`: CUDA prompts as prompt passes (cuda::CudaBackend's option; the CLI's default since they
// measured 1.7x the decode windows' prompt tokens/s through the engine: docs/receipts/cuda-prompt.md).
// `--backend`, `--cuda-prompt-passes` and `--cuda-drafts`, the options run and serve share.
// `--cuda-products` (cuda_products_for) too.
void add_backend_options(CLI::App& cmd, std::string& backend, bool& cuda_prompt_passes, bool& cuda_drafts,
                         std::string& cuda_products);

// `--cuda-products auto|fma|tensor|tensor-tall|...`: the CUDA decode products' family for the whole process.
// A row's bits depend on the family, never on a call's rows, so it is a setting like the backend: every reply
// of one process is the same whatever else it decodes. auto: the tensor-core products when up to `parallel`
// >= kTensorParallel streams decode together (measured 34-51% faster than FMA at 32-64 streams but 32% slower
// at one: docs/receipts/cuda-decode-streams.md "Column-split tensor products"), else FMA; with
// DS_CUDA_DECODE_PRODUCTS set, auto is the variable's family.
constexpr int kTensorParallel = 16;
std::string cuda_products_for(const std::string& choice, int parallel);

// Whether `run`/`serve --backend cuda` draft without --cuda-drafts (as the CPU always does). Off until drafts
// measure at least even with plain decoding in every case of docs/receipts/speculative.md on the H200 (the
// sampled reply lost 22-28% before the hidden rows stayed on the device: "Drafts that pay on the H200");
// the lead turns it on after the merged run confirms it.
constexpr bool kCudaDraftsByDefault = false;

// Whether the engine drafts: never with --no-drafts; on CUDA with --cuda-drafts or kCudaDraftsByDefault.
bool drafts_on(const std::string& backend, bool no_drafts, bool cuda_drafts);

LoadedBackend load_backend(const std::string& name, const std::string& model_dir, int64_t context,
                           bool cuda_prompt_path = false, const std::string& cuda_products = "auto",
                           int parallel = 1);

#ifdef DELTASERVE_HAS_CUDA
}  // namespace ds::cli
namespace ds::cuda {
class CudaModel;
struct CudaModelOptions;
}  // namespace ds::cuda
namespace ds::cli {
// `--load-format dummy` on CUDA: a model of random weights made on the GPU for the config.json at
// `config_file` (its `quantization` bits and group_size, else dense bf16), from `seed`; a file that cannot be
// read or parsed fails naming it.
std::unique_ptr<cuda::CudaModel> dummy_cuda_model(const std::string& config_file, uint64_t seed,
                                                  const cuda::CudaModelOptions& opt);
#endif

}  // namespace ds::cli
