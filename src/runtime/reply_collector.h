#pragma once
// Gathers the events of one engine request (its tokens and final event) for a caller that waits on the
// reply: the tests and the device contract program.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "runtime/engine.h"

namespace ds {

struct CollectedReply {
  std::vector<int32_t> tokens;
  TokenEvent final;
};

class ReplyCollector {
 public:
  TokenCallback callback() {
    return [this](const TokenEvent& ev) {
      std::lock_guard lock(mutex_);
      if (ev.token >= 0) reply_.tokens.push_back(ev.token);
      if (ev.finished) {
        reply_.final = ev;
        done_ = true;
      }
      cv_.notify_all();
    };
  }
  // Blocks until the final event; false when `timeout` passes first.
  bool wait_done(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return done_; });
  }
  // Blocks until at least n tokens arrived or the request finished; false when `timeout` passes first.
  bool wait_tokens(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return done_ || reply_.tokens.size() >= n; });
  }
  CollectedReply reply() const {
    std::lock_guard lock(mutex_);
    return reply_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  CollectedReply reply_;
  bool done_ = false;
};

}  // namespace ds
