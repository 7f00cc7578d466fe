// Gated DeltaNet decode step (deltanet_decode.h). Every reduction has one fixed order that depends on the
// shape alone; a stream's tokens run the same instructions whatever the window size or the other streams.
#include <cooperative_groups.h>

#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/deltanet_chunked.h"
#include "backend/cuda/deltanet_decode.h"
#include "backend/cuda/deltanet_prompt.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/grid_dependency.cuh"

namespace ds::cuda {

namespace {

constexpr int kKeyRows = 128;  // dk: 4 warps x 32 key rows per block in the recurrence
constexpr int kRowsPerWarp = kKeyRows / 4;
constexpr int kColumnsPerBlock = 32;  // one value column per lane

using dev::kWarp;
using dev::warp_sum;

__device__ __forceinline__ bool window_ok(const DeltaNetWindow& win, int n_rows) {
  return win.count > 0 && win.row0 >= 0 && win.row0 + win.count <= n_rows;
}

// Reads window i into win; false where it is out of range (skipped). LoadsFirst (sass13): only row0, count
// and the state pointer the kernel uses (Ptr), and the check reads that pointer too (never null for a valid
// window), so that ptxas issues its load with the count's instead of sinking it past the exit.
template <bool LoadsFirst, float* DeltaNetWindow::*Ptr>
__device__ __forceinline__ bool read_window(const DeltaNetWindow* windows, int i, int n_rows,
                                            DeltaNetWindow& win) {
  if constexpr (LoadsFirst) {
    win.row0 = windows[i].row0;
    win.count = windows[i].count;
    win.*Ptr = windows[i].*Ptr;
    return window_ok(win, n_rows) && win.*Ptr != nullptr;
  } else {
    win = windows[i];
    return window_ok(win, n_rows);
  }
}

// Causal depthwise conv + SiLU, one thread per (window, channel), blocks of 128 channels (one key head of q
// or k, dk = 128; then the v channels): taps in order over the K-1 history rows and the window's rows; the
// last K-1 inputs become the history. A q or k block then L2-normalises its head per token (q then scaled):
// warp 0 sums the squares as one warp per head would (lane l: channels l, l+32, l+64, l+96 in order, then
// the butterfly). The q/k blocks also write beta and g per value head (block j: heads j, j + 2nk, ...).
// LoadsFirst (sass13; the same operations on the same values): the window's row0, count and conv_state are
// read together; the thread's first value head's a_log and dt_bias before the wait, its b and a with the
// token's input, a compiler barrier after them. Without it the SASS waits the window, then conv_state, then
// the history and input, and after the q/k norm's barriers b, then (past the beta store) a, a_log and
// dt_bias: about 5 dependent memory round trips after the wait at one token, 2 with it.
template <int K, bool LoadsFirst>
__global__ void __launch_bounds__(kKeyRows)
    conv_norm_gates_kernel(DeltaNetShape s, DeltaNetWindow* windows, float* mixed, int64_t lm,
                           const float* taps, const float* b, const float* a, int64_t lba, const float* a_log,
                           const float* dt_bias, float* gates, float q_scale, int n_rows) {
  __shared__ float head_vals[kKeyRows];
  __shared__ float inv_shared;
  const int64_t cd = s.conv_dim(), ch = int64_t{blockIdx.x} * kKeyRows + threadIdx.x;
  const int qk_heads = 2 * s.nk, head = blockIdx.x;  // head < qk_heads: a q or k head's block
  float tap[K], hist[K];                             // hist[0..K-2]: previous inputs, oldest first
  if (ch < cd) {
#pragma unroll
    for (int k = 0; k < K; ++k) tap[k] = taps[ch * K + k];  // weights: before the wait
  }
  // The thread's first value head of the gates (LoadsFirst: its weights before the wait).
  const int h0 = head + qk_heads * static_cast<int>(threadIdx.x);
  const bool gate0 = LoadsFirst && head < qk_heads && threadIdx.x < kKeyRows && h0 < s.nv;
  float a_log0 = 0.0f, dt_bias0 = 0.0f;
  if (gate0) a_log0 = a_log[h0], dt_bias0 = dt_bias[h0];
  dev::grid_dependency_wait();
  DeltaNetWindow win;
  if (!read_window<LoadsFirst, &DeltaNetWindow::conv_state>(windows, blockIdx.y, n_rows, win)) return;
  if (head >= qk_heads && ch >= cd) return;  // past the v channels (no __syncthreads in v blocks)
#pragma unroll
  for (int k = 0; k < K - 1; ++k) hist[k] = win.conv_state[k * cd + ch];
  for (int t = 0; t < win.count; ++t) {
    const int64_t row = int64_t{win.row0} + t;
    float* cell = mixed + row * lm + ch;
    hist[K - 1] = *cell;
    float b0 = 0.0f, a0 = 0.0f;
    if constexpr (LoadsFirst) {
      if (gate0) b0 = b[row * lba + h0], a0 = a[row * lba + h0];
      asm volatile("" ::: "memory");  // every load above issued before the arithmetic below
    }
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) acc = __fmaf_rn(tap[k], hist[k], acc);
    float y = dev::silu(acc);
#pragma unroll
    for (int k = 0; k < K - 1; ++k) hist[k] = hist[k + 1];
    if (head < qk_heads) {
      head_vals[threadIdx.x] = y;
      __syncthreads();
      if (threadIdx.x < kWarp) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < kKeyRows; i += kWarp) ss = __fmaf_rn(head_vals[i], head_vals[i], ss);
        ss = warp_sum(ss);
        if (threadIdx.x == 0) inv_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ss, 1e-6f)));
      }
      __syncthreads();
      y = __fmul_rn(y, inv_shared);
      if (head < s.nk) y = __fmul_rn(y, q_scale);
      for (int h = head + qk_heads * static_cast<int>(threadIdx.x); threadIdx.x < kKeyRows && h < s.nv;
           h += qk_heads * kKeyRows) {
        if (gate0 && h == h0) {
          gates[row * 2 * s.nv + h] = dev::sigmoid(b0);
          gates[row * 2 * s.nv + s.nv + h] = __fmul_rn(-expf(a_log0), dev::softplus(__fadd_rn(a0, dt_bias0)));
          continue;
        }
        gates[row * 2 * s.nv + h] = dev::sigmoid(b[row * lba + h]);
        gates[row * 2 * s.nv + s.nv + h] =
            __fmul_rn(-expf(a_log[h]), dev::softplus(__fadd_rn(a[row * lba + h], dt_bias[h])));
      }
      __syncthreads();  // head_vals and inv_shared are rewritten by the next token
    }
    *cell = y;
  }
