// The DeltaNet decode checks' float64 reference computes the CPU layer's function (conv + SiLU, L2 norm, q
// scale, gates, ds::delta_rule_recurrent, gated RMSNorm as src/model/layers/deltanet.cpp composes them), so a GPU
// step that passes cuda_wx_check computes the model's DeltaNet, not a private reading of it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "../../tools/cuda/deltanet_reference.h"
#include "model/layers/deltanet.h"
#include "model/layers/row_math.h"

namespace {

using ds::cuda::wxcheck::deltanet_reference;
using ds::cuda::wxcheck::head_err_ratio;
using ds::cuda::wxcheck::random_deltanet_case;

// One value head of one window through the CPU layer math, in f32 as deltanet.cpp does it.
struct CpuHead {
  std::vector<float> core, state;
};

CpuHead cpu_head(const ds::cuda::wxcheck::DeltaNetCase& c, float beta_factor) {
  const auto& s = c.shape;
  const auto& w = c.windows[0];
  const int64_t cd = s.conv_dim(), K = s.conv_kernel, dk = s.dk, dv = s.dv, T = w.count;
  std::vector<float> win((K - 1 + T) * cd);
  std::copy(w.conv_state.begin(), w.conv_state.end(), win.begin());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t ch = 0; ch < cd; ++ch) win[(K - 1 + t) * cd + ch] = c.mixed[(w.row0 + t) * cd + ch];
  std::vector<float> q(T * dk), k(T * dk), v(T * dv), g(T), b(T), o(T * dv);
  CpuHead out{{}, w.state};
  for (int64_t t = 0; t < T; ++t) {
    std::vector<float> m(cd);
    for (int64_t ch = 0; ch < cd; ++ch) {
      float a = 0.0f;
      for (int64_t j = 0; j < K; ++j) a += c.taps[ch * K + j] * win[(t + j) * cd + ch];
      m[ch] = ds::rowmath::silu(a);
    }
    ds::rowmath::l2_normalize(m.data(), dk, 1e-6f);
    ds::rowmath::l2_normalize(m.data() + dk, dk, 1e-6f);
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    for (int64_t i = 0; i < dk; ++i) {
      q[t * dk + i] = m[i] * q_scale;
      k[t * dk + i] = m[dk + i];
    }
    for (int64_t i = 0; i < dv; ++i) v[t * dv + i] = m[2 * dk + i];
    b[t] = ds::rowmath::sigmoid(c.b[w.row0 + t]) * beta_factor;
    g[t] = -std::exp(c.a_log[0]) * ds::rowmath::softplus(c.a[w.row0 + t] + c.dt_bias[0]);
  }
  ds::delta_rule_recurrent(T, dk, dv, q.data(), k.data(), v.data(), g.data(), b.data(), out.state.data(),
                           o.data());
  for (int64_t t = 0; t < T; ++t) {
    float* ot = o.data() + t * dv;
    ds::rowmath::rms_norm(ot, c.norm.data(), dv, s.rms_eps, ot);
    for (int64_t i = 0; i < dv; ++i) ot[i] *= ds::rowmath::sigmoid(c.z[(w.row0 + t) * dv + i]);
  }
  out.core = std::move(o);
  return out;
}

TEST(CudaDeltaNetReference, MatchesTheCpuLayerMath) {
  std::mt19937_64 rng(3);
  ds::cuda::DeltaNetShape s;
  s.nk = 1;
  s.nv = 1;  // one key head, one value head: the CPU's per-head recurrence in full
  const auto c = random_deltanet_case(s, {6}, rng);
  const auto ref = deltanet_reference(c, 1.0);
  const CpuHead cpu = cpu_head(c, 1.0f);
  const int64_t row0 = c.windows[0].row0;
  EXPECT_LE(head_err_ratio(cpu.core.data(), ref.core.data() + row0 * s.dv, 6, s.dv), 1.0);
  EXPECT_LE(head_err_ratio(cpu.state.data(), ref.states[0].data(), s.dk, s.dv), 1.0);
  // Negative control: the CPU with beta 1% off is outside the same bound.
  const CpuHead off = cpu_head(c, 1.01f);
  EXPECT_GT(head_err_ratio(off.core.data(), ref.core.data() + row0 * s.dv, 6, s.dv), 1.0);
}

}  // namespace
