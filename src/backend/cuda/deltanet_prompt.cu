// The per-token DeltaNet conv and delta rule for prompt windows (deltanet_prompt.h). Every value is computed
// by the same operations in the same order as deltanet_decode.cu's conv_norm_gates_kernel and
// delta_rule_kernel (checked bit for bit by cuda_wx_check --only deltanet); only the organisation differs.
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/deltanet_prompt.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/tc_common.cuh"

namespace ds::cuda {

namespace {

using dev::kWarp;

constexpr int kHeadChannels = 128;  // dk: a q or k head, and the channels of one conv block
constexpr int kLaneChannels = kHeadChannels / kWarp;
constexpr int kConvWarps = 16;  // token ranges of a window per conv block
constexpr int kConvBatch = 8;   // tokens whose loads a lane issues together
constexpr int kKeyRows = 128;   // the rule: 4 warps x 32 key rows, lane = value column
constexpr int kRowsPerWarp = kKeyRows / 4;
constexpr int kColumns = 32;
constexpr int kStage = 16;  // tokens per cp.async stage of the rule

__device__ __forceinline__ bool window_ok(const DeltaNetWindow& win, int n_rows) {
  return win.count > 0 && win.row0 >= 0 && win.row0 + win.count <= n_rows;
}

// One block per (128 channels, window), kConvWarps warps; warp w takes tokens [w seg, (w+1) seg) of the
// window, lane l channels l, l+32, l+64, l+96 of the block. Every warp reads its range's K-1 raw inputs
// before the barrier, so no warp overwrites (in place) an input another still needs. Per token and channel
// the taps run in order over the K inputs, then SiLU; a q/k head's sum of squares is lane l's channels in
// order, then the butterfly: conv_norm_gates_kernel's warp 0 exactly. Gates: lane l of head block j writes
// heads j + 2 nk l, ... (the decode kernel's thread l).
template <int K>
__global__ void __launch_bounds__(kWarp* kConvWarps)
    conv_staged_kernel(DeltaNetShape s, DeltaNetWindow* windows, float* mixed, int64_t lm, const float* taps,
                       const float* b, const float* a, int64_t lba, const float* a_log, const float* dt_bias,
                       float* gates, float q_scale, int n_rows) {
  const int64_t cd = s.conv_dim();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int qk_heads = 2 * s.nk, head = blockIdx.x;
  const bool qk = head < qk_heads;
  int64_t ch[kLaneChannels];
  bool on[kLaneChannels];
  float tap[kLaneChannels][K];
#pragma unroll
  for (int j = 0; j < kLaneChannels; ++j) {
    ch[j] = int64_t{head} * kHeadChannels + lane + kWarp * j;
    on[j] = ch[j] < cd;
#pragma unroll
    for (int k = 0; k < K; ++k) tap[j][k] = on[j] ? taps[ch[j] * K + k] : 0.0f;  // weights: before the wait
  }
  dev::grid_dependency_wait();
  const DeltaNetWindow win = windows[blockIdx.y];
  if (!window_ok(win, n_rows)) return;
  const int64_t row0 = win.row0;
  const int seg = (win.count + kConvWarps - 1) / kConvWarps;
  const int t_begin = min(win.count, warp * seg), t_end = min(win.count, t_begin + seg);
  // The raw (pre-conv) input of token tau of the window; tau < 0 reads the conv state.
  auto raw = [&](int tau, int j) {
    return tau < 0 ? win.conv_state[int64_t{tau + K - 1} * cd + ch[j]] : mixed[(row0 + tau) * lm + ch[j]];
  };
  float hist[kLaneChannels][K];  // hist[j][0..K-2]: the previous inputs, oldest first
  float tail[kLaneChannels][K];  // warp 0: the window's last K-1 inputs, the new conv state
#pragma unroll
  for (int j = 0; j < kLaneChannels; ++j) {
#pragma unroll
    for (int k = 0; k < K - 1; ++k) {
      hist[j][k] = on[j] && t_begin < t_end ? raw(t_begin - (K - 1) + k, j) : 0.0f;
      tail[j][k] = on[j] && warp == 0 ? raw(win.count - (K - 1) + k, j) : 0.0f;
    }
  }
  __syncthreads();  // every raw input a warp needs is in its registers
  // Gates first (b and a are read-only here: no store of this kernel can alias them).
  if (qk) {
    for (int h = head + qk_heads * lane; h < s.nv; h += qk_heads * kWarp) {
      const float neg_a = -expf(a_log[h]), dt = dt_bias[h];
      for (int t0 = t_begin; t0 < t_end; t0 += kConvBatch) {
        float bb[kConvBatch], aa[kConvBatch];
#pragma unroll
        for (int d = 0; d < kConvBatch; ++d) {
          const int64_t row = row0 + min(t0 + d, t_end - 1);
          bb[d] = __ldg(b + row * lba + h);
          aa[d] = __ldg(a + row * lba + h);
        }
#pragma unroll
        for (int d = 0; d < kConvBatch; ++d) {
          if (t0 + d >= t_end) break;
          const int64_t row = row0 + t0 + d;
          gates[row * 2 * s.nv + h] = dev::sigmoid(bb[d]);
          gates[row * 2 * s.nv + s.nv + h] = __fmul_rn(neg_a, dev::softplus(__fadd_rn(aa[d], dt)));
        }
      }
    }
  }
  for (int t0 = t_begin; t0 < t_end; t0 += kConvBatch) {
    float x[kConvBatch][kLaneChannels];
#pragma unroll
    for (int d = 0; d < kConvBatch; ++d) {
#pragma unroll
      for (int j = 0; j < kLaneChannels; ++j)
        x[d][j] = t0 + d < t_end && on[j] ? mixed[(row0 + t0 + d) * lm + ch[j]] : 0.0f;
    }
#pragma unroll
    for (int d = 0; d < kConvBatch; ++d) {
      if (t0 + d >= t_end) break;  // uniform over the warp
      float y[kLaneChannels];
#pragma unroll
      for (int j = 0; j < kLaneChannels; ++j) {
        hist[j][K - 1] = x[d][j];
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < K; ++k) acc = __fmaf_rn(tap[j][k], hist[j][k], acc);
        y[j] = dev::silu(acc);
#pragma unroll
        for (int k = 0; k < K - 1; ++k) hist[j][k] = hist[j][k + 1];
      }
      if (qk) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < kLaneChannels; ++j) ss = __fmaf_rn(y[j], y[j], ss);
        ss = dev::warp_sum(ss);
        const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ss, 1e-6f)));
