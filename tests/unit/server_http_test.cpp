// The HTTP routes against a scripted backend: shapes, SSE, stop strings, tool calls, auth, 429/503, engine
// errors' statuses, disconnect -> cancel (streaming and not).
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/error.h"
#include "server/http_server.h"
#include "server/serial_backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

const std::filesystem::path kModelDir =
    std::filesystem::path(DELTASERVE_SOURCE_DIR) / "tests/data/server_model";

// Replies with a fixed token script (one token per `gap`), honouring cancel; `refuse` makes submit throw.
class ScriptedBackend : public GenerationBackend {
 public:
  std::vector<int32_t> script;
  std::chrono::milliseconds gap{1};
  bool forever = false;  // repeat the script until cancelled
  std::string refuse;
  std::string error;                  // ends the script with an engine error
  bool error_despite_cancel = false;  // the error even when cancelled (a round that failed before the cancel)
  std::chrono::milliseconds first_delay{0};  // before the first token (a prompt queued behind others)
  std::string failure;  // EngineStats::backend_failure (a backend that cannot serve again)
  GenerationRequest last;

  ~ScriptedBackend() override {
    for (auto& t : threads_) t.join();
  }
  uint64_t submit(GenerationRequest request, TokenCallback on_event) override {
    if (!refuse.empty()) fail("{}", refuse);
    uint64_t id = next_++;
    last = request;
    threads_.emplace_back([this, id, request, on_event] {
      TokenEvent end;
      end.finished = true;
      end.reason = FinishReason::Length;
      std::this_thread::sleep_for(first_delay);
      for (int32_t i = 0;; ++i) {
        if (is_cancelled(id)) {
          end.reason = FinishReason::Cancelled;
          break;
        }
        if (!forever && (i >= static_cast<int32_t>(script.size()) || i >= request.max_tokens)) break;
        TokenEvent e;
        e.token = script[i % script.size()];
        if (request.top_logprobs >= 0) e.logprobs = LogprobReport{-0.25f, {{e.token, -0.25f}}};
        on_event(e);
        if (i == 0) {
          std::lock_guard lock(mutex_);
          started_++;
          changed_.notify_all();
        }
        end.completion_tokens++;
        if (e.token == 2 && !request.ignore_eos) {
          end.reason = FinishReason::Stop;
          break;
        }
        std::this_thread::sleep_for(gap);
      }
      if (!error.empty() && (end.reason != FinishReason::Cancelled || error_despite_cancel)) {
        end.reason = FinishReason::Error;
        end.error = error;
      }
      end.prefill_seconds = 0.5;
      on_event(end);
    });
    return id;
  }
  void cancel(uint64_t id) override {
    std::lock_guard lock(mutex_);
    cancelled_.insert(id);
    changed_.notify_all();
  }
  // Bounded waits (no sleeps that race): until `n` requests gave their first token / were cancelled.
  bool wait_started(size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return started_ >= n; });
  }
  bool wait_cancelled(size_t n, std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return cancelled_.size() >= n; });
  }
  EngineStats stats() const override {
    EngineStats s;
    s.backend_failure = failure;
    return s;
  }
  bool is_cancelled(uint64_t id) {
    std::lock_guard lock(mutex_);
    return cancelled_.count(id) > 0;
  }
  size_t cancelled_count() {
    std::lock_guard lock(mutex_);
    return cancelled_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  size_t started_ = 0;
  std::set<uint64_t> cancelled_;
  std::vector<std::thread> threads_;
  uint64_t next_ = 1;
};

class ServerHttp : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(kModelDir));
    prompts_ = std::make_unique<PromptBuilder>(*tokenizer_, ChatTemplate::from_model_dir(kModelDir));
  }
  void start(const std::string& api_key = "") {
    state_.reset(new ServerState{backend_, *prompts_, {{"tiny"}, 320}, 128, {2}, {}});
    http_ = std::make_unique<HttpServer>(*state_, HttpOptions{"127.0.0.1", 0, api_key, 16, client_check_});
    port_ = http_->bind();
    thread_ = std::thread([this] { http_->serve(); });
  }
  void TearDown() override {
    if (http_) http_->stop();
    if (thread_.joinable()) thread_.join();
  }
  std::vector<int32_t> ids(const std::string& text) { return tokenizer_->encode(text); }
  httplib::Client client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  httplib::Result post(const std::string& path, const json& body, const httplib::Headers& headers = {}) {
    return client().Post(path, headers, body.dump(), "application/json");
  }
  // The data payloads of an SSE body, [DONE] included.
  static std::vector<std::string> sse(const std::string& body) {
    std::vector<std::string> out;
    size_t at = 0;
    while ((at = body.find("data: ", at)) != std::string::npos) {
      size_t end = body.find("\n\n", at);
      out.push_back(body.substr(at + 6, end - at - 6));
      at = end;
    }
    return out;
  }

  ScriptedBackend backend_;
  std::chrono::milliseconds client_check_{500};  // HttpOptions::client_check
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<PromptBuilder> prompts_;
  std::unique_ptr<ServerState> state_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

