// Launch side of the weight products: argument checks, window-size tiers and kernel dispatch.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/moe_epilogues.cuh"
#include "backend/cuda/wx_kernels.cuh"
#include "backend/cuda/wx_launch.cuh"
#include "backend/cuda/wx_products.h"
#include "backend/cuda/wx_row.cuh"
#include "backend/cuda/wx_row_choice.h"

namespace ds::cuda {
namespace {

using detail::affine_matrix;
using detail::bad_arg;
using detail::group_shift_of;
using detail::kOutputsPerWarp;
using detail::kWarpsPerBlock;
using detail::resident_blocks;

template <class Unit, class Rows, int R>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    window_kernel(typename Unit::Matrix m, int64_t n_out, Rows rows, int n_rows, float* y, int64_t ldy) {
  dev::grid_dependency_wait();
  detail::block_product<Unit, Rows, R>(m, n_out, rows, 0, n_rows, y, ldy);
}

// Grouped products on persistent blocks: a task is (pair, the outputs a block of block_product would own);
// block b takes tasks b, b + gridDim.x, ... and, as row_kernel does, loads the first unit of its next task
// (possibly another expert) while computing the last unit of this one. Each output's chain, butterfly and
// slice merge are block_product's, so each pair equals affine_wx of its expert on its row alone.
// Out (moe_epilogues.cuh) picks each output's weight row and stores a task's outputs: as they are, or with
// the MoE op that reads them next folded in.
template <int Bits, class Rows, class Out = detail::PlainOut>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, 4)
    grouped_row_kernel(typename detail::AffineUnit<Bits>::Matrix m, int64_t n_out, int64_t n_experts,
                       int64_t n_x_rows, const ExpertRow* pairs, int n_pairs, Rows rows, float* y,
                       int64_t ldy, Out out = {}) {
  using Unit = detail::AffineUnit<Bits>;
  constexpr int NO = kOutputsPerWarp;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int slices = detail::column_slices<Unit>(n_out, m.cols);
  const int64_t units = m.cols / Unit::kCols, stride = 32 * slices,
                u_first = (slices == 1 ? 0 : warp) * 32 + lane;
  const int64_t per_task = int64_t(kWarpsPerBlock / slices) * NO,
                tasks_per_pair = (n_out + per_task - 1) / per_task;
  const int64_t n_tasks = tasks_per_pair * n_pairs;
  const int64_t expert_words = n_out * m.words_per_row, expert_groups = n_out * m.groups_per_row;
  __shared__ float part[kWarpsPerBlock][NO];
  struct Task {
    typename Unit::Matrix m;
    int64_t o0, x_row, p, local;
    float* y;
    bool ok;
  };
  auto task_at = [&](int64_t task) {
    Task t;
    const int64_t p = task / tasks_per_pair, local = task % tasks_per_pair;
    const ExpertRow pr = pairs[p];
    t.ok = pr.expert >= 0 && pr.expert < n_experts && pr.row >= 0 && pr.row < n_x_rows;
    t.m = m;
    if (t.ok) {
      const int64_t e = pr.expert;
      t.m.codes += e * expert_words;
      t.m.scales += e * expert_groups;
      t.m.biases += e * expert_groups;
    }
    t.o0 = slices == 1 ? (local * kWarpsPerBlock + warp) * NO : local * NO;
    t.x_row = t.ok ? pr.row : 0;
    t.y = y + p * ldy;
    t.p = p, t.local = local;
    return t;
  };
  auto load_all = [&](Unit(&dst)[NO], const Task& t, int64_t u) {
#pragma unroll
    for (int o = 0; o < NO; ++o) dst[o].load(t.m, out.row(t.o0, o, n_out), u);
  };
  dev::grid_dependency_wait();
  int64_t task = blockIdx.x;
  if (task >= n_tasks) return;  // uniform over the block
  Task cur_t = task_at(task);
  Unit cur[NO];
  if (cur_t.ok && cur_t.o0 < n_out && u_first < units) load_all(cur, cur_t, u_first);
  while (task < n_tasks) {  // uniform over the block
    const int64_t next_task = task + gridDim.x;
    const bool has_next = next_task < n_tasks;
    Task next_t = cur_t;
    if (has_next) next_t = task_at(next_task);
    const bool next_loads = has_next && next_t.ok && next_t.o0 < n_out && u_first < units;
    // Uniform over the warp, and over the block when it shares outputs (o0 and the pair are the block's).
    const bool active = cur_t.ok && cur_t.o0 < n_out;
    float acc[1][NO];
#pragma unroll
    for (int o = 0; o < NO; ++o) acc[0][o] = 0.0f;
    if (active) {
      for (int64_t u = u_first; u < units; u += stride) {
        Unit next[NO];
        if (u + stride < units)
          load_all(next, cur_t, u + stride);
        else if (next_loads)
          load_all(next, next_t, u_first);
        detail::unit_product<Unit, Rows, 1, NO>(cur, u, rows, cur_t.x_row, 1, acc);
#pragma unroll
        for (int o = 0; o < NO; ++o) cur[o] = next[o];
      }
      detail::sum_warp_slices(acc, part, slices, warp, lane);
    } else if (next_loads) {
      load_all(cur, next_t, u_first);
    }
    if (cur_t.o0 < n_out && (slices == 1 || warp == 0))
      out.store(cur_t.y, cur_t.o0, acc[0], cur_t.ok, lane, n_out);
    out.task_done(cur_t.p, cur_t.local, per_task, y, ldy, n_out);
    task = next_task;
    cur_t = next_t;
  }
}

// grouped_row_kernel's products on the two-halves layout (wx_row.cuh; PlainOut and SwigluOut only).
template <int Bits, class Rows, class Out>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, 4)
    paired_grouped_row_kernel(detail::AffineMatrix m, int64_t n_out, int64_t n_experts, int64_t n_x_rows,
                              const ExpertRow* pairs, int n_pairs, Rows rows, float* y, int64_t ldy, Out out,
                              bool pairs_ready) {
  detail::paired_grouped_product<Bits, Rows, Out>(m, n_out, n_experts, n_x_rows, pairs, n_pairs, rows, y, ldy,
                                                  out, pairs_ready);
}

