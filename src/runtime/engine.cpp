// The engine's API, its thread and admission; the rounds themselves are in engine_round.cpp.
#include "runtime/engine.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/cpu_backend.h"
#include "runtime/engine_impl.h"
#include "runtime/ngram_drafter.h"

namespace ds {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double gib(int64_t bytes) {
  return static_cast<double>(bytes) / kGiB;
}

}  // namespace

Engine::Impl::Impl(std::shared_ptr<const ModelBackend> b, const EngineOptions& o)
    : backend(std::move(b)),
      model(*backend),
      options(o),
      cache(static_cast<int64_t>(o.prompt_cache_gib * kGiB)) {
  const ModelBackend& m = model;
  const int64_t max_pos = m.max_context();
  if (o.parallel < 1) fail("engine: parallel must be at least 1, got {}", o.parallel);
  if (o.max_queue < 0) fail("engine: max_queue must be >= 0, got {}", o.max_queue);
  if (!(o.prompt_cache_gib >= 0)) fail("engine: prompt_cache_gib must be >= 0, got {}", o.prompt_cache_gib);
  if (!(o.memory_limit_gib >= 0)) fail("engine: memory_limit_gib must be >= 0, got {}", o.memory_limit_gib);
  if (o.context < 0) fail("engine: context must be >= 0, got {}", o.context);
  if (o.max_drafts < 0 || o.max_drafts > 64)
    fail("engine: max_drafts must be in 0..64, got {}", o.max_drafts);
  if (o.draft_depth < 0) fail("engine: draft_depth must be >= 0, got {}", o.draft_depth);
  round_prompt_rows = o.prompt_rows_per_round > 0 ? o.prompt_rows_per_round : m.prompt_rows_per_round();
  mark_interval = o.cache_mark_interval > 0 ? o.cache_mark_interval : m.cache_mark_interval();
  if (o.prompt_rows_per_round < 0 || round_prompt_rows < PromptCache::kGrid)
    fail("engine: prompt_rows_per_round must be at least {} (or 0 for the backend's {}), got {}",
         PromptCache::kGrid, m.prompt_rows_per_round(), o.prompt_rows_per_round);
  if (o.cache_mark_interval < 0 || mark_interval <= 0 || mark_interval % PromptCache::kGrid != 0)
    fail("engine: cache_mark_interval must be a positive multiple of {} (or 0 for the backend's {}), got {}",
         PromptCache::kGrid, m.cache_mark_interval(), o.cache_mark_interval);
  context = o.context > 0 ? o.context : max_pos;
  if (max_pos > 0 && context > max_pos) {
    if (max_pos == m.config().max_positions)
      fail("engine: context {} exceeds the model's max_position_embeddings {}", context, max_pos);
    fail("engine: context {} exceeds the {} positions the {} backend's caches hold", context, max_pos,
         m.name());
  }
  if (context <= 0) fail("engine: the model gives no max_position_embeddings; set the context");
  weights_bytes = m.weights_bytes();
  limit_bytes = static_cast<int64_t>(o.memory_limit_gib * kGiB);
  if (limit_bytes > 0 && weights_bytes + static_cast<int64_t>(m.new_state().bytes()) > limit_bytes)
    fail("engine: memory_limit_gib {} is below the weights ({:.3f} GiB)", o.memory_limit_gib,
         gib(weights_bytes));
  stats.weights_bytes = weights_bytes;
  // The MTP head drafts when the model has one (n-gram copies still win where they agree and run further).
  if (o.draft_source)
    drafter = o.draft_source;
  else if (m.has_mtp())
    drafter = std::make_shared<MtpDrafter>(m, NgramOptions{}, &head_costs);
  else
    drafter = std::make_shared<NgramDrafter>();
  const bool head_follows = o.drafts && o.max_drafts > 0 && drafter->uses_hidden();
  memory = stream_memory(m, o.drafts ? o.max_drafts : 0, head_follows, kMaxIdleHeadRows);
  // Timed at load, so the first drafted reply does not pay for it.
  if (o.drafts && o.max_drafts > 0 && o.draft_depth == 0) try_calibrate_costs();
  cache.set_capacity(cache_budget());
}

int64_t Engine::Impl::reserved_bytes() const {
  int64_t n = 0;
  for (const auto& s : running) n += s->reserve_bytes;
  // A warm pass grows its state (the head's cache included) to its last mark.
  for (const auto& w : warm)
    n += static_cast<int64_t>(w.state.bytes()) +
         (w.target - w.state.position) * (memory.per_token + memory.head_per_token);
  return n;
}

// The prompt cache may use its own budget, but never memory that running streams have reserved.
int64_t Engine::Impl::cache_budget() const {
  int64_t budget = static_cast<int64_t>(options.prompt_cache_gib * kGiB);
  if (limit_bytes > 0) budget = std::min(budget, limit_bytes - weights_bytes - reserved_bytes());
  return std::max<int64_t>(budget, 0);
}

