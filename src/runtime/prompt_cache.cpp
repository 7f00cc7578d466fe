#include "runtime/prompt_cache.h"

#include <algorithm>

#include "core/error.h"

namespace ds {
namespace {

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<uint64_t> PromptCache::grid_keys(std::span<const int32_t> tokens, int64_t max_len) {
  const int64_t n = std::min<int64_t>(max_len, static_cast<int64_t>(tokens.size())) / kGrid;
  std::vector<uint64_t> keys(std::max<int64_t>(n, 0));
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t i = k * kGrid; i < (k + 1) * kGrid; ++i) h = mix64(h + static_cast<uint32_t>(tokens[i]) + 1);
    keys[k] = h;
  }
  return keys;
}

std::optional<PromptCache::Hit> PromptCache::find(std::span<const int32_t> tokens, int64_t max_len) {
  if (lru_.empty()) return std::nullopt;
  const auto keys = grid_keys(tokens, max_len);
  for (int64_t k = static_cast<int64_t>(keys.size()) - 1; k >= 0; --k) {
    auto it = index_.find(keys[k]);
    if (it == index_.end()) continue;
    const int64_t len = (k + 1) * kGrid;
    const auto& e = *it->second;
    // A hash match is only a candidate: the full prefix must be equal.
    if (static_cast<int64_t>(e.tokens.size()) != len ||
        !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin()))
      continue;
    lru_.splice(lru_.begin(), lru_, it->second);
    return Hit{len, &lru_.front().state};
  }
  return std::nullopt;
}

void PromptCache::insert(std::span<const int32_t> prefix, const StreamState& state) {
  const int64_t len = static_cast<int64_t>(prefix.size());
  if (len <= 0 || len % kGrid != 0)
    fail("prompt cache: a mark must be a positive multiple of {}, got {}", kGrid, len);
  if (state.position != len)
    fail("prompt cache: state at position {} stored for a {}-token prefix", state.position, len);
  const uint64_t key = grid_keys(prefix, len).back();
  auto it = index_.find(key);
  if (it != index_.end()) {
    const auto& e = *it->second;
    if (std::equal(e.tokens.begin(), e.tokens.end(), prefix.begin(), prefix.end())) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    // A hash collision with another prefix: the newer one replaces it.
    bytes_ -= e.bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  const int64_t token_bytes = static_cast<int64_t>(prefix.size() * sizeof(int32_t));
  const int64_t estimate = static_cast<int64_t>(state.bytes()) + token_bytes;
  if (estimate > capacity_) return;  // would evict everything and still not fit
  // Room first, by the live state's size, then the copy: the same entries go as evicting after, but the
  // states held stay within the capacity while the copy is made (on a GPU a copy is device memory).
  evict_to(capacity_ - estimate);
  lru_.push_front(Entry{key, std::vector<int32_t>(prefix.begin(), prefix.end()), state, 0});
  // The entry counts what its copy holds, which need not be the live state's size (a CUDA snapshot leaves
  // out the live state's rewind parts and the kept hidden rows no longer held); a copy larger than the
  // estimate evicts older entries, one larger than the whole budget is not kept.
  Entry& e = lru_.front();
  e.bytes = static_cast<int64_t>(e.state.bytes()) + token_bytes;
  if (e.bytes > capacity_) {
    lru_.pop_front();
    return;
  }
  index_[key] = lru_.begin();
  bytes_ += e.bytes;
  evict_to(capacity_);
}

void PromptCache::evict_to(int64_t limit) {
  while (bytes_ > std::max<int64_t>(limit, 0) && !lru_.empty()) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
}

}  // namespace ds
