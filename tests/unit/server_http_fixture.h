#pragma once
// The HTTP routes' test fixture: a scripted backend (a token script per request, honouring cancel, with
// bounded waits on its progress) and a server on a free loopback port. Used by server_http_test (routes,
// shapes, SSE, tool calls, auth) and server_http_errors_test (engine errors' statuses, disconnect -> cancel).
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "server/http_server.h"
#include "server/serial_backend.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::server::http_test {

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
  std::string failure;       // EngineStats::backend_failure (a backend that cannot serve again)
  EngineStats engine_stats;  // what stats() reports (with `failure` as its backend_failure)
  std::exception_ptr
      submit_throws;  // submit throws it (not a ds::Error: a backend's runtime_error, bad_alloc)
  std::exception_ptr
      cancel_throws;  // the next cancel throws it, once (an exception in the middle of a session)
  GenerationRequest last;

  ~ScriptedBackend() override {
    for (auto& t : threads_) t.join();
  }
  uint64_t submit(GenerationRequest request, TokenCallback on_event) override {
    if (!refuse.empty()) fail("{}", refuse);
    if (submit_throws) std::rethrow_exception(submit_throws);
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
    if (auto thrown = std::exchange(cancel_throws, nullptr)) std::rethrow_exception(thrown);
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
    EngineStats s = engine_stats;
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
    http_ = std::make_unique<HttpServer>(*state_, HttpOptions{host_, 0, api_key, 16, client_check_});
    port_ = http_->bind();
    thread_ = std::thread([this] { http_->serve(); });
  }
  void TearDown() override {
    if (http_) http_->stop();
    if (thread_.joinable()) thread_.join();
  }
  std::vector<int32_t> ids(const std::string& text) { return tokenizer_->encode(text); }
  httplib::Client client() {
    httplib::Client c(client_host_, port_);
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
  std::string host_ = "127.0.0.1";               // HttpOptions::host
  std::string client_host_ = "127.0.0.1";        // where client() connects
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<PromptBuilder> prompts_;
  std::unique_ptr<ServerState> state_;
  std::unique_ptr<HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

const json kChat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hello"}}}}};

}  // namespace ds::server::http_test
