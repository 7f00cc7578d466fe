#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace ds {

namespace {
std::atomic<int> g_default_threads{0};
}

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t pieces = std::min<int64_t>((n + grain - 1) / grain, static_cast<int64_t>(size()) * 4);
  if (pieces <= 1 || workers_.empty()) {
    fn(0, n);
    return;
  }
  auto run_piece = [&](int64_t p) { fn(n * p / pieces, n * (p + 1) / pieces); };
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  job_n_ = n;
  job_pieces_ = pieces;
  next_piece_ = 0;
  pieces_done_ = 0;
  ++generation_;
  start_cv_.notify_all();
  while (next_piece_ < job_pieces_) {
    int64_t p = next_piece_++;
    lock.unlock();
    run_piece(p);
    lock.lock();
    ++pieces_done_;
  }
  done_cv_.wait(lock, [&] { return pieces_done_ == job_pieces_; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && job_ != nullptr); });
    if (stop_) return;
    seen = generation_;
    while (job_ != nullptr && next_piece_ < job_pieces_) {
      int64_t p = next_piece_++;
      const auto* fn = job_;
      int64_t n = job_n_, pieces = job_pieces_;
      lock.unlock();
      (*fn)(n * p / pieces, n * (p + 1) / pieces);
      lock.lock();
      if (++pieces_done_ == job_pieces_) done_cv_.notify_all();
    }
  }
}

ThreadPool& ThreadPool::global() {
  static std::unique_ptr<ThreadPool> pool = [] {
    int n = g_default_threads.load();
    if (n <= 0) n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    return std::make_unique<ThreadPool>(n);
  }();
  return *pool;
}

void ThreadPool::set_default_threads(int threads) { g_default_threads.store(threads); }

}  // namespace ds
