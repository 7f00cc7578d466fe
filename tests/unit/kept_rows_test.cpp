// The kept hidden rows' copy arithmetic (src/backend/cuda/model/kept_rows.h): a state copy takes only the
// rows held, ring wrap included, into a ring sized for them. Plain C++: the header needs no CUDA.
#include "backend/cuda/model/kept_rows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ds::cuda {
namespace {

// Copies positions [first, end) between two simulated rings (a slot holds its position, -1: empty) by the
// runs, then checks every held position landed at its slot and nothing else was written.
void check_copy(int64_t first, int64_t end, int64_t from_capacity, int64_t to_capacity) {
  std::vector<int64_t> from(static_cast<size_t>(from_capacity), -1), to(static_cast<size_t>(to_capacity), -1);
  for (int64_t p = first; p < end; ++p) from[static_cast<size_t>(p % from_capacity)] = p;
  int64_t copied = 0;
  for (const KeptRowRun& r : kept_row_runs(first, end, from_capacity, to_capacity)) {
    ASSERT_GT(r.rows, 0);
    ASSERT_LE(r.from_slot + r.rows, from_capacity) << "a run stays inside the source ring";
    ASSERT_LE(r.to_slot + r.rows, to_capacity) << "a run stays inside the destination ring";
    for (int64_t i = 0; i < r.rows; ++i)
      to[static_cast<size_t>(r.to_slot + i)] = from[static_cast<size_t>(r.from_slot + i)];
    copied += r.rows;
  }
  EXPECT_EQ(copied, end > first ? end - first : 0) << "only the rows held are copied";
  int64_t written = 0;
  for (int64_t s = 0; s < to_capacity; ++s)
    if (to[static_cast<size_t>(s)] >= 0) {
      ++written;
      EXPECT_EQ(to[static_cast<size_t>(s)] % to_capacity, s) << "position " << to[static_cast<size_t>(s)];
      EXPECT_GE(to[static_cast<size_t>(s)], first);
      EXPECT_LT(to[static_cast<size_t>(s)], end);
    }
  EXPECT_EQ(written, end > first ? end - first : 0);
}

TEST(KeptRows, RingRowsRoundUpToTheQuantum) {
  EXPECT_EQ(kept_ring_rows(0), 0);
  EXPECT_EQ(kept_ring_rows(-3), 0);
  EXPECT_EQ(kept_ring_rows(1), 64);
  EXPECT_EQ(kept_ring_rows(64), 64);
  EXPECT_EQ(kept_ring_rows(65), 128);
  EXPECT_EQ(kept_ring_rows(2048), 2048);
}

TEST(KeptRows, EmptyCopiesNothing) {
  EXPECT_TRUE(kept_row_runs(100, 100, 2048, 64).empty());
  EXPECT_TRUE(kept_row_runs(5000, 4000, 2048, 64).empty());
  check_copy(100, 100, 2048, 64);
}

TEST(KeptRows, HeldRowsWithoutWrapAreOneRun) {
  // A 2048-row ring (after a prompt piece) holding 3 rows: one run of 3, not the ring.
  const auto runs = kept_row_runs(2050, 2053, 2048, kept_ring_rows(3));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0], (KeptRowRun{2, 2050 % 64, 3}));
  check_copy(2050, 2053, 2048, 64);
}

TEST(KeptRows, WrappingInEitherRing) {
  // The source ring wraps: positions 2040..2060 sit at slots 2040..2047 then 0..12.
  const auto runs = kept_row_runs(2040, 2061, 2048, 64);
  int64_t rows = 0;
  for (const KeptRowRun& r : runs) rows += r.rows;
  EXPECT_EQ(rows, 21);
  EXPECT_LE(runs.size(), 3u);
  check_copy(2040, 2061, 2048, 64);
  // The destination wraps (60..70 in a 64-row ring) while the source does not.
  EXPECT_EQ(kept_row_runs(60, 70, 2048, 64), (std::vector<KeptRowRun>{{60, 60, 4}, {64, 0, 6}}));
  check_copy(60, 70, 2048, 64);
  // Both wrap at different places.
  check_copy(1000, 1100, 1024, 128);
  check_copy(4090, 4160, 128, 128);
}

TEST(KeptRows, FullRing) {
  // Every slot of the ring held, starting mid-ring: the copy into a ring of the same size is two runs.
  check_copy(100, 164, 64, 64);
  EXPECT_EQ(kept_row_runs(100, 164, 64, 64), (std::vector<KeptRowRun>{{36, 36, 28}, {0, 0, 36}}));
  check_copy(0, 2048, 2048, 2048);
  EXPECT_EQ(kept_row_runs(0, 2048, 2048, 2048), (std::vector<KeptRowRun>{{0, 0, 2048}}));
  // A full ring into the smallest ring holding it.
  check_copy(3000, 3000 + 192, 192, kept_ring_rows(192));
}

}  // namespace
}  // namespace ds::cuda
