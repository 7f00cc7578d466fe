// The prompt cache's byte budget (runtime/prompt_cache.h): an entry counts what its stored copy holds, device
// copies included, not what the live state it was copied from held.
#include "runtime/prompt_cache.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ds {
namespace {

// A backend state of `bytes` whose copies hold `copy_bytes` (as a CUDA state's snapshot leaves out its rewind
// parts and the kept rows no longer held, or a backend whose copy could hold more).
class SizedState final : public BackendState {
 public:
  SizedState(size_t bytes, size_t copy_bytes) : bytes_(bytes), copy_bytes_(copy_bytes) {}
  std::unique_ptr<BackendState> clone() const override {
    return std::make_unique<SizedState>(copy_bytes_, copy_bytes_);
  }
  size_t bytes() const override { return bytes_; }

 private:
  size_t bytes_, copy_bytes_;
};

StreamState sized(size_t bytes, size_t copy_bytes) {
  StreamState s;
  s.position = PromptCache::kGrid;
  s.backend = BackendStateSlot(std::make_unique<SizedState>(bytes, copy_bytes));
  return s;
}

std::vector<int32_t> prefix(int32_t first) {
  std::vector<int32_t> t(PromptCache::kGrid);
  for (size_t i = 0; i < t.size(); ++i) t[i] = first + static_cast<int32_t>(i);
  return t;
}

constexpr int64_t kTokenBytes = PromptCache::kGrid * sizeof(int32_t);

TEST(PromptCache, EntriesCountTheirStoredCopy) {
  // A live state of 100000 bytes whose copy holds 1000: the entry counts 1000 (and its tokens).
  PromptCache cache(1 << 20);
  cache.insert(prefix(1), sized(100000, 1000));
  ASSERT_EQ(cache.entries(), 1u);
  EXPECT_EQ(cache.bytes(), 1000 + kTokenBytes);
  const auto hit = cache.find(prefix(1), PromptCache::kGrid);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->state->bytes(), 1000u);

  // Copies larger than the live state: the budget holds what is stored, older entries evicted for it.
  PromptCache small(6000);
  small.insert(prefix(1), sized(100, 5000));
  EXPECT_EQ(small.bytes(), 5000 + kTokenBytes);
  small.insert(prefix(2), sized(100, 5000));
  EXPECT_EQ(small.entries(), 1u);
  EXPECT_EQ(small.bytes(), 5000 + kTokenBytes);
  EXPECT_LE(small.bytes(), small.capacity());
  EXPECT_TRUE(small.find(prefix(2), PromptCache::kGrid).has_value()) << "the newer entry stays";
  EXPECT_FALSE(small.find(prefix(1), PromptCache::kGrid).has_value());
  // A copy larger than the whole budget is not kept, and the entries there stay.
  small.insert(prefix(3), sized(100, 20000));
  EXPECT_EQ(small.entries(), 1u);
  EXPECT_EQ(small.bytes(), 5000 + kTokenBytes);
  EXPECT_FALSE(small.find(prefix(3), PromptCache::kGrid).has_value());
}

}  // namespace
}  // namespace ds