#pragma unroll
  for (int k = 0; k < K - 1; ++k) win.conv_state[k * cd + ch] = hist[k];
}

// One token of the delta rule for value column c of a 4-warp group: warp kw holds key rows 32kw..32kw+31 of
// the state in registers. S *= exp(g); u = k^T S; S += k ((v - u) beta)^T; returns this warp's part of o =
// q^T S in part[kw][p]. Column sums meet as (w0 + w1) + (w2 + w3) in shared memory (sum4). Every thread calls
// it.
template <int W>
__device__ __forceinline__ float sum4(const float (&part)[4][W], int p) {
  return __fadd_rn(__fadd_rn(part[0][p], part[1][p]), __fadd_rn(part[2][p], part[3][p]));
}

template <int W>
__device__ __forceinline__ void delta_step(float (&st)[kRowsPerWarp], const float* q_sh, const float* k_sh,
                                           float (&part)[4][W], int kw, int p, float v, float beta,
                                           float alpha) {
  float u = 0.0f;
  for (int i = 0; i < kRowsPerWarp; ++i) {
    st[i] = __fmul_rn(st[i], alpha);
    u = __fmaf_rn(k_sh[kw * kRowsPerWarp + i], st[i], u);
  }
  part[kw][p] = u;
  __syncthreads();
  u = sum4(part, p);
  const float kv = __fmul_rn(__fsub_rn(v, u), beta);
  float o = 0.0f;
  for (int i = 0; i < kRowsPerWarp; ++i) {
    st[i] = __fmaf_rn(k_sh[kw * kRowsPerWarp + i], kv, st[i]);
    o = __fmaf_rn(q_sh[kw * kRowsPerWarp + i], st[i], o);
  }
  __syncthreads();  // every warp has read part's u
  part[kw][p] = o;
  __syncthreads();
}

