#include "runtime/logit_row.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace ds {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// NaN and +inf read as -inf: a broken row must neither crash the server nor win every draw.
inline float finite_or_ninf(float v) {
  return v < kInf ? v : -kInf;
}

}  // namespace

LogitRow::LogitRow(std::span<const float> logits, std::span<const uint64_t> mask, const TokenCounts* history,
                   Penalties penalties)
    : logits_(logits), mask_(mask), penalties_(penalties), vocab_(static_cast<int32_t>(logits.size())) {
  if (logits.empty()) fail("logits row is empty");
  if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("logits row of {} entries is too long", logits.size());
  const size_t words = (logits.size() + 63) / 64;
  if (!mask.empty() && mask.size() < words)
    fail("token mask has {} words, the vocabulary of {} needs {}", mask.size(), logits.size(), words);
  if (history != nullptr && penalties.active()) {
    if (history->max_id() >= vocab_)
      fail("history token id {} is outside the vocabulary of {}", history->max_id(), vocab_);
    entries_ = history->entries();
  }
}

float LogitRow::at(int32_t id) const {
  if (!mask_allows(mask_, id)) return -kInf;
  float z = logits_[static_cast<size_t>(id)];
  auto it = std::lower_bound(entries_.begin(), entries_.end(), id,
                             [](const TokenCounts::Entry& e, int32_t i) { return e.id < i; });
  if (it != entries_.end() && it->id == id) z = penalize(z, *it, penalties_);
  return finite_or_ninf(z);
}

int LogitRow::Reader::load(int64_t block, float* out) {
  const LogitRow& row = row_;
  const int32_t base = static_cast<int32_t>(block * kBlock);
  const int n = std::min<int32_t>(kBlock, row.vocab_ - base);
  const float* src = row.logits_.data() + base;
  if (row.mask_.empty()) {
    for (int j = 0; j < n; ++j) out[j] = src[j];
  } else {
    const uint64_t word = row.mask_[static_cast<size_t>(block)];
    for (int j = 0; j < n; ++j) out[j] = ((word >> j) & 1) ? src[j] : -kInf;
  }
  for (int j = n; j < kBlock; ++j) out[j] = -kInf;
  if (!row.entries_.empty()) {
    const auto& entries = row.entries_;
    if (next_ < entries.size() && entries[next_].id < base) {
      next_ = static_cast<size_t>(
          std::lower_bound(entries.begin() + static_cast<std::ptrdiff_t>(next_), entries.end(), base,
                           [](const TokenCounts::Entry& e, int32_t i) { return e.id < i; }) -
          entries.begin());
    }
    for (; next_ < entries.size() && entries[next_].id < base + n; ++next_) {
      float& z = out[entries[next_].id - base];
      if (z != -kInf) z = penalize(z, entries[next_], row.penalties_);
    }
  }
  for (int j = 0; j < n; ++j) out[j] = finite_or_ninf(out[j]);
  return n;
}

// Block maxima of the prepared row and its argmax (ties to the lower id).
RowMax scan_max(const LogitRow& row, std::vector<float>& block_max) {
  block_max.assign(static_cast<size_t>(row.blocks()), -kInf);
  LogitRow::Reader reader(row);
  alignas(64) float z[LogitRow::kBlock];
  float best = -kInf;
  int64_t best_block = -1;
  for (int64_t b = 0; b < row.blocks(); ++b) {
    reader.load(b, z);
    float lanes[8];
    for (int l = 0; l < 8; ++l) lanes[l] = z[l];
    for (int j = 8; j < LogitRow::kBlock; j += 8)
      for (int l = 0; l < 8; ++l) lanes[l] = z[j + l] > lanes[l] ? z[j + l] : lanes[l];
    float m = lanes[0];
    for (int l = 1; l < 8; ++l) m = lanes[l] > m ? lanes[l] : m;
    block_max[static_cast<size_t>(b)] = m;
    if (m > best) best = m, best_block = b;  // strict: the first block holding the max wins
  }
  if (best_block < 0) fail("no token can be drawn: every allowed logit is -inf or not finite");
  LogitRow::Reader again(row);
  again.load(best_block, z);
  int j = 0;
  while (!(z[j] == best)) ++j;
  return {best, static_cast<int32_t>(best_block * LogitRow::kBlock + j)};
}

}  // namespace ds
