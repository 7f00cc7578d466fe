#pragma once
// The plain reference decode behind the backend interface: one request at a time, prompt pass then one token
// per forward, keyed sampling. Serves until the batched runtime engine is wired in, and stays as the
// reference that engine's replies must equal.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <set>
#include <thread>

#include "model/model.h"
#include "server/generation_backend.h"

namespace ds::server {

class SerialBackend : public GenerationBackend {
 public:
  SerialBackend(const Model& model, int64_t context, int64_t max_queue);
  ~SerialBackend() override;  // cancels queued work and joins the worker

  uint64_t submit(GenerationRequest request, TokenCallback on_event) override;
  void cancel(uint64_t id) override;
  EngineStats stats() const override;
  // Requests marked cancelled and not yet ended (0 when idle: marks never outlive their request).
  size_t cancel_marks() const;

 private:
  struct Job {
    uint64_t id;
    GenerationRequest request;
    TokenCallback on_event;
  };
  void work();
  void run(Job& job);
  bool cancelled(uint64_t id);

  const Model& model_;
  int64_t context_, max_queue_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Job> queue_;
  std::set<uint64_t> cancelled_;
  uint64_t next_id_ = 1;
  uint64_t running_id_ = 0;  // the job being decoded; 0 when idle
  bool stopping_ = false;
  EngineStats stats_;
  std::thread worker_;
};

}  // namespace ds::server
