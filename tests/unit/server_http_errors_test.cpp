// The HTTP routes' error statuses against a scripted backend: engine errors before and after the first token
// (a whole reply's real status, a stream's error event), exceptions at submission or mid-session (500s with
// the error object, counted; never a crash), a stop-string reply complete despite a later error, a failed
// backend's health, and a client that leaves (streaming or not) cancelling its engine request.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <exception>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <utility>

#include "server_http_fixture.h"

namespace ds::server::http_test {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

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

// An exception that is not a ds::Error from the engine's submission (a backend's std::runtime_error, a
// std::bad_alloc, anything thrown) is a 500 with the OpenAI error object (server_error, code engine_error),
// streaming or not (a stream has sent nothing yet), counted in deltaserve_requests_total; the server keeps
// serving.
TEST_F(ServerHttp, EngineExceptionAtSubmissionIsA500) {
  backend_.script = ids("ab");
  start();
  const std::pair<std::exception_ptr, std::string> thrown[] = {
      {std::make_exception_ptr(std::runtime_error("cudaStreamCreate: out of memory")),
       "cudaStreamCreate: out of memory"},
      {std::make_exception_ptr(std::bad_alloc()), "std::bad_alloc"},
      {std::make_exception_ptr(42), "an unknown exception"}};
  for (const auto& [exception, message] : thrown) {
    backend_.submit_throws = exception;
    for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
      for (bool stream : {false, true}) {
        json request = std::string(path) == "/v1/completions" ? json{{"prompt", "x"}} : kChat;
        request["stream"] = stream;
        auto res = post(path, request);
        ASSERT_TRUE(res) << path;
        ASSERT_EQ(res->status, 500) << path << " stream " << stream << " " << res->body;
        EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
        ASSERT_TRUE(json::accept(res->body)) << res->body;
        json e = json::parse(res->body)["error"];
        EXPECT_NE(e["message"].get<std::string>().find(message), std::string::npos) << res->body;
        EXPECT_EQ(e["type"], "server_error");
        EXPECT_EQ(e["code"], "engine_error");
        EXPECT_TRUE(e["param"].is_null());
      }
    }
  }
  std::string metrics = client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"completions\",status=\"500\"} 6"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"chat\",status=\"500\"} 6"), std::string::npos)
      << metrics;
  backend_.submit_throws = nullptr;
  auto ok = post("/v1/completions", {{"prompt", "x"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// An exception in the middle of a session (here the backend's cancel, which a matched stop string calls,
// throws) is a 500 with the error object (server_error, code internal_error) for a whole reply, and an SSE
// error event before [DONE] for a stream (its 200 went out at once), each counted with that status; the
// server neither crashes (a throw out of a stream's content provider would end the process) nor stops
// serving.
TEST_F(ServerHttp, ExceptionMidSessionIsAnErrorNotACrash) {
  backend_.script = ids("one two STOP three four");
  start();
  json body = {{"prompt", "count:"}, {"max_tokens", 40}, {"stop", {"STOP"}}};
  backend_.cancel_throws = std::make_exception_ptr(std::runtime_error("cancel: the backend is gone"));
  auto whole = post("/v1/completions", body);
  ASSERT_TRUE(whole);
  ASSERT_EQ(whole->status, 500) << whole->body;
  json e = json::parse(whole->body)["error"];
  EXPECT_NE(e["message"].get<std::string>().find("cancel: the backend is gone"), std::string::npos)
      << whole->body;
  EXPECT_EQ(e["type"], "server_error");
  EXPECT_EQ(e["code"], "internal_error");
  EXPECT_FALSE(json::parse(whole->body).contains("choices"));
  body["stream"] = true;
  backend_.cancel_throws = std::make_exception_ptr(std::runtime_error("cancel: the backend is gone"));
  auto stream = post("/v1/completions", body);
  ASSERT_TRUE(stream);
  ASSERT_EQ(stream->status, 200);
  std::vector<std::string> events = sse(stream->body);
  ASSERT_GE(events.size(), 2u) << stream->body;
  EXPECT_EQ(events.back(), "[DONE]");
  json event = json::parse(events[events.size() - 2]);
  EXPECT_EQ(event["error"]["code"], "internal_error") << stream->body;
  EXPECT_EQ(event["error"]["type"], "server_error");
  std::string metrics = client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"completions\",status=\"500\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"completions\",status=\"200\"} 1"),
            std::string::npos)
      << metrics;
  body["stream"] = false;
  auto ok = post("/v1/completions", body);
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["choices"][0]["text"], "one two ");
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

// A chat template that refuses the messages (raise_exception, as templates do for roles out of order, or an
// expression that cannot take them: a string plus a number) is the client's error: a 400 naming 'messages'
// with the template's reason, counted as such, on the completion routes and /tokenize alike (the interpreter
// turns its evaluation errors into ds::Error with the template's position, which PromptBuilder reports).
TEST_F(ServerHttp, ChatTemplateRefusalIsA400NamingMessages) {
  backend_.script = ids("ab");
  const std::string raises =
      "{% if messages[0].role != 'system' %}{{ raise_exception('Conversation roles must alternate') }}{% "
      "endif %}"
      "{{ messages[0].content + 1 }}";
  prompts_ = std::make_unique<PromptBuilder>(*tokenizer_, ChatTemplate(raises));
  start();
  const json cases[] = {kChat, {{"messages", {{{"role", "system"}, {"content", "s"}}}}}};
  const char* reasons[] = {"Conversation roles must alternate", "the chat template refused the messages"};
  for (int i = 0; i < 2; ++i) {
    for (const char* path : {"/v1/chat/completions", "/tokenize"}) {
      auto res = post(path, cases[i]);
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 400) << path << " " << res->body;
      json e = json::parse(res->body)["error"];
      EXPECT_EQ(e["param"], "messages") << res->body;
      EXPECT_EQ(e["type"], "invalid_request_error");
      EXPECT_NE(e["message"].get<std::string>().find(reasons[i]), std::string::npos) << res->body;
    }
  }
  std::string metrics = client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("deltaserve_requests_total{route=\"chat\",status=\"400\"} 2"), std::string::npos)
      << metrics;
}