// Blocks stride over the windows (blockIdx.y, then every gridDim.y-th); a window's rows run in the tier of
// its size (1, 2 or 4), as affine_wx would run them, so the grid never changes a result.
template <int Bits, class Rows>
__device__ __forceinline__ void expert_window(const typename detail::AffineUnit<Bits>::Matrix& m,
                                              int64_t n_out, int64_t n_experts, int64_t n_x_rows,
                                              const ExpertWindow& win, const int32_t* row_ids,
                                              const Rows& rows, float* y, int64_t ldy) {
  using Unit = detail::AffineUnit<Bits>;
  bool ok = win.expert >= 0 && win.expert < n_experts && win.count > 0 && win.count <= kMaxExpertWindowRows &&
            win.first >= 0;
  for (int j = 0; ok && j < win.count; ++j) {
    const int64_t xr = row_ids ? row_ids[win.first + j] : int64_t{win.first} + j;
    ok = xr >= 0 && xr < n_x_rows;
  }
  float* y_rows = y + int64_t{win.first} * ldy;
  if (!ok) {
    // A bad window cannot throw from the device: its outputs become NaN, visibly wrong.
    const int n = win.count > 0 && win.count <= kMaxExpertWindowRows && win.first >= 0 ? win.count : 0;
    for (int j = 0; j < n; ++j)
      for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < n_out;
           o += int64_t(gridDim.x) * blockDim.x)
        y_rows[j * ldy + o] = __int_as_float(0x7FC00000);
    return;
  }
  typename Unit::Matrix me = m;
  const int64_t e = win.expert;
  me.codes += e * n_out * (m.cols / 32 * Bits);
  me.scales += e * n_out * (m.cols >> m.group_shift);
  me.biases += e * n_out * (m.cols >> m.group_shift);
  if (row_ids != nullptr) {
    const detail::GatherRows<Rows> g{rows, row_ids + win.first};
    if (win.count == 1)
      detail::block_product<Unit, detail::GatherRows<Rows>, 1>(me, n_out, g, 0, 1, y_rows, ldy);
    else if (win.count == 2)
      detail::block_product<Unit, detail::GatherRows<Rows>, 2>(me, n_out, g, 0, 2, y_rows, ldy);
    else
      detail::block_product<Unit, detail::GatherRows<Rows>, 4>(me, n_out, g, 0, win.count, y_rows, ldy);
  } else {
    if (win.count == 1)
      detail::block_product<Unit, Rows, 1>(me, n_out, rows, win.first, 1, y_rows, ldy);
    else if (win.count == 2)
      detail::block_product<Unit, Rows, 2>(me, n_out, rows, win.first, 2, y_rows, ldy);
    else
      detail::block_product<Unit, Rows, 4>(me, n_out, rows, win.first, win.count, y_rows, ldy);
  }
}

