#pragma once
// One-row products (R = 1) with 8 outputs a warp in two halves (fmarow, docs/cuda-products.md "Kernels"): the
// chains, butterfly and slice merge of every affine_wx / dense_wx tier, bit for bit, run with fewer issued
// instructions a code and no lane left idle on a row of 80 units.
//
// The chain of output o is a sum per *logical* lane l (units l, l + 32S, ... of slice s: 32s + l + 32S k,
// columns in order), then the xor butterfly. Which physical lane runs a chain is free. A warp owns 8 outputs,
// half 0 (outputs 0-3) and half 1 (4-7); physical lane p runs half 0's chain of logical lane p and half 1's
// of logical lane p ^ 16. So lane p walks the units b + 16 (j & 1) + 32S (j >> 1), b = 32s + (p & 15),
// j = 0, 1, 2, ...: the even items (units b + 32S k) are the chains of half hi = p >> 4, the odd items (b +
// 16
// + 32S k) those of half 1 - hi, each in its unit order. Lanes p and p ^ 16 read the same units (x once a
// unit for 8 outputs), and a row of 80 units takes 5 items on every lane (against 3 on lanes 0-15 and 2 on
// lanes 16-31 in lockstep, a third of those steps idle). The butterfly's first step adds lanes p and p ^ 16:
// for half 1, lane p then computes a_{p^16} + a_p, exactly what logical lane p ^ 16 computes, and every later
// step is the lockstep one, so each output gets the same bits.
//
// The items alternate between two register buffers (X holds even items, Y odd ones): the next item's loads go
// out before the current item's arithmetic with no `cur = next` copies; at a task's last item the loads are
// the warp's next task's first item, as in the lockstep kernel. With an odd item count the next task's first
// item lands in Y and is moved to X once per task.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/wx_kernels.cuh"
#include "backend/cuda/wx_products.h"

