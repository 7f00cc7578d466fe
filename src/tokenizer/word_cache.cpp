#include "tokenizer/word_cache.h"

#include <cstring>
#include <memory>
#include <utility>

namespace ds {
namespace {

constexpr size_t kSlots = 1 << 17;  // 2 MB of slots; half of them hold words before a reset
constexpr size_t kMask = kSlots - 1;

}  // namespace

WordCache::WordCache() : slots_(kSlots) {}

const int32_t* WordCache::find(std::string_view word, uint64_t hash, size_t& count) const {
  auto tag = static_cast<uint32_t>(hash >> 32);
  for (size_t i = hash & kMask;; i = (i + 1) & kMask) {
    const Slot& s = slots_[i];
    if (s.key_len == 0) return nullptr;
    if (s.tag == tag && s.key_len == word.size() &&
        std::memcmp(keys_.data() + s.key, word.data(), word.size()) == 0) {
      count = s.n_ids;
      return ids_.data() + s.ids;
    }
  }
}

void WordCache::insert(std::string_view word, uint64_t hash, std::span<const int32_t> ids) {
  if (word.size() < 2 || word.size() > kMaxWordBytes) return;
  if (count_ >= kSlots / 2) clear();
  size_t i = hash & kMask;
  while (slots_[i].key_len != 0) i = (i + 1) & kMask;
  Slot& s = slots_[i];
  s.tag = static_cast<uint32_t>(hash >> 32);
  s.key = static_cast<uint32_t>(keys_.size());
  s.ids = static_cast<uint32_t>(ids_.size());
  s.key_len = static_cast<uint8_t>(word.size());
  s.n_ids = static_cast<uint8_t>(ids.size());  // a word never has more tokens than bytes
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++count_;
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  ids_.clear();
  count_ = 0;
}

WordCache& word_cache_for(uint64_t model_uid) {
  // Caches are made on first use, so a thread that never encodes pays nothing.
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<WordCache>>> entries;
  thread_local size_t victim = 0;
  for (auto& [uid, cache] : entries) {
    if (uid == model_uid) return *cache;
  }
  if (entries.size() < 4) return *entries.emplace_back(model_uid, std::make_unique<WordCache>()).second;
  auto& entry = entries[victim];
  victim = (victim + 1) % entries.size();
  entry = {model_uid, std::make_unique<WordCache>()};
  return *entry.second;
}

}  // namespace ds