// At most 168 registers (3 blocks per SM): the 2- and 4-row paths compiled into the same kernel would
// otherwise set the register count, and the occupancy, for every window (at 128 the kernel spills).
template <int Bits, class Rows>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, 3)
    expert_windows_kernel(typename detail::AffineUnit<Bits>::Matrix m, int64_t n_out, int64_t n_experts,
                          int64_t n_x_rows, const ExpertWindow* windows, int n_windows,
                          const int32_t* row_ids, Rows rows, float* y, int64_t ldy) {
  dev::grid_dependency_wait();
  for (int i = blockIdx.y; i < n_windows; i += gridDim.y) {
    const ExpertWindow win = windows[i];
    if (win.count == 0) continue;  // an unused slot
    expert_window<Bits, Rows>(m, n_out, n_experts, n_x_rows, win, row_ids, rows, y, ldy);
    __syncthreads();  // block_product's shared partial sums are reused by the next window
  }
}

// The hyper-connection mix's tail for one row (affine_wx_hc_tail): block b owns d = 4b .. 4b+3; warp k
// computes outputs k*D + d (stream k) with slice_product, the chain of every affine_wx tier; the block's
// activated x row is staged in shared memory.
constexpr int kMaxHcRank = 1024;

template <int Bits>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    hc_tail_kernel(typename detail::AffineUnit<Bits>::Matrix m, const float* joint, int R, float inv_s,
                   const float* normed, int D, float* x, float* iota) {
  __shared__ __align__(16) float low[kMaxHcRank];
  __shared__ float mix[kWarpsPerBlock][kOutputsPerWarp];
  dev::grid_dependency_wait();
  for (int i = threadIdx.x; i < R; i += blockDim.x) low[i] = dev::silu(__fmul_rn(joint[i], inv_s));
  if (iota != nullptr && blockIdx.x == 0 && threadIdx.x < kWarpsPerBlock)
    iota[threadIdx.x] = __fmul_rn(2.0f, dev::sigmoid(__fmul_rn(joint[R + threadIdx.x], inv_s)));
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t d0 = int64_t{blockIdx.x} * kOutputsPerWarp;
  float acc[1][kOutputsPerWarp];
  detail::slice_product<detail::AffineUnit<Bits>, detail::F32Rows, 1>(
      m, int64_t{kWarpsPerBlock} * D, warp * int64_t{D} + d0, detail::F32Rows{low, 0}, 0, 1, 0, 1, acc);
  if (lane == 0) {
#pragma unroll
    for (int o = 0; o < kOutputsPerWarp; ++o) mix[warp][o] = acc[0][o];
  }
  __syncthreads();
  if (threadIdx.x < kOutputsPerWarp) {  // hc_combine's arithmetic, streams in order
    const int64_t d = d0 + threadIdx.x;
    float s = 0.0f;
    for (int k = 0; k < kWarpsPerBlock; ++k)
      s = __fadd_rn(s, __fmul_rn(dev::sigmoid(mix[k][threadIdx.x]), normed[k * int64_t{D} + d]));
    x[d] = __fmul_rn(s, __fdiv_rn(1.0f, static_cast<float>(kWarpsPerBlock)));
  }
}

