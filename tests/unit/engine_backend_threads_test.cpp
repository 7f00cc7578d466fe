// What a backend must tolerate from engines sharing it (docs/runtime.md "Backends"): forward calls come one
// at a time under forward_mutex(), but another engine's construction sizes a stream with new_state() while a
// forward is in flight. On CUDA such a call enqueued on the model's stream inside a graph capture became a
// node of a parked graph, replayed after its buffer was freed (CudaModel::capture_mutex_ keeps it out).
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "engine_test_support.h"
#include "runtime/cpu_backend.h"

namespace ds {
namespace {

// The CPU backend whose next forward, once armed, waits (up to 20 s) for a new_state() from another thread.
class WatchedBackend final : public ModelBackend {
 public:
  explicit WatchedBackend(const Model& m) : cpu_(m) {}
  const char* name() const override { return "watched"; }
  const ModelConfig& config() const override { return cpu_.config(); }
  int64_t max_context() const override { return cpu_.max_context(); }
  int64_t weights_bytes() const override { return cpu_.weights_bytes(); }
  StreamState new_state() const override {
    {
      std::lock_guard lock(mutex_);
      if (in_forward_) overlapped_ = true;
    }
    changed_.notify_all();
    return cpu_.new_state();
  }
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    std::unique_lock lock(mutex_);
    if (armed_) {
      armed_ = false;
      in_forward_ = true;
      changed_.notify_all();
      changed_.wait_for(lock, std::chrono::seconds(20), [&] { return overlapped_; });
      in_forward_ = false;
    }
    lock.unlock();
    return cpu_.forward(segments);
  }
  void rewind(const WindowRecord& record, int64_t keep, StreamState& state) const override {
    cpu_.rewind(record, keep, state);
  }
  bool has_mtp() const override { return cpu_.has_mtp(); }
  int64_t mtp_hidden_width() const override { return cpu_.mtp_hidden_width(); }
  std::vector<float> mtp_forward(std::span<const MtpSegment> segments) const override {
    return cpu_.mtp_forward(segments);
  }

  void arm() {
    std::lock_guard lock(mutex_);
    armed_ = true;
  }
  bool wait_forward_started() {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(20), [&] { return in_forward_; });
  }
  bool overlapped() const {
    std::lock_guard lock(mutex_);
    return overlapped_;
  }

 private:
  CpuBackend cpu_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  mutable bool armed_ = false, in_forward_ = false, overlapped_ = false;
};

TEST(EngineBackendThreads, NewStateRunsDuringAnotherEnginesForward) {
  const Model m(test::fixture("qwen4exp_base"));
  auto backend = std::make_shared<WatchedBackend>(m);
  EngineOptions o;
  o.drafts = false;  // no calibration calls: the first forward is the request's
  Engine running(backend, o);
  backend->arm();
  test::Collector c;
  running.submit(test::make_request(test::random_prompt(12, m.config().vocab_size, 5), 2, false, 1),
                 c.callback());
  ASSERT_TRUE(backend->wait_forward_started());
  {
    // Built while `running`'s forward waits: its stream sizing calls new_state() on this thread.
    Engine second(backend, o);
  }
  const test::Reply r = c.wait();
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_TRUE(backend->overlapped()) << "no new_state() ran while the other engine's forward was in flight";
}

}  // namespace
}  // namespace ds
