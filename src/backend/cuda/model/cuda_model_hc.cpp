// CudaModel's hyper-connection mix (docs/cuda-model.md "Whole model"): the separate ops, or with
// fused_hc the two launches of hc_kernels.h (down|inject split by stream; under the tensor family's `tensor`
// the tail with up on the tensor cores, hc_tensor_tail). CPU math:
// src/model/layers/hyper_connection.cpp.
#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/model/cuda_model_parts.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/model/hc_kernels.h"

namespace ds::cuda {

bool CudaModel::hc_tensor_mix(const DeviceHc& hc) const {
  const int S = static_cast<int>(cfg_.hc_count), D = static_cast<int>(cfg_.hidden),
            R = static_cast<int>(cfg_.hc_rank);
  const DeviceMatrix& di = hc.down_inject.joined;
  return opt_.fused_hc && !prompt_pass_ && di.kind == DeviceMatrix::Kind::Affine &&
         hc.up.kind == DeviceMatrix::Kind::Affine && !decode_tensor_takes(di) && decode_tensor_takes(hc.up) &&
         hc_tensor_tail_on() && hc_head_takes(di.affine, S, D, R) &&
         hc_tensor_tail_takes(hc.up.affine, S, D, R);
}

int CudaModel::hc_head_outputs_taken(int n) const {
  if (opt_.hc_head_outputs > 0) return opt_.hc_head_outputs;
  return hc_head_outputs_for_rows(n, !layers_.empty() && hc_tensor_mix(layers_[0].hc_attn));
}

void CudaModel::hc_mix(const DeviceHc& hc, int n, float* H, const float* pending, const float* iota_in,
                       float* x, float* iota_out) {
  Scratch& s = *scratch_;
  const int S = static_cast<int>(cfg_.hc_count), D = static_cast<int>(cfg_.hidden),
            R = static_cast<int>(cfg_.hc_rank);
  const float inv_s = 1.0f / static_cast<float>(S);
  const cudaStream_t st = stream_.get();
  // With fused_hc, a decode call at every row count: the inject + the norm + the down|inject product split by
  // stream in one launch, the partials' sum + the activations + up + the combine + the inject's store in a
  // second (hc_kernels.h; other down|inject sums than wx's, within the float64 bounds, checked). Not in a
  // prompt pass: there every product is the tiled one.
  const DeviceMatrix& di = hc.down_inject.joined;
  // Nor where the tensor decode products take either matrix (their arithmetic is not the fused kernels').
  if (opt_.fused_hc && !prompt_pass_ && !decode_tensor_takes(di) && !decode_tensor_takes(hc.up) &&
      di.kind == DeviceMatrix::Kind::Affine && hc.up.kind == DeviceMatrix::Kind::Affine &&
      hc_fused_takes(di.affine, hc.up.affine, S, D, R) &&
      (iota_out == nullptr || di.rows == int64_t{R} + S)) {
    op("hc norm|down|inject");
    hc_head(di.affine, H, pending, iota_in, hc.norm.as<float>(), S, D, cfg_.rms_eps, s.normed, s.low_iota, n,
            st, opt_.hc_head_outputs > 0 ? opt_.hc_head_outputs : hc_head_outputs_for_rows(n),
            !prompt_pass_ && loads_first());
    op("hc up");
    hc_tail(hc.up.affine, s.low_iota, di.rows, R, inv_s, s.normed, S, D, H, pending, iota_in, x, iota_out, n,
            st);
    return;
  }
  // The tensor family's fused mix: where the tensor products take hc up but not down|inject (`tensor`: up
  // 10240 x 320 at the real shape, down|inject 324 rows under its min rows), hc_head as above (its FMA
  // down|inject at every decode row count, as fused_hc's) and hc_tensor_tail, whose up outputs are
  // tc_decode_wx's bit for bit (checked). Where they take down|inject too (tensor-all), the separate ops.
  if (hc_tensor_mix(hc) && (iota_out == nullptr || di.rows == int64_t{R} + S)) {
    op("hc norm|down|inject");
    hc_head(di.affine, H, pending, iota_in, hc.norm.as<float>(), S, D, cfg_.rms_eps, s.normed, s.low_iota, n,
            st, opt_.hc_head_outputs > 0 ? opt_.hc_head_outputs : hc_head_outputs_for_rows(n, true),
            !prompt_pass_ && loads_first());
    op("hc up");
    hc_tensor_tail(hc.up.affine, s.low_iota, di.rows, R, inv_s, s.normed, S, D, H, pending, iota_in, x,
                   iota_out, n, st);
    return;
  }
  op("hc norm");
  if (pending != nullptr)  // the previous block's output, injected with the previous iota first
    add_rms_norm_rows(H, int64_t{S} * D, iota_in, pending, hc.norm.as<float>(), S, D, cfg_.rms_eps, s.normed,
                      int64_t{S} * D, n, st);
  else
    rms_norm_rows(H, int64_t{S} * D, hc.norm.as<float>(), S, D, cfg_.rms_eps, s.normed, int64_t{S} * D, n,
                  st);
  op("hc down|inject");
  wx(hc.down_inject, s.normed, int64_t{S} * D, n, s.low_iota, st);
  op("hc up");
  // One row: activations, up product and combine in one launch where the kernel takes the shape (same bits).
  // Not in a prompt pass: there every row takes the tiled products, whatever the pass's row count; nor with
  // the tensor decode products where they take hc up (then at every row count).
  if (n == 1 && !prompt_pass_ && !decode_tensor_takes(hc.up) && hc.up.kind == DeviceMatrix::Kind::Affine &&
      S == 4 && affine_wx_hc_tail(hc.up.affine, s.low_iota, R, inv_s, s.normed, D, x, iota_out, st))
    return;
  hc_activations(s.low_iota, n, hc.down_inject.width, R, S, inv_s, s.low, iota_out, st);
  wx(hc.up, s.low, R, n, s.mix, int64_t{S} * D, st);
  op("hc combine");
  hc_combine(s.mix, s.normed, n, S, D, x, st);
}

}  // namespace ds::cuda
