#pragma once
// The HTTP front: OpenAI routes, health, metrics, tokenize, API-key auth. The only file that sees
// cpp-httplib.
#include <chrono>
#include <memory>
#include <string>

#include "server/server_state.h"

namespace ds::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 picks a free port
  std::string api_key;
  int threads = 64;  // connections served at once (streams hold one each)
  // How often a non-streaming completion asks its client's socket whether the client is still there (it
  // sends nothing until the reply is whole; one that left cancels its engine request), and how long a stream
  // goes without events before it sends an SSE keep-alive comment.
  std::chrono::milliseconds client_check{500};
};

class HttpServer {
 public:
  HttpServer(ServerState& state, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the socket; returns the port. Throws ds::Error when the address cannot be bound.
  int bind();
  // Serves until stop(); requests in flight finish first.
  void serve();
  // Thread-safe: refuse new work (503), close the listener, let streams end.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);

}  // namespace ds::server
