#include "server/completion_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

#include "server/api_error.h"
#include "server/reply_state.h"
#include "server/response_json.h"

namespace ds::server {

// Engine thread -> HTTP thread. Shared with the engine's callback, which may outlive the session.
struct EventChannel {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<TokenEvent> events;

  void push(const TokenEvent& e) {
    {
      std::lock_guard lock(mutex);
      events.push_back(e);
    }
    ready.notify_one();
  }
  bool pop(TokenEvent& out, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex);
    if (!ready.wait_for(lock, timeout, [&] { return !events.empty(); })) return false;
    out = std::move(events.front());
    events.pop_front();
    return true;
  }
};

namespace {

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// The request field an engine refusal is about, from the word its message starts with (Engine::submit names
// the field first: "memory: the request needs ...", "prompt: token id ...", "top_p must be ..."); "" when
// it names none. A request's stream state grows with prompt + max_tokens, so a memory refusal is max_tokens'.
std::string refused_field(const std::string& message, Endpoint endpoint) {
  const std::string word = message.substr(0, message.find_first_of(": "));
  const bool chat = endpoint == Endpoint::Chat;
  if (word == "memory" || word == "context_length_exceeded" || word == "max_tokens") return "max_tokens";
  if (word == "prompt") return chat ? "messages" : "prompt";
  if (word == "top_logprobs") return chat ? "top_logprobs" : "logprobs";
  for (const char* name : {"stop_token_ids", "temperature", "top_k", "top_p", "min_p", "presence_penalty",
                           "frequency_penalty", "repetition_penalty"})
    if (word == name) return word;
  return "";
}

}  // namespace

CompletionSession::CompletionSession(ServerState& state, ApiRequest request, PreparedPrompt prompt)
    : state_(state),
      request_(std::move(request)),
      prompt_(std::move(prompt)),
      channel_(std::make_shared<EventChannel>()),
      start_(std::chrono::steady_clock::now()) {
  const int64_t prompt_len = static_cast<int64_t>(prompt_.ids.size());
  const char* param = request_.endpoint == Endpoint::Chat ? "messages" : "prompt";
  if (prompt_len >= state_.context)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens",
                               state_.context, prompt_len),
                   param, "context_length_exceeded");
  int64_t max_tokens = request_.max_tokens < 0 ? state_.context - prompt_len : request_.max_tokens;
  if (prompt_len + max_tokens > state_.context)
    throw ApiError(
        400,
        fmt::format("This model's maximum context length is {} tokens; the prompt has {} tokens and "
                    "max_tokens asks for {} more",
                    state_.context, prompt_len, max_tokens),
        "max_tokens", "context_length_exceeded");
  GenerationRequest g;
  g.prompt = prompt_.ids;
  g.sampling = request_.sampling;
  g.max_tokens = static_cast<int32_t>(max_tokens);
  g.ignore_eos = request_.ignore_eos;
  g.stop_token_ids = request_.stop_token_ids;
  g.top_logprobs = request_.top_logprobs;
  g.use_drafts = request_.use_drafts;
  std::weak_ptr<EventChannel> channel = channel_;
  try {
    engine_id_ = state_.backend.submit(std::move(g), [channel](const TokenEvent& e) {
      if (auto c = channel.lock()) c->push(e);
    });
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    std::string message = e.what();
    // Too much work right now is 429 (this request is fine; retry after the header's second); a server that
    // takes no more work at all is 503.
    if (message.starts_with("queue full")) throw ApiError(429, message, "", "queue_full", "rate_limit_error");
    if (message.find("shutting down") != std::string::npos)
      throw ApiError(503, message, "", "shutting_down", "server_error");
    // A request the engine refuses outright (e.g. its stream state over the memory limit) names its field.
    throw ApiError(400, message, refused_field(message, request_.endpoint),
                   message.starts_with("context_length_exceeded") ? "context_length_exceeded" : "");
  } catch (...) {
    // Not a refusal but a failure (a backend's std::runtime_error, a std::bad_alloc, anything else thrown):
    // the engine's error, a 500 like one it reports after the request started.
    throw ApiError(
        500,
        fmt::format("the engine could not take the request: {}", exception_message(std::current_exception())),
        "", "engine_error", "server_error");
  }
  const bool chat = request_.endpoint == Endpoint::Chat;
  id_ = fmt::format("{}-{:x}{:08x}", chat ? "chatcmpl" : "cmpl", state_.next_id++,
                    request_.sampling.seed & 0xffffffff);
  created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
}

CompletionSession::~CompletionSession() {
  end_engine_request();
}

void CompletionSession::end_engine_request() noexcept {
  if (done_) return;
  done_ = true;
  try {
    state_.backend.cancel(engine_id_);
  } catch (...) {  // a backend that cannot cancel has nothing left to free here either
  }
}

std::string CompletionSession::failure_body(std::exception_ptr thrown) {
  return error_body(
      fmt::format("the server failed while generating the reply: {}", exception_message(thrown)),
      "server_error", "", "internal_error");
}

void CompletionSession::stream(const Write& write, std::chrono::milliseconds keepalive) {
  try {
    run(write, nullptr, keepalive);
  } catch (...) {
    // The 200 went out with the headers: the failure is the stream's error event (as an engine error's is).
    end_engine_request();
    try {
      write("data: " + failure_body(std::current_exception()) + "\n\n" + kSseDone);
    } catch (...) {  // nothing more can reach this client
    }
  }
}

