// cuda_sampling_engine CONFIG [--streams 1,8,32] [--tokens N]: what the GPU sampler's filters buy through
// the engine. Random weights for CONFIG (4-bit g32, as `bench --load-format dummy`), then for each stream
// count a decode of N tokens per stream (16-token prompts, EOS ignored, no prompt cache, no drafts): greedy;
// T 0.6 top-k 20 top-p 0.95 drawn on the device (CudaBackend::set_device_filters(true)); the same with those
// rows drawn on the host (every row's logits copied back for the KeyedSampler). Prints decode tokens/s
// (tokens after each stream's first over the longest decode time) and whether the sampled replies of the two
// paths are equal (they must be); exits 1 if not.
#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/engine/cuda_backend.h"
#include "core/error.h"
#include "model/model_config.h"
#include "runtime/bench_decode.h"
#include "runtime/engine.h"

namespace {

using namespace ds;

struct Rate {
  double tokens_per_s = 0;
  std::vector<std::vector<int32_t>> replies;  // by stream
  int64_t device_draws = 0;                   // rows the DeviceSampler drew in this run
};

// One decode through a fresh engine: `streams` requests at once with `params` (seeded by stream).
Rate decode_rate(const std::shared_ptr<cuda::CudaBackend>& backend, int streams, int tokens,
                 const SamplingParams& params) {
  EngineOptions eo;
  eo.parallel = streams;
  eo.prompt_cache_gib = 0;
  eo.drafts = false;
  eo.context = backend->max_context();
  const int64_t draws_before = backend->device_draws();
  Engine engine(backend, eo);
  const BenchDecode run = bench_decode(engine, backend->config().vocab_size, streams, tokens, params, 1000);
  Rate rate;
  rate.replies = run.replies;
  rate.tokens_per_s = run.tokens_per_s();
  rate.device_draws = backend->device_draws() - draws_before;
  return rate;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: cuda_sampling_engine CONFIG [--streams 1,8,32] [--tokens N]\n");
    return 2;
  }
  std::vector<int> streams = {1, 8, 32};
  int tokens = 24;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--streams" && i + 1 < argc)
      streams = parse_list(argv[++i]);
    else if (a == "--tokens" && i + 1 < argc)
      tokens = std::stoi(argv[++i]);
    else {
      std::fprintf(stderr, "cuda_sampling_engine: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  try {
    std::ifstream in(argv[1]);
    if (!in) fail("{}: cannot open", argv[1]);
    cuda::CudaModelOptions opt;
    opt.max_context = 2048;
    auto model = std::make_unique<cuda::CudaModel>(ModelConfig::from_json(nlohmann::json::parse(in)),
                                                   cuda::DummySpec{}, opt);
    auto backend = std::make_shared<cuda::CudaBackend>(std::move(model), true);
    SamplingParams greedy, sampled;
    greedy.temperature = 0;
    sampled.temperature = 0.6f, sampled.top_k = 20, sampled.top_p = 0.95f;
    decode_rate(backend, 1, 4, sampled);  // warm-up (graphs, allocations)
    std::printf(
        "%s\ndecode tok/s through the engine, %d tokens a stream, no drafts:\n%8s %10s %18s %16s %8s\n",
        backend->model().describe().c_str(), tokens, "streams", "greedy", "T.6 k20 p.95 dev", "same on host",
        "equal");
    int failures = 0;
    for (int s : streams) {
      backend->set_device_filters(true);
      const Rate g = decode_rate(backend, s, tokens, greedy);
      const Rate d = decode_rate(backend, s, tokens, sampled);
      backend->set_device_filters(false);
      const Rate h = decode_rate(backend, s, tokens, sampled);
      const bool equal = d.replies == h.replies;
      failures += equal ? 0 : 1;
      std::printf("%8d %10.1f %18.1f %16.1f %8s   (device rows %lld / %lld)\n", s, g.tokens_per_s,
                  d.tokens_per_s, h.tokens_per_s, equal ? "yes" : "NO",
                  static_cast<long long>(d.device_draws), static_cast<long long>(h.device_draws));
      std::fflush(stdout);
    }
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