// Admits queued requests while slots and memory allow; the cache and warm passes give way first. A request
// that cannot fit even with nothing else running is refused with a reason instead of waiting forever.
void Engine::Impl::admit_locked(std::vector<PendingRequest>& admitted, std::vector<PendingRequest>& refused) {
  int64_t held = reserved_bytes();
  for (const auto& p : admitted) held += p.reserve_bytes;
  while (!queue.empty() && static_cast<int64_t>(running.size() + admitted.size()) < options.parallel) {
    PendingRequest& p = queue.front();
    if (limit_bytes > 0 && weights_bytes + held + cache.bytes() + p.reserve_bytes > limit_bytes) {
      cache.evict_to(limit_bytes - weights_bytes - held - p.reserve_bytes);
      if (weights_bytes + held + cache.bytes() + p.reserve_bytes > limit_bytes && !warm.empty()) {
        warm.clear();  // warm passes are an optimisation; a waiting request is not
        held = reserved_bytes();
        for (const auto& a : admitted) held += a.reserve_bytes;
      }
      if (weights_bytes + held + cache.bytes() + p.reserve_bytes > limit_bytes) {
        if (!running.empty() || !admitted.empty()) break;  // wait for memory to be freed
        refused.push_back(std::move(p));
        queue.pop_front();
        continue;
      }
    }
    held += p.reserve_bytes;
    admitted.push_back(std::move(p));
    queue.pop_front();
  }
}

void Engine::Impl::start_stream(PendingRequest&& p) {
  auto s = std::make_unique<Stream>();
  s->id = p.id;
  s->request = std::move(p.request);
  s->on_event = std::move(p.on_event);
  s->reserve_bytes = p.reserve_bytes;
  s->admitted = EngineClock::now();
  s->caching = options.prompt_cache_gib > 0 && s->request.use_prompt_cache;
  s->drafting = options.drafts && s->request.use_drafts && options.max_drafts > 0;
  std::optional<PromptCache::Hit> hit;
  try {
    s->history.add_prompt(s->request.prompt);
    // At least one prompt token must run to give the first token's logits.
    if (s->caching) hit = cache.find(s->request.prompt, s->prompt_len() - 1);
    if (hit) {
      s->state = *hit->state;
      s->cached_tokens = hit->length;
    } else {
      s->state = model.new_state();
    }
  } catch (const std::exception& e) {
    // No state for it (a GPU out of memory): the request ends with the error. Its callback has moved into
    // the stream by now, so the stream, not the caller, must send the final event.
    finish(*s, FinishReason::Error, e.what());
    return;
  }
  {
    std::lock_guard lock(mutex);
    stats.prompt_tokens_total += s->prompt_len();
    ++stats.running;
    s->counted = true;
    if (hit) {
      ++stats.cache_hits;
      stats.cached_tokens_total += hit->length;
    }
  }
  running.push_back(std::move(s));
}

void Engine::Impl::publish_stats() {
  int64_t state = 0;
  for (const auto& s : running) state += static_cast<int64_t>(s->state.bytes());
  for (const auto& w : warm) state += static_cast<int64_t>(w.state.bytes());
  std::lock_guard lock(mutex);
  stats.queued = static_cast<int64_t>(queue.size());
  stats.state_bytes = state;
  stats.prompt_cache_bytes = cache.bytes();
  stats.warm_pending = static_cast<int64_t>(warm.size());
  stats.draft_round_ms = round_costs.table();
  stats.draft_catch_up_ms = head_costs.catch_up.table();
  stats.draft_chain_ms = head_costs.chain.table();
}