// One block: count the pairs per expert, lay the experts' slots out in expert order, then each expert's
// thread lists its pairs in (row, rank) order and cuts them into windows. Integer work only: the same every
// run.
__global__ void expert_windows_build_kernel(const int32_t* topk, int n_pairs, int k, int n_experts,
                                            ExpertWindow* windows, int32_t* row_ids, int32_t* slot_of) {
  dev::grid_dependency_wait();
  __shared__ int32_t count[1024], slot0[1024], win0[1024];
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) count[e] = 0;
  for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
    windows[p] = ExpertWindow{0, 0, 0};
    slot_of[p] = -1;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
    const int32_t e = topk[p];
    if (e >= 0 && e < n_experts) atomicAdd(&count[e], 1);  // integer counts: exact in any order
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t s = 0, w = 0;
    for (int e = 0; e < n_experts; ++e) {
      slot0[e] = s;
      win0[e] = w;
      s += count[e];
      w += (count[e] + kMaxExpertWindowRows - 1) / kMaxExpertWindowRows;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    int32_t j = 0;
    for (int p = 0; p < n_pairs && j < count[e]; ++p) {
      if (topk[p] != e) continue;
      const int32_t slot = slot0[e] + j;
      row_ids[slot] = p / k;
      slot_of[p] = slot;
      if (j % kMaxExpertWindowRows == 0)
        windows[win0[e] + j / kMaxExpertWindowRows] =
            ExpertWindow{e, slot, min(kMaxExpertWindowRows, count[e] - j)};
      ++j;
    }
  }
}

void check_common(const char* op, int64_t rows, int64_t cols, const Activations& x, int n_rows,
                  const float* y, int64_t ldy) {
  if (rows <= 0 || cols <= 0)
    bad_arg(op, "weight shape must be positive (rows " + std::to_string(rows) + ", cols " +
                    std::to_string(cols) + ")");
  if (n_rows < 1 || n_rows > kMaxWindowRows)
    bad_arg(op,
            "n_rows must be 1.." + std::to_string(kMaxWindowRows) + " (got " + std::to_string(n_rows) + ")");
  if (x.data == nullptr || y == nullptr) bad_arg(op, "x and y must be device pointers");
  if (reinterpret_cast<uintptr_t>(x.data) % 16 != 0) bad_arg(op, "x must be 16-byte aligned");
  if (x.ld < cols || x.ld % 8 != 0)
    bad_arg(op, "x.ld must be >= cols and a multiple of 8 (got " + std::to_string(x.ld) + ")");
  if (ldy < rows) bad_arg(op, "ldy must be >= the weight's rows (got " + std::to_string(ldy) + ")");
}

// Outputs per block: kOutputsPerWarp per warp, or kOutputsPerWarp per block when its warps split the columns.
template <class Unit>
int64_t blocks_for(int64_t n_out, int64_t cols) {
  const int64_t per_block =
      int64_t(kWarpsPerBlock / detail::column_slices<Unit>(n_out, cols)) * kOutputsPerWarp;
  return (n_out + per_block - 1) / per_block;
}

// Window sizes run in tiers 1, 2, 4, 8, 16; a smaller window inside a tier skips the missing rows, so a row's
// arithmetic is the same in every tier.
template <class Unit, class Rows>
void launch_window(const typename Unit::Matrix& m, int64_t n_out, const Rows& rows, int n_rows, float* y,
                   int64_t ldy, cudaStream_t stream, const char* op) {
  const dim3 grid(static_cast<unsigned>(blocks_for<Unit>(n_out, m.cols)));
  const dim3 block(kWarpsPerBlock * 32);
  if (n_rows <= 1)
    detail::launch_row<Unit, Rows>(m, n_out, rows, y, stream);
  else if (n_rows <= 2)
    window_kernel<Unit, Rows, 2><<<grid, block, 0, stream>>>(m, n_out, rows, n_rows, y, ldy);
  else if (n_rows <= 4)
    window_kernel<Unit, Rows, 4><<<grid, block, 0, stream>>>(m, n_out, rows, n_rows, y, ldy);
  else if (n_rows <= 8)
    window_kernel<Unit, Rows, 8><<<grid, block, 0, stream>>>(m, n_out, rows, n_rows, y, ldy);
  else
    window_kernel<Unit, Rows, 16><<<grid, block, 0, stream>>>(m, n_out, rows, n_rows, y, ldy);
  check_launch(op);
}

