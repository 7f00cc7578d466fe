#pragma once
// The noise of keyed sampling: u = hash(seed, position, token id) in (0, 1) and its Gumbel transform.
// A draw is a pure function of its inputs because the noise is, never of a generator's state.
#include <cstdint>

#include "core/portable_log.h"

namespace ds {

inline constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// The splitmix64 / murmur3 finaliser: a bijection on 64 bits with full avalanche.
DS_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One key per (seed, absolute position); both pass a full mix so nearby seeds or positions are unrelated.
DS_HOST_DEVICE inline uint64_t draw_key(uint64_t seed, int64_t position) {
  return mix64(mix64(seed + kGolden) ^ (static_cast<uint64_t>(position) * 0xD1B54A32D192ED03ull + 1));
}

// The token's 64 noise bits: splitmix64 output number id + 1 of the stream keyed by `key`.
DS_HOST_DEVICE inline uint64_t token_bits(uint64_t key, int32_t id) {
  return mix64(key + (static_cast<uint64_t>(id) + 1) * kGolden);
}

// (k + 1/2) / 2^52 for the top 52 bits k: exact in double, within [2^-53, 1 - 2^-53], never 0 or 1.
DS_HOST_DEVICE inline double uniform_open(uint64_t bits) {
  return (static_cast<double>(bits >> 12) + 0.5) * 0x1p-52;
}

// Through portable_log, so the noise (and with it every sampled reply) has the same bits on every host.
DS_HOST_DEVICE inline double gumbel(double u) {
  return -portable_log(-portable_log(u));
}
DS_HOST_DEVICE inline double gumbel_of_bits(uint64_t bits) {
  return gumbel(uniform_open(bits));
}

// Upper bounds on gumbel_of_bits(bits) per top 12 bits (bits >> 52): a draw skips tokens that cannot win.
inline constexpr int kNoiseBuckets = 4096;
const double* gumbel_bucket_bounds();
// The bound for every bits value, and the bound for all but the top bucket.
double gumbel_max();
double gumbel_max_below_top_bucket();

}  // namespace ds
