#pragma once
// A per-thread memo of BPE results for short words. Open addressing over flat arrays: a hit costs one hash,
// one probe and one compare, where a node-based map costs several cache misses.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ds {

class WordCache {
 public:
  static constexpr size_t kMaxWordBytes = 255;  // HF caches only words shorter than 256 bytes too

  WordCache();
  // The ids cached for word (at most kMaxWordBytes bytes), or nullptr.
  const int32_t* find(std::string_view word, uint64_t hash, size_t& count) const;
  // Adds a word not yet cached; when half full the cache starts over.
  void insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids);

  static uint64_t hash(std::string_view word) { return std::hash<std::string_view>{}(word); }

 private:
  struct Slot {
    uint32_t tag = 0;     // high hash bits, to skip most string compares
    uint32_t key = 0;     // offset into keys_
    uint32_t ids = 0;     // offset into ids_
    uint8_t key_len = 0;  // 0: empty slot (cached words have at least 2 bytes)
    uint8_t n_ids = 0;
  };
  void clear();

  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

// This thread's cache for the model with the given uid (a few models per thread are kept).
WordCache& word_cache_for(uint64_t model_uid);

}  // namespace ds