template <class Unit>
void launch_window_any_x(const typename Unit::Matrix& m, int64_t n_out, const Activations& x, int n_rows,
                         float* y, int64_t ldy, cudaStream_t stream, const char* op) {
  if (x.type == ActType::F32)
    launch_window<Unit>(m, n_out, detail::F32Rows{static_cast<const float*>(x.data), x.ld}, n_rows, y, ldy,
                        stream, op);
  else
    launch_window<Unit>(m, n_out, detail::Bf16Rows{static_cast<const uint16_t*>(x.data), x.ld}, n_rows, y,
                        ldy, stream, op);
}

}  // namespace

void affine_wx(const AffineWeight& w, const Activations& x, int n_rows, float* y, int64_t ldy,
               cudaStream_t stream) {
  constexpr const char* op = "affine_wx";
  const int shift = group_shift_of(op, w);
  if (w.n_experts != 1) bad_arg(op, "n_experts must be 1 (point codes/scales/biases at the expert instead)");
  check_common(op, w.rows, w.cols, x, n_rows, y, ldy);
  with_bits(w.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    launch_window_any_x<detail::AffineUnit<B>>(affine_matrix<B>(w, shift), w.rows, x, n_rows, y, ldy, stream,
                                               op);
  });
}

void dense_wx(const DenseBf16Weight& w, const Activations& x, int n_rows, float* y, int64_t ldy,
              cudaStream_t stream) {
  constexpr const char* op = "dense_wx";
  if (w.values == nullptr) bad_arg(op, "values must be a device pointer");
  if (w.cols % 8 != 0) bad_arg(op, "cols must be a multiple of 8 (got " + std::to_string(w.cols) + ")");
  if (reinterpret_cast<uintptr_t>(w.values) % 16 != 0) bad_arg(op, "values must be 16-byte aligned");
  check_common(op, w.rows, w.cols, x, n_rows, y, ldy);
  launch_window_any_x<detail::DenseBf16Unit>({w.values, w.cols}, w.rows, x, n_rows, y, ldy, stream, op);
}

namespace {

// The grouped products in one launch, each task's outputs handled by `out` (moe_epilogues.cuh); x rows bf16
// only with PlainOut.
template <class Out>
void launch_grouped(const char* op, const AffineWeight& w, const ExpertRow* pairs, int n_pairs,
                    const Activations& x, int n_x_rows, float* y, int64_t ldy, const Out& out,
                    cudaStream_t stream, bool pairs_ready = false) {
  const int shift = group_shift_of(op, w);
  if (pairs == nullptr) bad_arg(op, "pairs must be a device pointer");
  if (n_pairs < 0 || n_pairs > 65535)
    bad_arg(op, "n_pairs must be 0..65535 (got " + std::to_string(n_pairs) + ")");
  if (n_x_rows < 1) bad_arg(op, "n_x_rows must be >= 1");
  constexpr bool kPlain = std::is_same_v<Out, detail::PlainOut>;
  if (!kPlain && x.type != ActType::F32) bad_arg(op, "x must be f32 rows");
  if (n_pairs == 0) return;
  const dim3 block(kWarpsPerBlock * 32);
  // The two-halves kernel with a paired one-row kernel (the combine's tiles are the lockstep kernel's).
  const RowKernel k = one_row_kernel();
  with_bits(w.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    using Unit = detail::AffineUnit<B>;
    const int64_t warps = kWarpsPerBlock / detail::column_slices<Unit>(w.rows, w.cols);
    auto tasks_of = [&](int64_t per_warp) {
      return (w.rows + warps * per_warp - 1) / (warps * per_warp) * n_pairs;
    };
    // paired_min_tasks(): wx_row_choice.h.
    const bool paired = !std::is_same_v<Out, detail::CombineOut> && paired_grouped() &&
                        (k == RowKernel::Paired || k == RowKernel::PairedStaged) &&
                        tasks_of(detail::kPairedOutputsPerWarp) >= paired_min_tasks();
    const int64_t tasks = tasks_of(paired ? detail::kPairedOutputsPerWarp : kOutputsPerWarp);
    const auto m = affine_matrix<B>(w, shift);
    auto launch_for = [&](const auto& rows) {  // the paired or the lockstep kernel for this row type
      using Rows = std::decay_t<decltype(rows)>;
      if (paired) {
        constexpr auto kernel = paired_grouped_row_kernel<B, Rows, Out>;
        kernel<<<static_cast<unsigned>(resident_blocks<kernel>(tasks)), block, 0, stream>>>(
            m, w.rows, w.n_experts, n_x_rows, pairs, n_pairs, rows, y, ldy, out, pairs_ready);
      } else {  // reads the pairs after its wait whatever pairs_ready says
        constexpr auto kernel = grouped_row_kernel<B, Rows, Out>;
        kernel<<<static_cast<unsigned>(resident_blocks<kernel>(tasks)), block, 0, stream>>>(
            m, w.rows, w.n_experts, n_x_rows, pairs, n_pairs, rows, y, ldy, out);
      }
    };
    if (x.type == ActType::F32)
      launch_for(detail::F32Rows{static_cast<const float*>(x.data), x.ld});
    else if constexpr (kPlain)
      launch_for(detail::Bf16Rows{static_cast<const uint16_t*>(x.data), x.ld});
  });
  check_launch(op);
}

}  // namespace

