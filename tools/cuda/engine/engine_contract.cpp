// cuda_engine_contract MODEL_DIR|--dummy-config FILE [--backend cuda|cpu] [--context N] [--prompt-path]: the
// exactness contract (../shared/design/exactness.md) through the Engine API on one backend, greedy and
// seeded: concurrent == solo, drafted == plain (the engine's default source: the MTP head on a model with
// one, else n-gram copies; a forced depth too, so rollbacks happen; and n-gram copies alone), resumed ==
// fresh (a prompt-cache hit, and a second chat turn resumed from the warm pass's mark; with a head its cache
// travels in the snapshots). The reference of each check is the same backend's plain decode: one slot, no
// prompt cache, no drafts. Prints one line per check and case; exits 1 if any fails. `--backend cpu` runs the
// same checks on the CPU (a control for the program itself). `--prompt-path`: CUDA prompts as CudaModel
// prompt passes (CudaBackend's option; decode windows without it). On CUDA, also device draws == host draws
// (the DeviceSampler against the KeyedSampler through the engine). `--dummy-config`: random weights for a
// config (dummy_backend below).
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/engine/cuda_backend.h"
#include "cli/backend_choice.h"
#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/ngram_drafter.h"
#include "runtime/reply_collector.h"

namespace {

using namespace ds;

using Reply = CollectedReply;

// One request's events; wait() throws when no final event comes within 300 s or the request failed.
class Collector : public ReplyCollector {
 public:
  Reply wait() {
    if (!wait_done(std::chrono::seconds(300))) fail("no final event in 300 s");
    Reply r = reply();
    if (r.final.reason == FinishReason::Error) fail("the request failed: {}", r.final.error);
    return r;
  }
};

struct Contract {
  std::shared_ptr<const ModelBackend> backend;
  int64_t context = 0;
  bool sampled = false;
  int failures = 0;

  EngineOptions options(int parallel, bool cache, bool drafts, int depth = 0, bool ngram_only = false) const {
    EngineOptions o;
    o.parallel = parallel;
    o.context = context;
    o.prompt_cache_gib = cache ? 1.0 : 0.0;
    o.drafts = drafts;
    o.draft_depth = depth;
    if (ngram_only) o.draft_source = std::make_shared<NgramDrafter>();
    return o;
  }
  std::vector<int32_t> prompt(size_t n, uint32_t seed) const {
    std::mt19937 rng(seed);
    std::vector<int32_t> t(n);
    const auto vocab = static_cast<uint32_t>(backend->config().vocab_size);
    for (auto& x : t) x = 3 + static_cast<int32_t>(rng() % (vocab - 3));  // no EOS (2) inside prompts
    return t;
  }
  GenerationRequest request(std::vector<int32_t> p, int32_t max_tokens) const {
    GenerationRequest r;
    r.prompt = std::move(p);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = sampled ? 0.8f : 0.0f;
    r.sampling.top_p = sampled ? 0.9f : 1.0f;
    r.sampling.seed = 99;
    return r;
  }
  static Reply run_on(Engine& e, const GenerationRequest& r) {
    Collector c;
    e.submit(r, c.callback());
    return c.wait();
  }
  Reply plain(const GenerationRequest& r) const {
    Engine e(backend, options(1, false, false));
    return run_on(e, r);
  }
  void report(const std::string& check, bool ok, const std::string& detail) {
    std::printf("%-34s %-7s %-4s %s\n", check.c_str(), sampled ? "seeded" : "greedy", ok ? "PASS" : "FAIL",
                detail.c_str());
    std::fflush(stdout);
    if (!ok) ++failures;
  }
  // Runs one check; an exception is its failure, and the next check still runs.
  void check(const std::string& name, const std::function<std::pair<bool, std::string>()>& body) {
    try {
      auto [ok, detail] = body();
      report(name, ok, detail);
    } catch (const std::exception& e) {
      report(name, false, fmt::format("threw: {}", e.what()));
    }
  }

