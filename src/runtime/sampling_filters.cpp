#include "runtime/sampling_filters.h"

#include <algorithm>
#include <array>
#include <limits>

#include "runtime/block_simd.h"
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

// The head: tokens within 12 nats of the max, collected while there are at most 4096 of them.
constexpr double kHeadNats = 12.0;
constexpr size_t kHeadLimit = 4096;

// A block can hold a mass-carrying min-p survivor only if its best token does.
bool block_has_mass(float block_max, const ScaledRow& sc) {
  return block_max != kNegInf && sc.offset(block_max) >= kMassFloor && sc.offset(block_max) >= sc.log_min_p;
}

// Mass per offset bin, in four interleaved copies: neighbours often share a bin and would serialise one copy.
class MassHistogram {
 public:
  void add(const float* z, const uint64_t* mass, const ScaledRow& sc) {
    for (int j = 0; j < kBlock; ++j)
      if (mass[j] != 0)
        lanes_[static_cast<size_t>(j & 3)][static_cast<size_t>(bin_of(sc.offset(z[j])))] += mass[j];
  }
  uint64_t bin(int i) const {
    const auto b = static_cast<size_t>(i);
    return lanes_[0][b] + lanes_[1][b] + lanes_[2][b] + lanes_[3][b];
  }

 private:
  std::array<std::array<uint64_t, kBins>, 4> lanes_{};
};

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
  // The k-th largest block maximum is at most the k-th largest logit: nothing below it can make the cut.
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

KeptSet select_top_p(const LogitRow& row, std::span<const float> block_max, const ScaledRow& sc, float top_p,
                     std::vector<Candidate>& kept, std::vector<Candidate>& boundary) {
  kept.clear();
  boundary.clear();
  alignas(64) float z[kBlock];
  alignas(64) uint64_t mass[kBlock];
  // Pass 1: the total mass, and the head of the ranking (tokens within kHeadNats of the max) while small.
  // A head that overflows means a flat row, which will need the histogram: later blocks go straight there.
  uint64_t total = 0, head_mass = 0;
  MassHistogram hist;
  int64_t hist_from = row.blocks();  // the histogram holds blocks from here on
  {
    LogitRow::Reader reader(row);
    for (int64_t b = 0; b < row.blocks(); ++b) {
      const float bm = block_max[static_cast<size_t>(b)];
      if (!block_has_mass(bm, sc)) continue;
      reader.load(b, z);
      total += simd::mass_block(z, sc.inv_t, sc.max_s, sc.log_min_p, mass);
      if (hist_from < row.blocks()) {
        hist.add(z, mass, sc);
      } else if (sc.offset(bm) >= -kHeadNats) {
        for (int j = 0; j < kBlock; ++j) {
          if (mass[j] == 0 || sc.offset(z[j]) < -kHeadNats) continue;
          boundary.push_back({static_cast<int32_t>(b * kBlock + j), z[j], mass[j]});
          head_mass += mass[j];
        }
        if (boundary.size() > kHeadLimit) hist_from = b + 1;
      }
    }
  }
  const uint64_t need = ceil_fraction(top_p, total);
  // The head is a prefix of the ranking, so when it holds enough mass the cut lies inside it.
  if (hist_from == row.blocks() && head_mass >= need) {
    const size_t r = cut_by_mass(boundary, need);
    kept.assign(boundary.begin(), boundary.begin() + static_cast<std::ptrdiff_t>(r));
    return {true, {}};
  }
  // Otherwise the histogram of mass by offset (completed here) finds the one bin the cut falls in.
  boundary.clear();
  {
    LogitRow::Reader reader(row);
    for (int64_t b = 0; b < hist_from; ++b) {
      if (!block_has_mass(block_max[static_cast<size_t>(b)], sc)) continue;
      reader.load(b, z);
      simd::mass_block(z, sc.inv_t, sc.max_s, sc.log_min_p, mass);
      hist.add(z, mass, sc);
    }
  }
  int cut_bin = kBins - 1;
  uint64_t before = 0;  // mass of the bins ahead of cut_bin
  for (int i = 0; i < kBins; ++i) {
    const uint64_t in_bin = hist.bin(i);
    if (before + in_bin >= need) {
      cut_bin = i;
      break;
    }
    before += in_bin;
  }
  // Rank only the cut bin; the set is everything ahead of the bin plus the shortest prefix of the bin.
  LogitRow::Reader reader(row);
  for (int64_t b = 0; b < row.blocks(); ++b) {
    const float bm = block_max[static_cast<size_t>(b)];
    if (!block_has_mass(bm, sc) || bin_of(sc.offset(bm)) > cut_bin) continue;
    reader.load(b, z);
    // bin_of(x) == cut_bin exactly when cut_bin <= -16 x < cut_bin + 1 (the last bin has no upper edge).
    const double lo = cut_bin,
                 hi = cut_bin == kBins - 1 ? std::numeric_limits<double>::infinity() : cut_bin + 1;
    simd::v4i hit = {0, 0, 0, 0};
    for (int j = 0; j < kBlock; j += 4) {
      simd::v4d x;
      simd::widen(x, z + j);
      x = x * sc.inv_t - sc.max_s;
      const simd::v4d y = -x * 16.0;
      hit |= (y >= lo) & (y < hi) & (x >= sc.log_min_p);
    }
    if (!simd::any(hit)) continue;
    for (int j = 0; j < kBlock; ++j) {
      const double x = sc.offset(z[j]);
      if (!(x >= sc.log_min_p) || bin_of(x) != cut_bin) continue;
      const uint64_t m = mass_of(x);
      if (m != 0) boundary.push_back({static_cast<int32_t>(b * kBlock + j), z[j], m});
    }
  }
  const size_t r = cut_by_mass(boundary, need - before);
  Candidate last = boundary[0];
  for (size_t i = 1; i < r; ++i)
    if (ahead(last, boundary[i])) last = boundary[i];
  return {false, last};
}

}  // namespace ds
