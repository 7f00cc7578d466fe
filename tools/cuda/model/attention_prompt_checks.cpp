// The prompt path's selected-blocks attention (backend/cuda/model/attention_prompt.h) against a float64
// softmax over each row's chosen blocks and tail: the bound, a negative control, rows with select_mode -1
// left alone, each window alone == in one launch (bits), and agreement with the any-shape kernel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/attention_prompt.h"
#include "backend/cuda/model/generic_mixers.h"
#include "backend/cuda/stream.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

constexpr double kHeadTol =
    1.0 / 4096;  // per head: max |y - ref| <= kHeadTol * max |ref| (the kernels' bound)

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size(), 1) * sizeof(T));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

struct Case {
  AttentionShape s;
  int ratio = 4, capacity = 0, max_blocks = 0;
  std::vector<int> pos0, count;                  // per window
  std::vector<std::vector<float>> keys, values;  // per window's cache [capacity, kv_width]
  std::vector<float> qg;                         // [rows, q_width]: normalised q and the gate per head
  std::vector<int32_t> mode;                     // [rows]
  std::vector<uint8_t> chosen;                   // [rows, max_blocks]
  int rows() const {
    int n = 0;
    for (int c : count) n += c;
    return n;
  }
};

Case make_case(const AttentionShape& s, std::mt19937_64& rng) {
  Case c;
  c.s = s;
  c.pos0 = {300, 997, 40};
  c.count = {40, 23, 5};
  c.capacity = 1100;
  c.max_blocks = c.capacity / c.ratio;
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  const int64_t kvw = s.kv_width();
  for (size_t w = 0; w < c.pos0.size(); ++w) {
    std::vector<float> k(c.capacity * kvw), v(c.capacity * kvw);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    c.keys.push_back(k);
    c.values.push_back(v);
  }
  const int n = c.rows();
  c.qg.resize(int64_t{n} * s.q_width());
  for (auto& x : c.qg) x = 0.3f * nd(rng);  // scores of a few units: a peaked softmax
  c.chosen.assign(int64_t{n} * c.max_blocks, 0);
  int row = 0;
  for (size_t w = 0; w < c.pos0.size(); ++w)
    for (int t = 0; t < c.count[w]; ++t, ++row) {
      const int pos = c.pos0[w] + t, complete = (pos + 1) / c.ratio;
      // The third window's rows keep every key (select_mode -1): the kernel must leave them alone.
      c.mode.push_back(w == 2 ? -1 : complete);
      for (int b = 0; b < complete; ++b) c.chosen[int64_t{row} * c.max_blocks + b] = ud(rng) < 0.3f;
    }
  return c;
}

// The float64 output of every row with select_mode >= 0 ([rows, nh*hd]; NaN elsewhere), scores *
// scale_factor.
std::vector<double> reference(const Case& c, double scale_factor) {
  const AttentionShape& s = c.s;
  const int n = c.rows(), G = s.nh / s.nkv;
  const int64_t kvw = s.kv_width();
  const double scale = scale_factor / std::sqrt(double(s.hd));
  std::vector<double> out(int64_t{n} * s.nh * s.hd, std::nan(""));
  int row = 0;
  for (size_t w = 0; w < c.pos0.size(); ++w)
    for (int t = 0; t < c.count[w]; ++t, ++row) {
      const int pos = c.pos0[w] + t, mode = c.mode[row];
      if (mode < 0) continue;
      std::vector<int> keys;
      for (int b = 0; b < mode; ++b)
        if (c.chosen[int64_t{row} * c.max_blocks + b])
          for (int i = 0; i < c.ratio; ++i) keys.push_back(b * c.ratio + i);
      for (int k = mode * c.ratio; k <= pos; ++k) keys.push_back(k);
      for (int h = 0; h < s.nh; ++h) {
        const float* q = c.qg.data() + int64_t{row} * s.q_width() + int64_t{h} * 2 * s.hd;
        const int kvh = h / G;
        std::vector<double> sc;
        double mx = -INFINITY;
        for (int k : keys) {
          double d = 0;
          for (int i = 0; i < s.hd; ++i) d += double(q[i]) * c.keys[w][int64_t{k} * kvw + kvh * s.hd + i];
          sc.push_back(d * scale);
          mx = std::max(mx, sc.back());
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - mx));
        for (int i = 0; i < s.hd; ++i) {
          double a = 0;
          for (size_t j = 0; j < keys.size(); ++j)
            a += sc[j] * c.values[w][int64_t{keys[j]} * kvw + kvh * s.hd + i];
          const double gate = 1.0 / (1.0 + std::exp(-double(q[s.hd + i])));
          out[(int64_t{row} * s.nh + h) * s.hd + i] = a / l * gate;
        }
      }
    }
  return out;
}

