#pragma once
// Exact prompt cache: prompt-path stream states snapshotted at marks on the 64-token grid, keyed by the token
// prefix (a chained hash, verified by full comparison on a hit), evicted least recently used under a byte
// budget.
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/stream_state.h"

namespace ds {

class PromptCache {
 public:
  static constexpr int64_t kGrid = 64;  // the chunk grid: prompt pieces split here give the same bits

  explicit PromptCache(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

  struct Hit {
    int64_t length = 0;          // tokens covered, a multiple of kGrid
    const StreamState* state{};  // valid until the next insert or eviction
  };
  // The longest cached mark m <= max_len whose tokens equal tokens[0, m); marks it most recently used.
  std::optional<Hit> find(std::span<const int32_t> tokens, int64_t max_len);
  // Stores a snapshot for `prefix` (size a positive multiple of kGrid); keeps an existing equal entry.
  void insert(std::span<const int32_t> prefix, const StreamState& state);
  // Evicts least recently used entries until bytes() <= limit.
  void evict_to(int64_t limit);
  void set_capacity(int64_t bytes) { capacity_ = bytes; }

  int64_t bytes() const { return bytes_; }
  int64_t capacity() const { return capacity_; }
  size_t entries() const { return lru_.size(); }

 private:
  struct Entry {
    uint64_t key;
    std::vector<int32_t> tokens;
    StreamState state;
    int64_t bytes;
  };
  // Hashes of tokens[0, k*kGrid) for k = 1..max_len/kGrid.
  static std::vector<uint64_t> grid_keys(std::span<const int32_t> tokens, int64_t max_len);

  int64_t capacity_ = 0, bytes_ = 0;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<uint64_t, std::list<Entry>::iterator> index_;
};

}  // namespace ds
