// Float64 reference of the DeltaNet decode step (deltanet_reference.h).
#include "deltanet_reference.h"

#include <algorithm>
#include <cmath>

#include "host_reference.h"

namespace ds::cuda::wxcheck {

namespace {

std::vector<float> uniform(int64_t n, float lo, float hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}
double silu(double x) {
  return x / (1.0 + std::exp(-x));
}
double softplus(double x) {
  return x > 20.0 ? x : std::log1p(std::exp(x));
}

}  // namespace

DeltaNetCase random_deltanet_case(const DeltaNetShape& s, const std::vector<int>& counts,
                                  std::mt19937_64& rng) {
  DeltaNetCase c;
  c.shape = s;
  const int64_t cd = s.conv_dim(), vd = s.value_dim(), K = s.conv_kernel;
  c.taps = random_normal(cd * K, 0.5f, rng);
  c.a_log = uniform(s.nv, -3.0f, 0.0f, rng);
  c.dt_bias = uniform(s.nv, -1.0f, 1.0f, rng);
  c.norm = random_normal(s.dv, 0.1f, rng);
  for (auto& x : c.norm) x += 1.0f;
  for (int n : counts) c.n_rows += n;
  c.mixed = random_normal(c.n_rows * cd, 1.0f, rng);
  c.z = random_normal(c.n_rows * vd, 1.0f, rng);
  c.b = random_normal(c.n_rows * int64_t{s.nv}, 1.0f, rng);
  c.a = random_normal(c.n_rows * int64_t{s.nv}, 1.0f, rng);
  int row = c.n_rows;
  for (int n : counts) {
    HostWindow w;
    row -= n;
    w.row0 = row;
    w.count = n;
    w.conv_state = random_normal((K - 1) * cd, 1.0f, rng);
    w.state = random_normal(int64_t{s.nv} * s.dk * s.dv, 0.3f, rng);
    c.windows.push_back(std::move(w));
  }
  return c;
}

DeltaNetReference deltanet_reference(const DeltaNetCase& c, double beta_factor) {
  const DeltaNetShape& s = c.shape;
  const int64_t cd = s.conv_dim(), kd = s.key_dim(), vd = s.value_dim(), K = s.conv_kernel, nv = s.nv,
                dk = s.dk, dv = s.dv, per = s.nv / s.nk;
  DeltaNetReference r;
  r.core.assign(c.n_rows * vd, 0.0);
  for (const HostWindow& w : c.windows) {
    std::vector<double> S(w.state.begin(), w.state.end());
    // Conv window: K-1 history rows then the window's rows (pre-conv, as given).
    std::vector<double> win((K - 1 + w.count) * cd);
    std::copy(w.conv_state.begin(), w.conv_state.end(), win.begin());
    for (int t = 0; t < w.count; ++t)
      for (int64_t ch = 0; ch < cd; ++ch) win[(K - 1 + t) * cd + ch] = c.mixed[(w.row0 + t) * cd + ch];
    std::vector<float> hist(win.end() - (K - 1) * cd, win.end());  // exact: inputs are floats
    r.conv_states.push_back(hist);
    std::vector<double> m(cd), u(dv), o(dv);
    for (int t = 0; t < w.count; ++t) {
      const int64_t row = w.row0 + t;
      for (int64_t ch = 0; ch < cd; ++ch) {
        double acc = 0.0;
        for (int64_t k = 0; k < K; ++k) acc += double{c.taps[ch * K + k]} * win[(t + k) * cd + ch];
        m[ch] = silu(acc);
      }
      for (int64_t head = 0; head < 2 * s.nk; ++head) {
        double ss = 0.0;
        for (int64_t i = 0; i < dk; ++i) ss += m[head * dk + i] * m[head * dk + i];
        const double inv = 1.0 / std::sqrt(ss + 1e-6);
        for (int64_t i = 0; i < dk; ++i)
          m[head * dk + i] *= head < s.nk ? inv / std::sqrt(static_cast<double>(dk)) : inv;
      }
      for (int64_t h = 0; h < nv; ++h) {
        const double beta = sigmoid(c.b[row * nv + h]) * beta_factor;
        const double g = -std::exp(double{c.a_log[h]}) * softplus(double{c.a[row * nv + h]} + c.dt_bias[h]);
        const double alpha = std::exp(g);
        const double* q = m.data() + (h / per) * dk;
        const double* k = m.data() + kd + (h / per) * dk;
        const double* v = m.data() + 2 * kd + h * dv;
        double* Sh = S.data() + h * dk * dv;
        for (int64_t i = 0; i < dk * dv; ++i) Sh[i] *= alpha;
        std::fill(u.begin(), u.end(), 0.0);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) u[j] += k[i] * Sh[i * dv + j];
        for (int64_t j = 0; j < dv; ++j) u[j] = (v[j] - u[j]) * beta;
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) Sh[i * dv + j] += k[i] * u[j];
        std::fill(o.begin(), o.end(), 0.0);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) o[j] += q[i] * Sh[i * dv + j];
        double ss = 0.0;
        for (int64_t j = 0; j < dv; ++j) ss += o[j] * o[j];
        const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dv) + s.rms_eps);
        for (int64_t j = 0; j < dv; ++j) {
          const double zz = c.z[row * vd + h * dv + j];
          r.core[row * vd + h * dv + j] = o[j] * inv * c.norm[j] * (s.gate_sigmoid ? sigmoid(zz) : silu(zz));
        }
      }
    }
    r.states.push_back(std::move(S));
  }
  return r;
}

namespace {

template <class T>
double err_ratio(const T* got, const double* ref, int64_t heads, int64_t width) {
  double worst = 0.0;
  for (int64_t h = 0; h < heads; ++h) {
    double scale = 0.0, err = 0.0;
    for (int64_t i = 0; i < width; ++i) {
      scale = std::max(scale, std::fabs(ref[h * width + i]));
      const double d = std::fabs(static_cast<double>(got[h * width + i]) - ref[h * width + i]);
      err = std::isfinite(d) ? std::max(err, d) : HUGE_VAL;
    }
    worst = std::max(worst, err / (kHeadTol * scale + 1e-300));
  }
  return worst;
}

}  // namespace

double head_err_ratio(const float* got, const double* ref, int64_t heads, int64_t width) {
  return err_ratio(got, ref, heads, width);
}
double head_err_ratio(const double* got, const double* ref, int64_t heads, int64_t width) {
  return err_ratio(got, ref, heads, width);
}

}  // namespace ds::cuda::wxcheck