void affine_wx_grouped(const AffineWeight& w, const ExpertRow* pairs, int n_pairs, const Activations& x,
                       int n_x_rows, float* y, int64_t ldy, cudaStream_t stream, bool pairs_ready) {
  constexpr const char* op = "affine_wx_grouped";
  check_common(op, w.rows, w.cols, x, 1, y, ldy);
  launch_grouped(op, w, pairs, n_pairs, x, n_x_rows, y, ldy, detail::PlainOut{}, stream, pairs_ready);
}

void affine_wx_grouped_swiglu(const AffineWeight& w, const ExpertRow* pairs, int n_pairs,
                              const Activations& x, int n_x_rows, float* h, int64_t ldh,
                              cudaStream_t stream) {
  constexpr const char* op = "affine_wx_grouped_swiglu";
  if (w.rows % 4 != 0)
    bad_arg(op, "rows (gate then up) must be a multiple of 4 (got " + std::to_string(w.rows) + ")");
  check_common(op, w.rows / 2, w.cols, x, 1, h, ldh);
  launch_grouped(op, w, pairs, n_pairs, x, n_x_rows, h, ldh, detail::SwigluOut{w.rows / 2}, stream);
}

int64_t grouped_combine_tiles(const AffineWeight& w) {
  return blocks_for<detail::AffineUnit<4>>(w.rows, w.cols);  // every code width has 32-column units
}

void affine_wx_grouped_combine(const AffineWeight& w, const ExpertRow* pairs, int n_pairs,
                               const Activations& x, int n_x_rows, float* slots, int64_t ld_slots,
                               const MoeCombineArgs& c, cudaStream_t stream) {
  constexpr const char* op = "affine_wx_grouped_combine";
  check_common(op, w.rows, w.cols, x, 1, slots, ld_slots);
  if (c.K < 1 || c.K > 32) bad_arg(op, "K must be 1..32 (got " + std::to_string(c.K) + ")");
  const bool shared = c.shared_gate != nullptr;
  if (c.n_rows < 1 || int64_t{n_pairs} != int64_t{c.n_rows} * (c.K + (shared ? 1 : 0)))
    bad_arg(op,
            "n_pairs must be n_rows * (K + 1 with a shared expert) (got " + std::to_string(n_pairs) + ")");
  if (c.weights == nullptr || c.out == nullptr || c.counters == nullptr)
    bad_arg(op, "weights, out and counters must be device pointers");
  const detail::CombineOut out{c.weights, c.shared_gate, c.ld_gate,
                               c.out,     c.counters,    grouped_combine_tiles(w),
                               c.n_rows,  c.K,           shared};
  launch_grouped(op, w, pairs, n_pairs, x, n_x_rows, slots, ld_slots, out, stream);
}

