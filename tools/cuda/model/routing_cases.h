#pragma once
// One row's top-k routings for the tensor expert checks (moe_tc_swiglu_checks, moe_tc_down_checks): a plain
// routing, then each kind of bad or repeated id the grouping must survive.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace ds::cuda::modelcheck {

constexpr int kRoutingKinds = 5;
inline const char* routing_kind_name(int kind) {
  static const char* const names[kRoutingKinds] = {"plain", "an id -1", "an id past the experts",
                                                   "a repeated id", "the shared expert's id"};
  return names[kind];
}

// K distinct ids of E (a shuffle drawn from rng), then the kind's bad id; stack: E with a stacked shared
// expert (whose id E the router never yields), else E. Positions mod K: top-4 routings too.
inline std::vector<int32_t> routing_of_kind(int kind, int E, int K, int stack, std::mt19937_64& rng) {
  std::vector<int32_t> ids(E);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> topk(ids.begin(), ids.begin() + K);
  if (kind == 1) topk[3 % K] = -1;
  if (kind == 2) topk[5 % K] = stack + 7;
  if (kind == 3) topk[K - 1] = topk[2];
  if (kind == 4) topk[4 % K] = E;
  return topk;
}

}  // namespace ds::cuda::modelcheck