// A body with bad UTF-8 in a string, or a number past a double's range, is a 400 that says why and where, on
// every route that reads a JSON body; the error body is itself valid JSON (the bad bytes are not echoed).
TEST_F(ServerHttp, MalformedBodiesAre400sThatSayWhy) {
  start();
  const std::pair<std::string, std::string> bodies[] = {
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"h\xff\"}]}", "ill-formed UTF-8 byte"},
      {"{\"prompt\": \"a\", \"max_tokens\": 1e400}", "number overflow"}};
  for (const auto& [body, why] : bodies) {
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
      auto res = client().Post(path, body, "application/json");
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 400) << path << " " << res->body;
      json e = json::parse(res->body)["error"];
      EXPECT_EQ(e["type"], "invalid_request_error");
      EXPECT_NE(e["message"].get<std::string>().find("not valid JSON: "), std::string::npos) << res->body;
      EXPECT_NE(e["message"].get<std::string>().find(why), std::string::npos) << res->body;
    }
  }
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

// True when this machine has an IPv6 loopback (::1 can be bound).
bool has_ipv6_loopback() {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

// A non-streaming client sends nothing and is sent nothing until its reply is whole; when it hangs up
// mid-generation (tokens still coming every millisecond, so no pause in which keep-alives would have gone
// out), the server sees the closed socket and cancels the engine request, freeing its slot. Served on
// host_, the client connecting to client_host_.
class ClientLeaves : public ServerHttp {
 protected:
  void expect_cancelled() {
    backend_.script = ids("more ");
    backend_.forever = true;
    client_check_ = 20ms;
    start();
    std::string body = json{{"prompt", "go"}, {"max_tokens", 50}}.dump();
    std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    addrinfo* to = nullptr;
    ASSERT_EQ(getaddrinfo(client_host_.c_str(), std::to_string(port_).c_str(), &hints, &to), 0);
    int fd = socket(to->ai_family, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    const int connected = connect(fd, to->ai_addr, to->ai_addrlen);
    freeaddrinfo(to);
    ASSERT_EQ(connected, 0) << client_host_;
    ASSERT_EQ(send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
    ASSERT_TRUE(backend_.wait_started(1, 10s));  // generating
    close(fd);                                   // the client leaves
    ASSERT_TRUE(backend_.wait_cancelled(1, 10s)) << "served on " << host_ << ", client at " << client_host_;
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
};

TEST_F(ClientLeaves, NonStreamingClientDisconnectCancels) {
  expect_cancelled();
}

TEST_F(ClientLeaves, NonStreamingClientDisconnectCancelsOverIpv6) {
  if (!has_ipv6_loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  host_ = client_host_ = "::1";
  expect_cancelled();
}

// A listener on "::" serves IPv4 clients too (dual stack): their peer is the v4-mapped ::ffff:127.0.0.1.
TEST_F(ClientLeaves, NonStreamingClientDisconnectCancelsOnADualStackListener) {
  if (!has_ipv6_loopback()) GTEST_SKIP() << "no IPv6 loopback (::1) on this machine";
  std::ifstream v6only("/proc/sys/net/ipv6/bindv6only");
  int only = 0;
  if (v6only >> only && only != 0) GTEST_SKIP() << "IPv6 sockets are IPv6-only here (bindv6only)";
  host_ = "::";
  client_host_ = "127.0.0.1";
  expect_cancelled();
}

}  // namespace
}  // namespace ds::server::http_test
