#include "cli/bench_cuda.h"

#include "core/error.h"

#ifdef DELTASERVE_HAS_CUDA
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "backend/cuda/engine/cuda_backend.h"
#include "backend/cuda/model/cuda_bench.h"
#include "cli/backend_choice.h"
#include "model/model.h"
#include "runtime/bench_decode.h"
#include "runtime/engine.h"
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

// The bench's engines: no prompt cache (every prompt runs in full), the backend's whole context.
EngineOptions bench_options(const cuda::CudaBackend& backend, int parallel, bool drafts) {
  EngineOptions eo;
  eo.parallel = parallel;
  eo.prompt_cache_gib = 0;
  eo.drafts = drafts;
  eo.context = backend.max_context();
  return eo;
}

// The same decode through the engine (CudaBackend): every stream a 16-token prompt of its own, then a greedy
// reply of `tokens` (EOS ignored, no prompt cache; drafts by the engine's default source and depth policy, or
// none); tokens drawn on the device (the DeviceSampler), or with `host_draws` every logits row to the host
// for the KeyedSampler. Aggregate decode tokens/s: the tokens after each stream's first over the longest
// decode time.
nlohmann::json engine_rate(const std::shared_ptr<cuda::CudaBackend>& backend, int streams, int tokens,
                           bool drafts, bool host_draws = false) {
  backend->set_device_draws(!host_draws);
  Engine engine(backend, bench_options(*backend, streams, drafts));
  SamplingParams greedy;
  greedy.temperature = 0;
  const BenchDecode run = bench_decode(engine, backend->config().vocab_size, streams, tokens, greedy, 1000);
  const double decode_s = run.decode_seconds;
  return {{"streams", streams},
          {"drafts", drafts},
          {"drafted", run.drafted},
          {"accepted", run.accepted},
          {"ms_per_round", decode_s > 0 ? 1e3 * decode_s / tokens : 0},
          {"tokens_per_s", run.tokens_per_s()}};
}

// One prompt of `length` tokens through the engine (one stream, no prompt cache, one greedy token): prompt
// tokens/s by the engine's prefill time (admission to the first token) and by the wall clock of the request.
nlohmann::json engine_prompt_rate(const std::shared_ptr<const cuda::CudaBackend>& backend, int length) {
  Engine engine(backend, bench_options(*backend, 1, false));
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<TokenEvent> last;
  const int64_t V = backend->config().vocab_size;
  GenerationRequest r;
  for (int t = 0; t < length; ++t)
    r.prompt.push_back(static_cast<int32_t>((7919 * int64_t{t} + 13 + length) % V));
  r.max_tokens = 1;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  r.use_prompt_cache = false;
  const auto t0 = std::chrono::steady_clock::now();
  engine.submit(std::move(r), [&](const TokenEvent& ev) {
    if (!ev.finished) return;
    std::lock_guard lock(mutex);
    last = ev;
    cv.notify_all();
  });
  std::unique_lock lock(mutex);
  cv.wait(lock, [&] { return last.has_value(); });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (last->reason == FinishReason::Error) fail("prompt bench through the engine: {}", last->error);
  return {{"tokens", length},
          {"prefill_s", last->prefill_seconds},
          {"wall_s", wall},
          {"tokens_per_s", last->prefill_seconds > 0 ? length / last->prefill_seconds : 0}};
}

