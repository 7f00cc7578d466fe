#pragma once
// Facts about the host's memory that benches and loaders need: how much is free, and how fast DRAM streams.
#include <cstdint>

#include "core/thread_pool.h"

namespace ds {

// MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read.
uint64_t available_memory_bytes();

// Read bandwidth in GB/s (1e9 bytes/s): every pool thread streams its share of a `bytes` buffer (make it much
// larger than the caches); the best of `passes` timed passes after one untimed pass that faults pages in.
double measure_read_bandwidth_gbs(uint64_t bytes, int passes, ThreadPool& pool = ThreadPool::global());

}  // namespace ds
