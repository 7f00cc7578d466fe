#pragma once
// The deterministic filters before the draw, in vLLM's order: min-p, then top-k, then top-p on what is left.
// Candidates are ranked by (logit descending, id ascending), so every tie goes to the lower id.
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "runtime/logit_row.h"

namespace ds {

struct Candidate {
  int32_t id;
  float z;        // prepared logit (mask and penalties applied)
  uint64_t mass;  // mass_of(offset), filled by top-p only
};

// Strict ranking: higher logit first, then lower id.
inline bool ahead(const Candidate& a, const Candidate& b) {
  return a.z > b.z || (a.z == b.z && a.id < b.id);
}

// The temperature-scaled view: s = z * (1 / T) in double, offsets x = s - max s <= 0.
struct ScaledRow {
  double inv_t;      // 1 / T
  double max_s;      // the largest s over allowed tokens
  double log_min_p;  // -inf when min_p is off
  double scaled(float z) const { return static_cast<double>(z) * inv_t; }
  double offset(float z) const { return scaled(z) - max_s; }
  bool passes_min_p(float z) const {
    return z != -std::numeric_limits<float>::infinity() && offset(z) >= log_min_p;
  }
};

// Reorders v so its first r entries are the shortest ranking prefix whose mass reaches `need`; returns r.
// Expected O(n) (selection, no full sort); needs sum of masses >= need.
size_t cut_by_mass(std::vector<Candidate>& v, uint64_t need);

// Top-k over the min-p survivors: `out` gets exactly min(k, survivors) candidates, ties to the lower id.
// block_max[b] is the largest prepared logit in block b.
void select_top_k(const LogitRow& row, std::span<const float> block_max, const ScaledRow& sc, int32_t k,
                  std::vector<Candidate>& out);

// Top-p on a candidate list (the top-k set): keeps its shortest ranking prefix with mass >= top_p * total.
void cut_top_p(std::vector<Candidate>& kept, const ScaledRow& sc, float top_p);

// Every kept set is a prefix of the ranking, so it is also "every min-p survivor ranked at or ahead of its
// last member". Top-p over the whole row answers in that form when the set is large.
struct KeptSet {
  bool listed;     // true: the set is `kept`; false: every token ranked at or ahead of `last`
  Candidate last;  // valid when !listed
};

inline bool at_or_ahead(float z, int32_t id, const Candidate& last) {
  return z > last.z || (z == last.z && id <= last.id);
}

// Top-p over all min-p survivors of the row without sorting them. Usually the head of the ranking (tokens
// near the max) holds the cut and is listed in `kept`; otherwise a histogram of mass by offset finds the one
// bin the cut falls in and only that bin is ranked. `boundary` is scratch.
KeptSet select_top_p(const LogitRow& row, std::span<const float> block_max, const ScaledRow& sc, float top_p,
                     std::vector<Candidate>& kept, std::vector<Candidate>& boundary);

}  // namespace ds
