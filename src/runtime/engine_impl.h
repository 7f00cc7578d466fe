#pragma once
// Engine internals shared by engine.cpp (API, thread, admission) and engine_round.cpp (rounds, sampling,
// cache). Everything below `engine thread only` is touched by the engine thread alone; the rest is guarded by
// `mutex`.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include "model/model.h"
#include "model/window_record.h"
#include "runtime/draft_policy.h"
#include "runtime/draft_source.h"
#include "runtime/engine.h"
#include "runtime/keyed_sampler.h"
#include "runtime/model_backend.h"
#include "runtime/mtp_drafter.h"
#include "runtime/prompt_cache.h"
#include "runtime/stream_memory.h"
#include "runtime/token_counts.h"

namespace ds {

using EngineClock = std::chrono::steady_clock;

// A request waiting for a slot.
struct PendingRequest {
  uint64_t id = 0;
  GenerationRequest request;
  TokenCallback on_event;
  int64_t reserve_bytes = 0;  // its state at full length (prompt + max_tokens), for admission
};

// A request holding a slot: prefilling while state.position < prompt size, then decoding.
struct Stream {
  uint64_t id = 0;
  GenerationRequest request;
  TokenCallback on_event;
  StreamState state;
  TokenCounts history;             // prompt + generated, for penalties
  std::vector<int32_t> generated;  // tokens drawn so far
  std::vector<int32_t> window;     // decode rows for the next round: the last drawn token, then drafts
  bool drafting = false;           // drafts on for this request (engine option and request field)
  WindowRecord record;             // per-row recurrent states of the last verify window, for rollback
  LandingRates landing;            // how often each draft depth landed, for the depth choice
  int64_t drafted = 0, accepted = 0;
  bool caching = false;  // takes and uses prompt-cache snapshots
  int64_t cached_tokens = 0;
  int64_t reserve_bytes = 0;
  EngineClock::time_point admitted, first_token;
  bool done = false;
  bool counted = false;  // in stats.running

  int64_t prompt_len() const { return static_cast<int64_t>(request.prompt.size()); }
  bool prefilling() const { return state.position < prompt_len(); }
};

// Low-priority prompt pass over a finished conversation (prompt + reply) that stores its grid marks.
struct WarmJob {
  std::vector<int32_t> tokens;
  int64_t target = 0;  // the last grid mark within tokens
  StreamState state;
};

// A round's logits rows as the engine reads them: each row's logits on the host, or the token the backend
// drew from it (ModelBackend::forward_rows).
class RoundRows {
 public:
  // Fails unless `drawn` answers each of the round's `rows` rows (a backend's short answer is an error).
  RoundRows(DrawnRows drawn, int64_t vocab, size_t rows);
  std::span<const float> logits(size_t row) const;  // empty when the row is not on the host
  int32_t token(size_t row) const { return drawn_.tokens[row]; }

 private:
  DrawnRows drawn_;
  int64_t vocab_;
  std::vector<size_t> host_at_;  // row -> its index among the host rows
};

// The CPU thread pool runs one job at a time: engines sharing a process take turns at forward calls.
std::mutex& forward_mutex();

struct Engine::Impl {
  Impl(std::shared_ptr<const ModelBackend> backend, const EngineOptions& options);

  // engine.cpp
  void loop();
  bool step();
  void admit_locked(std::vector<PendingRequest>& admitted, std::vector<PendingRequest>& refused);
  int64_t reserved_bytes() const;
  int64_t cache_budget() const;
  void start_stream(PendingRequest&& p);
  void publish_stats();

  // engine_round.cpp
  void run_round();
  // A row's token: drawn here from `row`, or `drawn` by the backend when `row` is empty.
  void draw(Stream& s, std::span<const float> row, int32_t drawn);
  int32_t draw_token(Stream& s, std::span<const float> row, int32_t drawn);
  void report(Stream& s, int32_t token, std::span<const float> row);
  void emit(Stream& s, const TokenEvent& ev);
  void finish(Stream& s, FinishReason reason, const std::string& error = {},
              const TokenEvent* last = nullptr);
  void snapshot(std::span<const int32_t> tokens, const StreamState& state);
  void queue_warm_pass(const Stream& s);
  void sweep_done();

  // engine_drafts.cpp
  void plan_windows();
  void verify(Stream& s, const RoundRows& out, size_t first, int64_t rows);
  void calibrate_costs();
  bool try_calibrate_costs();        // false (tables left uncalibrated) when a call of the calibration threw
  void note_calibration(double ms);  // adds to stats.draft_calibration_ms
  bool captures_hidden(const StreamState& state) const;
  void follow_prompt_rows(std::span<HeadRows> items);  // also catches up a resting head (plan_windows)

  std::shared_ptr<const ModelBackend> backend;
  const ModelBackend& model;
  EngineOptions options;
  int64_t context = 0;
  int64_t weights_bytes = 0, limit_bytes = 0;  // limit 0 = none
  StreamMemory memory;                         // what a stream reserves (runtime/stream_memory.h)
  int64_t round_prompt_rows = 256;  // prompt rows per round, so long prompts interleave with decoding
  int64_t mark_interval = 64;  // prompt-cache marks at its multiples (and at each prompt's last grid point)

  mutable std::mutex mutex;
  std::condition_variable wake;
  std::deque<PendingRequest> queue;
  std::unordered_set<uint64_t> active, cancels;
  bool stopping = false;
  uint64_t next_id = 1;
  EngineStats stats;

  // engine thread only
  PromptCache cache;
  KeyedSampler sampler;
  std::shared_ptr<DraftSource> drafter;
  RoundCosts round_costs;
  HeadCosts head_costs;              // the MTP head's calls, when the source runs it
  DraftGuard draft_guard;            // drafting's realized speed against plain rounds' (options.draft_guard)
  bool round_drafting = false;       // this round ran head calls or verify windows (plan_windows)
  bool round_source_failed = false;  // this round's draft source threw: neither a drafting nor a plain round
  bool round_catch_up = false;  // a resting head caught up this round: neither a drafting nor a plain round
  int calibration_skips = 0;    // rounds left before a failed calibration is tried again
  int calibration_backoff = 1;  // the next such wait: doubles per failure (to 256), 1 after a success
  std::vector<std::unique_ptr<Stream>> running;
  std::deque<WarmJob> warm;
  std::thread thread;
};

}  // namespace ds
