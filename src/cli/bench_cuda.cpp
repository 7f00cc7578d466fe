#include "cli/bench_cuda.h"

#include "core/error.h"

#ifdef DELTASERVE_HAS_CUDA
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cuda/model/cuda_bench.h"
#include "model/model.h"
#endif

namespace ds::cli {

#ifndef DELTASERVE_HAS_CUDA

void run_cuda_bench(const CudaBenchOptions&) {
  fail(
      "--backend cuda: this deltaserve was built without the CUDA backend (configure with "
      "-DDELTASERVE_CUDA=ON)");
}

#else

namespace {

void bench(const CudaBenchOptions& o) {
  using nlohmann::json;
  cuda::CudaModelOptions opt;
  opt.max_context = 2048;
  std::unique_ptr<Model> host;  // a checkpoint's bound weights, which the CUDA model reads its tables from
  std::unique_ptr<cuda::CudaModel> m;
  if (o.load_format == "dummy") {
    if (o.config.empty()) fail("--load-format dummy needs --config FILE (a config.json)");
    std::ifstream in(o.config);
    if (!in) fail("{}: cannot open", o.config);
    const json config = json::parse(in);
    const json& text = config.contains("text_config") ? config["text_config"] : config;
    // Random weights made on the GPU at the config's `quantization` (bits, group_size), else dense bf16.
    cuda::DummySpec spec;
    spec.seed = o.seed + 1;
    const json q = text.value("quantization", config.value("quantization", json::object()));
    spec.expert_bits = spec.other_bits = q.value("bits", 0);
    spec.expert_group = spec.other_group = q.value("group_size", 64);
    m = std::make_unique<cuda::CudaModel>(ModelConfig::from_json(config), spec, opt);
  } else {
    if (o.model.empty()) fail("bench needs --model DIR or --load-format dummy --config FILE");
    host = std::make_unique<Model>(o.model);
    m = std::make_unique<cuda::CudaModel>(host->config(), host->weights(), opt);
  }
  json r;
  r["backend"] = "cuda";
  r["model"] = m->describe();
  r["bytes_per_token"] = m->bytes_per_token();
  r["decode"] = json::array();
  for (int s : o.streams) {
    const cuda::DecodeRate d = cuda::bench_decode_rounds(*m, s, o.decode_tokens, o.warmup_rounds);
    r["decode"].push_back(
        {{"streams", s}, {"ms_per_round", d.ms_per_round}, {"tokens_per_s", d.tokens_per_s}});
  }
  if (o.json) {
    std::printf("%s\n", r.dump(2).c_str());
    return;
  }
  std::printf("%s%8s %12s %12s\n", m->describe().c_str(), "streams", "ms/round", "tok/s");
  for (const auto& d : r["decode"])
    std::printf("%8d %12.3f %12.1f\n", d["streams"].get<int>(), d["ms_per_round"].get<double>(),
                d["tokens_per_s"].get<double>());
}

}  // namespace

void run_cuda_bench(const CudaBenchOptions& o) {
  // CUDA failures (no device, an old driver, out of memory) as the CLI's error, naming the backend.
  try {
    bench(o);
  } catch (const cuda::CudaError& e) {
    fail("--backend cuda: {}", e.what());
  } catch (const cuda::ArgumentError& e) {
    fail("--backend cuda: {}", e.what());
  }
}

#endif

}  // namespace ds::cli
