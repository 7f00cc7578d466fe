#pragma once
// The row arithmetic of a stream's kept hidden rows (KeptHiddenRows, cuda_model.h): position p's row lives at
// slot p % capacity of a ring, and the rows held are positions [first, end). A copy of the state (a
// prompt-cache snapshot, its restore) takes only the rows held, into a ring sized for them, as runs of
// consecutive slots in both rings. Plain C++ (no CUDA), tested on the CPU (tests/unit/kept_rows_test.cpp).
#include <algorithm>
#include <cstdint>
#include <vector>

namespace ds::cuda {

constexpr int64_t kKeptRowsQuantum = 64;  // rings hold a multiple of this many rows

// Rows a ring made to hold `rows` rows has: 0 for none, else `rows` rounded up to kKeptRowsQuantum.
inline int64_t kept_ring_rows(int64_t rows) {
  return rows <= 0 ? 0 : (rows + kKeptRowsQuantum - 1) / kKeptRowsQuantum * kKeptRowsQuantum;
}

// Consecutive rows at from_slot.. of one ring going to to_slot.. of another.
struct KeptRowRun {
  int64_t from_slot = 0, to_slot = 0, rows = 0;
  bool operator==(const KeptRowRun&) const = default;
};

// The runs that copy positions [first, end) from a ring of `from_capacity` rows to one of `to_capacity` rows
// (each at p % capacity), in position order; none when first >= end. Each ring must hold the rows
// (end - first <= capacity; the caller checks), so either ring wraps at most once: at most three runs.
inline std::vector<KeptRowRun> kept_row_runs(int64_t first, int64_t end, int64_t from_capacity,
                                             int64_t to_capacity) {
  std::vector<KeptRowRun> runs;
  for (int64_t p = first; p < end;) {
    const int64_t from = p % from_capacity, to = p % to_capacity;
    const int64_t n = std::min({end - p, from_capacity - from, to_capacity - to});
    runs.push_back({from, to, n});
    p += n;
  }
  return runs;
}

}  // namespace ds::cuda
