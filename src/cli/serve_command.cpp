// `deltaserve serve MODEL_DIR`: the OpenAI-compatible HTTP server.
#include <fmt/format.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "cli/backend_choice.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "server/serial_backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::cli {

namespace {

struct ServeOptions {
  std::string model, host = "127.0.0.1", api_key, backend = "cpu";
  bool cuda_prompt_passes = true, cuda_drafts = false;
  std::string cuda_products = "auto";
  int port = 8080, parallel = 4, threads = 0;
  int64_t context = 0, max_queue = 256;
  double prompt_cache_gib = 1.0, memory_limit_gib = 0;
  int draft_depth = 0;
  bool no_drafts = false, draft_guard = false;
  bool reference = false;
};

std::optional<ChatTemplate> load_template(const std::filesystem::path& dir) {
  try {
    return ChatTemplate::from_model_dir(dir);
  } catch (const Error& e) {
    std::fprintf(stderr, "note: no chat template (%s); /v1/chat/completions will refuse requests\n",
                 e.what());
    return std::nullopt;
  }
}

void serve(const ServeOptions& o) {
  // SIGTERM / SIGINT are taken by a waiting thread, so shutdown runs outside a signal handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished client is a failed write, not a dead server
  if (o.threads > 0) ThreadPool::set_global_threads(o.threads);  // after the mask: threads inherit it

  std::filesystem::path dir(o.model);
  if (o.reference && o.backend != "cpu")
    fail("--reference is the CPU's serial decode; drop --backend {}", o.backend);
  const LoadedBackend loaded =
      load_backend(o.backend, o.model, o.context, o.cuda_prompt_passes, o.cuda_products, o.parallel);
  const Model& model = *loaded.host;
  Tokenizer tokenizer = Tokenizer::load(dir);
  server::PromptBuilder prompts(tokenizer, load_template(dir));
  const ModelConfig& cfg = model.config();
  const int64_t context = loaded.context;
  if (context <= 1) fail("--context: the model names no max_position_embeddings; give --context");
  // --reference: the serial plain decode, the baseline the batched engine's replies must equal.
  std::unique_ptr<Engine> engine;
  std::unique_ptr<server::GenerationBackend> backend_ptr;
  if (o.reference) {
    backend_ptr = std::make_unique<server::SerialBackend>(model, context, o.max_queue);
  } else {
    EngineOptions options;
    options.parallel = o.parallel;
    options.context = context;
    options.prompt_cache_gib = o.prompt_cache_gib;
    options.max_queue = o.max_queue;
    options.drafts = drafts_on(o.backend, o.no_drafts, o.cuda_drafts);
    options.draft_depth = o.draft_depth;
    options.draft_guard = o.draft_guard;
    options.memory_limit_gib = o.memory_limit_gib;
    engine = std::make_unique<Engine>(loaded.backend, options);
    backend_ptr = std::make_unique<server::EngineBackend<Engine>>(*engine);
  }
  server::GenerationBackend& backend = *backend_ptr;
  std::string name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  server::ServerState state{backend, prompts, {{name, o.model}, cfg.vocab_size}, context, cfg.eos_ids, {}};
  server::HttpServer http(state, {o.host, o.port, o.api_key, 64});
  int port = http.bind();
  if (!server::is_loopback(o.host) && o.api_key.empty())
    std::fprintf(stderr, "warning: listening on %s without --api-key: anyone who can reach it can use it\n",
                 o.host.c_str());
  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    signalled = true;
    std::fprintf(stderr, "signal %d: finishing requests in flight, then exiting\n", sig);
    http.stop();
  });
  const std::string products = loaded.products.empty() ? "" : ", decode products " + loaded.products;
  std::fprintf(stderr, "deltaserve: serving %s on http://%s:%d (context %lld, backend %s%s)\n", name.c_str(),
               o.host.c_str(), port, static_cast<long long>(context), loaded.backend->name(),
               products.c_str());
  std::fflush(stderr);
  http.serve();
  // serve() also returns when stop() came from elsewhere; wake the waiter so it can be joined.
  if (!signalled) pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
}

}  // namespace

void register_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("model", o->model, "model directory (config.json, safetensors, tokenizer.json)")
      ->required();
  cmd->add_option("--host", o->host, "address to bind (default 127.0.0.1)");
  cmd->add_option("--port", o->port, "port (default 8080; 0 picks a free one)")->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", o->parallel, "streams decoded together")->check(CLI::PositiveNumber);
  cmd->add_option("--context", o->context,
                  "tokens per stream, prompt + reply (default: the model's maximum)");
  cmd->add_option("--prompt-cache-gib", o->prompt_cache_gib, "prompt cache size; 0 disables it");
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (not on /health)");
  cmd->add_option("--max-queue", o->max_queue, "queued requests beyond this get 429 + Retry-After");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  cmd->add_flag("--no-drafts", o->no_drafts, "never draft (the plain decode for every request)");
  cmd->add_flag("--draft-guard", o->draft_guard,
                "rest drafting while its rounds measure slower per token than plain ones (DraftGuard)");
  cmd->add_option("--draft-depth", o->draft_depth,
                  "verify this many drafts when offered (tests); 0: by measured cost")
      ->check(CLI::Range(0, 8));
  cmd->add_option("--memory-limit-gib", o->memory_limit_gib,
                  "weights + stream states + drafting + prompt cache stay under this; 0: no limit")
      ->check(CLI::NonNegativeNumber);
  add_backend_options(*cmd, o->backend, o->cuda_prompt_passes, o->cuda_drafts, o->cuda_products);
  cmd->add_flag("--reference", o->reference,
                "serve with the serial reference decode instead of the batched engine");
  cmd->callback([o] { serve(*o); });
}

}  // namespace ds::cli
