#pragma once
// Host side of the attention decode checks: a random step (norm weights, RoPE table, rows, windows with
// cached prefixes) and its float64 reference, the math of src/model/layers/attention.cpp without the indexer:
// RMSNorm, RoPE with the f32 angle float(pos) * inv_freq (as torch and ds::Rope form it; cos/sin in double),
// softmax over keys 0..pos, sigmoid gate.
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/attention_decode.h"

namespace ds::cuda::wxcheck {

struct HostAttentionWindow {
  int32_t row0 = 0, count = 0, pos0 = 0;
  std::vector<float> keys, values;  // the cached prefix [pos0, kv_width]
};

struct AttentionCase {
  AttentionShape shape;
  std::vector<float> q_norm, k_norm, inv_freq;
  int n_rows = 0;
  std::vector<float> qg, k, v;  // [n_rows, ...]
  std::vector<HostAttentionWindow> windows;
};

// inv_freq as ds::Rope computes it: 1 / theta^(2i/rd) in f32.
std::vector<float> rope_inv_freq(int rotary_dim, double theta);

// Windows of the given token counts and cached prefix lengths; rows in reverse window order.
AttentionCase random_attention_case(const AttentionShape& shape, const std::vector<int>& counts,
                                    const std::vector<int>& prefixes, std::mt19937_64& rng);

struct AttentionReference {
  std::vector<double> out;                    // [n_rows, nh*hd]
  std::vector<std::vector<double>> new_keys;  // per window [count, kv_width]: normalised, rotated
};

// score_factor scales every score (1.0 = the function; 1.01 = the negative control).
AttentionReference attention_reference(const AttentionCase& c, double score_factor);

}  // namespace ds::cuda::wxcheck
