#include "cli/bench_drafts.h"

#include <cstdio>
#include <future>
#include <vector>

#include "core/error.h"
#include "runtime/engine.h"

namespace ds::cli {
namespace {

// A 16-token phrase repeated 8 times: n-gram copies land while the reply repeats it.
std::vector<int32_t> repetitive_prompt(uint64_t seed, int64_t vocab) {
  std::vector<int32_t> phrase(16), out;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 7;
  for (auto& t : phrase) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  for (int i = 0; i < 8; ++i) out.insert(out.end(), phrase.begin(), phrase.end());
  return out;
}

struct DraftRun {
  std::vector<int32_t> tokens;
  TokenEvent final;
};

DraftRun run_once(const Model& model, const GenerationRequest& request, bool drafts) {
  EngineOptions options;
  options.parallel = 1;
  options.prompt_cache_gib = 0;
  options.drafts = drafts;
  Engine engine(model, options);
  DraftRun run;
  std::promise<void> done;
  engine.submit(request, [&](const TokenEvent& ev) {
    if (ev.token >= 0) run.tokens.push_back(ev.token);
    if (ev.finished) {
      run.final = ev;
      done.set_value();
    }
  });
  done.get_future().wait();
  if (run.final.reason == FinishReason::Error) fail("bench drafts: {}", run.final.error);
  return run;
}

nlohmann::json summary(const DraftRun& r) {
  const double s = r.final.decode_seconds;
  // The first token comes from the prompt pass: decode speed counts the tokens after it.
  const double rate = s > 0 ? static_cast<double>(r.final.completion_tokens - 1) / s : 0;
  return {{"tokens", r.final.completion_tokens},
          {"decode_s", s},
          {"tokens_per_s", rate},
          {"drafted", r.final.drafted_tokens},
          {"accepted", r.final.accepted_tokens}};
}

}  // namespace

nlohmann::json bench_drafts(const Model& model, int reply_tokens, uint64_t seed) {
  GenerationRequest request;
  request.prompt = repetitive_prompt(seed, model.config().vocab_size);
  request.max_tokens = reply_tokens;
  request.ignore_eos = true;
  request.sampling.temperature = 0;
  std::fprintf(stderr, "drafts: a %d-token greedy reply, drafts off then on\n", reply_tokens);
  const DraftRun plain = run_once(model, request, false), drafted = run_once(model, request, true);
  return {{"prompt_tokens", request.prompt.size()},
          {"plain", summary(plain)},
          {"drafts", summary(drafted)},
          {"same_tokens", plain.tokens == drafted.tokens}};
}

void print_drafts(const nlohmann::json& r) {
  const auto &p = r["plain"], &d = r["drafts"];
  const int64_t drafted = d["drafted"].get<int64_t>(), accepted = d["accepted"].get<int64_t>();
  std::printf("\ndrafts (n-gram copies; %lld-token repetitive prompt, greedy reply of %lld tokens):\n",
              static_cast<long long>(r["prompt_tokens"].get<int64_t>()),
              static_cast<long long>(p["tokens"].get<int64_t>()));
  std::printf("  off: %.1f tok/s; on: %.1f tok/s, %lld drafted, %lld accepted (%.0f%%); same tokens: %s\n",
              p["tokens_per_s"].get<double>(), d["tokens_per_s"].get<double>(),
              static_cast<long long>(drafted), static_cast<long long>(accepted),
              drafted > 0 ? 100.0 * accepted / drafted : 0.0, r["same_tokens"].get<bool>() ? "yes" : "NO");
}

}  // namespace ds::cli
