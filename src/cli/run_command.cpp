// `deltaserve run MODEL_DIR -p "prompt" [--chat]`: tokenizes (through the checkpoint's chat template with
// --chat), streams the reply as the engine decodes it (drafts on unless --no-drafts), and reports tokens/s.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/sampling_params.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::cli {

namespace {

struct RunOptions {
  std::string model, prompt, system, backend = "cpu";
  bool cuda_prompt_passes = true, cuda_drafts = false;
  std::string cuda_products = "auto";
  int64_t context = 0;
  bool chat = false, no_think = false, ignore_eos = false, no_drafts = false, draft_guard = false;
  int max_tokens = 256, threads = 0;
  SamplingParams sampling;
  int64_t seed = -1;
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The ids that end a reply: the config's EOS ids, the tokenizer's EOS, and ChatML's end of turn.
std::vector<int32_t> stop_ids(const ModelConfig& cfg, const Tokenizer& tok) {
  std::vector<int32_t> ids = cfg.eos_ids;
  if (auto e = tok.eos_id()) ids.push_back(*e);
  for (const char* t : {"<|im_end|>", "<|endoftext|>"})
    if (int32_t id = tok.token_id(t); id >= 0) ids.push_back(id);
  return ids;
}

void run(const RunOptions& o) {
  if (o.threads > 0) ThreadPool::set_global_threads(o.threads);
  const bool tty = isatty(STDERR_FILENO);
  auto t_load = Clock::now();
  if (tty) std::fprintf(stderr, "loading %s ...", o.model.c_str());
  const LoadedBackend loaded =
      load_backend(o.backend, o.model, o.context, o.cuda_prompt_passes, o.cuda_products, 1);
  Tokenizer tok = Tokenizer::load(o.model);
  if (tty)
    std::fprintf(stderr, "\rloaded %s in %.2f s (%s)\n", o.model.c_str(), seconds_since(t_load),
                 loaded.backend->name());
  const ModelConfig& cfg = loaded.backend->config();

  std::string text = o.prompt;
  if (o.chat) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", o.prompt}});
    nlohmann::ordered_json extra = {{"enable_thinking", !o.no_think}};
    text = ChatTemplate::from_model_dir(o.model).apply(messages, nullptr, true, extra);
  }
  std::vector<int32_t> prompt = tok.encode(text);
  if (prompt.empty()) fail("the prompt encodes to no tokens");
  if (static_cast<int64_t>(prompt.size()) + o.max_tokens > loaded.context)
    fail("prompt of {} tokens + --max-tokens {} exceeds the context of {} positions", prompt.size(),
         o.max_tokens, loaded.context);

  SamplingParams params = o.sampling;
  params.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : random_seed();
  params.validate();
  const std::vector<int32_t> stops = stop_ids(cfg, tok);
  GenerationRequest request;
  request.prompt = prompt;
  request.sampling = params;
  request.max_tokens = o.max_tokens;
  request.ignore_eos = o.ignore_eos;
  if (!o.ignore_eos) request.stop_token_ids = stops;

  // One engine slot, no prompt cache: the engine's decode path (with drafts unless --no-drafts).
  EngineOptions options;
  options.parallel = 1;
  options.prompt_cache_gib = 0;
  options.drafts = drafts_on(o.backend, o.no_drafts, o.cuda_drafts);
  options.draft_guard = o.draft_guard;
  options.context = loaded.context;
  Engine engine(loaded.backend, options);
  IncrementalDecoder decoder(tok, true);
  std::promise<TokenEvent> final_event;
  engine.submit(std::move(request), [&](const TokenEvent& ev) {
    const bool stop = std::find(stops.begin(), stops.end(), ev.token) != stops.end();
    if (ev.token >= 0 && !(stop && !o.ignore_eos)) {
      std::fputs(decoder.push(ev.token).c_str(), stdout);
      std::fflush(stdout);
    }
    if (ev.finished) final_event.set_value(ev);
  });
  const TokenEvent done = final_event.get_future().get();
  if (done.reason == FinishReason::Error) fail("generation failed: {}", done.error);
  std::fputs(decoder.flush().c_str(), stdout);
  const double prefill = done.prefill_seconds, decode = done.decode_seconds;
  const int64_t generated = done.completion_tokens;
  std::fprintf(stderr,
               "\n[%zu prompt tokens in %.2f s (%.1f tok/s); %lld tokens in %.2f s (%.1f tok/s); drafts %lld "
               "accepted %lld; seed %llu]\n",
               prompt.size(), prefill, prompt.size() / std::max(prefill, 1e-9),
               static_cast<long long>(generated), decode, generated / std::max(decode, 1e-9),
               static_cast<long long>(done.drafted_tokens), static_cast<long long>(done.accepted_tokens),
               static_cast<unsigned long long>(params.seed));
  // Not in the times above: the depth policy times its rounds when the engine starts.
  const EngineStats stats = engine.stats();
  if (stats.draft_calibration_ms > 0)
    std::fprintf(stderr, "[drafts: depth policy calibrated in %.1f ms at engine start]\n",
                 stats.draft_calibration_ms);
  // The policy's tables at the end of the reply (calibrated, then refined by its rounds and head calls).
  auto table = [](const std::vector<double>& ms) {
    std::string out;
    for (double m : ms) out += fmt::format(" {:.3f}", m);
    return out;
  };
  if (!stats.draft_round_ms.empty())
    std::fprintf(stderr, "[drafts: ms by rows:%s; head catch-up by rows:%s; head chain by streams:%s]\n",
                 table(stats.draft_round_ms).c_str(), table(stats.draft_catch_up_ms).c_str(),
                 table(stats.draft_chain_ms).c_str());
  // The draft guard's verdicts over the reply: rests, and rest rounds in which the resting head caught up.
  if (options.drafts && options.draft_guard)
    std::fprintf(stderr, "[drafts: guard rested %lld times; head catch-up rounds %lld]\n",
                 static_cast<long long>(stats.draft_rests), static_cast<long long>(stats.draft_catch_ups));
}

}  // namespace

void register_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "stream a reply to a prompt");
  cmd->add_option("model", o->model, "checkpoint directory (with tokenizer.json)")->required();
  cmd->add_option("-p,--prompt", o->prompt, "the prompt text")->required();
  cmd->add_flag("--chat", o->chat, "wrap the prompt as a user message with the checkpoint's chat template");
  cmd->add_option("--system", o->system, "system message (with --chat)");
  cmd->add_flag("--no-think", o->no_think, "chat_template_kwargs.enable_thinking = false");
  cmd->add_option("-n,--max-tokens", o->max_tokens, "tokens to generate")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", o->sampling.temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", o->sampling.top_k, "0 = off");
  cmd->add_option("--top-p", o->sampling.top_p, "1 = off");
  cmd->add_option("--min-p", o->sampling.min_p, "0 = off");
  cmd->add_option("--repetition-penalty", o->sampling.repetition_penalty);
  cmd->add_option("--seed", o->seed, "sampling seed (random when absent; printed at the end)");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "do not stop at end-of-sequence tokens");
  cmd->add_flag("--no-drafts", o->no_drafts, "never draft (the plain decode path; the same reply)");
  cmd->add_flag("--draft-guard", o->draft_guard,
                "rest drafting while its rounds measure slower per token than plain ones (DraftGuard)");
  add_backend_options(*cmd, o->backend, o->cuda_prompt_passes, o->cuda_drafts, o->cuda_products);
  cmd->add_option("--context", o->context,
                  "positions per stream, prompt + reply (default: the model's maximum; cuda: at most 8192)");
  cmd->callback([o] { run(*o); });
}

}  // namespace ds::cli
