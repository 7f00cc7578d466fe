// cuda_sampling_check [--rows N] [--seed S] [--no-bench | --bench-only]: draws random and adversarial rows
// (ties, -inf / NaN / +inf logits, -0 and +0, masks, penalties over histories, drafted tokens, every filter
// combination, T near 0 and large, vocabulary 248,320 and small ones) with the DeviceSampler and with
// ds::KeyedSampler, and counts the rows where the tokens differ (there must be none). Then times device draws
// of 1-64 rows, and the host path they replace (the rows copied back, then KeyedSampler a row at a time).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/sampling/device_sampler.h"
#include "core/error.h"
#include "runtime/keyed_sampler.h"
#include "runtime/row_draws.h"

namespace {

using ds::cuda::DeviceBuffer;
constexpr float kInf = std::numeric_limits<float>::infinity();

// One test row: logits and everything KeyedSampler::sample takes.
struct Case {
  std::vector<float> logits;
  ds::SamplingParams params;
  int64_t position = 0;
  ds::TokenCounts history;
  std::vector<int32_t> drafted;
  std::vector<uint64_t> mask;
  std::string kind;
};

class Maker {
 public:
  explicit Maker(uint64_t seed) : rng_(seed) {}

  Case make(int64_t vocab, int index) {
    Case c;
    c.kind = fill(c.logits, vocab, index);
    params(c.params, vocab);
    c.position = pick(0, 100000);
    if (c.params.penalties_active() || coin(0.3)) {
      std::vector<int32_t> prompt(static_cast<size_t>(pick(0, 300)));
      for (auto& t : prompt) t = static_cast<int32_t>(favoured(vocab, c.logits));
      c.history.add_prompt(prompt);
      for (int g = pick(0, 60); g > 0; --g)
        c.history.add_generated(static_cast<int32_t>(favoured(vocab, c.logits)));
      for (int d = pick(0, 4); d > 0; --d)
        c.drafted.push_back(static_cast<int32_t>(favoured(vocab, c.logits)));
    }
    if (coin(0.25)) {
      c.mask.assign(static_cast<size_t>((vocab + 63) / 64), 0);
      const double density = std::vector<double>{0.0, 0.001, 0.1, 0.5, 0.99}[static_cast<size_t>(pick(0, 4))];
      for (int64_t id = 0; id < vocab; ++id)
        if (coin(density)) c.mask[static_cast<size_t>(id >> 6)] |= uint64_t{1} << (id & 63);
      if (coin(0.5)) {  // keep the argmax allowed most of the time, so filters still matter
        const int64_t top = std::max_element(c.logits.begin(), c.logits.end()) - c.logits.begin();
        c.mask[static_cast<size_t>(top >> 6)] |= uint64_t{1} << (top & 63);
      }
    }
    return c;
  }

 private:
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  // Ids near the top of the row half the time, so penalties change the kept sets.
  int64_t favoured(int64_t vocab, const std::vector<float>& z) {
    if (coin(0.5)) return pick(0, static_cast<int>(vocab - 1));
    int64_t best = pick(0, static_cast<int>(vocab - 1));
    for (int t = 0; t < 8; ++t) {
      const int64_t id = pick(0, static_cast<int>(vocab - 1));
      if (z[static_cast<size_t>(id)] > z[static_cast<size_t>(best)]) best = id;
    }
    return best;
  }

