#include "tokenizer/bpe.h"

#include <atomic>
#include <queue>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/word_cache.h"

namespace ds {
namespace {

constexpr uint32_t kNoRank = UINT32_MAX;

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

std::atomic<uint64_t> next_uid{1};

// Scratch for merge_small, reused per thread.
std::vector<uint32_t>& small_ranks() {
  thread_local std::vector<uint32_t> v;
  return v;
}
std::vector<int32_t>& small_merged() {
  thread_local std::vector<int32_t> v;
  return v;
}

}  // namespace

void BpeModel::MergeTable::insert(uint64_t key, Merge value) {
  for (uint64_t slot = mix(key) & mask;; slot = (slot + 1) & mask) {
    if (slots[slot].key == UINT64_MAX || slots[slot].key == key) {
      slots[slot] = {key, value};  // a repeated pair keeps its last rank, as HF's map does
      return;
    }
  }
}

const BpeModel::Merge* BpeModel::MergeTable::find(uint64_t key) const {
  if (slots.empty()) return nullptr;
  for (uint64_t slot = mix(key) & mask;; slot = (slot + 1) & mask) {
    if (slots[slot].key == key) return &slots[slot].value;
    if (slots[slot].key == UINT64_MAX) return nullptr;
  }
}

BpeModel::BpeModel(const BpeSpec& spec, size_t small_word)
    : ignore_merges_(spec.ignore_merges), small_word_(small_word), uid_(next_uid++) {
  vocab_.reserve(spec.vocab.size());
  for (const auto& [bytes, id] : spec.vocab) vocab_[bytes] = id;
  for (int b = 0; b < 256; ++b) byte_id_[b] = id_of(std::string(1, static_cast<char>(b)));

  size_t capacity = 16;
  while (capacity < spec.merges.size() * 2 + 1) capacity *= 2;
  merges_.slots.assign(capacity, MergeTable::Slot{});
  merges_.mask = capacity - 1;
  std::string joined;
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    int32_t l = id_of(left), r = id_of(right);
    joined = left + right;
    int32_t m = id_of(joined);
    if (l < 0 || r < 0 || m < 0) {
      fail("tokenizer.json merge {} ('{}' + '{}') names a token that is not in the vocabulary", rank,
           byte_level::from_bytes(left), byte_level::from_bytes(right));
    }
    merges_.insert((static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r),
                   {static_cast<uint32_t>(rank), m});
  }
}

int32_t BpeModel::id_of(std::string_view bytes) const {
  auto it = vocab_.find(bytes);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::merge_small(std::vector<int32_t>& s) const {
  // ranks[i] and merged[i] describe the merge of s[i] with s[i + 1] (kNoRank when there is none).
  size_t n = s.size();
  std::vector<uint32_t>& ranks = small_ranks();
  std::vector<int32_t>& merged = small_merged();
  ranks.resize(n);
  merged.resize(n);
  auto update = [&](size_t i) {
    const Merge* m = merge_of(s[i], s[i + 1]);
    ranks[i] = m ? m->rank : kNoRank;
    merged[i] = m ? m->id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) update(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == kNoRank) break;
    s[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) {
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) update(best - 1);
    if (best + 1 < n) update(best);
  }
  s.resize(n);
}

void BpeModel::merge_large(std::vector<int32_t>& s) const {
  // HF's algorithm: a doubly linked list of symbols and a heap of (rank, position); stale entries are
  // skipped.
  struct Entry {
    uint32_t rank;
    uint32_t pos;
    int32_t id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  size_t n = s.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
    if (i + 1 < n) {
      if (const Merge* m = merge_of(s[i], s[i + 1])) heap.push({m->rank, static_cast<uint32_t>(i), m->id});
    }
  }
  while (!heap.empty()) {
    Entry top = heap.top();
    heap.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    auto right = static_cast<size_t>(next[top.pos]);
    const Merge* m = merge_of(s[top.pos], s[right]);
    if (m == nullptr || m->id != top.id) continue;
    s[top.pos] = top.id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = static_cast<int32_t>(top.pos);
    if (prev[top.pos] >= 0) {
      auto p = static_cast<size_t>(prev[top.pos]);
      if (const Merge* pm = merge_of(s[p], s[top.pos]))
        heap.push({pm->rank, static_cast<uint32_t>(p), pm->id});
    }
    if (next[top.pos] >= 0) {
      if (const Merge* nm = merge_of(s[top.pos], s[next[top.pos]])) heap.push({nm->rank, top.pos, nm->id});
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (alive[i]) s[kept++] = s[i];
  }
  s.resize(kept);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (word.size() == 1) {
    int32_t id = byte_id_[static_cast<uint8_t>(word[0])];
    if (id >= 0) out.push_back(id);
    return;
  }
  if (ignore_merges_) {
    if (int32_t id = id_of(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  bool cacheable = word.size() <= WordCache::kMaxWordBytes;
  WordCache* cache = cacheable ? &word_cache_for(uid_) : nullptr;
  uint64_t hash = cacheable ? WordCache::hash(word) : 0;
  if (cache) {
    size_t count = 0;
    if (const int32_t* ids = cache->find(word, hash, count)) {
      out.insert(out.end(), ids, ids + count);
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(word.size());
  // A byte missing from the vocabulary is dropped, as HF does without an unk token.
  for (char c : word) {
    if (int32_t id = byte_id_[static_cast<uint8_t>(c)]; id >= 0) symbols.push_back(id);
  }
  if (symbols.size() <= small_word_) {
    merge_small(symbols);
  } else {
    merge_large(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cache) cache->insert(word, hash, symbols);
}

}  // namespace ds
