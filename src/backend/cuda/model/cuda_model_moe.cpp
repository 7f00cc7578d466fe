// CudaModel's MLP and MoE steps of a forward (routing, the routed experts by windows, tiles or pairs, the
// shared expert, the combine); the rest of the forward is in cuda_model.cpp.
#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/model/cuda_model_parts.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/wx_products.h"

namespace ds::cuda {

namespace {

constexpr int kMaxExpertWindowSlots = 4096;  // moe_expert_windows takes at most this many (row, rank) pairs

}  // namespace

// gate|up of an MLP on n rows of x: one product into gu [n, 2 inter] (two when the encodings differ), then
// h = silu(gate) * up [n, inter].
void CudaModel::mlp_in(const DeviceMatrix& gate_up, const DeviceMatrix& up_alone, int64_t inter, int n,
                       const float* x, float* gu, float* h) {
  const cudaStream_t st = stream_.get();
  const int64_t D = cfg_.hidden;
  wx(gate_up, x, D, n, gu, 2 * inter, st);
  if (up_alone.valid()) wx(up_alone, x, D, n, gu + inter, 2 * inter, st);
  silu_mul_halves(gu, n, static_cast<int>(inter), h, st);
}

void CudaModel::moe(const Layer& L, int n, const float* x, float* y) {
  Scratch& s = *scratch_;
  const cudaStream_t st = stream_.get();
  const int D = static_cast<int>(cfg_.hidden), E = static_cast<int>(cfg_.n_experts),
            K = static_cast<int>(cfg_.experts_per_tok);
  if (L.dense) {
    op("mlp");
    const int64_t I = cfg_.dense_inter;
    mlp_in(L.sh_gate_up, L.sh_up_alone, I, n, x, s.sgu, s.sh);
    wx(L.sh_down, s.sh, I, n, y, D, st);
    return;
  }
  op("moe router|shared in");
  // Router logits, then (with a shared expert) its gate|up and its gate logit, one row each.
  const int64_t RW = L.router_shared.width, SI = cfg_.shared_inter;
  // Slots: the n*K routed (row, rank) pairs, then, with the shared expert stacked as expert E, one per row.
  const int I = static_cast<int>(cfg_.moe_inter), routed = n * K;
  const bool stacked = L.shared_stacked;
  const int all = routed + (stacked ? n : 0);
  // Expert windows (each expert's weights read once for all the rows it serves) where the kernels take the
  // matrices; the per-pair products otherwise (their pairs written by the routing). Both give each row
  // affine_wx's bits.
  const bool windows = opt_.expert_windows && experts_windowed_ && routed <= kMaxExpertWindowSlots;
  // Expert tiles (prompt passes, decode tensor products) group the routing themselves: no pairs.
  const bool tiled = (prompt_pass_ || decode_tensor_experts(L)) && prompt_experts_tiled(L);
  const bool pairs = !tiled && (!windows || stacked);
  // fused_route/swiglu/combine: ops folded into the FMA products' launches, each with the bits of the
  // separate ops.
  const bool decode = !prompt_pass_;
  const DeviceMatrix& router = L.router_shared.joined;
  bool route_in_experts = false;  // the tensor experts' gate|up launch routes the row itself (one row)
  if (!(opt_.fused_route && decode && n == 1 && router.kind == DeviceMatrix::Kind::Affine &&
        !decode_tensor_takes(router) &&
        affine_wx_route(router.affine, x, s.rjoint, E, K, cfg_.norm_topk_prob, s.ids, s.weights,
                        pairs ? s.up_pairs : nullptr, pairs ? s.down_pairs : nullptr,
                        stacked && pairs ? E : -1, s.counters, st))) {
    wx(L.router_shared, x, D, n, s.rjoint, st);
    route_in_experts = tiled && experts_route_themselves(L, n);
    if (!route_in_experts) {
      op("moe top-k");
      moe_route(s.rjoint, n, E, K, cfg_.norm_topk_prob, s.ids, s.weights, st, RW,
                pairs ? s.up_pairs : nullptr, pairs ? s.down_pairs : nullptr, stacked && pairs ? E : -1);
    }
  }
  const int32_t* slot_of = nullptr;
  if (tiled) {
    slot_of = prompt_experts(L, n, x, y, route_in_experts);
    if (slot_of == nullptr) return;  // the down launch combined (one row, tc_decode_experts_routed)
  } else if (windows) {
    moe_expert_windows(s.ids, n, K, E, s.windows, s.row_ids, s.slot_of, st);
    op("moe expert gate|up");
    wx_windows(L.gate_up, s.windows, routed, s.row_ids, x, D, n, s.gu, 2 * I, st);
    if (L.up_alone.valid())
      wx_windows(L.up_alone, s.windows, routed, s.row_ids, x, D, n, s.gu + I, 2 * I, st);
    if (stacked) {
      float* gu = s.gu + int64_t{routed} * 2 * I;
      wx_grouped(L.gate_up, s.up_pairs + routed, n, x, D, n, gu, 2 * I, st);
      if (L.up_alone.valid()) wx_grouped(L.up_alone, s.up_pairs + routed, n, x, D, n, gu + I, 2 * I, st);
    }
    silu_mul_halves(s.gu, all, I, s.h, st);
    op("moe expert down");
    wx_windows(L.down, s.windows, routed, nullptr, s.h, I, routed, s.slots, D, st);
    if (stacked)
      wx_grouped(L.down, s.down_pairs + routed, n, s.h, I, all, s.slots + int64_t{routed} * D, D, st);
    slot_of = s.slot_of;
  } else {
    op("moe expert gate|up");
    if (opt_.fused_swiglu && decode && L.gate_up.kind == DeviceMatrix::Kind::Affine && !L.up_alone.valid() &&
        I % 2 == 0) {
      affine_wx_grouped_swiglu(L.gate_up.affine, s.up_pairs, all, Activations{x, ActType::F32, D}, n, s.h, I,
                               st);
    } else {
      wx_grouped(L.gate_up, s.up_pairs, all, x, D, n, s.gu, 2 * I, st);
      if (L.up_alone.valid()) wx_grouped(L.up_alone, s.up_pairs, all, x, D, n, s.gu + I, 2 * I, st);
      silu_mul_halves(s.gu, all, I, s.h, st);
    }
    op("moe expert down");
    if (opt_.fused_combine && decode && L.down.kind == DeviceMatrix::Kind::Affine &&
        (stacked || !L.has_shared)) {
      const MoeCombineArgs c{s.weights, stacked ? s.rjoint + E : nullptr, RW, y, s.counters + 1, n, K};
      affine_wx_grouped_combine(L.down.affine, s.down_pairs, all, Activations{s.h, ActType::F32, I}, all,
                                s.slots, D, c, st);
      return;
    }
    // The routing wrote down_pairs two launches or more back (route, gate|up [, up, SwiGLU], down).
    wx_grouped(L.down, s.down_pairs, all, s.h, I, all, s.slots, D, st, decode && down_pairs_early());
  }
  const float *shared = nullptr, *shared_gate = nullptr;
  if (stacked) {
    shared = s.slots + int64_t{routed} * D, shared_gate = s.rjoint + E;
  } else if (L.has_shared) {
    op("moe shared");
    silu_mul_halves(s.rjoint + E, n, static_cast<int>(SI), s.sh, st, RW);
    wx(L.sh_down, s.sh, SI, n, s.shared, D, st);
    shared = s.shared, shared_gate = s.rjoint + E + 2 * SI;
  }
  op("moe combine");
  moe_combine(s.weights, s.slots, slot_of, n, K, D, shared, shared_gate, y, st, RW);
}

}  // namespace ds::cuda
