#pragma once
// `deltaserve bench --backend cuda`: decode throughput of the whole model on the GPU (docs/backend-cuda.md).
// Built into the CLI only with -DDELTASERVE_CUDA=ON; otherwise it refuses naming the build option.
#include <cstdint>
#include <string>
#include <vector>

namespace ds::cli {

struct CudaBenchOptions {
  std::string model, load_format, config;
  uint64_t seed = 0;
  std::vector<int> streams;
  int decode_tokens = 32, warmup_rounds = 2;
  bool json = false;
  bool engine = true;  // also the same decode through the engine (CudaBackend: device draws, host draws)
  std::vector<int> prompt_lengths;  // prompt tokens/s through the engine at these lengths (one stream each)
  bool prompt_passes = false;       // CudaBackend runs prompts as CudaModel prompt passes
  bool drafts = true;  // and through the engine with drafts (a model with an MTP head); --no-drafts: not
};

void run_cuda_bench(const CudaBenchOptions& o);

}  // namespace ds::cli
