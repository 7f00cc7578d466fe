// The serial reference backend: replies end with a final event, cancel stops a running request, and cancel
// marks never outlive their request (a late cancel must not grow the set for ever).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "model/model.h"
#include "server/serial_backend.h"

namespace ds::server {
namespace {

const std::filesystem::path kFixture =
    std::filesystem::path(DELTASERVE_SOURCE_DIR) / "tests/fixtures/qwen4exp_base";

// Collects one request's events; wait() returns the final one.
struct Collector {
  std::mutex mutex;
  std::condition_variable done;
  std::vector<int32_t> tokens;
  std::optional<TokenEvent> last;

  TokenCallback callback() {
    return [this](const TokenEvent& e) {
      std::lock_guard lock(mutex);
      if (e.token >= 0) tokens.push_back(e.token);
      if (e.finished) {
        last = e;
        done.notify_all();
      }
    };
  }
  TokenEvent wait() {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, std::chrono::seconds(60), [&] { return last.has_value(); }));
    return last.value_or(TokenEvent{});
  }
  size_t count() {
    std::lock_guard lock(mutex);
    return tokens.size();
  }
};

GenerationRequest request(int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = {1, 10, 20, 30};
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

TEST(ServerSerialBackend, LateCancelsLeaveNoMarks) {
  Model model(kFixture);
  SerialBackend backend(model, 4096, 8);
  Collector finished;
  uint64_t id = backend.submit(request(3), finished.callback());
  TokenEvent end = finished.wait();
  EXPECT_EQ(end.reason, FinishReason::Length);
  EXPECT_EQ(finished.count(), 3u);
  // The final event reaches us just before the worker lets go of the request, so a cancel racing that window
  // may still mark it; the worker clears such a mark as it moves on. What must never happen is a mark that stays.
  auto marks_settle = [&] {
    for (int i = 0; i < 1000 && backend.cancel_marks() != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return backend.cancel_marks();
  };
  backend.cancel(id);       // after the end: nothing to mark (or a mark the worker clears)
  backend.cancel(id + 99);  // never existed: never marked
  EXPECT_EQ(marks_settle(), 0u);

  Collector running;
  uint64_t long_id = backend.submit(request(2000), running.callback());
  while (running.count() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  backend.cancel(long_id);
  EXPECT_EQ(running.wait().reason, FinishReason::Cancelled);
  EXPECT_LT(running.count(), 2000u);
  // The worker clears the mark right after the final event.
  EXPECT_EQ(marks_settle(), 0u);
}

}  // namespace
}  // namespace ds::server
