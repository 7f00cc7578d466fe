#include "runtime/token_counts.h"

#include <algorithm>

#include "core/error.h"

namespace ds {
namespace {

bool id_less(const TokenCounts::Entry& e, int32_t id) {
  return e.id < id;
}

}  // namespace

void TokenCounts::add_prompt(std::span<const int32_t> ids) {
  std::vector<int32_t> sorted(ids.begin(), ids.end());
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty() && sorted.front() < 0) fail("prompt token id must be >= 0, got {}", sorted.front());
  std::vector<Entry> merged;
  merged.reserve(entries_.size() + sorted.size());
  size_t e = 0;
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
    while (e < entries_.size() && entries_[e].id < sorted[i]) merged.push_back(entries_[e++]);
    const uint32_t count = static_cast<uint32_t>(j - i);
    if (e < entries_.size() && entries_[e].id == sorted[i]) {
      merged.push_back(entries_[e++]);
      merged.back().prompt += count;
    } else {
      merged.push_back({sorted[i], count, 0});
    }
    i = j;
  }
  merged.insert(merged.end(), entries_.begin() + static_cast<std::ptrdiff_t>(e), entries_.end());
  entries_ = std::move(merged);
}

void TokenCounts::add_generated(int32_t id) {
  if (id < 0) fail("generated token id must be >= 0, got {}", id);
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id, id_less);
  if (it != entries_.end() && it->id == id) {
    ++it->generated;
  } else {
    entries_.insert(it, Entry{id, 0, 1});
  }
}

void TokenCounts::remove_generated(int32_t id) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id, id_less);
  if (it == entries_.end() || it->id != id || it->generated == 0)
    fail("cannot remove generated token {}: it was not generated", id);
  // Dropping emptied entries keeps the map a function of the multiset of tokens, not of its history.
  if (--it->generated == 0 && it->prompt == 0) entries_.erase(it);
}

const TokenCounts::Entry* TokenCounts::find(int32_t id) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id, id_less);
  return it != entries_.end() && it->id == id ? &*it : nullptr;
}

}  // namespace ds
