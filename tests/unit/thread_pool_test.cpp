#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ds {

// Every index is visited exactly once, for any pool size and grain.
TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000}) {
      std::vector<std::atomic<int>> seen(n);
      pool.parallel_for(n, 3, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) seen[i]++;
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << threads << " " << n << " " << i;
    }
  }
}

// Two threads using one pool at once (two engines, a bench beside a server) neither deadlock nor mix jobs.
TEST(ThreadPool, ConcurrentCallersAreSerialised) {
  ThreadPool pool(3);
  auto worker = [&](int64_t* total) {
    for (int rep = 0; rep < 300; ++rep) {
      std::atomic<int64_t> sum{0};
      pool.parallel_for(100, 1, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) sum += i;
      });
      *total += sum.load();
    }
  };
  int64_t t1 = 0, t2 = 0;
  std::thread a(worker, &t1), b(worker, &t2);
  a.join();
  b.join();
  EXPECT_EQ(t1, 300 * 4950);
  EXPECT_EQ(t2, 300 * 4950);
}

// A parallel_for inside pool work runs inline rather than re-entering the pool.
TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(8, 1, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i)
      pool.parallel_for(10, 1, [&](int64_t c, int64_t d) { sum += d - c; });
  });
  EXPECT_EQ(sum.load(), 80);
}

}  // namespace ds