std::optional<CompletionSession::Whole> CompletionSession::complete(const Alive& alive,
                                                                    std::chrono::milliseconds check) {
  Whole whole;
  try {
    whole.status = run(
        [&](const std::string& data) {
          whole.body += data;
          return true;
        },
        alive, check);
  } catch (...) {
    // Nothing was sent: the reply is a 500 with the error object, whatever the body held so far.
    end_engine_request();
    return Whole{500, failure_body(std::current_exception())};
  }
  if (whole.status == 0) return std::nullopt;
  return whole;
}

int CompletionSession::run(const Write& write, const Alive& alive, std::chrono::milliseconds interval) {
  const Tokenizer& tokenizer = state_.prompts.tokenizer();
  IncrementalDecoder decoder(tokenizer, request_.skip_special_tokens);
  ReplyConfig config{request_.stop,
                     prompt_.reasoning,
                     prompt_.starts_in_reasoning,
                     !request_.tools.is_null(),
                     !request_.parallel_tool_calls,
                     prompt_.reply_prefill};
  ReplyState reply(config);
  const ResponseMeta meta{request_.endpoint, id_, request_.model, created_};
  const bool with_logprobs = request_.top_logprobs >= 0;
  const TokenText token_text = [&](int32_t id) { return std::string(tokenizer.token_bytes(id)); };
  size_t text_offset = request_.echo ? prompt_.text.size() : 0;
  auto gone = [&] {
    state_.backend.cancel(engine_id_);
    state_.metrics.disconnect();
    done_ = true;
    return 0;
  };

  if (request_.stream) {
    ReplyDelta opening;
    if (request_.echo) opening.content = prompt_.text;
    bool chat = request_.endpoint == Endpoint::Chat;
    if ((chat || request_.echo) &&
        !write(sse_data(chunk_json(meta, opening, false, "", chat, token_text, text_offset))))
      return gone();
  }
  auto last = start_;
  auto checked = start_;  // the last liveness check of a whole reply
  bool first = true;
  for (;;) {
    TokenEvent e;
    const bool got = channel_->pop(e, interval);
    if (request_.stream) {
      if (!got && !write(": keep-alive\n\n")) return gone();
    } else if (auto now = std::chrono::steady_clock::now(); now - checked >= interval) {
      // Nothing is written before the whole reply is known, so the client's socket is asked instead (also
      // while tokens keep coming: a client that left should not hold a slot until max_tokens).
      checked = now;
      if (alive && !alive()) return gone();
    }
    if (!got) continue;
    if (e.token >= 0 && !reply.stopped()) {
      auto now = std::chrono::steady_clock::now();
      std::chrono::duration<double> gap = now - last;
      first ? state_.metrics.first_token(gap.count()) : state_.metrics.inter_token(gap.count());
      first = false;
      last = now;
      bool hidden = contains(request_.stop_token_ids, e.token) ||
                    (!request_.ignore_eos && contains(state_.eos_ids, e.token));
      std::string text = hidden ? std::string() : decoder.push(e.token);
      ReplyDelta delta = reply.push(e.token, text, e.logprobs);
      if (request_.stream && !delta.empty() &&
          !write(sse_data(chunk_json(meta, delta, with_logprobs, "", false, token_text, text_offset))))
        return gone();
      // A stop string ends the reply here; the engine's final (cancelled) event still brings the timings.
      if (reply.stopped()) state_.backend.cancel(engine_id_);
    }
    if (!e.finished) continue;
    done_ = true;
    // A reply a stop string ended is complete: its final event (cancelled, or the error of a round that ran
    // before the cancel reached the engine) only brings the timings.
    if (!reply.stopped() && (e.reason == FinishReason::Error || e.reason == FinishReason::Cancelled)) {
      std::string why =
          e.reason == FinishReason::Error ? e.error : "the request was cancelled (server shutting down)";
      std::string body =
          error_body(why, "server_error", "", e.reason == FinishReason::Error ? "engine_error" : "cancelled");
      write(request_.stream ? "data: " + body + "\n\n" + kSseDone : body);
      return e.reason == FinishReason::Error ? 500 : 503;
    }
    ReplyDelta tail = reply.finish(decoder.flush());
    std::string finish = e.reason == FinishReason::Length && !reply.stopped() ? "length" : "stop";
    if (!reply.total().tool_calls.empty() && finish == "stop") finish = "tool_calls";
    Usage usage{static_cast<int64_t>(prompt_.ids.size()), static_cast<int64_t>(reply.tokens().size()),
                e.cached_tokens, reply.reasoning_tokens()};
    std::string hash = reply.token_hash();
    Extension ext{request_.sampling.seed,
                  e.drafted_tokens,
                  e.accepted_tokens,
                  e.prefill_seconds,
                  e.decode_seconds,
                  hash,
                  request_.return_token_ids ? &reply.tokens() : nullptr};
    state_.metrics.tokens(usage.prompt_tokens, usage.completion_tokens);
    if (!request_.stream) {
      write(dump_json(response_json(meta, reply.total(), with_logprobs, finish, usage, ext, token_text,
                                    request_.echo ? prompt_.text : "")));
      return 200;
    }
    std::string out;
    if (!tail.empty())
      out += sse_data(chunk_json(meta, tail, with_logprobs, "", false, token_text, text_offset));
    Json last_chunk = chunk_json(meta, {}, false, finish, false, token_text, text_offset);
    last_chunk["extension"] = extension_json(ext);
    out += sse_data(last_chunk);
    if (request_.include_usage) out += sse_data(usage_chunk_json(meta, usage, ext));
    out += kSseDone;
    write(out);
    return 200;
  }
}

}  // namespace ds::server