namespace ds::cuda::detail {

constexpr int kPairedOutputsPerWarp = 2 * kOutputsPerWarp;

// x of a one-row product staged once per block in shared memory as f32: unit u's 32 values (32-column
// blocks of columns, whatever the weight's unit) at u * 36, the pad of 4 putting the reads of 8 lanes on 8
// consecutive units on distinct banks.
constexpr int kStagedBlockFloats = 36;

__host__ __device__ constexpr int64_t staged_row_bytes(int64_t cols) {
  return (cols + 31) / 32 * kStagedBlockFloats * 4;
}

struct StagedRow {
  const float* xs;
  __device__ __forceinline__ void load8(int64_t, int64_t col, float (&out)[8]) const {
    const float4* q = reinterpret_cast<const float4*>(xs + (col >> 5) * kStagedBlockFloats + (col & 31));
    const float4 a = q[0];
    const float4 b = q[1];
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
};

// Row 0 of `rows` into xs (staged_row_bytes(cols)), converted to f32 exactly; then the block synchronises.
template <class Rows>
__device__ __forceinline__ void stage_row(const Rows& rows, int64_t cols, float* xs) {
  for (int64_t col = int64_t{threadIdx.x} * 8; col < cols; col += int64_t{blockDim.x} * 8) {
    float v[8];
    rows.load8(0, col, v);
    float4* d = reinterpret_cast<float4*>(xs + (col >> 5) * kStagedBlockFloats + (col & 31));
    d[0] = make_float4(v[0], v[1], v[2], v[3]);
    d[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
  __syncthreads();
}

// stage_row with each thread's loads issued in groups of kStageGroup before any of their stores (sass13: in
// stage_row's loop every load waits for the previous iteration's store, one L2 round trip per 1024 columns
// after the programmatic wait, 3 at 2560 columns and 6 at 6144; grouped, 1 and 2). The same values copied.
constexpr int kStageGroup = 4;
template <class Rows>
__device__ __forceinline__ void stage_row_grouped(const Rows& rows, int64_t cols, float* xs) {
  const int64_t step = int64_t{blockDim.x} * 8;
  for (int64_t col0 = int64_t{threadIdx.x} * 8; col0 < cols; col0 += kStageGroup * step) {
    float v[kStageGroup][8];
#pragma unroll
    for (int g = 0; g < kStageGroup; ++g)
      if (col0 + g * step < cols) rows.load8(0, col0 + g * step, v[g]);
    asm volatile("" ::: "memory");  // the group's loads issued before its stores
#pragma unroll
    for (int g = 0; g < kStageGroup; ++g) {
      const int64_t col = col0 + g * step;
      if (col < cols) {
        float4* d = reinterpret_cast<float4*>(xs + (col >> 5) * kStagedBlockFloats + (col & 31));
        d[0] = make_float4(v[g][0], v[g][1], v[g][2], v[g][3]);
        d[1] = make_float4(v[g][4], v[g][5], v[g][6], v[g][7]);
      }
    }
  }
  __syncthreads();
}

// Where a lane's items lie: lane p's item j is unit b + 16 (j & 1) + pair_stride (j >> 1); every lane of
// the warp runs n_items items (lane 0's count), skipping those past the row's end.
struct PairedItems {
  int hi, b, pair_stride, units, n_items;
  __device__ __forceinline__ PairedItems(int slices, int units_, int warp, int lane) {
    const int b0 = (slices == 1 ? 0 : warp) * 32;  // the slice's first unit
    hi = lane >> 4, b = b0 + (lane & 15), pair_stride = 32 * slices, units = units_;
    auto count = [&](int first) {
      return first < units ? (units - first + pair_stride - 1) / pair_stride : 0;
    };
    n_items = count(b0) + count(b0 + 16);
  }
};

// One task's chains: X holds item 0 on entry. load_even(dst, u) / load_odd(dst, u) load this task's half hi /
// half 1 - hi at unit u (nothing when u is past the row's end), load_next(dst) the next task's item 0 (or
// nothing), which X holds on return. acc[h][o]: the sum of output 4h + o, the same bits in every lane.
// y_ready: Y already holds item 1 (the caller issued its load_odd(Y, b + 16)); the first load_odd is skipped.
template <class Unit, class XRow, class LoadEven, class LoadOdd, class LoadNext>
__device__ __forceinline__ void paired_task(Unit (&X)[kOutputsPerWarp], Unit (&Y)[kOutputsPerWarp],
                                            const PairedItems& it, const XRow& x, int64_t x_row,
                                            const LoadEven& load_even, const LoadOdd& load_odd,
                                            const LoadNext& load_next, float (&acc)[2][kOutputsPerWarp],
                                            bool y_ready = false) {
  constexpr int NH = kOutputsPerWarp;
  float acc_even[1][NH], acc_odd[1][NH];
#pragma unroll
  for (int o = 0; o < NH; ++o) acc_even[0][o] = acc_odd[0][o] = 0.0f;
  int j = 0, u = it.b;                                       // u: the unit of item j (even)
  for (; j + 1 < it.n_items; j += 2, u += it.pair_stride) {  // X holds item j
    if (!y_ready || j > 0) load_odd(Y, u + 16);
    if (u < it.units) unit_product<Unit, XRow, 1, NH>(X, u, x, x_row, 1, acc_even);
    if (j + 2 < it.n_items)
      load_even(X, u + it.pair_stride);
    else
      load_next(X);
    if (u + 16 < it.units) unit_product<Unit, XRow, 1, NH>(Y, u + 16, x, x_row, 1, acc_odd);
  }
  if (j < it.n_items) {  // an odd count: the next task's first item goes to Y, then moves to X
    load_next(Y);
    if (u < it.units) unit_product<Unit, XRow, 1, NH>(X, u, x, x_row, 1, acc_even);
#pragma unroll
    for (int o = 0; o < NH; ++o) X[o] = Y[o];
  }
  // Logical order: half 0 holds lane p's chains, half 1 lane p ^ 16's; then the fixed xor butterfly.
#pragma unroll
  for (int o = 0; o < NH; ++o) {
    acc[0][o] = it.hi ? acc_odd[0][o] : acc_even[0][o];
    acc[1][o] = it.hi ? acc_even[0][o] : acc_odd[0][o];
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int o = 0; o < NH; ++o)
#pragma unroll
      for (int mask = 16; mask > 0; mask >>= 1)
        acc[h][o] = __fadd_rn(acc[h][o], __shfl_xor_sync(0xFFFFFFFFu, acc[h][o], mask));
}

// The kWarpsPerBlock slices' sums meet as (s0 + s1) + (s2 + s3), block_product's merge; every warp gets them.
__device__ __forceinline__ void merge_paired_slices(float (&acc)[2][kOutputsPerWarp],
                                                    float (&part)[kWarpsPerBlock][2][kOutputsPerWarp]) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (lane == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int o = 0; o < kOutputsPerWarp; ++o) part[warp][h][o] = acc[h][o];
  }
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int o = 0; o < kOutputsPerWarp; ++o)
      acc[h][o] = __fadd_rn(__fadd_rn(part[0][h][o], part[1][h][o]), __fadd_rn(part[2][h][o], part[3][h][o]));
  __syncthreads();  // part is rewritten by the next task
}

// Persistent one-row product on the two-halves layout above: block b takes tasks b, b + gridDim.x, ...; a
// task is the 8 outputs of each warp (one slice) or the block's 8 outputs (4 slices, the warps splitting the
// columns as block_product's do). Row x is read through `x` (F32Rows, Bf16Rows, or StagedRow); `stage()` runs
// once, after the grid dependency wait and before x is first read (stage_row, or nothing).
// kLoadsFirst: the first task's item 1 (Y) is loaded before the wait too (weights), not after the staging.
template <class Unit, class XRow, class Stage, bool kLoadsFirst = false>
__device__ __forceinline__ void paired_row_product(const typename Unit::Matrix& m, int64_t n_out64,
                                                   const XRow& x, float* y, const Stage& stage) {
  constexpr int NH = kOutputsPerWarp;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int slices = column_slices<Unit>(n_out64, m.cols);
  // 32-bit rows and units (the launch checks n_out < 2^31; units are fewer than columns).
  const int n_out = static_cast<int>(n_out64);
  const PairedItems it(slices, static_cast<int>(m.cols / Unit::kCols), warp, lane);
  auto first_output = [&](int64_t task) {
    return slices == 1 ? (task * kWarpsPerBlock + warp) * kPairedOutputsPerWarp
                       : task * kPairedOutputsPerWarp;
  };
  // The 4 outputs from row h0 (clamped to the last row) at unit u, if u is in the row.
  auto load_half = [&](Unit(&dst)[NH], int h0, int u) {
    if (u >= it.units) return;
#pragma unroll
    for (int o = 0; o < NH; ++o) dst[o].load(m, min(h0 + o, n_out - 1), u);
  };
  __shared__ float part[kWarpsPerBlock][2][NH];
  int64_t task = blockIdx.x, o0 = first_output(task);
  Unit X[NH], Y[NH];  // X: even items (half hi), Y: odd items (half 1 - hi)
  if (o0 < n_out) load_half(X, int(o0) + NH * it.hi, it.b);
  // The first task's item 1 as its first paired_task iteration would load it (load_odd at unit b + 16).
  const bool y_ready = kLoadsFirst && o0 < n_out && it.n_items > 1;
  if (y_ready) load_half(Y, int(o0) + NH * (1 - it.hi), it.b + 16);
  // Weights never change during a round: their first loads go out before waiting for the previous kernel
  // (programmatic launch, grid_dependency.cuh); x is read only after it.
  dev::grid_dependency_wait();
  stage();
  bool first_task = true;
  while (o0 < n_out) {  // uniform over the warp, and over the block when it shares outputs
    const int64_t next_o0 = first_output(task + gridDim.x);
    const bool has_next = next_o0 < n_out;
    const int even_row = int(o0) + NH * it.hi, odd_row = int(o0) + NH * (1 - it.hi);
    const int next_even_row = has_next ? int(next_o0) + NH * it.hi : 0;
    float acc[2][NH];
    paired_task<Unit, XRow>(
        X, Y, it, x, 0, [&](Unit(&d)[NH], int u) { load_half(d, even_row, u); },
        [&](Unit(&d)[NH], int u) { load_half(d, odd_row, u); },
        [&](Unit(&d)[NH]) {
          if (has_next) load_half(d, next_even_row, it.b);
        },
        acc, y_ready && first_task);
    first_task = false;
    if (slices > 1) merge_paired_slices(acc, part);
    if (slices == 1 || warp == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int o = 0; o < NH; ++o)
          if (o0 + NH * h + o < n_out && lane == NH * h + o) y[o0 + NH * h + o] = acc[h][o];
    }
    task += gridDim.x;
    o0 = next_o0;
  }
}