// Runs windows `sel` (their rows packed from row 0 in the given order) through the selected-blocks kernel,
// or the any-shape kernel; output poisoned first.
std::vector<float> run(const Case& c, const std::vector<int>& sel, bool generic, const Stream& stream) {
  const AttentionShape& s = c.s;
  std::vector<float> qg;
  std::vector<int32_t> mode;
  std::vector<uint8_t> chosen;
  std::vector<DeviceBuffer> caches;
  std::vector<AttentionWindow> wins;
  int rows = 0, max_count = 0;
  for (int w : sel) {
    int first = 0;
    for (int i = 0; i < w; ++i) first += c.count[i];
    qg.insert(qg.end(), c.qg.begin() + int64_t{first} * s.q_width(),
              c.qg.begin() + int64_t{first + c.count[w]} * s.q_width());
    mode.insert(mode.end(), c.mode.begin() + first, c.mode.begin() + first + c.count[w]);
    chosen.insert(chosen.end(), c.chosen.begin() + int64_t{first} * c.max_blocks,
                  c.chosen.begin() + int64_t{first + c.count[w]} * c.max_blocks);
    caches.push_back(upload(c.keys[w]));
    caches.push_back(upload(c.values[w]));
    wins.push_back({rows, c.count[w], c.pos0[w], c.capacity, caches[caches.size() - 2].as<float>(),
                    caches.back().as<float>()});
    rows += c.count[w];
    max_count = std::max(max_count, c.count[w]);
  }
  DeviceBuffer d_qg = upload(qg), d_mode = upload(mode), d_chosen = upload(chosen), d_wins = upload(wins);
  DeviceBuffer out(int64_t{rows} * s.nh * s.hd * sizeof(float));
  out.fill_bytes(0xFF);
  const AttentionRows r{d_qg.as<float>(), nullptr, nullptr, out.as<float>(), 0};
  const AttentionSelection selection{d_mode.as<int32_t>(), d_chosen.as<uint8_t>(), c.max_blocks, c.ratio};
  if (generic)
    attention_decode_generic(s, {}, d_wins.as<AttentionWindow>(), static_cast<int>(wins.size()), max_count, r,
                             rows, selection, true, stream.get());
  else
    attention_prompt_selected(s, d_wins.as<AttentionWindow>(), static_cast<int>(wins.size()), max_count, r,
                              rows, selection, stream.get());
  stream.synchronize();
  std::vector<float> h(int64_t{rows} * s.nh * s.hd);
  out.download(h.data(), h.size() * sizeof(float));
  return h;
}

// max over (row, head) with a reference of (max |got - ref|) / (kHeadTol * max |ref|).
double head_ratio(const std::vector<float>& got, const std::vector<double>& ref, int hd) {
  double worst = 0;
  for (size_t h0 = 0; h0 < ref.size(); h0 += hd) {
    if (std::isnan(ref[h0])) continue;
    double err = 0, top = 0;
    for (int i = 0; i < hd; ++i) {
      const double g = got[h0 + i];
      err = std::max(err, std::isfinite(g) ? std::fabs(g - ref[h0 + i]) : INFINITY);
      top = std::max(top, std::fabs(ref[h0 + i]));
    }
    worst = std::max(worst, err / (kHeadTol * top));
  }
  return worst;
}

void check_shape(Tally& tally, const AttentionShape& s, const std::string& name, std::mt19937_64& rng) {
  const Case c = make_case(s, rng);
  Stream stream;
  const std::vector<int> all{0, 1, 2};
  const std::vector<float> got = run(c, all, false, stream), generic = run(c, all, true, stream);
  const std::vector<double> ref = reference(c, 1.0), control = reference(c, 1.01);
  const double ratio = head_ratio(got, ref, s.hd), ctrl = head_ratio(got, control, s.hd),
               gen = head_ratio(generic, ref, s.hd);
  // Rows of select_mode -1 (the third window, last 5 rows) keep the poison.
  const int64_t dense0 = int64_t{c.count[0] + c.count[1]} * s.nh * s.hd;
  const bool untouched = std::all_of(got.begin() + dense0, got.end(), [](float x) { return std::isnan(x); });
  std::printf(
      "  selected attention %s: err/bound %.4f (negative control, scale 1%% off: %.1f; any-shape kernel "
      "%.4f)\n",
      name.c_str(), ratio, ctrl, gen);
  tally.expect(ratio <= 1.0, "selected attention " + name + ": within the bound of the float64 softmax");
  tally.expect(ctrl > 1.0, "selected attention " + name + ": negative control exceeds the bound");
  tally.expect(untouched, "selected attention " + name + ": rows with select_mode -1 left alone");
  bool alone = true;
  int64_t at = 0;
  for (int w : all) {
    const std::vector<float> one = run(c, {w}, false, stream);
    alone = alone && std::memcmp(one.data(), got.data() + at, one.size() * sizeof(float)) == 0;
    at += static_cast<int64_t>(one.size());
  }
  tally.expect(alone, "selected attention " + name + ": each window alone == in one launch (bits)");
}

}  // namespace

void run_attention_prompt_checks(Tally& tally) {
  std::mt19937_64 rng(23);
  check_shape(tally, AttentionShape{24, 2, 256, 64, 1e-6f}, "24/2 hd256", rng);
  check_shape(tally, AttentionShape{8, 2, 128, 32, 1e-6f}, "8/2 hd128", rng);
  bool named = false;
  try {
    attention_prompt_selected(AttentionShape{34, 2, 256, 64, 1e-6f}, nullptr, 1, 1, {}, 1, {}, nullptr);
  } catch (const ArgumentError& e) {
    named = std::string(e.what()).find("16 q heads") != std::string::npos;
  }
  tally.expect(named, "selected attention: 17 q heads per kv head is an ArgumentError naming the limit");
}

}  // namespace ds::cuda::modelcheck