// Gated RMSNorm of one (row, value head) by one warp: out = o / sqrt(mean(o^2) + eps) * w * gate(z). o may be
// out (each lane rewrites only what it read).
__device__ __forceinline__ void gated_norm_head(const DeltaNetShape& s, const float* o, float* out,
                                                const float* zz, const float* norm, int lane) {
  float ss = 0.0f;
  for (int i = lane; i < s.dv; i += kWarp) ss = __fmaf_rn(o[i], o[i], ss);
  ss = warp_sum(ss);
  const float inv =
      __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(s.dv)), s.rms_eps)));
  for (int i = lane; i < s.dv; i += kWarp) {
    const float gate = s.gate_sigmoid ? dev::sigmoid(zz[i]) : dev::silu(zz[i]);
    out[i] = __fmul_rn(__fmul_rn(__fmul_rn(o[i], inv), norm[i]), gate);
  }
}

// gated_norm_head with lane's z values and norm weights in registers (zz[j], norm[j]: output lane + 32 j; dv
// <= 128): the same operations in the same order.
__device__ __forceinline__ void gated_norm_head_regs(const DeltaNetShape& s, const float* o, float* out,
                                                     const float (&zz)[4], const float (&norm)[4], int lane) {
  float ss = 0.0f;
  for (int i = lane; i < s.dv; i += kWarp) ss = __fmaf_rn(o[i], o[i], ss);
  ss = warp_sum(ss);
  const float inv =
      __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(s.dv)), s.rms_eps)));
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int i = lane + j * kWarp;
    if (i < s.dv) {
      const float gate = s.gate_sigmoid ? dev::sigmoid(zz[j]) : dev::silu(zz[j]);
      out[i] = __fmul_rn(__fmul_rn(__fmul_rn(o[i], inv), norm[j]), gate);
    }
  }
}

// The delta rule for one (window, value head, 32 value columns): lane = column, warp w holds key rows
// 32w..32w+31 of the state in registers for the whole window (delta_step per token).
__global__ void __launch_bounds__(128)
    delta_rule_kernel(DeltaNetShape s, DeltaNetWindow* windows, const float* mixed, int64_t lm,
                      const float* gates, float* core, int n_rows) {
  dev::grid_dependency_wait();
  __shared__ float q_sh[kKeyRows], k_sh[kKeyRows], part[4][kColumnsPerBlock];
  const DeltaNetWindow win = windows[blockIdx.z];
  if (!window_ok(win, n_rows)) return;
  const int h = blockIdx.y, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int c = blockIdx.x * kColumnsPerBlock + lane;
  const int key_head = h / (s.nv / s.nk);
  const int64_t kd = s.key_dim(), vd = s.value_dim();
  float* S = win.state + int64_t{h} * kKeyRows * s.dv;
  float st[kRowsPerWarp];
  for (int i = 0; i < kRowsPerWarp; ++i) st[i] = S[int64_t{warp * kRowsPerWarp + i} * s.dv + c];
  for (int t = 0; t < win.count; ++t) {
    const int64_t row = int64_t{win.row0} + t;
    const float* m = mixed + row * lm;
    __syncthreads();  // the previous token is done with q_sh, k_sh, part
    q_sh[threadIdx.x] = m[int64_t{key_head} * kKeyRows + threadIdx.x];
    k_sh[threadIdx.x] = m[kd + int64_t{key_head} * kKeyRows + threadIdx.x];
    const float v = m[2 * kd + int64_t{h} * s.dv + c];
    const float beta = gates[row * 2 * s.nv + h];
    const float alpha = expf(gates[row * 2 * s.nv + s.nv + h]);
    __syncthreads();
    delta_step(st, q_sh, k_sh, part, warp, lane, v, beta, alpha);
    if (warp == 0) core[row * vd + int64_t{h} * s.dv + c] = sum4(part, lane);
  }
  for (int i = 0; i < kRowsPerWarp; ++i) S[int64_t{warp * kRowsPerWarp + i} * s.dv + c] = st[i];
}

// The delta rule and the gated norm of one (window, value head) in one block, for dv <= 128: warps 4j..4j+3
// are delta_rule_kernel's block for value columns 32j..32j+31 (the same delta_step), and per token warp 0
// then runs gated_norm_kernel's warp over the head's dv outputs: the bits of the two kernels run apart, in
// one launch.
constexpr int kMaxFusedColumns = 128;

