#pragma once
// One generation request from submit to the last byte: engine events -> text -> SSE chunks or one JSON body.
// Knows nothing of HTTP: the route gives it a write function (streams) or a liveness check (whole replies),
// either of which reports a client that went away.
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/api_request.h"
#include "server/prompt_builder.h"
#include "server/server_state.h"

namespace ds::server {

struct EventChannel;

class CompletionSession {
 public:
  using Write = std::function<bool(const std::string&)>;

  // Checks the prompt against the context and submits; throws ApiError (400 context_length_exceeded or the
  // engine's validation, 429 when the queue is full, 503 while shutting down, 500 engine_error when submit
  // throws anything else: a backend's std::runtime_error, a std::bad_alloc) before anything is sent.
  CompletionSession(ServerState& state, ApiRequest request, PreparedPrompt prompt);
  ~CompletionSession();  // cancels the engine request if it is still running
  CompletionSession(const CompletionSession&) = delete;
  CompletionSession& operator=(const CompletionSession&) = delete;

  // Streaming: runs to the end, writing SSE events as they come. A false write cancels the engine request. An
  // SSE comment (keep-alive) goes out after `keepalive` without events, so a vanished client is noticed.
  // Never throws: an exception on the way cancels the engine request and ends the stream with an error event
  // (server_error, code internal_error) and [DONE].
  void stream(const Write& write, std::chrono::milliseconds keepalive = std::chrono::milliseconds(500));

  // Non-streaming: runs to the end and sends nothing, so the reply gets its real status: 200 with the
  // completion, 500 engine_error or 503 cancelled (shutdown) with the OpenAI error object, wherever the
  // engine failed (before or after the first token). `alive` is asked at least every `check` (also while
  // tokens keep coming); false cancels the engine request and the result is nullopt (nothing to send). Never
  // throws: an exception on the way cancels the engine request and is a 500 (server_error, internal_error).
  struct Whole {
    int status = 200;
    std::string body;
  };
  using Alive = std::function<bool()>;
  std::optional<Whole> complete(const Alive& alive,
                                std::chrono::milliseconds check = std::chrono::milliseconds(500));
  bool streaming() const { return request_.stream; }

 private:
  // The loop of both: `write` gets the SSE events, or the whole body once; returns the HTTP status the body
  // goes with (200 unless the engine ended the request), or 0 when the client left.
  int run(const Write& write, const Alive& alive, std::chrono::milliseconds interval);
  // Cancels the engine request unless it ended (or was cancelled); swallows what the backend's cancel throws.
  void end_engine_request() noexcept;
  // The error object of an exception thrown while the reply was being made.
  static std::string failure_body(std::exception_ptr thrown);

  ServerState& state_;
  ApiRequest request_;
  PreparedPrompt prompt_;
  std::shared_ptr<EventChannel> channel_;
  uint64_t engine_id_ = 0;
  bool done_ = false;
  std::string id_;
  int64_t created_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ds::server
