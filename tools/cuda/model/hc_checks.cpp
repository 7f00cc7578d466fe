// The hyper-connection mix kernels (hc_kernels.h) at the real shape (S 4, D 2560, R 320; and R 32, 128, 1024
// for the tail's other lane groups) against a float64 reference within a stated bound, with a negative
// control; a row alone == the same row among others, the normed rows and the stored inject ==
// add_rms_norm_rows', hc_head with 1 output a warp == with 2, hc_head's loads_first kernel == the default one
// (at 5 rows and 1, 1 and 2 outputs a warp; negative control: one input changed differs), and hc_tail ==
// affine_wx_hc_tail (the separate ops' one-row tail) on the same joint values: each bit for bit.
#include <cmath>
#include <cstring>
#include <random>

#include "../host_reference.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/model/hc_kernels.h"
#include "backend/cuda/wx_products.h"
#include "check_buffers.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

using wxcheck::HostAffine;
using wxcheck::RefWeight;

constexpr int kS = 4, kD = 2560, kR = 320;  // the real shape; other ranks R as cases below
constexpr float kEps = 1e-6f;
const double kUlp = std::ldexp(1.0, -24);

// The mix's inputs for n rows.
struct Inputs {
  int n = 0;
  std::vector<float> H, pending, iota_in, norm_w;
};

Inputs random_inputs(int n, std::mt19937_64& rng) {
  Inputs in;
  in.n = n;
  in.H = wxcheck::random_normal(int64_t{n} * kS * kD, 1.0f, rng);
  in.pending = wxcheck::random_normal(int64_t{n} * kD, 1.0f, rng);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  in.iota_in.resize(size_t(n) * kS);
  for (float& v : in.iota_in) v = u(rng);
  in.norm_w.resize(size_t(kS) * kD);
  for (float& v : in.norm_w) v = u(rng);
  return in;
}

struct Outputs {
  std::vector<float> x, iota, H, normed;
  std::vector<float> joint;  // per row, the down|inject outputs: hc_tail's sum of the head's partials
};

// hc_head + hc_tail on the device; with_pending false: no inject (the final mixer's form), no iota out.
Outputs run_split(const DeviceAffine& di, const DeviceAffine& up, const Inputs& in, bool with_pending,
                  int head_outputs = 2, bool loads_first = false) {
  const int n = in.n;
  DeviceBuffer H = upload(in.H), pending = upload(in.pending), iota_in = upload(in.iota_in),
               norm_w = upload(in.norm_w);
  DeviceBuffer normed(size_t(n) * kS * kD * 4), partial(size_t(hc_partial_floats(di.w, kS, n)) * 4),
      x(size_t(n) * kD * 4), iota_out(size_t(n) * kS * 4);
  x.fill_bytes(0xFF), iota_out.fill_bytes(0xFF), normed.fill_bytes(0xFF);
  const float* p = with_pending ? pending.as<float>() : nullptr;
  const float* ii = with_pending ? iota_in.as<float>() : nullptr;
  hc_head(di.w, H.as<float>(), p, ii, norm_w.as<float>(), kS, kD, kEps, normed.as<float>(),
          partial.as<float>(), n, nullptr, head_outputs, loads_first);
  hc_tail(up.w, partial.as<float>(), di.w.rows, static_cast<int>(up.w.cols), 1.0f / kS, normed.as<float>(),
          kS, kD, H.as<float>(), p, ii, x.as<float>(), with_pending ? iota_out.as<float>() : nullptr, n,
          nullptr);
  check(cudaDeviceSynchronize(), "hc mix check");
  // The joint values as the tail forms them, (p0 + p1) + (p2 + p3) in f32 (-ffp-contract=off: the same bits).
  const int64_t rows = di.w.rows;
  std::vector<float> joint = hc_joint_partials(partial, n, rows);
  return {download<float>(x, size_t(n) * kD), download<float>(iota_out, size_t(n) * kS),
          download<float>(H, in.H.size()), download<float>(normed, size_t(n) * kS * kD), std::move(joint)};
}

