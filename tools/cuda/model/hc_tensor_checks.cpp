// The tensor family's fused hc mix (hc_kernels.h, hc_head + hc_tensor_tail) against the separate ops on the
// same head outputs, bit for bit: up's outputs == tc_decode_wx of hc up on hc_activations' low values, x ==
// hc_combine's, the new iota == hc_activations', the stored inject == add_rms_norm_rows', at 1, 2, 3, 4, 8,
// 16 and 64 rows (tc_decode_wx's one-row, small-window and general kernels), both planes layouts; a row's x
// at every row count == at one row. The four forms the model calls: inject and iota out (most mixes), iota
// out only (a round's first mix, and the first after a PLE layer), inject only (the final mixer: down rows
// R), neither (the MTP head's mixer); H and iota are compared in every form (untouched where not stored).
// Negative control: tc_decode_wx on up with one scale a bf16 ulp off must not match.
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "../host_reference.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/model/hc_kernels.h"
#include "backend/cuda/tc_decode.h"
#include "check_buffers.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

using wxcheck::HostAffine;

constexpr int kS = 4, kD = 2560;
constexpr float kEps = 1e-6f;
constexpr int kMaxRows = 64;

struct Result {
  std::vector<float> mix, x, iota, H;
};

// The fused tail's outputs (fused) and the separate ops' (ref) on one hc_head run of n rows; `ref_up` is the
// up matrix the reference's tc_decode_wx runs (the negative control passes a perturbed one). misaligned: the
// tail reads up's scales and biases 2 bytes past a 16-byte boundary and the partials one float past one with
// ld rows + 1 (hc_tc_tail_fast_kernel's fallbacks: 16-bit loads, scalar partials; review13).
void run_both(const DeviceAffine& di, const DeviceAffine& up, const DeviceAffine& ref_up, int R, int n,
              bool with_pending, bool with_iota, const std::vector<float>& H0,
              const std::vector<float>& pending0, const std::vector<float>& iota0,
              const std::vector<float>& norm0, Result& fused, Result& ref, bool misaligned = false) {
  const int64_t SD = int64_t{kS} * kD, rows = di.w.rows;
  const float inv_s = 1.0f / kS;
  std::vector<float> Hn(H0.begin(), H0.begin() + n * SD), pn(pending0.begin(), pending0.begin() + n * kD),
      in(iota0.begin(), iota0.begin() + n * kS);
  DeviceBuffer H = upload(Hn), H_ref = upload(Hn), pending = upload(pn), iota_in = upload(in),
               norm_w = upload(norm0);
  DeviceBuffer normed(size_t(n) * SD * 4), normed_ref(size_t(n) * SD * 4),
      partial(size_t(hc_partial_floats(di.w, kS, n)) * 4), x(size_t(n) * kD * 4), x_ref(size_t(n) * kD * 4),
      iota(size_t(n) * kS * 4), iota_ref(size_t(n) * kS * 4), mix(size_t(n) * SD * 4),
      mix_ref(size_t(n) * SD * 4), low(size_t(n) * R * 4);
  for (DeviceBuffer* b : {&x, &x_ref, &iota, &iota_ref, &mix, &mix_ref}) b->fill_bytes(0xFF);
  const float* p = with_pending ? pending.as<float>() : nullptr;
  const float* ii = with_pending ? iota_in.as<float>() : nullptr;
  hc_head(di.w, H.as<float>(), p, ii, norm_w.as<float>(), kS, kD, kEps, normed.as<float>(),
          partial.as<float>(), n, nullptr, hc_head_outputs_for_rows(n));
  AffineWeight up_w = up.w;
  const float* tail_partial = partial.as<float>();
  int64_t ld_partial = rows;
  DeviceBuffer scales_m, biases_m, partial_m;
  if (misaligned) {
    scales_m = DeviceBuffer(up.scales.bytes() + 16), biases_m = DeviceBuffer(up.biases.bytes() + 16);
    check(
        cudaMemcpy(scales_m.as<uint8_t>() + 2, up.scales.data(), up.scales.bytes(), cudaMemcpyDeviceToDevice),
        "hc tensor mix check: misaligned scales");
    check(
        cudaMemcpy(biases_m.as<uint8_t>() + 2, up.biases.data(), up.biases.bytes(), cudaMemcpyDeviceToDevice),
        "hc tensor mix check: misaligned biases");
    up_w.scales = reinterpret_cast<const uint16_t*>(scales_m.as<uint8_t>() + 2);
    up_w.biases = reinterpret_cast<const uint16_t*>(biases_m.as<uint8_t>() + 2);
    ld_partial = rows + 1;
    partial_m = DeviceBuffer((size_t(n) * kS * ld_partial + 4) * 4);
    check(cudaMemcpy2D(partial_m.as<float>() + 1, ld_partial * 4, partial.data(), rows * 4, rows * 4,
                       size_t(n) * kS, cudaMemcpyDeviceToDevice),
          "hc tensor mix check: misaligned partials");
    tail_partial = partial_m.as<float>() + 1;
  }
  hc_tensor_tail(up_w, tail_partial, ld_partial, R, inv_s, normed.as<float>(), kS, kD, H.as<float>(), p, ii,
                 x.as<float>(), with_iota ? iota.as<float>() : nullptr, n, nullptr, mix.as<float>(), SD);
  // The separate ops on the head's joint values ((p0 + p1) + (p2 + p3) in f32, -ffp-contract=off) and normed
  // rows; the inject stored by add_rms_norm_rows.
  const std::vector<float> joint = hc_joint_partials(partial, n, rows);
  DeviceBuffer jd = upload(joint);
  hc_activations(jd.as<float>(), n, rows, R, kS, inv_s, low.as<float>(),
                 with_iota ? iota_ref.as<float>() : nullptr, nullptr);
  const size_t scratch_bytes = tc_decode_scratch_bytes(R, n);
  DeviceBuffer scratch(scratch_bytes);
  tc_decode_wx(ref_up.tiled(), low.as<float>(), R, n, mix_ref.as<float>(), SD, scratch.data(), scratch_bytes,
               nullptr);
  hc_combine(mix_ref.as<float>(), normed.as<float>(), n, kS, kD, x_ref.as<float>(), nullptr);
  if (with_pending)
    add_rms_norm_rows(H_ref.as<float>(), SD, iota_in.as<float>(), pending.as<float>(), norm_w.as<float>(), kS,
                      kD, kEps, normed_ref.as<float>(), SD, n, nullptr);
  check(cudaDeviceSynchronize(), "hc tensor mix check");
  fused = {download<float>(mix, size_t(n) * SD), download<float>(x, size_t(n) * kD),
           download<float>(iota, size_t(n) * kS), download<float>(H, size_t(n) * SD)};
  ref = {download<float>(mix_ref, size_t(n) * SD), download<float>(x_ref, size_t(n) * kD),
         download<float>(iota_ref, size_t(n) * kS), download<float>(H_ref, size_t(n) * SD)};
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

void run_hc_tensor_checks(Tally& tally) {
  struct Case {
    int bits, group;
    bool with_pending;  // an inject (the previous block's output) stored into H
    bool with_iota;     // a new iota out (down|inject rows R + S; else down rows R)
    int R = 320;
  };
  const TcPlanes before = tc_decode_planes();
  const char* variant_env = std::getenv("DS_CUDA_HC_TAIL_VARIANT");
  const std::string variant_before = variant_env != nullptr ? variant_env : "";
  // Each tail kernel (hc_tensor_tail_variant: 0 session 12's, 1 hctail13's) under each planes layout.
  // misaligned (review13): variant 1's fallbacks for scales, biases and partials not 16-byte aligned.
  struct Pass {
    const char* variant;
    TcPlanes planes;
    bool misaligned = false;
  };
  for (const auto [variant, planes, misaligned] :
       {Pass{"0", TcPlanes::Chained}, Pass{"0", TcPlanes::Columns}, Pass{"1", TcPlanes::Chained},
        Pass{"1", TcPlanes::Columns}, Pass{"1", TcPlanes::Chained, true},
        Pass{"1", TcPlanes::Columns, true}}) {
    setenv("DS_CUDA_HC_TAIL_VARIANT", variant, 1);
    tc_decode_set_planes(planes);
    for (const Case c : {Case{4, 32, true, true}, Case{6, 64, true, true}, Case{3, 32, true, true},
                         Case{8, 64, false, false}, Case{5, 64, true, true}, Case{2, 32, true, true},
                         Case{4, 64, true, true, 128}, Case{4, 32, false, true}, Case{6, 64, true, false}}) {
      std::mt19937_64 rng(7000 + c.bits * 7 + c.group + c.R);
      const HostAffine di =
          wxcheck::random_affine(c.with_iota ? c.R + kS : c.R, int64_t{kS} * kD, c.bits, c.group, rng);
      const HostAffine up = wxcheck::random_affine(int64_t{kS} * kD, c.R, c.bits, c.group, rng);
      HostAffine off = up;  // one scale a bf16 ulp off (output 5, its first group)
      off.scales[5 * off.groups_per_row()] ^= 1;
      const DeviceAffine ddi(di), dup(up), doff(off);
      const std::string name = std::string("hc tensor mix (tail ") + variant +
                               (misaligned ? " misaligned" : "") + ", " + tc_planes_name(planes) + ") " +
                               std::to_string(c.bits) + "-bit g" + std::to_string(c.group) +
                               (c.R != 320 ? ", R " + std::to_string(c.R) : "") +
                               (c.with_pending && c.with_iota ? ""
                                : c.with_iota                 ? " (first mix form: no inject)"
                                : c.with_pending              ? " (final mixer form: no iota out)"
                                                              : " (head mixer form: no inject, no iota out)");
      if (!hc_head_takes(ddi.w, kS, kD, c.R) || !hc_tensor_tail_takes(dup.w, kS, kD, c.R)) {
        tally.expect(false, name + ": hc_head_takes/hc_tensor_tail_takes refuse the shape");
        continue;
      }
      const std::vector<float> H = wxcheck::random_normal(int64_t{kMaxRows} * kS * kD, 1.0f, rng),
                               pending = wxcheck::random_normal(int64_t{kMaxRows} * kD, 1.0f, rng);
      std::uniform_real_distribution<float> u(0.5f, 1.5f);
      std::vector<float> iota(size_t(kMaxRows) * kS), norm(size_t(kS) * kD);
      for (float& v : iota) v = u(rng);
      for (float& v : norm) v = u(rng);
      std::string failed_rows;
      std::vector<float> x_one;  // row 0's x at one row
      bool row0_same = true;
      for (const int n : {1, 2, 3, 4, 8, 16, 64}) {
        Result fused, ref;
        run_both(ddi, dup, dup, c.R, n, c.with_pending, c.with_iota, H, pending, iota, norm, fused, ref,
                 misaligned);
        // iota and H also where the form stores none: both stay as uploaded (H) or poisoned (iota).
        const bool ok = same(fused.mix, ref.mix) && same(fused.x, ref.x) && same(fused.iota, ref.iota) &&
                        same(fused.H, ref.H);
        if (!ok) {
          failed_rows += ' ';
          failed_rows += std::to_string(n);
        }
        if (n == 1) x_one = fused.x;
        row0_same = row0_same && std::memcmp(fused.x.data(), x_one.data(), kD * sizeof(float)) == 0;
      }
      Result fused, ref;
      run_both(ddi, dup, doff, c.R, 3, c.with_pending, c.with_iota, H, pending, iota, norm, fused, ref,
               misaligned);
      const bool control_differs = !same(fused.mix, ref.mix);
      std::string verdict = "bit-identical";
      if (!failed_rows.empty()) verdict = "DIFFERENT at rows" + failed_rows;
      std::printf(
          "  %s: up, x%s == tc_decode_wx + hc_combine%s at 1, 2, 3, 4, 8, 16, 64 rows: %s; row 0 at every "
          "row count == alone: %s; one scale 1 ulp off: %s\n",
          name.c_str(),
          c.with_iota      ? (c.with_pending ? ", iota, inject" : ", iota")
          : c.with_pending ? ", inject"
                           : "",
          c.with_iota ? " + hc_activations" : "", verdict.c_str(), row0_same ? "bit-identical" : "DIFFERENT",
          control_differs ? "differs (control ok)" : "SAME");
      tally.expect(failed_rows.empty(), name + ": == the separate ops at every row count");
      tally.expect(row0_same, name + ": a row among others == alone");
      tally.expect(control_differs, name + ": negative control (perturbed scale) differs");
    }
  }
  tc_decode_set_planes(before);
  if (variant_before.empty())
    unsetenv("DS_CUDA_HC_TAIL_VARIANT");
  else
    setenv("DS_CUDA_HC_TAIL_VARIANT", variant_before.c_str(), 1);
}

}  // namespace ds::cuda::modelcheck
