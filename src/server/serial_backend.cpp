#include "server/serial_backend.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "runtime/keyed_sampler.h"
#include "runtime/token_counts.h"

namespace ds::server {

SerialBackend::SerialBackend(const Model& model, int64_t context, int64_t max_queue)
    : model_(model), context_(context), max_queue_(max_queue), worker_([this] { work(); }) {}

SerialBackend::~SerialBackend() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

uint64_t SerialBackend::submit(GenerationRequest request, TokenCallback on_event) {
  const int64_t vocab = model_.config().vocab_size;
  if (request.prompt.empty()) fail("the prompt is empty");
  for (int32_t id : request.prompt)
    if (id < 0 || id >= vocab) fail("prompt token id {} is out of range [0, {})", id, vocab);
  if (request.max_tokens < 1) fail("max_tokens must be at least 1, got {}", request.max_tokens);
  if (static_cast<int64_t>(request.prompt.size()) + request.max_tokens > context_)
    fail("the prompt ({} tokens) plus max_tokens ({}) exceeds the context of {} tokens",
         request.prompt.size(), request.max_tokens, context_);
  if (request.top_logprobs > 20) fail("top_logprobs must be in [0, 20], got {}", request.top_logprobs);
  request.sampling.validate();
  std::lock_guard lock(mutex_);
  if (static_cast<int64_t>(queue_.size()) >= max_queue_)
    fail("queue full ({} requests waiting)", queue_.size());
  uint64_t id = next_id_++;
  queue_.push_back({id, std::move(request), std::move(on_event)});
  stats_.queued = static_cast<int64_t>(queue_.size());
  wake_.notify_one();
  return id;
}

void SerialBackend::cancel(uint64_t id) {
  std::lock_guard lock(mutex_);
  // Only live requests are marked: a cancel after the end would stay in the set for ever.
  bool queued = std::any_of(queue_.begin(), queue_.end(), [&](const Job& j) { return j.id == id; });
  if (id == running_id_ || queued) cancelled_.insert(id);
}

size_t SerialBackend::cancel_marks() const {
  std::lock_guard lock(mutex_);
  return cancelled_.size();
}

EngineStats SerialBackend::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

bool SerialBackend::cancelled(uint64_t id) {
  std::lock_guard lock(mutex_);
  return stopping_ || cancelled_.count(id) > 0;
}

void SerialBackend::work() {
  for (;;) {
    Job job;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      running_id_ = job.id;
      stats_.queued = static_cast<int64_t>(queue_.size());
      stats_.running = 1;
      stats_.requests_total++;
      stats_.prompt_tokens_total += static_cast<int64_t>(job.request.prompt.size());
    }
    run(job);
    std::lock_guard lock(mutex_);
    stats_.running = 0;
    running_id_ = 0;
    cancelled_.erase(job.id);
  }
}

void SerialBackend::run(Job& job) {
  using Clock = std::chrono::steady_clock;
  const GenerationRequest& r = job.request;
  const ModelConfig& cfg = model_.config();
  TokenEvent last;
  last.finished = true;
  last.prompt_tokens = static_cast<int64_t>(r.prompt.size());
  try {
    auto t0 = Clock::now();
    StreamState state = model_.new_state();
    ForwardSegment prompt{&state, r.prompt, true, false};
    std::vector<float> logits = model_.forward({&prompt, 1});
    auto t1 = Clock::now();
    last.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    TokenCounts history;
    history.add_prompt(r.prompt);
    KeyedSampler sampler;
    last.reason = FinishReason::Length;
    for (int32_t i = 0; i < r.max_tokens; ++i) {
      if (cancelled(job.id)) {
        last.reason = FinishReason::Cancelled;
        break;
      }
      std::span<const float> row(logits.data(), static_cast<size_t>(cfg.vocab_size));
      int32_t token = sampler.sample(row, r.sampling, static_cast<int64_t>(r.prompt.size()) + i, history);
      TokenEvent e;
      e.token = token;
      if (r.top_logprobs >= 0) e.logprobs = raw_logprobs(row, {}, token, r.top_logprobs);
      history.add_generated(token);
      last.completion_tokens++;
      job.on_event(e);
      bool eos = std::find(cfg.eos_ids.begin(), cfg.eos_ids.end(), token) != cfg.eos_ids.end();
      bool stop =
          std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), token) != r.stop_token_ids.end();
      if ((eos && !r.ignore_eos) || stop) {
        last.reason = FinishReason::Stop;
        break;
      }
      if (i + 1 == r.max_tokens) break;
      ForwardSegment step{&state, {&token, 1}, false, false};
      logits = model_.forward({&step, 1});
    }
    last.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  } catch (const std::exception& e) {
    last.reason = FinishReason::Error;
    last.error = e.what();
  }
  {
    std::lock_guard lock(mutex_);
    stats_.completion_tokens_total += last.completion_tokens;
  }
  job.on_event(last);
}

}  // namespace ds::server
