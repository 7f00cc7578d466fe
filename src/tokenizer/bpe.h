#pragma once
// Byte-level BPE by merge rank, as HF's BPE model: the lowest-ranked adjacent pair merges first, the leftmost
// on ties. Works on raw bytes; words already seen are served from a per-thread cache.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ds {

struct BpeSpec {
  std::vector<std::pair<std::string, int32_t>> vocab;       // raw bytes -> id
  std::vector<std::pair<std::string, std::string>> merges;  // raw bytes of the left and right part, by rank
  bool ignore_merges = false;
};

class BpeModel {
 public:
  BpeModel() = default;
  // Words of up to small_word bytes merge by a quadratic scan, longer ones with a heap; both give HF's
  // result.
  explicit BpeModel(const BpeSpec& spec, size_t small_word = 48);

  // Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // The id of a vocabulary entry given as raw bytes, or -1.
  int32_t id_of(std::string_view bytes) const;

 private:
  struct Merge {
    uint32_t rank;
    int32_t id;
  };
  // Open addressing over (left id, right id) keys, ~2x the merge count; key and value share a slot so that a
  // lookup touches one cache line.
  struct MergeTable {
    struct Slot {
      uint64_t key = UINT64_MAX;
      Merge value{};
    };
    std::vector<Slot> slots;
    uint64_t mask = 0;
    void insert(uint64_t key, Merge value);
    const Merge* find(uint64_t key) const;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  const Merge* merge_of(int32_t left, int32_t right) const {
    return merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
                        static_cast<uint32_t>(right));
  }
  void merge_small(std::vector<int32_t>& symbols) const;
  void merge_large(std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  int32_t byte_id_[256];
  MergeTable merges_;
  bool ignore_merges_ = false;
  size_t small_word_ = 48;
  uint64_t uid_ = 0;  // tells this model's entries apart in the per-thread word cache
};

}  // namespace ds