// The separate norm's normed rows and stored inject (add_rms_norm_rows), the bits hc_head/hc_tail must give.
Outputs run_norm(const Inputs& in, bool with_pending) {
  DeviceBuffer H = upload(in.H), pending = upload(in.pending), iota_in = upload(in.iota_in),
               norm_w = upload(in.norm_w), normed(in.H.size() * 4);
  if (with_pending)
    add_rms_norm_rows(H.as<float>(), kS * kD, iota_in.as<float>(), pending.as<float>(), norm_w.as<float>(),
                      kS, kD, kEps, normed.as<float>(), kS * kD, in.n, nullptr);
  else
    rms_norm_rows(H.as<float>(), kS * kD, norm_w.as<float>(), kS, kD, kEps, normed.as<float>(), kS * kD, in.n,
                  nullptr);
  check(cudaDeviceSynchronize(), "hc norm check");
  return {{}, {}, download<float>(H, in.H.size()), download<float>(normed, in.H.size()), {}};
}

// affine_wx_hc_tail (hc_activations + affine_wx + hc_combine's bits, one row a launch) on the joint values
// and normed rows hc_head/hc_tail gave: the x and iota hc_tail must give, bit for bit.
Outputs run_one_row_tails(const DeviceAffine& up, const Outputs& split, int n, int64_t ld_joint,
                          bool with_pending) {
  DeviceBuffer joint = upload(split.joint), normed = upload(split.normed), x(size_t(n) * kD * 4),
               iota(size_t(n) * kS * 4);
  x.fill_bytes(0xFF), iota.fill_bytes(0xFF);
  for (int r = 0; r < n; ++r)
    if (!affine_wx_hc_tail(up.w, joint.as<float>() + r * ld_joint, static_cast<int>(up.w.cols), 1.0f / kS,
                           normed.as<float>() + int64_t{r} * kS * kD, kD, x.as<float>() + int64_t{r} * kD,
                           with_pending ? iota.as<float>() + r * kS : nullptr, nullptr))
      throw ArgumentError("hc mix check: affine_wx_hc_tail refuses the real shape");
  check(cudaDeviceSynchronize(), "hc one-row tail check");
  return {download<float>(x, size_t(n) * kD), download<float>(iota, size_t(n) * kS), {}, {}, {}};
}

double sigmoid(double z) {
  return 1.0 / (1.0 + std::exp(-z));
}

// Worst |got - float64| / bound over row r (the reference's affine scales times `scale`), in two parts:
// - the head: each down|inject output (the GPU's partial sum) against float64 from H, the inject and the
// norm,
//   within (chain + 7 + 8) ulps of sum |w normed| (a stream's lane chain of ceil(80/32)*32 terms, a rounded
//   dequantization, the butterfly; the partials' 2 adds and normed's roundings, 6 ulps of each value);
// - the tail, from the GPU's joint values and normed rows: x and iota against float64 within silu/sigmoid/
//   products of 8 ulps each, the up chain's (32 + 7) ulps of sum |u low| plus sum |u| dlow, |sigmoid'| <=
//   1/4.
double worst_ratio(const HostAffine& di, const HostAffine& up, double scale, const Inputs& in, int r,
                   bool with_pending, const Outputs& got) {
  std::vector<double> nv(size_t(kS) * kD);
  for (int g = 0; g < kS; ++g) {
    double ss = 0;
    std::vector<double> v(kD);
    for (int i = 0; i < kD; ++i) {
      const size_t at = (size_t(r) * kS + g) * kD + i;
      v[i] = in.H[at] +
             (with_pending ? double(in.iota_in[size_t(r) * kS + g]) * in.pending[size_t(r) * kD + i] : 0);
      ss += v[i] * v[i];
    }
    const double inv = 1.0 / std::sqrt(ss / kD + kEps);
    for (int i = 0; i < kD; ++i) nv[size_t(g) * kD + i] = v[i] * inv * in.norm_w[size_t(g) * kD + i];
  }
  const RefWeight wd{&di, nullptr, di.rows, di.cols, scale}, wu{&up, nullptr, up.rows, up.cols, scale};
  const double joint_factor = wxcheck::bound_factor(kD, 32) + 8 * kUlp;
  double worst = 0;
  const float* joint = &got.joint[size_t(r) * di.rows];
  for (int64_t o = 0; o < di.rows; ++o) {
    const wxcheck::RefValue v = wxcheck::reference(wd, nv.data(), o);
    worst = std::max(worst, std::fabs(joint[o] - v.y) / (joint_factor * v.abs_sum + 1e-30));
  }
  const int R = static_cast<int>(up.cols);
  std::vector<double> low(R), dlow(R);
  for (int j = 0; j < R; ++j) {
    const double z = double(joint[j]) / kS;
    low[j] = z * sigmoid(z);
    dlow[j] = 8 * kUlp * std::fabs(low[j]);
  }
  const float* normed = &got.normed[size_t(r) * kS * kD];
  for (int d = 0; d < kD; ++d) {
    double x = 0, dx = 0;
    for (int k = 0; k < kS; ++k) {
      const int64_t o = int64_t{k} * kD + d;
      const wxcheck::RefValue m = wxcheck::reference(wu, low.data(), o);
      double prop = 0;
      for (int j = 0; j < R; ++j) prop += std::fabs(wu.at(o, j)) * dlow[j];
      const double dmix = wxcheck::bound_factor(R, 32) * m.abs_sum + prop;
      const double s = sigmoid(m.y), n = normed[o];
      x += s * n;
      dx += 0.25 * dmix * std::fabs(n) + 8 * kUlp * std::fabs(s * n);
    }
    x /= kS, dx = dx / kS + 1e-30;
    worst = std::max(worst, std::fabs(got.x[size_t(r) * kD + d] - x) / dx);
  }
  if (with_pending)
    for (int k = 0; k < kS; ++k) {
      const double want = 2 * sigmoid(double(joint[R + k]) / kS);
      worst = std::max(worst, std::fabs(got.iota[size_t(r) * kS + k] - want) / (8 * kUlp * want + 1e-30));
    }
  return worst;
}

