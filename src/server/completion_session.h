#pragma once
// One generation request from submit to the last byte: engine events -> text -> SSE chunks or one JSON body.
// Knows nothing of HTTP: the route gives it a write function, which reports a client that went away.
#include <chrono>
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
  // engine's validation, 429 when the queue is full, 503 while shutting down) before anything is sent.
  CompletionSession(ServerState& state, ApiRequest request, PreparedPrompt prompt);
  ~CompletionSession();  // cancels the engine request if it is still running
  CompletionSession(const CompletionSession&) = delete;
  CompletionSession& operator=(const CompletionSession&) = delete;

  // Runs to the end, writing the body. A false write cancels the engine request. Keep-alives (an SSE comment,
  // or JSON's leading whitespace) go out after `keepalive` without events, so a vanished client is noticed.
  void run(const Write& write, std::chrono::milliseconds keepalive = std::chrono::milliseconds(500));
  // Before the route commits a status: waits up to `limit` for the engine's first event, so a request the
  // engine ends before its first token (a state that cannot be made, a failed first round) throws ApiError
  // (500 engine_error; 503 when cancelled by a shutdown) instead of answering 200 with the error as its body.
  // An event that arrives is kept for run().
  void await_start(std::chrono::milliseconds limit);
  bool streaming() const { return request_.stream; }

 private:
  ServerState& state_;
  ApiRequest request_;
  PreparedPrompt prompt_;
  std::shared_ptr<EventChannel> channel_;
  std::optional<TokenEvent> first_;  // the event await_start took off the channel
  uint64_t engine_id_ = 0;
  bool done_ = false;
  std::string id_;
  int64_t created_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ds::server
