#include "core/thread_pool.h"

#include <algorithm>
#include <memory>

namespace ds {

namespace {
std::unique_ptr<ThreadPool>& global_pool() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
// Set inside pool work: a nested parallel_for runs inline instead of re-entering the pool.
thread_local bool t_inside_pool = false;
}  // namespace

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
  if (pieces <= 1 || workers_.empty() || t_inside_pool) {
    fn(0, n);
    return;
  }
  // One job at a time: callers on different threads (two engines, a bench beside a server) queue here.
  std::lock_guard<std::mutex> one_job(job_mutex_);
  auto run_piece = [&](int64_t p) {
    t_inside_pool = true;
    fn(n * p / pieces, n * (p + 1) / pieces);
    t_inside_pool = false;
  };
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
      t_inside_pool = true;
      (*fn)(n * p / pieces, n * (p + 1) / pieces);
      t_inside_pool = false;
      lock.lock();
      if (++pieces_done_ == job_pieces_) done_cv_.notify_all();
    }
  }
}

ThreadPool& ThreadPool::global() {
  auto& pool = global_pool();
  if (!pool)
    pool = std::make_unique<ThreadPool>(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  return *pool;
}

void ThreadPool::set_global_threads(int threads) {
  global_pool() = std::make_unique<ThreadPool>(threads);
}

}  // namespace ds