bool same_floats(const std::vector<float>& a, size_t a0, const std::vector<float>& b, size_t b0,
                 size_t count) {
  return std::memcmp(a.data() + a0, b.data() + b0, count * sizeof(float)) == 0;
}

}  // namespace

std::vector<float> hc_joint_partials(const DeviceBuffer& partial, int n, int64_t rows) {
  constexpr int S = 4;  // the hc streams (hc_head's partials: S blocks of rows a row)
  const std::vector<float> pv = download<float>(partial, size_t(n) * S * rows);
  std::vector<float> joint(size_t(n) * rows);
  for (int r = 0; r < n; ++r)
    for (int64_t o = 0; o < rows; ++o) {
      const float* p0 = &pv[size_t(r) * S * rows + o];
      joint[size_t(r) * rows + o] = (p0[0] + p0[rows]) + (p0[2 * rows] + p0[3 * rows]);
    }
  return joint;
}

void run_hc_checks(Tally& tally) {
  struct Case {
    int bits, group;
    bool with_pending;  // false: the final mixer's form (down rows R, no inject, no iota out)
    int R = kR;         // other ranks: hc_tail's lane groups of R / 32 lanes, 32 / (R / 32) outputs a warp
  };
  // Groups of 128 do not divide up's R = 320 columns (hc_fused_takes refuses them: the separate ops run).
  for (const Case c :
       {Case{4, 32, true}, Case{6, 64, true}, Case{8, 64, false}, Case{2, 32, true}, Case{3, 64, true},
        Case{5, 32, true}, Case{4, 32, true, 32}, Case{4, 32, true, 128}, Case{4, 64, true, 1024}}) {
    std::mt19937_64 rng(1000 + c.bits * 7 + c.group + (c.R == kR ? 0 : c.R));
    const HostAffine di =
        wxcheck::random_affine(c.with_pending ? c.R + kS : c.R, int64_t{kS} * kD, c.bits, c.group, rng);
    const HostAffine up = wxcheck::random_affine(int64_t{kS} * kD, c.R, c.bits, c.group, rng);
    const DeviceAffine ddi(di), dup(up);
    const std::string name = "hc mix " + std::to_string(c.bits) + "-bit g" + std::to_string(c.group) +
                             (c.R != kR ? ", R " + std::to_string(c.R) : "") +
                             (c.with_pending ? "" : " (mixer form)");
    if (!hc_fused_takes(ddi.w, dup.w, kS, kD, c.R)) {
      tally.expect(false, name + ": hc_fused_takes refuses the shape");
      continue;
    }
    const int n = 5;
    const Inputs all = random_inputs(n, rng);
    const Outputs together = run_split(ddi, dup, all, c.with_pending);
    // Each row alone (n = 1) == the same row among 5, bit for bit (x, iota, H, normed).
    bool alone_same = true;
    for (int r = 0; r < n; ++r) {
      Inputs one;
      one.n = 1;
      one.H.assign(all.H.begin() + int64_t{r} * kS * kD, all.H.begin() + int64_t{r + 1} * kS * kD);
      one.pending.assign(all.pending.begin() + int64_t{r} * kD, all.pending.begin() + int64_t{r + 1} * kD);
      one.iota_in.assign(all.iota_in.begin() + r * kS, all.iota_in.begin() + (r + 1) * kS);
      one.norm_w = all.norm_w;
      const Outputs o = run_split(ddi, dup, one, c.with_pending);
      alone_same = alone_same && same_floats(o.x, 0, together.x, size_t(r) * kD, kD) &&
                   same_floats(o.H, 0, together.H, size_t(r) * kS * kD, size_t(kS) * kD) &&
                   same_floats(o.normed, 0, together.normed, size_t(r) * kS * kD, size_t(kS) * kD) &&
                   (!c.with_pending || same_floats(o.iota, 0, together.iota, size_t(r) * kS, kS));
    }
    const Outputs norm = run_norm(all, c.with_pending);
    const bool norm_same = norm.normed == together.normed && norm.H == together.H;
    // One output a warp in the head: the same bits everywhere; the tail == the separate ops' one-row tail.
    const Outputs narrow = run_split(ddi, dup, all, c.with_pending, 1);
    const bool narrow_same = narrow.joint == together.joint && narrow.normed == together.normed &&
                             narrow.x == together.x && narrow.H == together.H &&
                             (!c.with_pending || narrow.iota == together.iota);
    // hc_head's loads_first kernel: the same bits as the default at 5 rows and at 1, with 1 and 2 outputs a
    // warp; negative control: the same kernel with one input changed (the pending row's first value, or H's
    // in the mixer form, times 1.5 plus 0.25: an ulp was absorbed by the rounding in 2 of 6 cases) gives other
    // joint values.
    auto same_split = [&](const Outputs& a, const Outputs& b) {
      return a.joint == b.joint && a.normed == b.normed && a.x == b.x && a.H == b.H &&
             (!c.with_pending || a.iota == b.iota);
    };
    Inputs first_row = all;
    first_row.n = 1;
    first_row.H.resize(size_t(kS) * kD), first_row.pending.resize(kD), first_row.iota_in.resize(kS);
    const Outputs first_row_default = run_split(ddi, dup, first_row, c.with_pending, 1);
    bool early_same =
        same_split(run_split(ddi, dup, all, c.with_pending, 2, true), together) &&
        same_split(run_split(ddi, dup, all, c.with_pending, 1, true), narrow) &&
        same_split(run_split(ddi, dup, first_row, c.with_pending, 1, true), first_row_default) &&
        same_split(run_split(ddi, dup, first_row, c.with_pending, 2, true), first_row_default);
    Inputs nudged = first_row;
    float& nudge = c.with_pending ? nudged.pending[0] : nudged.H[0];
    nudge = nudge * 1.5f + 0.25f;
    const bool early_control =
        run_split(ddi, dup, nudged, c.with_pending, 1, true).joint != first_row_default.joint;
    const Outputs one_row = run_one_row_tails(dup, together, n, di.rows, c.with_pending);
    const bool tail_same = one_row.x == together.x && (!c.with_pending || one_row.iota == together.iota);
    double worst = 0, off = 0;
    for (int r = 0; r < 2; ++r) {
      worst = std::max(worst, worst_ratio(di, up, 1.0, all, r, c.with_pending, together));
      off = std::max(off, worst_ratio(di, up, 1.01, all, r, c.with_pending, together));
    }
    std::printf(
        "  %s: down|inject, x%s vs float64 %.3f of the bound (scales 1%% off: %.0fx); rows alone == 5 "
        "together: %s; normed rows and stored inject == add_rms_norm_rows: %s; head 1 == 2 outputs a warp: "
        "%s; head loads_first == default: %s (an input changed: %s); tail == affine_wx_hc_tail: %s\n",
        name.c_str(), c.with_pending ? ", iota" : "", worst, off, alone_same ? "bit-identical" : "DIFFERENT",
        norm_same ? "bit-identical" : "DIFFERENT", narrow_same ? "bit-identical" : "DIFFERENT",
        early_same ? "bit-identical" : "DIFFERENT", early_control ? "differs" : "SAME",
        tail_same ? "bit-identical" : "DIFFERENT");
    tally.expect(worst <= 1.0, name + ": within the float64 bound");
    tally.expect(off > 1.0, name + ": negative control exceeds the bound");
    tally.expect(alone_same, name + ": a row alone == among others");
    tally.expect(norm_same, name + ": normed and inject == add_rms_norm_rows");
    tally.expect(narrow_same, name + ": head with 1 output a warp == 2");
    tally.expect(early_same, name + ": head loads_first == the default kernel");
    tally.expect(early_control, name + ": head loads_first's negative control differs");
    tally.expect(tail_same, name + ": tail == affine_wx_hc_tail");
  }
}

}  // namespace ds::cuda::modelcheck
