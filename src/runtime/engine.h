#pragma once
// The runtime's public face: requests in, token events out. Many streams share each forward round; a reply
// never depends on what else runs, on drafting, or on the prompt cache (../shared/design/exactness.md).
// Contract between runtime/ (implements it) and server/ + cli/ (use it).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampling_params.h"
#include "runtime/token_logprobs.h"

namespace ds {

class Model;
class ModelBackend;
class DraftSource;

enum class FinishReason { None, Stop, Length, Cancelled, Error };

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids (the server tokenizes and applies templates)
  SamplingParams sampling;      // seed already chosen (SamplingParams::seed)
  int32_t max_tokens = 256;     // generated tokens at most
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  int32_t top_logprobs = -1;  // -1: no logprobs; 0..20: chosen token's logprob plus this many alternatives
  bool use_drafts = true;     // "draft": false runs the plain decode path (same tokens)
  bool use_prompt_cache = true;
};

// One event per generated token, then a final event (finished = true; token may be -1 when nothing new).
struct TokenEvent {
  int32_t token = -1;
  std::optional<LogprobReport> logprobs;
  bool finished = false;
  FinishReason reason = FinishReason::None;
  std::string error;  // set when reason == Error
  // Filled on the final event:
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

using TokenCallback =
    std::function<void(const TokenEvent&)>;  // called from the engine thread; must not block

struct EngineOptions {
  int parallel = 4;               // streams decoded together
  int64_t context = 0;            // max tokens per stream (prompt + reply); 0 = model's max positions
  double prompt_cache_gib = 1.0;  // 0 disables the prompt cache
  double memory_limit_gib = 0;    // 0 = no limit beyond the machine's
  int64_t max_queue = 256;        // queued requests beyond this are refused (server answers 429)
  bool drafts = true;             // --no-drafts turns them off for every request
  int max_drafts = 8;             // drafts per verify window at most
  int draft_depth = 0;            // 0: each round's depth by measured cost; N: always N at most (tests)
  bool draft_guard = false;       // with depths by cost: drafting that measures slower than plain rests
  std::shared_ptr<DraftSource> draft_source;  // null: n-gram copies (runtime/ngram_drafter.h)
  // Prompt rows per round (>= 64) and the prompt-cache mark spacing (a multiple of 64); 0: the backend's
  // choice (ModelBackend::prompt_rows_per_round / cache_mark_interval: 256 and 64 on the CPU).
  int64_t prompt_rows_per_round = 0;
  int64_t cache_mark_interval = 0;
};

struct EngineStats {
  int64_t running = 0, queued = 0;
  int64_t requests_total = 0, prompt_tokens_total = 0, completion_tokens_total = 0;
  int64_t cache_hits = 0, cached_tokens_total = 0, drafted_total = 0, accepted_total = 0;
  int64_t prompt_cache_bytes = 0, state_bytes = 0;
  int64_t weights_bytes = 0;  // the backend's weights: checkpoint files (mmapped) + the CPU's tiled copies
  int64_t warm_pending = 0;   // warm passes not yet run to their last mark
  double draft_calibration_ms = 0;  // timing the depth policy's rounds (at engine start)
  int64_t draft_rests = 0;  // times drafting measured slower than plain rounds and rested (DraftGuard)
  // Rounds in which a resting head caught up (one head call, no logits, no drafts): counted toward the rest,
  // neither drafting nor plain rounds for DraftGuard's timing.
  int64_t draft_catch_ups = 0;
  // The depth policy's cost tables as they stand (ms; rounds and head catch-ups by rows, chains by streams).
  std::vector<double> draft_round_ms, draft_catch_up_ms, draft_chain_ms;
  std::string backend_failure;  // ModelBackend::failure(): non-empty once the backend cannot serve again
};

class Engine {
 public:
  // The CPU backend over `model` (which must outlive the engine).
  Engine(const Model& model, const EngineOptions& options);
  // Any backend (runtime/model_backend.h): the CPU's, or the GPU's (src/backend/cuda/engine/).
  Engine(std::shared_ptr<const ModelBackend> backend, const EngineOptions& options);
  ~Engine();  // cancels everything and joins the engine thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe. Validates (prompt length vs context, token ids, params) and throws ds::Error naming the
  // problem before anything is queued; returns the request id. Refuses with ds::Error starting "queue full"
  // when the queue is at max_queue (the server maps that to 429 + Retry-After).
  uint64_t submit(GenerationRequest request, TokenCallback on_event);
  // Thread-safe; the request ends at the next round with FinishReason::Cancelled and frees its slot.
  void cancel(uint64_t id);
  EngineStats stats() const;
  const EngineOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds
