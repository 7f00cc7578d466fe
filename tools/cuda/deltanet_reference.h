#pragma once
// Host side of the DeltaNet decode checks: a random step (weights, rows, windows, states) and its float64
// reference, the same math as src/model/layers/deltanet.cpp (conv + SiLU, L2 norm, q scale, beta, g, the
// per-token delta rule, gated RMSNorm).
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/deltanet_decode.h"

namespace ds::cuda::wxcheck {

struct HostWindow {
  int32_t row0 = 0, count = 0;
  std::vector<float> conv_state;  // [K-1, conv_dim]
  std::vector<float> state;       // [nv, dk, dv]
};

struct DeltaNetCase {
  DeltaNetShape shape;
  std::vector<float> taps, a_log, dt_bias, norm;
  int n_rows = 0;
  std::vector<float> mixed, z, b, a;  // [n_rows, ...]
  std::vector<HostWindow> windows;
};

// Windows of the given token counts; rows laid out in reverse window order (the kernels must follow row0).
DeltaNetCase random_deltanet_case(const DeltaNetShape& shape, const std::vector<int>& counts,
                                  std::mt19937_64& rng);

struct DeltaNetReference {
  std::vector<double> core;                     // [n_rows, value_dim]
  std::vector<std::vector<double>> states;      // per window [nv, dk, dv]
  std::vector<std::vector<float>> conv_states;  // per window: the last K-1 pre-conv rows (copies, exact)
};

// beta_factor scales every beta (1.0 = the function; 1.01 = the negative control).
DeltaNetReference deltanet_reference(const DeltaNetCase& c, double beta_factor);

// The stated bound of the DeltaNet and attention checks: per head (a row's dv or hd outputs, a state row, a
// cached key) max |y - ref| <= kHeadTol * max |ref| over the head.
constexpr double kHeadTol = 1.0 / 4096;

// max over heads of (max |x - ref|) / (kHeadTol * max |ref|), for `heads` consecutive blocks of `width`.
double head_err_ratio(const float* got, const double* ref, int64_t heads, int64_t width);
double head_err_ratio(const double* got, const double* ref, int64_t heads, int64_t width);

}  // namespace ds::cuda::wxcheck
