#pragma once
// Facts about the host's memory that benches and loaders need: how much is free, and how fast DRAM streams.
#include <cstdint>

#include "core/thread_pool.h"

namespace ds {

// MemAvailable from /proc/meminfo in bytes, or 0 when it cannot be read.
uint64_t available_memory_bytes();

// Asks the kernel to back the 2 MiB-aligned part of [p, p + bytes) with transparent huge pages (call before the
// first write): weight streams then cross far fewer TLB entries. A no-op where THP is off or unsupported.
void advise_huge_pages(void* p, uint64_t bytes);

// Read bandwidth in GB/s (1e9 bytes/s): every pool thread streams its share of a `bytes` buffer (make it much
// larger than the caches); the best of `passes` timed passes after one untimed pass that faults pages in.
// The buffer gets huge pages as the weights do, so the bound is what the weights could stream at.
double measure_read_bandwidth_gbs(uint64_t bytes, int passes, ThreadPool& pool = ThreadPool::global());

}  // namespace ds