// LoadsFirst (sass13; the same operations on the same values): the window's row0, count and state pointer
// are read together (not the pointer after the count's check); each token's q, k, v, beta, g and (warp 0)
// its z values are loaded together at the top of the token, a compiler barrier after them; warp 0 loads the
// norm weights before the wait. Without it the SASS waits the window, then the state pointer, then q and k
// (stored to shared memory before beta and g are loaded), and warp 0's gated norm loads z, then the norm
// weight, per output in a loop with the sigmoid's division call between: about 12 dependent memory round
// trips after the wait at one token, about 4 with it.
constexpr int kNormPerLane = kMaxFusedColumns / kWarp;
static_assert(kNormPerLane == 4, "gated_norm_head_regs holds 4 outputs a lane");

template <bool LoadsFirst>
__global__ void __launch_bounds__(4 * kMaxFusedColumns)
    delta_rule_norm_kernel(DeltaNetShape s, DeltaNetWindow* windows, const float* mixed, int64_t lm,
                           const float* gates, const float* z, int64_t lz, const float* norm, float* core,
                           int n_rows) {
  const int h = blockIdx.y, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float norm_v[kNormPerLane], z_v[kNormPerLane];
  if constexpr (LoadsFirst) {
    if (warp == 0) {
#pragma unroll
      for (int j = 0; j < kNormPerLane; ++j)
        if (lane + j * kWarp < s.dv) norm_v[j] = norm[lane + j * kWarp];  // weights: before the wait
    }
  }
  dev::grid_dependency_wait();
  __shared__ float q_sh[kKeyRows], k_sh[kKeyRows], part[4][kMaxFusedColumns], o_sh[kMaxFusedColumns];
  DeltaNetWindow win;
  if (!read_window<LoadsFirst, &DeltaNetWindow::state>(windows, blockIdx.z, n_rows, win)) return;
  const int kw = warp % 4;                             // key rows 32kw..32kw+31
  const int c = (warp / 4) * kColumnsPerBlock + lane;  // value column
  const int key_head = h / (s.nv / s.nk);
  const int64_t kd = s.key_dim(), vd = s.value_dim();
  float* S = win.state + int64_t{h} * kKeyRows * s.dv;
  float st[kRowsPerWarp];
  for (int i = 0; i < kRowsPerWarp; ++i) st[i] = S[int64_t{kw * kRowsPerWarp + i} * s.dv + c];
  for (int t = 0; t < win.count; ++t) {
    const int64_t row = int64_t{win.row0} + t;
    const float* m = mixed + row * lm;
    if constexpr (LoadsFirst) {
      float qv = 0.0f, kv = 0.0f;
      if (threadIdx.x < kKeyRows) {
        qv = m[int64_t{key_head} * kKeyRows + threadIdx.x];
        kv = m[kd + int64_t{key_head} * kKeyRows + threadIdx.x];
      }
      const float v = m[2 * kd + int64_t{h} * s.dv + c];
      const float beta = gates[row * 2 * s.nv + h];
      const float g = gates[row * 2 * s.nv + s.nv + h];
      const float* zz = z + row * lz + int64_t{h} * s.dv;
      if (warp == 0) {
#pragma unroll
        for (int j = 0; j < kNormPerLane; ++j)
          if (lane + j * kWarp < s.dv) z_v[j] = zz[lane + j * kWarp];
      }
      asm volatile("" ::: "memory");  // every load above issued before what follows
      __syncthreads();                // the previous token is done with q_sh, k_sh, part, o_sh
      if (threadIdx.x < kKeyRows) q_sh[threadIdx.x] = qv, k_sh[threadIdx.x] = kv;
      const float alpha = expf(g);
      __syncthreads();
      delta_step(st, q_sh, k_sh, part, kw, c, v, beta, alpha);
      if (kw == 0) o_sh[c] = sum4(part, c);
      __syncthreads();
      if (warp == 0) gated_norm_head_regs(s, o_sh, core + row * vd + int64_t{h} * s.dv, z_v, norm_v, lane);
    } else {
      __syncthreads();  // the previous token is done with q_sh, k_sh, part, o_sh
      if (threadIdx.x < kKeyRows) {
        q_sh[threadIdx.x] = m[int64_t{key_head} * kKeyRows + threadIdx.x];
        k_sh[threadIdx.x] = m[kd + int64_t{key_head} * kKeyRows + threadIdx.x];
      }
      const float v = m[2 * kd + int64_t{h} * s.dv + c];
      const float beta = gates[row * 2 * s.nv + h];
      const float alpha = expf(gates[row * 2 * s.nv + s.nv + h]);
      __syncthreads();
      delta_step(st, q_sh, k_sh, part, kw, c, v, beta, alpha);
      if (kw == 0) o_sh[c] = sum4(part, c);
      __syncthreads();
      if (warp == 0)
        gated_norm_head(s, o_sh, core + row * vd + int64_t{h} * s.dv, z + row * lz + int64_t{h} * s.dv, norm,
                        lane);
    }
  }
  for (int i = 0; i < kRowsPerWarp; ++i) S[int64_t{kw * kRowsPerWarp + i} * s.dv + c] = st[i];
}

