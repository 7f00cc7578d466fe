#include "runtime/logit_row.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "runtime/block_simd.h"

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
  const simd::v8f ninf = {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf};
  if (n == kBlock && row.mask_.empty()) {
    for (int g = 0; g < kBlock; g += 8) {
      simd::v8f v;
      simd::load(v, src + g);
      simd::store(out + g, v < kInf ? v : ninf);
    }
  } else if (n == kBlock) {
    const uint64_t word = row.mask_[static_cast<size_t>(block)];
    const simd::v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int g = 0; g < kBlock; g += 8) {
      simd::v8f v;
      simd::load(v, src + g);
      const simd::v8i bits = simd::v8i{} + static_cast<int32_t>((word >> g) & 0xff);
      const simd::v8i keep = (((bits >> lane) & 1) != 0) & (v < kInf);
      simd::store(out + g, keep ? v : ninf);
    }
  } else {
    for (int j = 0; j < n; ++j) out[j] = mask_allows(row.mask_, base + j) ? finite_or_ninf(src[j]) : -kInf;
    for (int j = n; j < kBlock; ++j) out[j] = -kInf;
  }
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
      // Masked and non-finite logits are already -inf and stay so; a penalty may overflow, so check again.
      if (z != -kInf) z = finite_or_ninf(penalize(z, entries[next_], row.penalties_));
    }
  }
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
    const float m = simd::max_block(z);
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