#pragma unroll
        for (int j = 0; j < kLaneChannels; ++j) {
          y[j] = __fmul_rn(y[j], inv);
          if (head < s.nk) y[j] = __fmul_rn(y[j], q_scale);
        }
      }
#pragma unroll
      for (int j = 0; j < kLaneChannels; ++j)
        if (on[j]) mixed[(row0 + t0 + d) * lm + ch[j]] = y[j];
    }
  }
  if (warp == 0) {
#pragma unroll
    for (int j = 0; j < kLaneChannels; ++j) {
#pragma unroll
      for (int k = 0; k < K - 1; ++k)
        if (on[j]) win.conv_state[int64_t{k} * cd + ch[j]] = tail[j][k];
    }
  }
}

// One stage of the rule's ring: kStage tokens' q and k heads, the block's 32 values, beta | g.
struct RuleStage {
  float q[kStage][kKeyRows];
  float k[kStage][kKeyRows];
  float v[kStage][kColumns];
  float bg[kStage][2];
};

__device__ __forceinline__ float sum4(const float (&part)[4][kColumns], int p) {
  return __fadd_rn(__fadd_rn(part[0][p], part[1][p]), __fadd_rn(part[2][p], part[3][p]));
}

// delta_rule_kernel's block (value head, 32 columns; warp w holds key rows 32w..32w+31 of the state in
// registers, lane = column) with the token data staged: stage n + 1 is copied (cp.async) while stage n
// runs. One barrier a token: u's partial sums and o's alternate between two slots by token parity, warp 0
// writes token t's output after token t + 1's barrier, and token t's state update and o run in one loop
// with token t + 1's decay and u (per state cell the decode kernel's operations in its order).
__global__ void __launch_bounds__(128)
    delta_rule_staged_kernel(DeltaNetShape s, DeltaNetWindow* windows, const float* mixed, int64_t lm,
                             const float* gates, float* core, int n_rows) {
  __shared__ __align__(16) RuleStage ring[2];
  __shared__ float pu[2][4][kColumns], po[2][4][kColumns];
  dev::grid_dependency_wait();
  const DeltaNetWindow win = windows[blockIdx.z];
  if (!window_ok(win, n_rows)) return;
  const int h = blockIdx.y, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int c0 = blockIdx.x * kColumns, c = c0 + lane;
  const int key_head = h / (s.nv / s.nk), count = win.count;
  const int64_t kd = s.key_dim(), vd = s.value_dim(), nv = s.nv, row0 = win.row0;
  float* S = win.state + int64_t{h} * kKeyRows * s.dv;
  float st[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) st[i] = S[int64_t{warp * kRowsPerWarp + i} * s.dv + c];
  const int n_stages = (count + kStage - 1) / kStage;
  auto load_stage = [&](int n) {
    RuleStage& r = ring[n & 1];
    const int t0 = n * kStage, len = min(kStage, count - t0);
    for (int e = threadIdx.x; e < kStage * (kKeyRows / 4); e += blockDim.x) {
      const int tt = e / (kKeyRows / 4), f = 4 * (e % (kKeyRows / 4));
      const bool ok = tt < len;
      const float* m = mixed + (row0 + t0 + (ok ? tt : 0)) * lm + int64_t{key_head} * kKeyRows + f;
      tc::cp_async16(&r.q[tt][f], m, ok ? 16 : 0);
      tc::cp_async16(&r.k[tt][f], m + kd, ok ? 16 : 0);
    }
    for (int e = threadIdx.x; e < kStage * (kColumns / 4); e += blockDim.x) {
      const int tt = e / (kColumns / 4), f = 4 * (e % (kColumns / 4));
      const bool ok = tt < len;
      const float* m = mixed + (row0 + t0 + (ok ? tt : 0)) * lm + 2 * kd + int64_t{h} * s.dv + c0 + f;
      tc::cp_async16(&r.v[tt][f], m, ok ? 16 : 0);
    }
    if (threadIdx.x < 2 * kStage) {
      const int tt = threadIdx.x / 2, which = threadIdx.x % 2;
      const bool ok = tt < len;
      tc::cp_async4(&r.bg[tt][which], gates + (row0 + t0 + (ok ? tt : 0)) * 2 * nv + which * nv + h,
                    ok ? 4 : 0);
    }
    tc::cp_async_commit();
  };
  load_stage(0);
  tc::cp_async_wait<0>();
  __syncthreads();
  if (n_stages > 1) load_stage(1);
  {
    const float alpha = expf(ring[0].bg[0][1]);
    float u = 0.0f;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      st[i] = __fmul_rn(st[i], alpha);
      u = __fmaf_rn(ring[0].k[0][warp * kRowsPerWarp + i], st[i], u);
    }
    pu[0][warp][lane] = u;
  }
  for (int t = 0; t < count; ++t) {
    __syncthreads();  // token t's u partials (and t - 1's o partials) are complete
    const int tt = t % kStage, stage = t / kStage;
    const RuleStage& r = ring[stage & 1];
    if (warp == 0 && t > 0) core[(row0 + t - 1) * vd + int64_t{h} * s.dv + c] = sum4(po[(t - 1) & 1], lane);
    // The slot stage + 1 goes to was last read by token t - 1, before this barrier.
    if (tt == 0 && t > 0 && stage + 1 < n_stages) load_stage(stage + 1);
    const float u = sum4(pu[t & 1], lane);
    const float kv = __fmul_rn(__fsub_rn(r.v[tt][lane], u), r.bg[tt][0]);
    const float* kt = r.k[tt] + warp * kRowsPerWarp;
    const float* qt = r.q[tt] + warp * kRowsPerWarp;
    float o = 0.0f;
    if (t + 1 < count) {
      if ((t + 1) % kStage == 0) {  // token t + 1 opens the next stage: wait for its copies
        tc::cp_async_wait<0>();
        __syncthreads();
      }
      const RuleStage& rn = ring[((t + 1) / kStage) & 1];
      const int tn = (t + 1) % kStage;
      const float alpha = expf(rn.bg[tn][1]);
      const float* kn = rn.k[tn] + warp * kRowsPerWarp;
      float un = 0.0f;
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        st[i] = __fmaf_rn(kt[i], kv, st[i]);
        o = __fmaf_rn(qt[i], st[i], o);
        st[i] = __fmul_rn(st[i], alpha);
        un = __fmaf_rn(kn[i], st[i], un);
      }
      pu[(t + 1) & 1][warp][lane] = un;
    } else {
#pragma unroll
      for (int i = 0; i < kRowsPerWarp; ++i) {
        st[i] = __fmaf_rn(kt[i], kv, st[i]);
        o = __fmaf_rn(qt[i], st[i], o);
      }
    }
    po[t & 1][warp][lane] = o;
  }
  __syncthreads();
  if (warp == 0) core[(row0 + count - 1) * vd + int64_t{h} * s.dv + c] = sum4(po[(count - 1) & 1], lane);
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) S[int64_t{warp * kRowsPerWarp + i} * s.dv + c] = st[i];
}