void affine_wx_expert_windows(const AffineWeight& w, const ExpertWindow* windows, int n_windows,
                              const int32_t* row_ids, const Activations& x, int n_x_rows, float* y,
                              int64_t ldy, cudaStream_t stream) {
  constexpr const char* op = "affine_wx_expert_windows";
  const int shift = group_shift_of(op, w);
  check_common(op, w.rows, w.cols, x, 1, y, ldy);
  if (windows == nullptr) bad_arg(op, "windows must be a device pointer");
  if (n_windows < 0 || n_windows > 65535)
    bad_arg(op, "n_windows must be 0..65535 (got " + std::to_string(n_windows) + ")");
  if (n_x_rows < 1) bad_arg(op, "n_x_rows must be >= 1");
  if (n_windows == 0) return;
  const dim3 block(kWarpsPerBlock * 32);
  with_bits(w.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    // About 16k blocks in all (several waves on 132 SMs); more windows than that are strided over.
    const int64_t per_window = blocks_for<detail::AffineUnit<B>>(w.rows, w.cols);
    const int64_t strided = std::max<int64_t>(1, std::min<int64_t>(n_windows, 16384 / per_window));
    const dim3 grid(static_cast<unsigned>(per_window), static_cast<unsigned>(strided));
    const auto m = affine_matrix<B>(w, shift);
    if (x.type == ActType::F32)
      expert_windows_kernel<B, detail::F32Rows>
          <<<grid, block, 0, stream>>>(m, w.rows, w.n_experts, n_x_rows, windows, n_windows, row_ids,
                                       detail::F32Rows{static_cast<const float*>(x.data), x.ld}, y, ldy);
    else
      expert_windows_kernel<B, detail::Bf16Rows>
          <<<grid, block, 0, stream>>>(m, w.rows, w.n_experts, n_x_rows, windows, n_windows, row_ids,
                                       detail::Bf16Rows{static_cast<const uint16_t*>(x.data), x.ld}, y, ldy);
  });
  check_launch(op);
}

void moe_expert_windows(const int32_t* topk, int n_rows, int k, int n_experts, ExpertWindow* windows,
                        int32_t* row_ids, int32_t* slot_of, cudaStream_t stream) {
  constexpr const char* op = "moe_expert_windows";
  if (n_experts < 1 || n_experts > 1024)
    bad_arg(op, "n_experts must be 1..1024 (got " + std::to_string(n_experts) + ")");
  if (n_rows < 1 || k < 1 || int64_t{n_rows} * k > 4096)
    bad_arg(op,
            "n_rows*k must be 1..4096 (n_rows " + std::to_string(n_rows) + ", k " + std::to_string(k) + ")");
  if (!topk || !windows || !row_ids || !slot_of)
    bad_arg(op, "topk, windows, row_ids and slot_of must be device pointers");
  expert_windows_build_kernel<<<1, 1024, 0, stream>>>(topk, n_rows * k, k, n_experts, windows, row_ids,
                                                      slot_of);
  check_launch(op);
}

bool affine_wx_hc_tail(const AffineWeight& up, const float* joint, int R, float inv_s, const float* normed,
                       int D, float* x, float* iota, cudaStream_t stream) {
  constexpr const char* op = "affine_wx_hc_tail";
  if (up.rows != int64_t{kWarpsPerBlock} * D || up.cols != R || D % kOutputsPerWarp != 0 || R % 8 != 0 ||
      R > kMaxHcRank || up.n_experts != 1)
    return false;
  const int shift = group_shift_of(op, up);
  bool done = false;
  with_bits(up.bits, [&](auto bits) {
    constexpr int B = decltype(bits)::value;
    if (detail::column_slices<detail::AffineUnit<B>>(up.rows, up.cols) != 1) return;
    hc_tail_kernel<B><<<static_cast<unsigned>(D / kOutputsPerWarp), kWarpsPerBlock * 32, 0, stream>>>(
        affine_matrix<B>(up, shift), joint, R, inv_s, normed, D, x, iota);
    check_launch(op);
    done = true;
  });
  return done;
}

}  // namespace ds::cuda