const json kChat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}}};

TEST_F(ServerHttp, ChatSplitsReasoningAndCountsUsage) {
  backend_.script = ids("Hmm</think>\n\nHello world");
  backend_.script.push_back(2);
  start();
  json body = kChat;
  body["seed"] = 7;
  body["return_token_ids"] = true;
  auto res = post("/v1/chat/completions", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "Hmm");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello world");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["completion_tokens"], backend_.script.size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], backend_.last.prompt.size());
  EXPECT_GT(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_EQ(j["extension"]["seed"], 7);
  EXPECT_EQ(j["extension"]["token_ids"].get<std::vector<int32_t>>(), backend_.script);
  EXPECT_EQ(backend_.last.sampling.seed, 7u);
  // The template opened <think> in the prompt.
  EXPECT_EQ(tokenizer_->decode(backend_.last.prompt),
            "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n");
}

TEST_F(ServerHttp, StreamingChatWithUsage) {
  backend_.script = ids("</think>Hi there, friend");
  start();
  json body = kChat;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["max_tokens"] = 5;
  body["logprobs"] = true;
  auto res = post("/v1/chat/completions", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::string> events = sse(res->body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content;
  int logprob_entries = 0;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    const json& choice = c["choices"][0];
    if (i == 0) {
      EXPECT_EQ(choice["delta"]["role"], "assistant");
    }
    content += choice["delta"].value("content", "");
    if (!choice["logprobs"].is_null()) logprob_entries += choice["logprobs"]["content"].size();
  }
  EXPECT_EQ(content, tokenizer_->decode(
                         std::vector<int32_t>(backend_.script.begin() + 1, backend_.script.begin() + 5)));
  EXPECT_EQ(logprob_entries, 5);
  json finish = json::parse(events[events.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 5);
}

TEST_F(ServerHttp, CompletionsStopStringCancelsTheEngine) {
  backend_.script = ids("one two STOP three four five six");
  backend_.gap = 5ms;
  start();
  json body = {{"prompt", "count:"}, {"max_tokens", 40}, {"stop", {"STOP"}}, {"echo", true}};
  auto res = post("/v1/completions", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "count:one two ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(backend_.cancelled_count(), 1u);
  EXPECT_EQ(backend_.last.max_tokens, 40);
}

TEST_F(ServerHttp, TokenPromptsAndStreamingCompletions) {
  backend_.script = ids("abc");
  start();
  auto res = post("/v1/completions", {{"prompt", {5, 6, 7}}, {"stream", true}, {"logprobs", 1}});
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(backend_.last.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(backend_.last.top_logprobs, 1);
  std::vector<std::string> events = sse(res->body);
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i)
    text += json::parse(events[i])["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, "abc");
}

TEST_F(ServerHttp, ErrorsAreOpenAIShaped) {
  start();
  auto bad = post("/v1/chat/completions", {{"messages", kChat["messages"]}, {"n", 2}});
  ASSERT_EQ(bad->status, 400);
  json e = json::parse(bad->body)["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "n");
  auto malformed = client().Post("/v1/completions", "{nope", "application/json");
  EXPECT_EQ(malformed->status, 400);
  auto long_prompt = post("/v1/completions", {{"prompt", std::vector<int>(130, 5)}});
  ASSERT_EQ(long_prompt->status, 400);
  EXPECT_EQ(json::parse(long_prompt->body)["error"]["code"], "context_length_exceeded");
  auto too_many = post("/v1/completions", {{"prompt", {5}}, {"max_tokens", 128}});
  EXPECT_EQ(json::parse(too_many->body)["error"]["param"], "max_tokens");
}

// 429: the queue is full for now (the same request later will do); 503: the server takes no more work.
TEST_F(ServerHttp, QueueFullIs429ShuttingDownIs503) {
  start();
  backend_.refuse = "queue full: 3 requests are waiting (max_queue 3); retry later";
  auto full = post("/v1/completions", {{"prompt", "x"}});
  ASSERT_EQ(full->status, 429);
  EXPECT_EQ(full->get_header_value("Retry-After"), "1");
  json e = json::parse(full->body)["error"];
  EXPECT_EQ(e["code"], "queue_full");
  EXPECT_EQ(e["type"], "rate_limit_error");
  backend_.refuse = "engine: shutting down";
  auto stopping = post("/v1/chat/completions", kChat);
  ASSERT_EQ(stopping->status, 503);
  EXPECT_EQ(json::parse(stopping->body)["error"]["code"], "shutting_down");
  EXPECT_EQ(stopping->get_header_value("Retry-After"), "1");
  backend_.refuse.clear();
  state_->shutting_down = true;  // what stop() sets: refused before the engine is asked
  auto closing = post("/v1/completions", {{"prompt", "x"}});
  ASSERT_EQ(closing->status, 503);
  EXPECT_EQ(json::parse(closing->body)["error"]["code"], "shutting_down");
  auto metrics = client().Get("/metrics");
  EXPECT_NE(metrics->body.find(R"(status="429"} 1)"), std::string::npos) << metrics->body;
}

TEST_F(ServerHttp, ApiKeyGuardsEverythingButHealth) {
  start("sekret");
  auto health = client().Get("/health");
  ASSERT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto denied = client().Get("/v1/models");
  ASSERT_EQ(denied->status, 401);
  EXPECT_EQ(denied->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(json::parse(denied->body)["error"]["code"], "invalid_api_key");
  auto wrong = client().Get("/v1/models", {{"Authorization", "Bearer nope"}});
  EXPECT_EQ(wrong->status, 401);
  auto models = client().Get("/v1/models", {{"Authorization", "Bearer sekret"}});
  ASSERT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
}

TEST_F(ServerHttp, TokenizeDetokenizeAndMetrics) {
  start();
  auto tok = post("/tokenize", {{"prompt", "Hello world"}});
  ASSERT_EQ(tok->status, 200);
  json t = json::parse(tok->body);
  EXPECT_EQ(t["tokens"].get<std::vector<int32_t>>(), ids("Hello world"));
  EXPECT_EQ(t["max_model_len"], 128);
  auto chat_tok = post("/tokenize", {{"messages", kChat["messages"]}});
  EXPECT_EQ(json::parse(chat_tok->body)["tokens"].get<std::vector<int32_t>>(),
            ids("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n"));
  auto detok = post("/detokenize", {{"tokens", t["tokens"]}});
  EXPECT_EQ(json::parse(detok->body)["prompt"], "Hello world");
  EXPECT_EQ(post("/detokenize", {{"tokens", {999}}})->status, 400);
  auto metrics = client().Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  for (const char* name :
       {"deltaserve_requests_total", "deltaserve_time_to_first_token_seconds_bucket",
        "deltaserve_inter_token_seconds_count", "deltaserve_queue_depth", "deltaserve_drafted_tokens_total"})
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
}

TEST_F(ServerHttp, ToolCallsFinishWithToolCalls) {
  backend_.script = ids(
      "</think><tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>");
  backend_.script.push_back(2);
  start();
  json body = kChat;
  body["tools"] = {
      {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", json::object()}}}}};
  auto res = post("/v1/chat/completions", body);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  const json& call = j["choices"][0]["message"]["tool_calls"][0];
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>())["city"], "Oslo");
}

const json kTools = {
    {{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", json::object()}}}},
    {{"type", "function"}, {"function", {{"name", "get_time"}, {"parameters", json::object()}}}}};

TEST_F(ServerHttp, StreamedToolCallsComeAsDeltas) {
  // Short enough (about 100 byte-level tokens) to end by EOS inside the test's 128-token context.
  const std::string calls =
      "</think><tool_call>{\"name\": \"get_weather\", \"arguments\": {\"c\": \"Oslo\"}}</tool_call>"
      "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
  backend_.script = ids(calls);
  backend_.script.push_back(2);
  start();
  json body = kChat;
  body["tools"] = kTools;
  body["stream"] = true;
  auto res = post("/v1/chat/completions", body);
  ASSERT_EQ(res->status, 200);
  std::vector<std::string> events = sse(res->body);
  ASSERT_EQ(events.back(), "[DONE]");
  json joined = json::array();
  std::vector<std::string> finishes;
  int fragments = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    json choice = json::parse(events[i])["choices"][0];
    if (!choice["finish_reason"].is_null()) finishes.push_back(choice["finish_reason"]);
    for (const json& piece : choice["delta"].value("tool_calls", json::array())) {
      size_t index = piece["index"];
      if (piece.contains("id")) {  // a call's first piece: id, type and name
        ASSERT_EQ(index, joined.size());
        EXPECT_EQ(piece["type"], "function");
        joined.push_back(piece);
      } else {
        ASSERT_LT(index, joined.size());
        ASSERT_FALSE(piece["function"].contains("name"));
        joined[index]["function"]["arguments"] = joined[index]["function"]["arguments"].get<std::string>() +
                                                 piece["function"]["arguments"].get<std::string>();
        ++fragments;
      }
    }
  }
  EXPECT_EQ(finishes, std::vector<std::string>{"tool_calls"});
  EXPECT_GT(fragments, 2);  // the arguments arrived in pieces, as generated
  body["stream"] = false;
  json whole = json::parse(post("/v1/chat/completions", body)->body)["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(whole.size(), 2u);
  ASSERT_EQ(joined.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(joined[i]["id"], whole[i]["id"]);
    EXPECT_EQ(joined[i]["function"], whole[i]["function"]);
  }
  EXPECT_EQ(whole[1]["function"]["name"], "get_time");
  EXPECT_EQ(whole[0]["function"]["arguments"], R"({"c": "Oslo"})");
  EXPECT_EQ(whole[1]["function"]["arguments"], "{}");
}

TEST_F(ServerHttp, NamedToolChoicePrefillsTheCall) {
  backend_.script =
      ids("{\"city\": \"Oslo\"}}\n</tool_call><tool_call>{\"name\": \"get_time\", \"arguments\": {}}");
  backend_.script.push_back(2);
  backend_.gap = 5ms;
  start();
  json body = kChat;
  body["tools"] = kTools;
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  body["parallel_tool_calls"] = false;
  auto res = post("/v1/chat/completions", body);
  ASSERT_EQ(res->status, 200) << res->body;
  // The prompt closes the open <think> and opens the named call; the model writes only the arguments.
  EXPECT_EQ(backend_.last.prompt,
            ids("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "));
  json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  json calls = j["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), 1u);  // parallel_tool_calls false: the reply ended after the first call
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city": "Oslo"})");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  EXPECT_LT(j["usage"]["completion_tokens"].get<size_t>(),
            backend_.script.size());  // cancelled at the call's end
  EXPECT_EQ(backend_.cancelled_count(), 1u);

  body["tool_choice"] = "required";
  body.erase("parallel_tool_calls");
  backend_.script = ids("get_time\", \"arguments\": {}}</tool_call>");
  backend_.script.push_back(2);
  json r = json::parse(post("/v1/chat/completions", body)->body);
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_time");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "nope"}}}};
  auto bad = post("/v1/chat/completions", body);
  ASSERT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "tool_choice.function.name");
}

TEST_F(ServerHttp, EngineErrorMidStreamIsAnErrorEvent) {
  backend_.script = ids("ab");
  backend_.error = "out of state memory";
  start();
  auto res = post("/v1/completions", {{"prompt", "x"}, {"stream", true}});
  ASSERT_EQ(res->status, 200);
  std::vector<std::string> events = sse(res->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  json e = json::parse(events[events.size() - 2]);
  EXPECT_EQ(e["error"]["message"], "out of state memory");
  EXPECT_EQ(e["error"]["type"], "server_error");
}

// Not streaming, nothing is sent before the reply is whole, so an engine error after the first tokens is a
// 500 with the OpenAI error object (what an SDK raises as InternalServerError), not a 200 whose body is an
// error.
TEST_F(ServerHttp, EngineErrorAfterTheFirstTokenIsA500) {
  backend_.script = ids("ab");
  backend_.error = "out of state memory";
  start();
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    json request = std::string(path) == "/v1/completions" ? json{{"prompt", "x"}} : kChat;
    auto whole = post(path, request);
    ASSERT_TRUE(whole);
    ASSERT_EQ(whole->status, 500) << whole->body;
    json body = json::parse(whole->body);
    EXPECT_EQ(body["error"]["message"], "out of state memory");
    EXPECT_EQ(body["error"]["type"], "server_error");
    EXPECT_EQ(body["error"]["code"], "engine_error");
    EXPECT_FALSE(body.contains("choices"));
  }
  std::string metrics = client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"completions\",status=\"500\"} 1"),
            std::string::npos);
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"chat\",status=\"500\"} 1"), std::string::npos);
}

TEST_F(ServerHttp, EngineErrorBeforeTheFirstTokenIsA500) {
  backend_.script = {};  // the engine ends the request before any token (a state it could not make)
  backend_.error = "CudaModel::new_state: cudaErrorMemoryAllocation (out of memory)";
  start();
  auto res = post("/v1/completions", {{"prompt", "x"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500) << res->body;
  json e = json::parse(res->body)["error"];
  EXPECT_EQ(e["message"], backend_.error);
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_EQ(e["code"], "engine_error");
  // A stream answers at once (headers while queued), so its error is the SSE error event.
  auto stream = post("/v1/completions", {{"prompt", "x"}, {"stream", true}});
  ASSERT_EQ(stream->status, 200);
  std::vector<std::string> events = sse(stream->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(json::parse(events[events.size() - 2])["error"]["code"], "engine_error");
}

// A late first token (a long prompt queued behind others on a busy server) is a 200 with the whole reply: the
// liveness checks while it waits (every 20 ms here) do not take a silent, connected client for one that left.
// An engine error that late is still a 500.
TEST_F(ServerHttp, SlowFirstTokenIsNotAnError) {
  backend_.script = ids("late but fine");
  backend_.first_delay = 300ms;
  client_check_ = 20ms;
  start();
  auto res = post("/v1/completions", {{"prompt", "x"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "late but fine");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  backend_.script = {};
  backend_.error = "CudaModel::new_state: cudaErrorMemoryAllocation (out of memory)";
  auto late = post("/v1/completions", {{"prompt", "x"}});
  ASSERT_EQ(late->status, 500);
  EXPECT_EQ(json::parse(late->body)["error"]["code"], "engine_error");
  EXPECT_EQ(backend_.cancelled_count(), 0u);
}

// A reply a stop string ended is complete, even when the engine's final event for it is an error (the round
// after the stop string failed before the engine took the session's cancel): the client gets the reply.
TEST_F(ServerHttp, StopStringReplyIsCompleteDespiteALaterEngineError) {
  backend_.script = ids("one two STOP three four");
  backend_.error = "forward failed: cudaErrorMemoryAllocation (out of memory)";
  backend_.error_despite_cancel = true;
  start();
  json body = {{"prompt", "count:"}, {"max_tokens", 40}, {"stop", {"STOP"}}};
  auto res = post("/v1/completions", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], "one two ") << res->body;
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  body["stream"] = true;
  auto stream = post("/v1/completions", body);
  ASSERT_EQ(stream->status, 200);
  std::vector<std::string> events = sse(stream->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  for (const std::string& e : events) EXPECT_EQ(e.find("engine_error"), std::string::npos) << e;
  EXPECT_EQ(json::parse(events[events.size() - 2])["choices"][0]["finish_reason"], "stop");
}

TEST_F(ServerHttp, HealthIs503OnceTheBackendCannotServe) {
  backend_.failure = "CudaModel::forward: cudaErrorIllegalAddress (an illegal memory access was encountered)";
  start();  // (a healthy backend answers 200: ApiKeyGuardsEverythingButHealth)
  auto health = client().Get("/health");
  ASSERT_EQ(health->status, 503);
  json j = json::parse(health->body);
  EXPECT_EQ(j["status"], "failed");
  EXPECT_EQ(j["error"], backend_.failure);
}

TEST_F(ServerHttp, ClientDisconnectCancels) {
  backend_.script = ids("more ");
  backend_.forever = true;
  backend_.gap = 10ms;
  start();
  json body = {{"prompt", "go"}, {"stream", true}, {"max_tokens", 50}};
  httplib::Client c = client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body.dump();
  req.headers = {{"Content-Type", "application/json"}};
  int chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++chunks < 3;
  };  // then hang up
  EXPECT_FALSE(c.send(req));
  EXPECT_TRUE(backend_.wait_cancelled(1, 10s));
  EXPECT_EQ(backend_.cancelled_count(), 1u);
}

// A non-streaming client sends nothing and is sent nothing until its reply is whole; when it hangs up
// mid-generation (tokens still coming every millisecond, so no pause in which keep-alives would have gone
// out), the server sees the closed socket and cancels the engine request, freeing its slot.
TEST_F(ServerHttp, NonStreamingClientDisconnectCancels) {
  backend_.script = ids("more ");
  backend_.forever = true;
  client_check_ = 20ms;
  start();
  std::string body = json{{"prompt", "go"}, {"max_tokens", 50}}.dump();
  std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  ASSERT_TRUE(backend_.wait_started(1, 10s));  // generating
  close(fd);                                   // the client leaves
  ASSERT_TRUE(backend_.wait_cancelled(1, 10s));
  // The server's own count of it, and the route's request counted as the client's close (499: "other").
  std::string metrics;
  for (auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
    metrics = client().Get("/metrics")->body;
    if (metrics.find("status=\"other\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_NE(metrics.find("deltaserve_client_disconnects_total 1"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"completions\",status=\"other\"} 1"),
            std::string::npos)
      << metrics;
}

}  // namespace
}  // namespace ds::server