// Grouped one-row products (affine_wx_grouped, PlainOut or SwigluOut) on the two-halves layout: a task is
// (pair, the 8 outputs of a warp or, with slices, of the block), block b takes tasks b, b + gridDim.x, ...
// and loads the next task's first item (often another expert's) during this task's last. Half h of a task
// from output o0 is out's 4 outputs from o0 + 4h (SwigluOut: 2 gate and 2 up rows). Each pair equals
// affine_wx of its expert on its row alone, bit for bit.
template <int Bits, class Rows, class Out>
__device__ __forceinline__ void paired_grouped_product(const AffineMatrix& m, int64_t n_out,
                                                       int64_t n_experts, int64_t n_x_rows,
                                                       const ExpertRow* pairs, int n_pairs, const Rows& rows,
                                                       float* y, int64_t ldy, const Out& out,
                                                       bool pairs_ready) {
  using Unit = AffineUnit<Bits>;
  constexpr int NH = kOutputsPerWarp;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int slices = column_slices<Unit>(n_out, m.cols);
  const PairedItems it(slices, static_cast<int>(m.cols / Unit::kCols), warp, lane);
  const int64_t per_task = int64_t(kWarpsPerBlock / slices) * kPairedOutputsPerWarp,
                tasks_per_pair = (n_out + per_task - 1) / per_task, n_tasks = tasks_per_pair * n_pairs;
  const int64_t expert_words = n_out * m.words_per_row, expert_groups = n_out * m.groups_per_row;
  __shared__ float part[kWarpsPerBlock][2][NH];
  struct Task {
    AffineMatrix m;
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
      t.m.codes += pr.expert * expert_words;
      t.m.scales += pr.expert * expert_groups;
      t.m.biases += pr.expert * expert_groups;
    }
    t.o0 =
        slices == 1 ? (local * kWarpsPerBlock + warp) * kPairedOutputsPerWarp : local * kPairedOutputsPerWarp;
    t.x_row = t.ok ? pr.row : 0;
    t.y = y + p * ldy;
    t.p = p, t.local = local;
    return t;
  };
  auto load_half = [&](Unit(&dst)[NH], const Task& t, int64_t h0, int u) {
    if (u >= it.units || h0 >= n_out) return;  // out.row() is defined for h0 < n_out only
#pragma unroll
    for (int o = 0; o < NH; ++o) dst[o].load(t.m, out.row(h0, o, n_out), u);
  };
  int64_t task = blockIdx.x;
  Task cur{};
  Unit X[NH], Y[NH];
  // pairs_ready (affine_wx_grouped): the pairs were written two launches or more before this one, so the
  // first task's pair and weights go out before the wait (only x and y wait for the previous kernel).
  if (pairs_ready && task < n_tasks) {
    cur = task_at(task);
    if (cur.ok && cur.o0 < n_out) load_half(X, cur, cur.o0 + NH * it.hi, it.b);
  }
  dev::grid_dependency_wait();
  if (task >= n_tasks) return;  // uniform over the block
  if (!pairs_ready) {
    cur = task_at(task);
    if (cur.ok && cur.o0 < n_out) load_half(X, cur, cur.o0 + NH * it.hi, it.b);
  }
  while (task < n_tasks) {  // uniform over the block
    const int64_t next_task = task + gridDim.x;
    const bool has_next = next_task < n_tasks;
    const Task nt = has_next ? task_at(next_task) : cur;
    const bool next_loads = has_next && nt.ok && nt.o0 < n_out;
    // Uniform over the warp, and over the block when it shares outputs (o0 and the pair are the block's).
    const bool active = cur.ok && cur.o0 < n_out;
    float acc[2][NH];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int o = 0; o < NH; ++o) acc[h][o] = 0.0f;
    if (active) {
      paired_task<Unit, Rows>(
          X, Y, it, rows, cur.x_row, [&](Unit(&d)[NH], int u) { load_half(d, cur, cur.o0 + NH * it.hi, u); },
          [&](Unit(&d)[NH], int u) { load_half(d, cur, cur.o0 + NH * (1 - it.hi), u); },
          [&](Unit(&d)[NH]) {
            if (next_loads) load_half(d, nt, nt.o0 + NH * it.hi, it.b);
          },
          acc);
      if (slices > 1) merge_paired_slices(acc, part);
    } else if (next_loads) {
      load_half(X, nt, nt.o0 + NH * it.hi, it.b);
    }
    if (cur.o0 < n_out && (slices == 1 || warp == 0)) {
      out.store(cur.y, cur.o0, acc[0], cur.ok, lane, n_out);
      if (cur.o0 + NH < n_out) out.store(cur.y, cur.o0 + NH, acc[1], cur.ok, lane, n_out);
    }
    task = next_task;
    cur = nt;
  }
}

}  // namespace ds::cuda::detail
