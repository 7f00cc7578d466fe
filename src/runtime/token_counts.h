#pragma once
// Per-request token counts for the penalties: a flat map sorted by token id, updated one token at a time,
// so a draw touches only the tokens seen so far and never the whole vocabulary.
#include <cstdint>
#include <span>
#include <vector>

namespace ds {

class TokenCounts {
 public:
  struct Entry {
    int32_t id;
    uint32_t prompt;     // occurrences in the prompt
    uint32_t generated;  // occurrences in the completion so far
  };

  // Adds the prompt's tokens (any order, repeats counted); O(P log P + H).
  void add_prompt(std::span<const int32_t> ids);
  // Counts one generated token; O(log H), plus a shift of the entries when the id is new.
  void add_generated(int32_t id);
  // Undoes add_generated(id) (a rejected draft); throws if the id has no generated occurrence.
  void remove_generated(int32_t id);
  void clear() { entries_.clear(); }

  // Ids that occur at least once, ascending; entries never hold two zero counts.
  std::span<const Entry> entries() const { return entries_; }
  // The entry for id, or nullptr when the id has not occurred.
  const Entry* find(int32_t id) const;
  int32_t max_id() const { return entries_.empty() ? -1 : entries_.back().id; }

 private:
  std::vector<Entry> entries_;
};

}  // namespace ds