  std::string fill(std::vector<float>& z, int64_t vocab, int index) {
    z.resize(static_cast<size_t>(vocab));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int kind = index % 10;
    const float scale = std::vector<float>{0.01f, 1.0f, 3.0f, 10.0f, 40.0f}[static_cast<size_t>(pick(0, 4))];
    for (float& v : z) v = normal(rng_) * scale;
    switch (kind) {
      case 0:
        return "normal";
      case 1:  // coarse values: many exact ties, the top included
        for (float& v : z) v = std::round(v * 2.0f) / 2.0f;
        return "ties";
      case 2:  // every logit equal (all ties)
        std::fill(z.begin(), z.end(), static_cast<float>(pick(-3, 3)));
        return "flat";
      case 3:  // -inf, NaN, +inf sprinkled
        for (float& v : z) {
          const int r = pick(0, 99);
          if (r < 10)
            v = -kInf;
          else if (r < 13)
            v = std::numeric_limits<float>::quiet_NaN();
          else if (r < 15)
            v = kInf;
        }
        return "non-finite";
      case 4:  // nothing finite (or a single finite token)
        std::fill(z.begin(), z.end(), -kInf);
        for (float& v : z)
          if (coin(0.3)) v = std::numeric_limits<float>::quiet_NaN();
        if (coin(0.5)) z[static_cast<size_t>(pick(0, static_cast<int>(vocab - 1)))] = 0.0f;
        return "none-finite";
      case 5:  // -0 and +0 at the top
        for (float& v : z) v = -std::fabs(v) - 1.0f;
        for (int t = 0; t < 6; ++t)
          z[static_cast<size_t>(pick(0, static_cast<int>(vocab - 1)))] = coin(0.5) ? 0.0f : -0.0f;
        return "signed-zeros";
      case 6:  // one dominant token
        z[static_cast<size_t>(pick(0, static_cast<int>(vocab - 1)))] = 50.0f;
        return "dominant";
      case 7:  // huge magnitudes
        for (float& v : z) v = v * 1e36f;
        return "huge";
      case 8:  // a plateau of equal tops
        for (int t = 0; t < 40; ++t) z[static_cast<size_t>(pick(0, static_cast<int>(vocab - 1)))] = 7.25f;
        return "plateau";
      default:
        for (float& v : z) v = std::round(v * 16.0f) / 16.0f;
        return "sixteenths";
    }
  }

  void params(ds::SamplingParams& p, int64_t vocab) {
    const int mode = pick(0, 9);
    p.seed = rng_();
    p.temperature =
        mode == 0
            ? 0.0f
            : std::vector<float>{
                  1e-6f, 0.01f, 0.3f, 0.6f, 1.0f, 1.5f, 4.0f, 100.0f, 1e4f}[static_cast<size_t>(pick(0, 8))];
    if (coin(0.5))
      p.top_k = std::vector<int32_t>{-1,
                                     0,
                                     1,
                                     2,
                                     5,
                                     20,
                                     50,
                                     1000,
                                     5000,  // above the 4,096-key list, below the 7,936 thread maxima
                                     static_cast<int32_t>(vocab),
                                     static_cast<int32_t>(vocab + 7)}[static_cast<size_t>(pick(0, 10))];
    if (coin(0.5))
      p.top_p = std::vector<float>{
          1e-6f, 0.1f, 0.5f, 0.8f, 0.9f, 0.95f, 0.999999f, 1.0f}[static_cast<size_t>(pick(0, 7))];
    if (coin(0.35))
      p.min_p = std::vector<float>{1e-6f, 0.01f, 0.05f, 0.1f, 0.5f, 1.0f}[static_cast<size_t>(pick(0, 5))];
    if (coin(0.35)) {
      p.presence_penalty =
          std::vector<float>{-2.0f, -0.5f, 0.0f, 0.7f, 2.0f}[static_cast<size_t>(pick(0, 4))];
      p.frequency_penalty = std::vector<float>{-1.0f, 0.0f, 0.3f, 2.0f}[static_cast<size_t>(pick(0, 3))];
      p.repetition_penalty =
          std::vector<float>{1e-3f, 0.8f, 1.0f, 1.3f, 1e3f}[static_cast<size_t>(pick(0, 4))];
    }
  }

