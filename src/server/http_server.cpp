#include "server/http_server.h"

#include <httplib.h>

#include <chrono>
#include <exception>
#include <optional>

#include "server/api_error.h"
#include "server/client_socket.h"
#include "server/completion_session.h"
#include "server/request_fields.h"
#include "server/response_json.h"

namespace ds::server {

namespace {

void send_error(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

void send_api_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 503 || e.status == 429) res.set_header("Retry-After", "1");
  send_error(res, e.status, error_body(e));
}

bool authorized(const httplib::Request& req, const std::string& key) {
  if (key.empty()) return true;
  std::string header = req.get_header_value("Authorization");
  return header == "Bearer " + key || req.get_header_value("x-api-key") == key;
}

}  // namespace

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.starts_with("127.");
}

struct HttpServer::Impl {
  static constexpr int kClientClosed = 499;  // nginx's "client closed request", for the metrics
  ServerState& state;
  HttpOptions options;
  httplib::Server server;
  int port = -1;  // the bound one

  Impl(ServerState& s, HttpOptions o) : state(s), options(std::move(o)) {
    const int threads = options.threads;
    server.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server.set_payload_max_length(64 << 20);
    server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health" || authorized(req, options.api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, 401,
                 error_body("invalid or missing API key", "authentication_error", "", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    });
    server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, 500, error_body(what, "server_error"));
    });
    server.Post("/v1/chat/completions", [this](const auto& req, auto& res) { generate(req, res, true); });
    server.Post("/v1/completions", [this](const auto& req, auto& res) { generate(req, res, false); });
    server.Get("/v1/models", [this](const auto&, auto& res) { models(res); });
    server.Get("/health", [this](const auto&, auto& res) { health(res); });
    server.Get("/metrics", [this](const auto&, auto& res) {
      res.set_content(state.metrics.render(state.backend.stats()), "text/plain; version=0.0.4");
    });
    server.Post("/tokenize",
                [this](const auto& req, auto& res) { guarded(res, [&] { tokenize(req, res); }); });
    server.Post("/detokenize",
                [this](const auto& req, auto& res) { guarded(res, [&] { detokenize(req, res); }); });
  }

  template <typename F>
  void guarded(httplib::Response& res, F&& f) {
    try {
      f();
    } catch (const ApiError& e) {
      send_api_error(res, e);
    } catch (const Error& e) {
      send_error(res, 400, error_body(e.what(), "invalid_request_error"));
    }
  }

  // A generation request that failed with something other than ApiError / ds::Error: 500 server_error.
  void internal_error(httplib::Response& res, bool chat, std::exception_ptr thrown) {
    state.metrics.request_done(chat, 500);
    send_error(res, 500, error_body(exception_message(thrown), "server_error", "", "internal_error"));
  }

  void generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    std::shared_ptr<CompletionSession> session;
    try {
      if (state.shutting_down)
        throw ApiError(503, "the server is shutting down", "", "shutting_down", "server_error");
      ApiRequest r = chat ? parse_chat_request(req.body, state.limits)
                          : parse_completions_request(req.body, state.limits);
      PreparedPrompt prompt = state.prompts.build(r);
      session = std::make_shared<CompletionSession>(state, std::move(r), std::move(prompt));
    } catch (const ApiError& e) {
      state.metrics.request_done(chat, e.status);
      return send_api_error(res, e);
    } catch (const Error& e) {
      state.metrics.request_done(chat, 400);
      return send_error(res, 400, error_body(e.what(), "invalid_request_error"));
    } catch (...) {
      // Anything else before the session started (the engine's submission throws only ApiError, see
      // CompletionSession) is the server's failure: a 500 with the error object, counted, never httplib's.
      return internal_error(res, chat, std::current_exception());
    }
    if (!session->streaming()) {
      // Nothing goes out before the reply is whole, so an engine failure at any token gets its real status
      // (docs/server.md, "Errors"); the client's socket is watched meanwhile, so one that left cancels.
      std::optional<CompletionSession::Whole> whole;
      try {
        const int fd = request_socket(
            {req.local_addr, req.local_port > 0 ? req.local_port : port, req.remote_addr, req.remote_port});
        whole = session->complete([fd] { return peer_connected(fd); }, options.client_check);
      } catch (...) {  // complete() itself never throws
        return internal_error(res, chat, std::current_exception());
      }
      if (!whole) {
        state.metrics.request_done(chat, kClientClosed);
        res.status = kClientClosed;  // never sent: httplib's write to the closed socket fails
        return;
      }
      state.metrics.request_done(chat, whole->status);
      if (whole->status == 503) res.set_header("Retry-After", "1");
      res.status = whole->status;
      res.set_content(std::move(whole->body), "application/json");
      return;
    }
    // Streams answer at once (clients expect their headers while queued; an error after that is an SSE error
    // event, which the OpenAI SDKs raise).
    state.metrics.request_done(chat, 200);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [session, keepalive = options.client_check](size_t, httplib::DataSink& sink) {
          session->stream([&](const std::string& data) { return sink.write(data.data(), data.size()); },
                          keepalive);
          sink.done();
          return true;
        });
  }

  void models(httplib::Response& res) {
    Json data = Json::array();
    for (size_t i = 0; i < std::min<size_t>(1, state.limits.names.size()); ++i)
      data.push_back({{"id", state.limits.names[i]},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "deltaserve"},
                      {"max_model_len", state.context}});
    res.set_content(dump_json(Json{{"object", "list"}, {"data", data}}), "application/json");
  }

  void health(httplib::Response& res) {
    EngineStats s = state.backend.stats();
    // A backend that cannot serve again (a lost GPU context) answers 503 with its error, so a supervisor
    // restarts the process instead of routing requests that can only fail.
    const bool failed = !s.backend_failure.empty();
    Json j = {{"status", state.shutting_down ? "shutting_down"
                         : failed            ? "failed"
                                             : "ok"},
              {"requests_running", s.running},
              {"requests_queued", s.queued},
              {"requests_total", s.requests_total},
              {"http_requests_total", state.metrics.requests_total()},
              {"prompt_tokens_total", s.prompt_tokens_total},
              {"completion_tokens_total", s.completion_tokens_total},
              {"cache_hits", s.cache_hits},
              {"drafted_total", s.drafted_total},
              {"accepted_total", s.accepted_total},
              {"draft_rests", s.draft_rests},
              {"draft_catch_ups", s.draft_catch_ups}};
    if (failed) j["error"] = s.backend_failure;
    res.status = state.shutting_down || failed ? 503 : 200;
    res.set_content(dump_json(j), "application/json");
  }

  // vLLM's /tokenize: {"prompt": text} or {"messages": [...]} -> {"tokens", "count", "max_model_len"}.
  void tokenize(const httplib::Request& req, httplib::Response& res) {
    Json j = parse_request_body(req.body);
    std::vector<int32_t> ids;
    if (field(j, "messages")) {
      // The prompt a chat request with these fields would send (a forced tool call's opening included).
      ids = state.prompts.build(parse_chat_request(req.body, state.limits)).ids;
    } else if (auto prompt = read_string(j, "prompt")) {
      ids = state.prompts.tokenizer().encode(*prompt, true);
    } else {
      reject("prompt", "'prompt' (a string) or 'messages' is required");
    }
    res.set_content(dump_json(Json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", state.context}}),
                    "application/json");
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    Json j = parse_request_body(req.body);
    const Json* tokens = field(j, "tokens");
    if (!tokens || !tokens->is_array()) reject("tokens", "'tokens' must be an array of token ids");
    std::vector<int32_t> ids;
    for (const Json& t : *tokens) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= state.limits.vocab_size)
        reject("tokens",
               fmt::format("token id {} is out of range [0, {})", t.dump(), state.limits.vocab_size));
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    res.set_content(dump_json(Json{{"prompt", state.prompts.tokenizer().decode(ids)}}), "application/json");
  }
};

HttpServer::HttpServer(ServerState& state, HttpOptions options)
    : impl_(std::make_unique<Impl>(state, std::move(options))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  const HttpOptions& o = impl_->options;
  if (o.port == 0) {
    int port = impl_->server.bind_to_any_port(o.host);
    if (port <= 0) fail("cannot bind {}: no free port", o.host);
    return impl_->port = port;
  }
  if (!impl_->server.bind_to_port(o.host, o.port))
    fail("cannot bind {}:{} (in use, or not an address here)", o.host, o.port);
  return impl_->port = o.port;
}

void HttpServer::serve() {
  impl_->server.listen_after_bind();
}

void HttpServer::stop() {
  impl_->state.shutting_down = true;
  impl_->server.stop();
}

}  // namespace ds::server