void fail(const std::string& what) {
  throw ArgumentError("deltanet (prompt kernels): " + what);
}

void check_shape(const DeltaNetShape& s, int n_windows) {
  if (s.dk != kKeyRows) fail("dk must be 128 (got " + std::to_string(s.dk) + ")");
  if (s.dv <= 0 || s.dv % kColumns != 0) fail("dv must be a positive multiple of 32");
  if (s.nk <= 0 || s.nv <= 0 || s.nv % s.nk != 0) fail("nv must be a positive multiple of nk");
  if (n_windows <= 0 || n_windows > 65535) fail("n_windows must be 1..65535");
}

}  // namespace

bool delta_rule_staged_supported(const DeltaNetShape& s, const float* mixed, int64_t lm) {
  return s.dk == kKeyRows && s.dv % kColumns == 0 && lm % 4 == 0 &&
         reinterpret_cast<uintptr_t>(mixed) % 16 == 0;
}

void conv_norm_gates_staged(const DeltaNetShape& s, DeltaNetWindow* windows, int n_windows, float* mixed,
                            int64_t lm, const float* taps, const float* b, const float* a, int64_t lba,
                            const float* a_log, const float* dt_bias, float* gates, float q_scale, int n_rows,
                            cudaStream_t stream) {
  check_shape(s, n_windows);
  if (s.conv_kernel < 2 || s.conv_kernel > 4) fail("conv_kernel must be 2, 3 or 4");
  const dim3 grid(static_cast<unsigned>((s.conv_dim() + kHeadChannels - 1) / kHeadChannels),
                  static_cast<unsigned>(n_windows));
  auto* conv = s.conv_kernel == 2   ? conv_staged_kernel<2>
               : s.conv_kernel == 3 ? conv_staged_kernel<3>
                                    : conv_staged_kernel<4>;
  conv<<<grid, kWarp * kConvWarps, 0, stream>>>(s, windows, mixed, lm, taps, b, a, lba, a_log, dt_bias, gates,
                                                q_scale, n_rows);
  check_launch("deltanet conv, q/k norm, gates (prompt)");
}

void delta_rule_staged(const DeltaNetShape& s, DeltaNetWindow* windows, int n_windows, const float* mixed,
                       int64_t lm, const float* gates, float* core, int n_rows, cudaStream_t stream) {
  check_shape(s, n_windows);
  if (!delta_rule_staged_supported(s, mixed, lm)) fail("q/k/v rows must be 16-byte aligned");
  const dim3 grid(static_cast<unsigned>(s.dv / kColumns), static_cast<unsigned>(s.nv),
                  static_cast<unsigned>(n_windows));
  delta_rule_staged_kernel<<<grid, 128, 0, stream>>>(s, windows, mixed, lm, gates, core, n_rows);
  check_launch("deltanet delta rule (prompt)");
}

}  // namespace ds::cuda