  void run_all() {
    check("concurrent == solo (4 streams)", [&] {
      std::vector<GenerationRequest> reqs;
      const size_t lens[] = {40, 100, 150, 70};
      for (uint32_t i = 0; i < 4; ++i) reqs.push_back(request(prompt(lens[i], 10 + i), 24));
      Engine e(backend, options(4, true, true));
      std::vector<Collector> cs(4);
      for (int i = 0; i < 4; ++i) e.submit(reqs[i], cs[i].callback());
      int same = 0;
      for (int i = 0; i < 4; ++i) same += cs[i].wait().tokens == plain(reqs[i]).tokens;
      return std::pair{same == 4, fmt::format("{}/4 replies equal alone", same)};
    });
    // 16 tokens repeated 8 times: the reply tends to repeat too, so n-gram copies are offered and land.
    std::vector<int32_t> phrase = prompt(16, 7), repetitive;
    for (int i = 0; i < 8; ++i) repetitive.insert(repetitive.end(), phrase.begin(), phrase.end());
    for (int depth : {0, 4}) {
      check(fmt::format("drafted == plain (depth {})", depth == 0 ? "by cost" : "4"), [&] {
        const GenerationRequest r = request(repetitive, 48);
        Engine e(backend, options(1, false, true, depth));
        const Reply got = run_on(e, r), want = plain(r);
        return std::pair{
            got.tokens == want.tokens && got.final.completion_tokens == want.final.completion_tokens,
            fmt::format("{} tokens; drafted {}, accepted {}", got.tokens.size(), got.final.drafted_tokens,
                        got.final.accepted_tokens)};
      });
    }
    check("drafted == plain (n-gram only, d4)", [&] {
      const GenerationRequest r = request(repetitive, 48);
      Engine e(backend, options(1, false, true, 4, true));
      const Reply got = run_on(e, r), want = plain(r);
      return std::pair{got.tokens == want.tokens,
                       fmt::format("{} tokens; drafted {}, accepted {}", got.tokens.size(),
                                   got.final.drafted_tokens, got.final.accepted_tokens)};
    });
    check("drafted == plain (4 streams, d4)", [&] {
      std::vector<GenerationRequest> reqs;
      for (uint32_t i = 0; i < 4; ++i) {
        std::vector<int32_t> p = prompt(8, 30 + i), q;
        for (int k = 0; k < 6; ++k) q.insert(q.end(), p.begin(), p.end());
        reqs.push_back(request(q, 32));
      }
      Engine e(backend, options(4, false, true, 4));
      std::vector<Collector> cs(4);
      for (int i = 0; i < 4; ++i) e.submit(reqs[i], cs[i].callback());
      int same = 0;
      int64_t drafted = 0, accepted = 0;
      for (int i = 0; i < 4; ++i) {
        const Reply got = cs[i].wait();
        same += got.tokens == plain(reqs[i]).tokens;
        drafted += got.final.drafted_tokens, accepted += got.final.accepted_tokens;
      }
      return std::pair{same == 4,
                       fmt::format("{}/4 equal; drafted {}, accepted {}", same, drafted, accepted)};
    });
    check("resumed == fresh (cache hit)", [&] {
      Engine e(backend, options(4, true, true));
      const GenerationRequest r = request(prompt(200, 1), 20);
      const Reply first = run_on(e, r), second = run_on(e, r), fresh = plain(r);
      return std::pair{
          first.tokens == fresh.tokens && second.tokens == fresh.tokens && second.final.cached_tokens == 192,
          fmt::format("cached {} of 200", second.final.cached_tokens)};
    });
    check("resumed == fresh (second turn)", [&] {
      Engine e(backend, options(4, true, true));
      const GenerationRequest r = request(prompt(180, 2), 30);
      const Reply turn1 = run_on(e, r);
      // The warm pass re-runs prompt + reply as a prompt pass to the mark at 192; wait for it.
      for (int i = 0; i < 3000 && e.stats().warm_pending > 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      GenerationRequest next = r;
      next.prompt.insert(next.prompt.end(), turn1.tokens.begin(), turn1.tokens.end());
      const std::vector<int32_t> user = prompt(25, 3);
      next.prompt.insert(next.prompt.end(), user.begin(), user.end());
      const Reply turn2 = run_on(e, next), fresh = plain(next);
      return std::pair{
          turn1.tokens == plain(r).tokens && turn2.tokens == fresh.tokens && turn2.final.cached_tokens == 192,
          fmt::format("turn 2: {} prompt tokens, cached {}", next.prompt.size(), turn2.final.cached_tokens)};
    });
  }
};

// CUDA only: the same requests (greedy; top-p; top-k + top-p; min-p with penalties; temperature alone; one
// wanting logprobs, whose rows come to the host) with drafts at depth 4, four streams at once, drawn by the
// DeviceSampler and by the host's KeyedSampler (set_device_draws): the replies must be equal.
int device_vs_host_draws(const cli::LoadedBackend& loaded, cuda::CudaBackend& cuda) {
  Contract c{loaded.backend, loaded.context, true};
  std::vector<GenerationRequest> reqs;
  for (uint32_t i = 0; i < 6; ++i) {
    std::vector<int32_t> p = c.prompt(8, 50 + i), q;
    for (int k = 0; k < 5; ++k) q.insert(q.end(), p.begin(), p.end());
    GenerationRequest r = c.request(q, 40);
    r.sampling.seed = 1000 + i;
    SamplingParams& s = r.sampling;
    if (i == 0) s.temperature = 0, s.top_p = 1;
    if (i == 2) s.temperature = 0.6f, s.top_k = 20, s.top_p = 0.95f;
    if (i == 3)
      s.temperature = 1.0f, s.top_p = 1, s.min_p = 0.05f, s.repetition_penalty = 1.2f,
      s.presence_penalty = 0.5f, s.frequency_penalty = 0.3f;
    if (i == 4) s.temperature = 1.5f, s.top_p = 1;
    if (i == 5) r.top_logprobs = 2;
    reqs.push_back(r);
  }
  auto replies = [&](bool device) {
    cuda.set_device_draws(device);
    std::vector<Collector> cs(reqs.size());  // outlives the engine, whose thread calls them
    Engine e(loaded.backend, c.options(4, false, true, 4));
    for (size_t i = 0; i < reqs.size(); ++i) e.submit(reqs[i], cs[i].callback());
    std::vector<Reply> out;
    for (auto& col : cs) out.push_back(col.wait());
    return out;
  };
  const int64_t before = cuda.device_draws();
  const bool filters_were = cuda.device_filters();
  cuda.set_device_filters(true);  // top-k / top-p rows on the device (the default; set here in case it moves)
  const std::vector<Reply> dev = replies(true);
  cuda.set_device_filters(filters_were);
  const int64_t drawn = cuda.device_draws() - before;
  const std::vector<Reply> host = replies(false);
  cuda.set_device_draws(true);
  int same = 0;
  int64_t drafted = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    same += dev[i].tokens == host[i].tokens;
    drafted += dev[i].final.drafted_tokens;
  }
  const bool ok = same == static_cast<int>(reqs.size()) && drawn > 0;
  std::printf("%-34s %-7s %-4s %d/%zu replies equal; %lld rows drawn on the device, %lld drafted\n",
              "device draws == host draws (d4)", "mixed", ok ? "PASS" : "FAIL", same, reqs.size(),
              static_cast<long long>(drawn), static_cast<long long>(drafted));
  std::fflush(stdout);
  return ok ? 0 : 1;
}

constexpr const char* kUsage =
    "usage: cuda_engine_contract MODEL_DIR|--dummy-config FILE [--backend cuda|cpu] [--context N] "
    "[--prompt-path]";

// --dummy-config: random weights made on the GPU for a config.json, no checkpoint, so the contract runs at
// shapes the tiny checkpoint lacks (tests/cuda/flashnext-small-real-heads.json has the real hc and expert
// shapes, where the tensor family's fused hc tail and expert folds are taken).
cli::LoadedBackend dummy_backend(const std::string& file, int64_t context, bool prompt_path) {
  cuda::CudaModelOptions opt;
  opt.max_context = context;
  cli::LoadedBackend b;
  b.context = context;
  b.backend = std::make_shared<cuda::CudaBackend>(cli::dummy_cuda_model(file, 1, opt), prompt_path);
  return b;
}

int run(int argc, char** argv) {
  std::string dir, dummy_config, backend = "cuda";
  int64_t context = 2048;
  bool prompt_path = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--backend" && i + 1 < argc)
      backend = argv[++i];
    else if (a == "--prompt-path")
      prompt_path = true;
    else if (a == "--context" && i + 1 < argc)
      context = std::stoll(argv[++i]);
    else if (a == "--dummy-config" && i + 1 < argc)
      dummy_config = argv[++i];
    else if (dir.empty() && a.rfind("--", 0) != 0)
      dir = a;
    else
      fail("{} (unknown '{}')", kUsage, a);
  }
  if (dir.empty() == dummy_config.empty()) fail("{} (give a model directory or --dummy-config, one)", kUsage);
  if (!dummy_config.empty() && backend != "cuda")
    fail("--dummy-config is for --backend cuda (got '{}')", backend);
  const cli::LoadedBackend loaded = dummy_config.empty()
                                        ? cli::load_backend(backend, dir, context, prompt_path)
                                        : dummy_backend(dummy_config, context, prompt_path);
  if (!dummy_config.empty()) dir = "dummy weights for " + dummy_config;
  std::printf("contract on %s, backend %s%s, context %lld, draft source %s\n", dir.c_str(),
              loaded.backend->name(), prompt_path ? " (prompt path)" : "",
              static_cast<long long>(loaded.context),
              loaded.backend->has_mtp() ? "MTP head (+ agreeing n-gram copies)" : "n-gram copies");
  int failures = 0;
  for (bool sampled : {false, true}) {
    Contract c{loaded.backend, loaded.context, sampled};
    c.run_all();
    failures += c.failures;
  }
  if (const auto* cuda = dynamic_cast<const cuda::CudaBackend*>(loaded.backend.get())) {
    try {
      failures += device_vs_host_draws(loaded, const_cast<cuda::CudaBackend&>(*cuda));
    } catch (const std::exception& e) {
      std::printf("device draws == host draws: FAIL threw: %s\n", e.what());
      ++failures;
    }
  }
  std::printf("%s: %d check(s) failed\n", failures == 0 ? "PASS" : "FAIL", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_engine_contract: %s\n", e.what());
    return 2;
  }
}