  std::mt19937_64 rng_;
};

// The host's token (kNothingDrawable where KeyedSampler fails for want of a token).
int32_t host_token(ds::KeyedSampler& sampler, const Case& c) {
  ds::TokenCounts h = c.history;
  for (int32_t t : c.drafted) h.add_generated(t);
  try {
    return sampler.sample(c.logits, c.params, c.position, h, c.mask);
  } catch (const ds::Error& e) {
    if (std::string(e.what()).find("no token can be drawn") == std::string::npos) throw;
    return ds::kNothingDrawable;
  }
}

ds::RowDraw row_draw(const Case& c) {
  ds::RowDraw d;
  d.use = ds::RowUse::Draw;
  d.params = &c.params;
  d.position = c.position;
  d.history = &c.history;
  d.drafted = c.drafted;
  d.mask = c.mask;
  return d;
}

// Device draws of `cases` (one call); returns the tokens.
std::vector<int32_t> device_tokens(ds::cuda::DeviceSampler& sampler, const std::vector<Case>& cases,
                                   int64_t vocab, DeviceBuffer& logits, cudaStream_t stream) {
  std::vector<ds::RowDraw> rows;
  std::vector<float> flat;
  for (const Case& c : cases) {
    rows.push_back(row_draw(c));
    flat.insert(flat.end(), c.logits.begin(), c.logits.end());
  }
  if (logits.bytes() < flat.size() * sizeof(float)) logits = DeviceBuffer(flat.size() * sizeof(float));
  logits.upload(flat.data(), flat.size() * sizeof(float));
  const ds::PackedDraws packed = ds::pack_draws(rows, vocab);
  if (packed.rows.size() != cases.size())
    ds::fail("pack_draws left {} of {} rows to the host", cases.size() - packed.rows.size(), cases.size());
  return sampler.draw(logits.as<float>(), vocab, packed, stream);
}

// One timing row set: n rows of normal logits (scale 3) at the real vocabulary, every row with `params`
// (seed by row), penalties over a history of 300 prompt and 60 generated tokens when they are on.
std::vector<Case> bench_cases(int n, const ds::SamplingParams& params, std::mt19937_64& rng) {
  constexpr int64_t kVocab = 248320;
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::uniform_int_distribution<int32_t> id(0, kVocab - 1);
  std::vector<Case> cases(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    Case& c = cases[static_cast<size_t>(i)];
    c.logits.resize(kVocab);
    for (float& v : c.logits) v = normal(rng);
    c.params = params;
    c.params.seed = static_cast<uint64_t>(i);
    c.position = 1000 + i;
    if (params.penalties_active()) {
      std::vector<int32_t> prompt(300);
      for (auto& t : prompt) t = id(rng);
      c.history.add_prompt(prompt);
      for (int g = 0; g < 60; ++g) c.history.add_generated(id(rng));
    }
  }
  return cases;
}

// Best of 20 per call at vocabulary 248,320: the device draw (packing, upload, kernels, tokens back) and the
// host path (the rows' logits copied to the host, then KeyedSampler on each).
// Returns the rows where the two paths drew different tokens (there must be none).
int64_t draw_times(ds::cuda::DeviceSampler& sampler, DeviceBuffer& logits, cudaStream_t stream,
                   uint64_t seed) {
  constexpr int64_t kVocab = 248320;
  struct Variant {
    const char* name;
    ds::SamplingParams params;
  };
  std::vector<Variant> variants(6);
  variants[0] = {"greedy", {}};
  variants[0].params.temperature = 0;
  variants[1] = {"T 1", {}};
  variants[2] = {"T.6 k20 p.95", {}};
  variants[2].params.temperature = 0.6f, variants[2].params.top_k = 20, variants[2].params.top_p = 0.95f;
  variants[3] = {"T 1 k50", {}};
  variants[3].params.top_k = 50;
  variants[4] = {"T 1 p.9 pen", {}};
  variants[4].params.top_p = 0.9f, variants[4].params.repetition_penalty = 1.1f,
  variants[4].params.presence_penalty = 0.5f;
  variants[5] = {"T 1 minp.05 pen", {}};
  variants[5].params.min_p = 0.05f, variants[5].params.frequency_penalty = 0.3f,
  variants[5].params.repetition_penalty = 1.1f;
  std::mt19937_64 rng(seed + 7);
  ds::KeyedSampler host;
  std::printf(
      "draw ms per call, vocabulary %lld (normal logits, scale 3), best of 20: device / host path\n%6s",
      static_cast<long long>(kVocab), "rows");
  for (const Variant& v : variants) std::printf(" %17s", v.name);
  std::printf("\n");
  std::vector<float> back;
  int64_t differ = 0;
  for (int n : {1, 8, 32, 64}) {
    std::printf("%6d", n);
    for (const Variant& v : variants) {
      const std::vector<Case> cases = bench_cases(n, v.params, rng);
      std::vector<float> flat;
      for (const Case& c : cases) flat.insert(flat.end(), c.logits.begin(), c.logits.end());
      if (logits.bytes() < flat.size() * sizeof(float)) logits = DeviceBuffer(flat.size() * sizeof(float));
      double device = 1e9, host_path = 1e9;
      std::vector<int32_t> dev, want(cases.size());
      for (int r = 0; r < 21; ++r) {  // the first is a warm-up
        // Penalties rewrite the drawn rows in place: upload again outside the timed part.
        logits.upload(flat.data(), flat.size() * sizeof(float));
        std::vector<ds::RowDraw> draws;
        for (const Case& c : cases) draws.push_back(row_draw(c));
        auto t0 = std::chrono::steady_clock::now();
        const ds::PackedDraws packed = ds::pack_draws(draws, kVocab);
        dev = sampler.draw(logits.as<float>(), kVocab, packed, stream);
        const double d =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        logits.upload(flat.data(), flat.size() * sizeof(float));
        t0 = std::chrono::steady_clock::now();
        back.resize(flat.size());
        ds::cuda::check(
            cudaMemcpy(back.data(), logits.data(), back.size() * sizeof(float), cudaMemcpyDeviceToHost),
            "draw_times: rows to the host");
        for (size_t i = 0; i < cases.size(); ++i)
          want[i] = host.sample(std::span<const float>(back.data() + i * kVocab, kVocab), cases[i].params,
                                cases[i].position, cases[i].history, {});
        const double h =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) device = std::min(device, d), host_path = std::min(host_path, h);
      }
      for (size_t i = 0; i < cases.size(); ++i) differ += dev[i] != want[i];
      std::printf(" %8.3f /%7.3f", device, host_path);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("timed rows: device == host on all but %lld\n", static_cast<long long>(differ));
  return differ;
}

}  // namespace

int main(int argc, char** argv) {
  int rows = 4096;
  uint64_t seed = 1;
  bool bench = true, check = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc)
      rows = std::stoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc)
      seed = std::stoull(argv[++i]);
    else if (a == "--no-bench")
      bench = false;
    else if (a == "--bench-only")
      check = false;
    else {
      std::fprintf(stderr, "usage: cuda_sampling_check [--rows N] [--seed S] [--no-bench | --bench-only]\n");
      return 2;
    }
  }
  try {
    cudaStream_t stream;
    ds::cuda::check(cudaStreamCreate(&stream), "cudaStreamCreate");
    ds::cuda::DeviceSampler sampler;
    ds::KeyedSampler host;
    DeviceBuffer logits;
    Maker maker(seed);
    int64_t failures = 0, total = 0, nothing = 0;
    // A quarter of the rows at the real vocabulary, the rest spread over small ones (odd sizes included).
    const std::vector<int64_t> vocabs = {248320, 1, 2, 63, 64, 65, 1000, 8191, 8193, 50000};
    for (int64_t vocab : check ? vocabs : std::vector<int64_t>{}) {
      const int count = vocab == 248320 ? rows / 4 : std::max(1, rows * 3 / 4 / 9);
      const int batch = vocab == 248320 ? 64 : 256;
      int64_t same = 0, by_mode[3] = {0, 0, 0};
      for (int done = 0; done < count; done += batch) {
        std::vector<Case> cases;
        for (int i = done; i < std::min(count, done + batch); ++i) cases.push_back(maker.make(vocab, i));
        const std::vector<int32_t> dev = device_tokens(sampler, cases, vocab, logits, stream);
        for (size_t i = 0; i < cases.size(); ++i) {
          const int32_t want = host_token(host, cases[i]);
          const ds::SamplingParams& p = cases[i].params;
          ++by_mode[p.greedy() ? 0 : (p.top_k_active() || p.top_p_active() || p.min_p_active()) ? 2 : 1];
          nothing += want == ds::kNothingDrawable;
          if (dev[i] == want) {
            ++same;
            continue;
          }
          if (++failures <= 20)
            std::printf(
                "MISMATCH vocab %lld row %d (%s): T %g top_k %d top_p %.9g min_p %g pen %g/%g/%g mask %d "
                "drafted %zu: device %d host %d\n",
                static_cast<long long>(vocab), done + static_cast<int>(i), cases[i].kind.c_str(),
                p.temperature, p.top_k, p.top_p, p.min_p, p.presence_penalty, p.frequency_penalty,
                p.repetition_penalty, cases[i].mask.empty() ? 0 : 1, cases[i].drafted.size(), dev[i], want);
        }
      }
      total += count;
      std::printf(
          "vocab %6lld: %5d rows (greedy %lld, temperature only %lld, filtered %lld): device == host %lld\n",
          static_cast<long long>(vocab), count, static_cast<long long>(by_mode[0]),
          static_cast<long long>(by_mode[1]), static_cast<long long>(by_mode[2]),
          static_cast<long long>(same));
      std::fflush(stdout);
    }
    if (check)
      std::printf("%s: %lld rows, %lld mismatches (%lld with nothing drawable)\n",
                  failures == 0 ? "PASS" : "FAIL", static_cast<long long>(total),
                  static_cast<long long>(failures), static_cast<long long>(nothing));
    if (bench) failures += draw_times(sampler, logits, stream, seed);
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
