#pragma once
// A fixed pool of worker threads. Ops split independent outputs across threads, never a reduction,
// so results do not depend on the thread count.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ds {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end) over [0, n) in contiguous pieces of at least `grain` items; blocks until done.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool used by the CPU backend (hardware threads unless set).
  static ThreadPool& global();
  // Replaces the process-wide pool; call only while no work is running on it (start-up, tests).
  static void set_global_threads(int threads);

 private:
  void worker_loop();
  // Runs pieces of the current job until none is left; called with `lock` held, returns with it held.
  void run_pieces(std::unique_lock<std::mutex>& lock);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::mutex job_mutex_;  // serialises parallel_for calls from different threads
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_pieces_ = 0, next_piece_ = 0;
  // Read without the mutex while spinning; written under it.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int64_t> pieces_done_{0};
  int sleepers_ = 0;              // workers blocked on start_cv_
  bool caller_sleeping_ = false;  // the caller is blocked on done_cv_
  bool stop_ = false;
};

}  // namespace ds
