#include "runtime/sampling_filters.h"

#include <algorithm>
#include <array>
#include <limits>

#include "runtime/softmax_mass.h"

namespace ds {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kBlock = LogitRow::kBlock;

// Offset bins of 1/16 nat over [0, 32): every token with mass > 0 has -x < 31.2.
constexpr int kBins = 512;
inline int bin_of(double x) {
  return std::min(static_cast<int>(-x * 16.0), kBins - 1);
}

// A block can hold a mass-carrying min-p survivor only if its best token does.
bool block_has_mass(float block_max, const ScaledRow& sc) {
  return block_max != kNegInf && sc.offset(block_max) >= kMassFloor && sc.offset(block_max) >= sc.log_min_p;
}

}  // namespace

size_t cut_by_mass(std::vector<Candidate>& v, uint64_t need) {
  size_t lo = 0, hi = v.size();
  uint64_t before = 0;  // mass of v[0, lo), all ranked ahead of v[lo, hi); the cut lies in [lo, hi)
  while (hi - lo > 48) {
    const auto mid = static_cast<std::ptrdiff_t>(lo + (hi - lo) / 2);
    std::nth_element(v.begin() + static_cast<std::ptrdiff_t>(lo), v.begin() + mid,
                     v.begin() + static_cast<std::ptrdiff_t>(hi), ahead);
    uint64_t upper = 0;
    for (auto i = static_cast<std::ptrdiff_t>(lo); i <= mid; ++i) upper += v[static_cast<size_t>(i)].mass;
    if (before + upper >= need) {
      hi = static_cast<size_t>(mid) + 1;
    } else {
      before += upper;
      lo = static_cast<size_t>(mid) + 1;
    }
  }
  std::sort(v.begin() + static_cast<std::ptrdiff_t>(lo), v.begin() + static_cast<std::ptrdiff_t>(hi), ahead);
  for (size_t i = lo; i < hi; ++i) {
    before += v[i].mass;
    if (before >= need) return i + 1;
  }
  return hi;  // only when the masses sum below need: keep everything
}

void select_top_k(const LogitRow& row, std::span<const float> block_max, const ScaledRow& sc, int32_t k,
                  std::vector<Candidate>& out) {
  out.clear();
  // The k-th largest block maximum is at most the k-th largest logit, so tokens below it can never make the
  // cut.
  std::vector<float> maxima;
  maxima.reserve(block_max.size());
  for (float m : block_max)
    if (m != kNegInf) maxima.push_back(m);
  float floor = kNegInf;
  if (maxima.size() > static_cast<size_t>(k)) {
    std::nth_element(maxima.begin(), maxima.begin() + (k - 1), maxima.end(), std::greater<float>());
    floor = maxima[static_cast<size_t>(k - 1)];
  }
  LogitRow::Reader reader(row);
  alignas(64) float z[kBlock];
  for (int64_t b = 0; b < row.blocks(); ++b) {
    if (block_max[static_cast<size_t>(b)] == kNegInf || block_max[static_cast<size_t>(b)] < floor) continue;
    reader.load(b, z);
    for (int j = 0; j < kBlock; ++j)
      if (z[j] >= floor && sc.passes_min_p(z[j]))
        out.push_back({static_cast<int32_t>(b * kBlock + j), z[j], 0});
  }
  if (out.size() > static_cast<size_t>(k)) {
    std::nth_element(out.begin(), out.begin() + (k - 1), out.end(), ahead);
    out.resize(static_cast<size_t>(k));
  }
}

void cut_top_p(std::vector<Candidate>& kept, const ScaledRow& sc, float top_p) {
  uint64_t total = 0;
  for (Candidate& c : kept) {
    c.mass = mass_of(sc.offset(c.z));
    total += c.mass;
  }
  kept.resize(cut_by_mass(kept, ceil_fraction(top_p, total)));
}

void select_top_p(const LogitRow& row, std::span<const float> block_max, const ScaledRow& sc, float top_p,
                  std::vector<Candidate>& kept, std::vector<Candidate>& boundary) {
  kept.clear();
  boundary.clear();
  std::array<uint64_t, kBins> hist{};
  uint64_t total = 0;
  alignas(64) float z[kBlock];
  alignas(64) uint64_t mass[kBlock];
  {
    LogitRow::Reader reader(row);
    for (int64_t b = 0; b < row.blocks(); ++b) {
      if (!block_has_mass(block_max[static_cast<size_t>(b)], sc)) continue;
      reader.load(b, z);
      for (int j = 0; j < kBlock; ++j) {
        const double x = sc.offset(z[j]);
        mass[j] = x >= sc.log_min_p ? mass_of(x) : 0;  // -inf tokens get mass 0
      }
      for (int j = 0; j < kBlock; ++j) {
        if (mass[j] == 0) continue;
        total += mass[j];
        hist[static_cast<size_t>(bin_of(sc.offset(z[j])))] += mass[j];
      }
    }
  }
  const uint64_t need = ceil_fraction(top_p, total);
  int cut_bin = kBins - 1;
  uint64_t before = 0;  // mass of the bins ahead of cut_bin
  for (int i = 0; i < kBins; ++i) {
    if (before + hist[static_cast<size_t>(i)] >= need) {
      cut_bin = i;
      break;
    }
    before += hist[static_cast<size_t>(i)];
  }
  LogitRow::Reader reader(row);
  for (int64_t b = 0; b < row.blocks(); ++b) {
    const float bm = block_max[static_cast<size_t>(b)];
    if (!block_has_mass(bm, sc) || bin_of(sc.offset(bm)) > cut_bin) continue;
    reader.load(b, z);
    for (int j = 0; j < kBlock; ++j) {
      const double x = sc.offset(z[j]);
      if (!(x >= sc.log_min_p) || x < kMassFloor) continue;
      const uint64_t m = mass_of(x);
      if (m == 0) continue;
      const int bin = bin_of(x);
      const Candidate c{static_cast<int32_t>(b * kBlock + j), z[j], m};
      if (bin < cut_bin) {
        kept.push_back(c);
      } else if (bin == cut_bin) {
        boundary.push_back(c);
      }
    }
  }
  const size_t r = cut_by_mass(boundary, need - before);
  kept.insert(kept.end(), boundary.begin(), boundary.begin() + static_cast<std::ptrdiff_t>(r));
}

}  // namespace ds
