#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <memory>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ds {

namespace {
std::unique_ptr<ThreadPool>& global_pool() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
// Set inside pool work: a nested parallel_for runs inline instead of re-entering the pool.
thread_local bool t_inside_pool = false;

// Decode issues a parallel job every few tens of microseconds; a futex wake-up costs about as much, so
// waiters spin first (pausing, then yielding the core to other processes) and only then sleep.
constexpr auto kPauseSpin = std::chrono::microseconds(50);
constexpr auto kYieldSpin = std::chrono::microseconds(2000);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() holds or the spin budget is spent; returns done().
template <class Done>
bool spin_until(Done&& done) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) != 63) {
      cpu_relax();
      continue;
    }
    const auto spent = std::chrono::steady_clock::now() - start;
    if (spent > kYieldSpin) return done();
    if (spent > kPauseSpin) std::this_thread::yield();
  }
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_pieces(std::unique_lock<std::mutex>& lock) {
  while (job_ != nullptr && next_piece_ < job_pieces_) {
    const int64_t p = next_piece_++;
    const auto* fn = job_;
    const int64_t n = job_n_, pieces = job_pieces_;
    lock.unlock();
    t_inside_pool = true;
    (*fn)(n * p / pieces, n * (p + 1) / pieces);
    t_inside_pool = false;
    lock.lock();
    if (pieces_done_.fetch_add(1, std::memory_order_release) + 1 == job_pieces_ && caller_sleeping_)
      done_cv_.notify_all();
  }
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
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  job_n_ = n;
  job_pieces_ = pieces;
  next_piece_ = 0;
  pieces_done_.store(0, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  if (sleepers_ > 0) start_cv_.notify_all();
  run_pieces(lock);
  lock.unlock();
  const bool done = spin_until([&] { return pieces_done_.load(std::memory_order_acquire) == pieces; });
  lock.lock();
  if (!done) {
    caller_sleeping_ = true;
    done_cv_.wait(lock, [&] { return pieces_done_.load(std::memory_order_relaxed) == pieces; });
    caller_sleeping_ = false;
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock<std::mutex> lock(mutex_);
    if (generation_.load(std::memory_order_relaxed) == seen) {
      ++sleepers_;
      start_cv_.wait(lock, [&] { return generation_.load(std::memory_order_relaxed) != seen; });
      --sleepers_;
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_relaxed);
    run_pieces(lock);
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
