// MoE routing (moe_routing.h): one warp per row (dev::route_row, moe_route_row.cuh). Lane l holds experts l,
// l+32, ...; every reduction is a fixed per-lane order then an xor butterfly over a commutative, associative
// combine, so all lanes agree bit for bit.
#include <climits>
#include <string>
#include <type_traits>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/moe_route_row.cuh"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/wx_launch.cuh"

namespace ds::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 4;

// kSlots: experts per lane, 32 * kSlots >= E (16 for 512 experts: the slots past E would only be skipped, so
// the bits do not depend on it).
template <int kSlots>
__global__ void __launch_bounds__(kRowsPerBlock* kWarp)
    route_kernel(const float* logits, int64_t ld, int n_rows, dev::RouteOutputs out) {
  dev::grid_dependency_wait();
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= n_rows) return;
  dev::route_row<kSlots>(logits + int64_t{row} * ld, row, n_rows, out);
}

// The router product of one row (persistent_row_product: affine_wx's one-row chains), then, in the warp of
// the grid that counts itself last, the routing of its first E outputs (moe_route's route_row).
constexpr int kFusedSlots = 16;  // E <= 512

template <int Bits>
__global__ void __launch_bounds__(detail::kWarpsPerBlock * 32, 4)
    router_route_kernel(typename detail::AffineUnit<Bits>::Matrix m, int64_t n_out, const float* x, float* y,
                        dev::RouteOutputs out, uint32_t* counter) {
  detail::persistent_row_product<detail::AffineUnit<Bits>, detail::F32Rows>(m, n_out,
                                                                            detail::F32Rows{x, m.cols}, y);
  __threadfence();  // this lane's logits, before its warp is counted
  __syncwarp();
  const int lane = threadIdx.x % kWarp;
  uint32_t arrived = 0;
  if (lane == 0) arrived = atomicAdd(counter, 1u);
  arrived = __shfl_sync(0xffffffffu, arrived, 0);
  if (arrived != gridDim.x * detail::kWarpsPerBlock - 1) return;
  __threadfence();
  dev::route_row<kFusedSlots>(y, 0, 1, out);
  if (lane == 0) *counter = 0;  // every warp has arrived: ready for the next launch (graph replays)
}

void check_route(const char* op, int n_rows, int E, int k, const void* logits, const int32_t* ids,
                 const float* weights, const ExpertRow* up_pairs, const ExpertRow* down_pairs,
                 int shared_expert) {
  const std::string o(op);
  if (E < 1 || E > kMaxRoutingExperts)
    throw ArgumentError(o + ": E must be in 1..1024 (got " + std::to_string(E) + ")");
  if (k < 1 || k > E || k > kMaxRoutingTopK)
    throw ArgumentError(o + ": k must be in 1..min(E, 32) (got " + std::to_string(k) + ")");
  if (n_rows < 1) throw ArgumentError(o + ": n_rows must be positive");
  if (!logits || !ids || !weights) throw ArgumentError(o + ": a buffer pointer is null");
  if ((up_pairs == nullptr) != (down_pairs == nullptr))
    throw ArgumentError(o + ": up_pairs and down_pairs go together");
  if (shared_expert >= 0 && up_pairs == nullptr)
    throw ArgumentError(o + ": a shared expert's pairs need up_pairs and down_pairs");
}

}  // namespace

bool moe_route_fast() {
  return env_on_off("DS_CUDA_ROUTE_FAST", kDefaultRouteFast);
}

void moe_route(const float* logits, int n_rows, int E, int k, bool renormalise, int32_t* ids, float* weights,
               cudaStream_t stream, int64_t ld_logits, ExpertRow* up_pairs, ExpertRow* down_pairs,
               int shared_expert) {
  check_route("moe_route", n_rows, E, k, logits, ids, weights, up_pairs, down_pairs, shared_expert);
  if (ld_logits == 0) ld_logits = E;
  if (ld_logits < E) throw ArgumentError("moe_route: ld_logits must be at least E");
  const int blocks = (n_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  const bool fast = moe_route_fast();
  const auto launch = [&](auto slots) {
    route_kernel<decltype(slots)::value><<<blocks, kRowsPerBlock * kWarp, 0, stream>>>(
        logits, ld_logits, n_rows,
        dev::RouteOutputs{E, k, renormalise, ids, weights, up_pairs, down_pairs, shared_expert, fast});
  };
  if (E <= 8 * kWarp)
    launch(std::integral_constant<int, 8>{});
  else if (E <= 16 * kWarp)
    launch(std::integral_constant<int, 16>{});
  else
    launch(std::integral_constant<int, kMaxRoutingExperts / kWarp>{});
  check_launch("moe_route");
}

bool affine_wx_route(const AffineWeight& w, const float* x, float* y, int E, int k, bool renormalise,
                     int32_t* ids, float* weights, ExpertRow* up_pairs, ExpertRow* down_pairs,
                     int shared_expert, uint32_t* counter, cudaStream_t stream) {
  constexpr const char* op = "affine_wx_route";
  if (E > kFusedSlots * kWarp || w.rows < E || w.n_experts != 1) return false;
  check_route(op, 1, E, k, y, ids, weights, up_pairs, down_pairs, shared_expert);
  const int shift = detail::group_shift_of(op, w);
  if (x == nullptr || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    detail::bad_arg(op, "x must be 16-byte aligned");
  if (counter == nullptr) detail::bad_arg(op, "counter must be a device pointer");
  const dev::RouteOutputs out{
      E, k, renormalise, ids, weights, up_pairs, down_pairs, shared_expert, moe_route_fast()};
  with_bits(w.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    constexpr auto kernel = router_route_kernel<B>;
    const int64_t per_block =
        int64_t{detail::kWarpsPerBlock / detail::column_slices<detail::AffineUnit<B>>(w.rows, w.cols)} *
        detail::kOutputsPerWarp;
    const int64_t tasks = (w.rows + per_block - 1) / per_block;
    kernel<<<static_cast<unsigned>(detail::resident_blocks<kernel>(tasks)), detail::kWarpsPerBlock * 32, 0,
             stream>>>(detail::affine_matrix<B>(w, shift), w.rows, x, y, out, counter);
  });
  check_launch(op);
  return true;
}

}  // namespace ds::cuda
