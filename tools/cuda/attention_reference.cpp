// Float64 reference of the attention decode step (attention_reference.h).
#include "attention_reference.h"

#include <algorithm>
#include <cmath>

#include "host_reference.h"

namespace ds::cuda::wxcheck {

namespace {

// RMSNorm with weight, then rotate-half on the first rd values at `pos`, in double (angle in f32).
void norm_rope(const float* x, const float* w, const std::vector<float>& inv_freq, const AttentionShape& s,
               int64_t pos, double* y) {
  double ss = 0.0;
  for (int i = 0; i < s.hd; ++i) ss += double{x[i]} * x[i];
  const double inv = 1.0 / std::sqrt(ss / s.hd + s.rms_eps);
  std::vector<double> n(s.hd);
  for (int i = 0; i < s.hd; ++i) n[i] = x[i] * inv * w[i];
  const int half = s.rotary_dim / 2;
  for (int i = 0; i < s.hd; ++i) y[i] = n[i];
  for (int j = 0; j < half; ++j) {
    const float angle = static_cast<float>(pos) * inv_freq[j];  // f32 product, as the model computes it
    const double c = std::cos(double{angle}), sn = std::sin(double{angle});
    y[j] = n[j] * c - n[j + half] * sn;
    y[j + half] = n[j + half] * c + n[j] * sn;
  }
}

}  // namespace

std::vector<float> rope_inv_freq(int rd, double theta) {
  std::vector<float> f;
  for (int i = 0; i < rd / 2; ++i)
    f.push_back(1.0f /
                std::pow(static_cast<float>(theta), static_cast<float>(2 * i) / static_cast<float>(rd)));
  return f;
}

AttentionCase random_attention_case(const AttentionShape& s, const std::vector<int>& counts,
                                    const std::vector<int>& prefixes, std::mt19937_64& rng) {
  AttentionCase c;
  c.shape = s;
  c.q_norm = random_normal(s.hd, 0.1f, rng);
  c.k_norm = random_normal(s.hd, 0.1f, rng);
  for (auto& x : c.q_norm) x += 1.0f;
  for (auto& x : c.k_norm) x += 1.0f;
  c.inv_freq = rope_inv_freq(s.rotary_dim, 1e7);
  for (int n : counts) c.n_rows += n;
  c.qg = random_normal(c.n_rows * s.q_width(), 1.0f, rng);
  c.k = random_normal(c.n_rows * s.kv_width(), 1.0f, rng);
  c.v = random_normal(c.n_rows * s.kv_width(), 1.0f, rng);
  int row = c.n_rows;
  for (size_t i = 0; i < counts.size(); ++i) {
    HostAttentionWindow w;
    row -= counts[i];
    w.row0 = row;
    w.count = counts[i];
    w.pos0 = prefixes[i];
    // Cached keys look like normalised ones (rms ~ 1); values as rows.
    w.keys = random_normal(int64_t{w.pos0} * s.kv_width(), 1.0f, rng);
    w.values = random_normal(int64_t{w.pos0} * s.kv_width(), 1.0f, rng);
    c.windows.push_back(std::move(w));
  }
  return c;
}

AttentionReference attention_reference(const AttentionCase& c, double score_factor) {
  const AttentionShape& s = c.shape;
  const int64_t kvw = s.kv_width(), hd = s.hd;
  AttentionReference r;
  r.out.assign(c.n_rows * int64_t{s.nh} * hd, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd)) * score_factor;
  for (const HostAttentionWindow& w : c.windows) {
    std::vector<double> keys(w.keys.begin(), w.keys.end()), values(w.values.begin(), w.values.end());
    keys.resize((w.pos0 + w.count) * kvw);
    values.resize((w.pos0 + w.count) * kvw);
    std::vector<double> q(hd), p;
    for (int t = 0; t < w.count; ++t) {
      const int64_t row = w.row0 + t, pos = w.pos0 + t;
      for (int h = 0; h < s.nkv; ++h)
        norm_rope(c.k.data() + row * kvw + h * hd, c.k_norm.data(), c.inv_freq, s, pos,
                  keys.data() + pos * kvw + h * hd);
      for (int64_t i = 0; i < kvw; ++i) values[pos * kvw + i] = c.v[row * kvw + i];
      p.resize(pos + 1);
      for (int h = 0; h < s.nh; ++h) {
        const float* qg = c.qg.data() + row * s.q_width() + int64_t{h} * 2 * hd;
        norm_rope(qg, c.q_norm.data(), c.inv_freq, s, pos, q.data());
        const int64_t kv = h / (s.nh / s.nkv);
        double mx = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          double d = 0.0;
          for (int64_t i = 0; i < hd; ++i) d += q[i] * keys[j * kvw + kv * hd + i];
          p[j] = d * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0.0;
        for (auto& e : p) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0.0;
          for (int64_t j = 0; j <= pos; ++j) acc += p[j] * values[j * kvw + kv * hd + i];
          r.out[row * s.nh * hd + h * hd + i] = acc / sum / (1.0 + std::exp(-double{qg[hd + i]}));
        }
      }
    }
    r.new_keys.emplace_back(keys.begin() + int64_t{w.pos0} * kvw, keys.end());
  }
  return r;
}

}  // namespace ds::cuda::wxcheck
