// The HTTP routes against a scripted backend: shapes, SSE, stop strings, tool calls, auth, 429/503, tokenize,
// metrics. Engine errors' statuses and disconnects: server_http_errors_test.
#include <nlohmann/json.hpp>
#include <tuple>

#include "server_http_fixture.h"

namespace ds::server::http_test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

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

// A request the engine refuses outright (one that could never fit) is a 400 that names its field, as the
// parser's are: a stream state over the memory limit is max_tokens' (it grows with prompt + max_tokens).
// Before, these 400s carried a null param.
TEST_F(ServerHttp, EngineRefusalsNameTheirField) {
  start();
  const std::tuple<std::string, const char*, const char*> cases[] = {
      {"memory: the request needs 3.000 GiB of stream state; with 1.000 GiB of weights it exceeds "
       "memory_limit_gib 2",
       "max_tokens", "max_tokens"},
      {"prompt: token id 400 at index 0 is out of range [0, 320)", "messages", "prompt"},
      {"top_p must be in (0, 1], got 2", "top_p", "top_p"},
      {"top_logprobs must be in [0, 20], got 30", "top_logprobs", "logprobs"},
  };
  for (const auto& [refusal, chat_param, completions_param] : cases) {
    backend_.refuse = refusal;
    auto chat = post("/v1/chat/completions", kChat);
    ASSERT_EQ(chat->status, 400) << chat->body;
    json e = json::parse(chat->body)["error"];
    EXPECT_EQ(e["param"], chat_param) << chat->body;
    EXPECT_EQ(e["message"], refusal);
    EXPECT_EQ(e["type"], "invalid_request_error");
    auto completion = post("/v1/completions", {{"prompt", "x"}});
    ASSERT_EQ(completion->status, 400) << completion->body;
    EXPECT_EQ(json::parse(completion->body)["error"]["param"], completions_param) << completion->body;
  }
  backend_.refuse =
      "context_length_exceeded: prompt of 300 tokens + max_tokens 40 exceeds the context of 320";
  json e = json::parse(post("/v1/completions", {{"prompt", "x"}})->body)["error"];
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_EQ(e["code"], "context_length_exceeded");
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

// The engine's draft counters are exported as they stand: drafts proposed and accepted, and the draft guard's
// rests and the resting head's catch-up rounds (EngineStats::draft_rests / draft_catch_ups).
TEST_F(ServerHttp, MetricsAndHealthExportTheDraftCounters) {
  backend_.engine_stats.drafted_total = 40;
  backend_.engine_stats.accepted_total = 31;
  backend_.engine_stats.draft_rests = 3;
  backend_.engine_stats.draft_catch_ups = 7;
  start();
  auto metrics = client().Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  for (const char* line :
       {"\ndeltaserve_drafted_tokens_total 40\n", "\ndeltaserve_accepted_tokens_total 31\n",
        "\ndeltaserve_draft_rests_total 3\n", "# TYPE deltaserve_draft_rests_total counter\n",
        "\ndeltaserve_draft_catch_ups_total 7\n", "# TYPE deltaserve_draft_catch_ups_total counter\n"})
    EXPECT_NE(metrics->body.find(line), std::string::npos) << line << metrics->body;
  // /health carries the same counters (a supervisor reading one JSON document sees the guard's state).
  json health = json::parse(client().Get("/health")->body);
  EXPECT_EQ(health["drafted_total"], 40);
  EXPECT_EQ(health["accepted_total"], 31);
  EXPECT_EQ(health["draft_rests"], 3);
  EXPECT_EQ(health["draft_catch_ups"], 7);
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

}  // namespace
}  // namespace ds::server::http_test