void bench(const CudaBenchOptions& o) {
  using nlohmann::json;
  cuda::CudaModelOptions opt;
  opt.max_context = 2048;
  for (int len : o.prompt_lengths) {
    if (len <= 0) fail("--prompt-lengths: {} is not a positive length", len);
    opt.max_context = std::max<int64_t>(opt.max_context, len + 64);
  }
  std::unique_ptr<Model> host;  // a checkpoint's bound weights, which the CUDA model reads its tables from
  std::unique_ptr<cuda::CudaModel> m;
  if (o.load_format == "dummy") {
    if (o.config.empty()) fail("--load-format dummy needs --config FILE (a config.json)");
    m = dummy_cuda_model(o.config, o.seed + 1, opt);
  } else {
    if (o.model.empty()) fail("bench needs --model DIR or --load-format dummy --config FILE");
    host = std::make_unique<Model>(o.model);
    m = std::make_unique<cuda::CudaModel>(host->config(), host->weights(), opt,
                                          host->has_mtp() ? &host->mtp_weights() : nullptr);
  }
  auto backend = std::make_shared<cuda::CudaBackend>(std::move(m), o.prompt_passes);
  cuda::CudaModel& model = backend->model();
  json r;
  r["backend"] = "cuda";
  r["model"] = model.describe();
  r["bytes_per_token"] = model.bytes_per_token();
  r["decode"] = json::array();
  r["engine"] = json::array();
  r["engine_drafts"] = json::array();      // the same with drafts (MTP head, depth by measured cost)
  r["engine_host_draws"] = json::array();  // no drafts, every logits row to the host's KeyedSampler
  // Prompts first, each line printed as it is measured (a long one may be cut by the caller's timeout).
  r["prompt_passes"] = o.prompt_passes;
  r["prompt"] = json::array();
  if (!o.prompt_lengths.empty()) {
    engine_prompt_rate(backend, std::min(o.prompt_lengths.front(), 512));  // warm-up
    if (!o.json)
      std::printf("prompts through the engine (%s):\n%10s %12s %10s %12s\n",
                  o.prompt_passes ? "prompt passes" : "decode windows", "tokens", "prefill s", "wall s",
                  "tok/s");
  }
  for (int len : o.prompt_lengths) {
    const json p = engine_prompt_rate(backend, len);
    r["prompt"].push_back(p);
    if (!o.json)
      std::printf("%10d %12.3f %10.3f %12.1f\n", len, p["prefill_s"].get<double>(), p["wall_s"].get<double>(),
                  p["tokens_per_s"].get<double>());
    std::fflush(stdout);
  }
  for (int s : o.streams) {
    const cuda::DecodeRate d = cuda::bench_decode_rounds(model, s, o.decode_tokens, o.warmup_rounds);
    r["decode"].push_back(
        {{"streams", s}, {"ms_per_round", d.ms_per_round}, {"tokens_per_s", d.tokens_per_s}});
    if (!o.engine) continue;
    // Each engine line after an untimed run of its own kind (warmup_rounds tokens a stream): the graphs of
    // this row count and draw path are captured there, not in the timed rounds, as the model line's warm-up
    // rounds do for it (a 16-token run at one stream otherwise carries ~10 ms of capture, 0.6 ms a round).
    const auto timed = [&](bool drafts, bool host_draws) {
      if (o.warmup_rounds > 0) engine_rate(backend, s, o.warmup_rounds, drafts, host_draws);
      return engine_rate(backend, s, o.decode_tokens, drafts, host_draws);
    };
    r["engine"].push_back(timed(false, false));
    r["engine_host_draws"].push_back(timed(false, true));
    if (o.drafts && backend->has_mtp()) r["engine_drafts"].push_back(timed(true, false));
  }
  if (o.json) {
    std::printf("%s\n", r.dump(2).c_str());
    return;
  }
  std::printf("%s%8s %12s %12s %18s %14s %16s %18s %16s\n", model.describe().c_str(), "streams", "ms/round",
              "tok/s", "engine ms/round", "engine tok/s", "+drafts tok/s", "drafted/accepted",
              "host-draw tok/s");
  for (size_t i = 0; i < r["decode"].size(); ++i) {
    const auto& d = r["decode"][i];
    std::printf("%8d %12.3f %12.1f", d["streams"].get<int>(), d["ms_per_round"].get<double>(),
                d["tokens_per_s"].get<double>());
    if (i < r["engine"].size())
      std::printf(" %18.3f %14.1f", r["engine"][i]["ms_per_round"].get<double>(),
                  r["engine"][i]["tokens_per_s"].get<double>());
    if (i < r["engine_drafts"].size()) {
      const auto& e = r["engine_drafts"][i];
      std::printf(" %16.1f %10lld/%-7lld", e["tokens_per_s"].get<double>(), e["drafted"].get<long long>(),
                  e["accepted"].get<long long>());
    } else if (i < r["engine_host_draws"].size()) {
      std::printf(" %16s %18s", "-", "-");  // no drafts line: keep the host-draw figure in its own column
    }
    if (i < r["engine_host_draws"].size())
      std::printf(" %16.1f", r["engine_host_draws"][i]["tokens_per_s"].get<double>());
    std::printf("\n");
  }
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