// The whole step per (window, value head) in one launch, for dv == dk == 128 (conv_rule_norm_supported):
// conv_norm_gates_kernel's conv + SiLU of the head's v channels and of its key head's q and k channels (the
// q/k L2 norm and q's scale the same instructions, warp 0 for q and warp 4 for k), beta and g, then
// delta_rule_norm_kernel's rule and gated norm: the same bits as the two launches. The value heads of one
// key head form a thread-block cluster: every block convolves the shared q/k channels itself from the
// history it read before the cluster's barrier, and only block rank 0 writes their new history (after that
// barrier, so no block reads a history already rewritten). mixed and gates are left as they came.
template <int K>
__global__ void __launch_bounds__(4 * kKeyRows)
    conv_rule_norm_kernel(DeltaNetShape s, DeltaNetWindow* windows, const float* mixed, int64_t lm,
                          const float* taps, const float* b, const float* a, int64_t lba, const float* a_log,
                          const float* dt_bias, const float* z, int64_t lz, const float* norm, float* core,
                          float q_scale, int n_rows) {
  __shared__ float q_sh[kKeyRows], k_sh[kKeyRows], v_sh[kKeyRows], part[4][kKeyRows], o_sh[kKeyRows];
  __shared__ float inv_sh[2];
  const int h = blockIdx.y, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int kw = warp % 4, c = (warp / 4) * kColumnsPerBlock + lane;    // delta_rule_norm_kernel's roles
  const int role = threadIdx.x / kKeyRows, j = threadIdx.x % kKeyRows;  // conv: 0 q, 1 k, 2 v, 3 none
  const int key_head = h / (s.nv / s.nk);
  const int64_t kd = s.key_dim(), vd = s.value_dim(), cd = s.conv_dim();
  const int64_t ch = role == 0   ? int64_t{key_head} * kKeyRows + j
                     : role == 1 ? kd + int64_t{key_head} * kKeyRows + j
                                 : 2 * kd + int64_t{h} * s.dv + j;
  float tap[K], hist[K];
  if (role < 3) {
#pragma unroll
    for (int k = 0; k < K; ++k) tap[k] = taps[ch * K + k];  // weights: before the wait
  }
  dev::grid_dependency_wait();
  const DeltaNetWindow win = windows[blockIdx.z];
  if (!window_ok(win, n_rows)) return;  // the whole cluster (one window) returns
  if (role < 3) {
#pragma unroll
    for (int k = 0; k < K - 1; ++k) hist[k] = win.conv_state[k * cd + ch];
  }
  cooperative_groups::this_cluster().sync();  // every block has read the q/k history
  float* S = win.state + int64_t{h} * kKeyRows * s.dv;
  float st[kRowsPerWarp];
  for (int i = 0; i < kRowsPerWarp; ++i) st[i] = S[int64_t{kw * kRowsPerWarp + i} * s.dv + c];
  for (int t = 0; t < win.count; ++t) {
    const int64_t row = int64_t{win.row0} + t;
    __syncthreads();  // the previous token is done with q_sh, k_sh, v_sh, part, o_sh
    float y = 0.0f;
    if (role < 3) {
      hist[K - 1] = mixed[row * lm + ch];
      float acc = 0.0f;
#pragma unroll
      for (int k = 0; k < K; ++k) acc = __fmaf_rn(tap[k], hist[k], acc);
      y = dev::silu(acc);
#pragma unroll
      for (int k = 0; k < K - 1; ++k) hist[k] = hist[k + 1];
      (role == 0 ? q_sh : role == 1 ? k_sh : v_sh)[j] = y;
    }
    __syncthreads();
    if (warp == 0 || warp == 4) {  // q's and k's sum of squares, as conv_norm_gates_kernel's warp 0
      const float* vals = warp == 0 ? q_sh : k_sh;
      float ss = 0.0f;
      for (int i = lane; i < kKeyRows; i += kWarp) ss = __fmaf_rn(vals[i], vals[i], ss);
      ss = warp_sum(ss);
      if (lane == 0) inv_sh[warp / 4] = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ss, 1e-6f)));
    }
    __syncthreads();
    if (role == 0) q_sh[j] = __fmul_rn(__fmul_rn(y, inv_sh[0]), q_scale);
    if (role == 1) k_sh[j] = __fmul_rn(y, inv_sh[1]);
    const float beta = dev::sigmoid(b[row * lba + h]);
    const float g = __fmul_rn(-expf(a_log[h]), dev::softplus(__fadd_rn(a[row * lba + h], dt_bias[h])));
    __syncthreads();
    delta_step(st, q_sh, k_sh, part, kw, c, v_sh[c], beta, expf(g));
    if (kw == 0) o_sh[c] = sum4(part, c);
    __syncthreads();
    if (warp == 0)
      gated_norm_head(s, o_sh, core + row * vd + int64_t{h} * s.dv, z + row * lz + int64_t{h} * s.dv, norm,
                      lane);
  }
  for (int i = 0; i < kRowsPerWarp; ++i) S[int64_t{kw * kRowsPerWarp + i} * s.dv + c] = st[i];
  if (role == 2 || (role < 2 && cooperative_groups::this_cluster().block_rank() == 0)) {
#pragma unroll
    for (int k = 0; k < K - 1; ++k) win.conv_state[k * cd + ch] = hist[k];
  }
}

