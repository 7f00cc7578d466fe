#include "runtime/bench_decode.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/error.h"
#include "runtime/reply_collector.h"

namespace ds {

std::vector<int32_t> bench_prompt(int stream, int64_t vocab) {
  std::vector<int32_t> prompt;
  for (int t = 0; t < 16; ++t) prompt.push_back(static_cast<int32_t>((7919 * stream + 31 * t + 5) % vocab));
  return prompt;
}

BenchDecode bench_decode(Engine& engine, int64_t vocab, int streams, int tokens, const SamplingParams& params,
                         uint64_t seed_base) {
  std::vector<std::unique_ptr<ReplyCollector>> collectors;
  for (int i = 0; i < streams; ++i) {
    GenerationRequest r;
    r.prompt = bench_prompt(i, vocab);
    r.max_tokens = tokens + 1;
    r.ignore_eos = true;
    r.sampling = params;
    r.sampling.seed = seed_base + static_cast<uint64_t>(i);
    r.use_prompt_cache = false;
    collectors.push_back(std::make_unique<ReplyCollector>());
    engine.submit(std::move(r), collectors.back()->callback());
  }
  BenchDecode out;
  for (auto& c : collectors) {
    c->wait_done(std::chrono::hours(24));
    const CollectedReply reply = c->reply();
    const TokenEvent& ev = reply.final;
    if (ev.reason == FinishReason::Error) fail("decode through the engine: {}", ev.error);
    out.replies.push_back(reply.tokens);
    out.decode_seconds = std::max(out.decode_seconds, ev.decode_seconds);
    out.decoded += ev.completion_tokens - 1;
    out.drafted += ev.drafted_tokens, out.accepted += ev.accepted_tokens;
  }
  return out;
}

}  // namespace ds