// One pass of the engine thread: cancels, admission, one round. False once the engine is stopping.
bool Engine::Impl::step() {
  std::vector<PendingRequest> admitted, refused, dropped;
  std::unordered_set<uint64_t> cancelled;
  {
    std::unique_lock lock(mutex);
    wake.wait(lock, [&] {
      return stopping || !cancels.empty() || !running.empty() || !warm.empty() ||
             (!queue.empty() && static_cast<int64_t>(running.size()) < options.parallel);
    });
    if (stopping) return false;
    cancelled.swap(cancels);
    for (auto it = queue.begin(); it != queue.end();) {
      if (cancelled.count(it->id)) {
        active.erase(it->id);
        dropped.push_back(std::move(*it));
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
    admit_locked(admitted, refused);
    for (const auto& p : refused) active.erase(p.id);
  }
  for (auto& p : dropped) {
    TokenEvent ev;
    ev.finished = true;
    ev.reason = FinishReason::Cancelled;
    ev.prompt_tokens = static_cast<int64_t>(p.request.prompt.size());
    try {
      p.on_event(ev);
    } catch (...) {
    }
  }
  for (auto& p : refused) {
    TokenEvent ev;
    ev.finished = true;
    ev.reason = FinishReason::Error;
    ev.error = fmt::format(
        "memory: the request needs {:.3f} GiB of stream state; with {:.3f} GiB of weights and the prompt "
        "cache "
        "emptied it still exceeds memory_limit_gib {}",
        gib(p.reserve_bytes), gib(weights_bytes), options.memory_limit_gib);
    ev.prompt_tokens = static_cast<int64_t>(p.request.prompt.size());
    try {
      p.on_event(ev);
    } catch (...) {
    }
  }
  for (auto& s : running)
    if (cancelled.count(s->id)) finish(*s, FinishReason::Cancelled);
  sweep_done();
  for (auto& p : admitted) {
    try {
      start_stream(std::move(p));
    } catch (const std::exception& e) {  // before start_stream took the callback (it ends its own failures)
      Stream s;
      s.id = p.id;
      s.on_event = std::move(p.on_event);
      finish(s, FinishReason::Error, e.what());
    }
  }
  try {
    cache.set_capacity(cache_budget());
    cache.evict_to(cache.capacity());
    run_round();
  } catch (const std::exception& e) {
    // Nothing may kill the engine thread: the streams of a failed round end with the error.
    for (auto& s : running)
      if (!s->done) finish(*s, FinishReason::Error, fmt::format("engine round failed: {}", e.what()));
    warm.clear();
  }
  sweep_done();
  publish_stats();
  return true;
}

void Engine::Impl::loop() {
  for (;;) {
    try {
      if (!step()) break;
    } catch (const std::exception& e) {
      // Nothing may kill the engine thread (an allocation failing in admission, say): running streams end.
      for (auto& s : running)
        if (!s->done) finish(*s, FinishReason::Error, fmt::format("engine failed: {}", e.what()));
      running.clear();
      warm.clear();
    }
  }
  // Shutting down: everything still queued or running ends as cancelled.
  std::deque<PendingRequest> left;
  {
    std::lock_guard lock(mutex);
    left.swap(queue);
  }
  for (auto& s : running) finish(*s, FinishReason::Cancelled);
  sweep_done();
  for (auto& p : left) {
    TokenEvent ev;
    ev.finished = true;
    ev.reason = FinishReason::Cancelled;
    try {
      p.on_event(ev);
    } catch (...) {
    }
  }
}

Engine::Engine(const Model& model, const EngineOptions& options)
    : Engine(std::make_shared<CpuBackend>(model), options) {}

Engine::Engine(std::shared_ptr<const ModelBackend> backend, const EngineOptions& options) {
  if (!backend) fail("engine: no backend");
  impl_ = std::make_unique<Impl>(std::move(backend), options);
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

uint64_t Engine::submit(GenerationRequest request, TokenCallback on_event) {
  Impl& im = *impl_;
  const ModelConfig& cfg = im.model.config();
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) fail("prompt: must hold at least one token");
  for (size_t i = 0; i < request.prompt.size(); ++i)
    if (request.prompt[i] < 0 || request.prompt[i] >= cfg.vocab_size)
      fail("prompt: token id {} at index {} is out of range [0, {})", request.prompt[i], i, cfg.vocab_size);
  for (int32_t t : request.stop_token_ids)
    if (t < 0 || t >= cfg.vocab_size)
      fail("stop_token_ids: token id {} is out of range [0, {})", t, cfg.vocab_size);
  if (request.max_tokens < 1) fail("max_tokens must be at least 1, got {}", request.max_tokens);
  if (request.top_logprobs < -1 || request.top_logprobs > 20)
    fail("top_logprobs must be in [0, 20], got {}", request.top_logprobs);
  request.sampling.validate();
  if (n + request.max_tokens > im.context)
    fail("context_length_exceeded: prompt of {} tokens + max_tokens {} exceeds the context of {} tokens", n,
         request.max_tokens, im.context);
  if (!on_event) fail("submit: no event callback");
  const bool drafts = im.options.drafts && request.use_drafts && im.options.max_drafts > 0;
  const int64_t reserve = im.memory.reserve(n + request.max_tokens, n, drafts);
  if (im.limit_bytes > 0 && im.weights_bytes + reserve > im.limit_bytes)
    fail(
        "memory: the request needs {:.3f} GiB of stream state{}; with {:.3f} GiB of weights it exceeds "
        "memory_limit_gib {}",
        gib(reserve), drafts ? " (drafts included; \"draft\": false needs less)" : "", gib(im.weights_bytes),
        im.options.memory_limit_gib);
  uint64_t id = 0;
  {
    std::lock_guard lock(im.mutex);
    if (im.stopping) fail("engine: shutting down");
    if (static_cast<int64_t>(im.queue.size()) >= im.options.max_queue)
      fail("queue full: {} requests are waiting (max_queue {}); retry later", im.queue.size(),
           im.options.max_queue);
    id = im.next_id++;
    im.queue.push_back(PendingRequest{id, std::move(request), std::move(on_event), reserve});
    im.active.insert(id);
    ++im.stats.requests_total;
    im.stats.queued = static_cast<int64_t>(im.queue.size());
  }
  im.wake.notify_all();
  return id;
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard lock(impl_->mutex);
    if (!impl_->active.count(id)) return;  // unknown or already finished
    impl_->cancels.insert(id);
  }
  impl_->wake.notify_all();
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard lock(impl_->mutex);
    s = impl_->stats;
    s.queued = static_cast<int64_t>(impl_->queue.size());
  }
  s.backend_failure = impl_->model.failure();
  return s;
}

const EngineOptions& Engine::options() const {
  return impl_->options;
}

}  // namespace ds