// Gated RMSNorm per (row, value head), one warp per head, in place.
__global__ void gated_norm_kernel(DeltaNetShape s, float* core, const float* z, int64_t lz,
                                  const float* norm) {
  dev::grid_dependency_wait();
  const int64_t row = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n_warps = blockDim.x / kWarp;
  for (int h = warp; h < s.nv; h += n_warps) {
    float* o = core + row * s.value_dim() + int64_t{h} * s.dv;
    gated_norm_head(s, o, o, z + row * lz + int64_t{h} * s.dv, norm, lane);
  }
}

void fail(const std::string& what) {
  throw ArgumentError("deltanet_decode: " + what);
}

}  // namespace

void deltanet_decode(const DeltaNetShape& s, const DeltaNetWeights& w, const DeltaNetWindow* windows,
                     int n_windows, const DeltaNetRows& rows, int n_rows, cudaStream_t stream,
                     const DeltaRuleChunks* chunks, bool separate_norm, bool staged, bool fused_conv,
                     bool loads_first) {
  if (s.dk != kKeyRows) fail("dk must be 128 (got " + std::to_string(s.dk) + ")");
  if (s.dv <= 0 || s.dv % kColumnsPerBlock != 0) fail("dv must be a positive multiple of 32");
  if (s.nk <= 0 || s.nv <= 0 || s.nv % s.nk != 0) fail("nv must be a positive multiple of nk");
  if (s.conv_kernel < 2 || s.conv_kernel > 4) fail("conv_kernel must be 2, 3 or 4");
  if (n_windows <= 0 || n_rows <= 0) fail("n_windows and n_rows must be positive");
  if (n_windows > 65535) fail("at most 65535 windows per launch");
  if (!w.conv_taps || !w.a_log || !w.dt_bias || !w.norm) fail("a weight pointer is null");
  if (!windows || !rows.mixed || !rows.z || !rows.b || !rows.a || !rows.gates || !rows.core)
    fail("a row buffer pointer is null");
  auto* wins = const_cast<DeltaNetWindow*>(windows);
  const int64_t cd = s.conv_dim(), lm = rows.ld_mixed(s);
  if (lm < cd || rows.ld_z(s) < s.value_dim() || rows.ld_gates_in(s) < s.nv)
    fail("ld is shorter than a part");
  // q scale as the CPU forms it: 1 / sqrt(float(dk)).
  const float q_scale = 1.0f / __builtin_sqrtf(static_cast<float>(s.dk));
  const dim3 conv_grid(static_cast<unsigned>((cd + kKeyRows - 1) / kKeyRows),
                       static_cast<unsigned>(n_windows));
  const int64_t lba = rows.ld_gates_in(s);
  auto* conv = s.conv_kernel == 2
                   ? (loads_first ? conv_norm_gates_kernel<2, true> : conv_norm_gates_kernel<2, false>)
               : s.conv_kernel == 3
                   ? (loads_first ? conv_norm_gates_kernel<3, true> : conv_norm_gates_kernel<3, false>)
                   : (loads_first ? conv_norm_gates_kernel<4, true> : conv_norm_gates_kernel<4, false>);
  if (fused_conv && chunks == nullptr && !separate_norm && !staged && conv_rule_norm_supported(s)) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(1, static_cast<unsigned>(s.nv), static_cast<unsigned>(n_windows));
    cfg.blockDim = dim3(4 * kKeyRows);
    cfg.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 1;
    cluster.val.clusterDim.y = static_cast<unsigned>(s.nv / s.nk);  // the value heads of one key head
    cluster.val.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    auto* fused = s.conv_kernel == 2   ? conv_rule_norm_kernel<2>
                  : s.conv_kernel == 3 ? conv_rule_norm_kernel<3>
                                       : conv_rule_norm_kernel<4>;
    check(cudaLaunchKernelEx(&cfg, fused, s, wins, static_cast<const float*>(rows.mixed), lm, w.conv_taps,
                             rows.b, rows.a, lba, w.a_log, w.dt_bias, rows.z, rows.ld_z(s), w.norm, rows.core,
                             q_scale, n_rows),
          "deltanet_decode conv + rule + gated norm");
    return;
  }
  if (staged) {
    conv_norm_gates_staged(s, wins, n_windows, rows.mixed, lm, w.conv_taps, rows.b, rows.a, lba, w.a_log,
                           w.dt_bias, rows.gates, q_scale, n_rows, stream);
  } else {
    conv<<<conv_grid, kKeyRows, 0, stream>>>(s, wins, rows.mixed, lm, w.conv_taps, rows.b, rows.a, lba,
                                             w.a_log, w.dt_bias, rows.gates, q_scale, n_rows);
    check_launch("deltanet_decode conv, q/k norm, gates");
  }
  if (chunks != nullptr) {
    delta_rule_chunked(s, wins, n_windows, rows.mixed, lm, rows.gates, rows.core, n_rows, *chunks, stream);
  } else if (staged && delta_rule_staged_supported(s, rows.mixed, lm)) {
    delta_rule_staged(s, wins, n_windows, rows.mixed, lm, rows.gates, rows.core, n_rows, stream);
  } else if (s.dv <= kMaxFusedColumns && !separate_norm && !staged) {  // one block per (window, value head)
    const dim3 grid(1, static_cast<unsigned>(s.nv), static_cast<unsigned>(n_windows));
    auto* rule_norm = loads_first ? delta_rule_norm_kernel<true> : delta_rule_norm_kernel<false>;
    rule_norm<<<grid, 4 * s.dv, 0, stream>>>(s, wins, rows.mixed, lm, rows.gates, rows.z, rows.ld_z(s),
                                             w.norm, rows.core, n_rows);
    check_launch("deltanet_decode delta rule + gated norm");
    return;
  } else {
    const dim3 rule_grid(static_cast<unsigned>(s.dv / kColumnsPerBlock), static_cast<unsigned>(s.nv),
                         static_cast<unsigned>(n_windows));
    delta_rule_kernel<<<rule_grid, 128, 0, stream>>>(s, wins, rows.mixed, lm, rows.gates, rows.core, n_rows);
    check_launch("deltanet_decode delta rule");
  }
  gated_norm_kernel<<<n_rows, 256, 0, stream>>>(s, rows.core, rows.z, rows.ld_z(s), w.norm);
  check_launch("deltanet_decode gated norm");
}

bool conv_rule_norm_supported(const DeltaNetShape& s) {
  return s.dk == kKeyRows && s.dv == kKeyRows && s.nk > 0 && s.nv % s.nk == 0 && s.nv / s.nk <= 8;
}

}  // namespace ds::cuda
