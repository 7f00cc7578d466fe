#include "backend/cuda/cuda_error.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/model/device_math.cuh"
#include "backend/cuda/model/generic_mixers.h"

namespace ds::cuda {

namespace {

using dev::kWarp;
constexpr int kMaxConvKernel = 8;

// One thread per (window, channel): the last K-1 raw inputs stay in registers, so rows are overwritten in
// place.
__global__ void conv_silu_generic(DeltaNetShape s, const DeltaNetWindow* wins, float* mixed, int64_t lm,
                                  const float* taps) {
  dev::grid_dependency_wait();
  const DeltaNetWindow win = wins[blockIdx.y];
  const int64_t cd = s.conv_dim(), ch = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (ch >= cd || win.count <= 0) return;
  const int K = s.conv_kernel;
  float hist[kMaxConvKernel];
  for (int k = 0; k < K - 1; ++k) hist[k] = win.conv_state[k * cd + ch];
  for (int t = 0; t < win.count; ++t) {
    float* row = mixed + int64_t{win.row0 + t} * lm;
    const float raw = row[ch];
    float acc = 0.0f;
    for (int k = 0; k < K - 1; ++k) acc = __fadd_rn(acc, __fmul_rn(taps[ch * K + k], hist[k]));
    acc = __fadd_rn(acc, __fmul_rn(taps[ch * K + K - 1], raw));
    row[ch] = dev::silu(acc);
    for (int k = 0; k + 1 < K - 1; ++k) hist[k] = hist[k + 1];
    if (K > 1) hist[K - 2] = raw;
  }
  for (int k = 0; k < K - 1; ++k) win.conv_state[k * cd + ch] = hist[k];
}

// One block per row: warps over the key heads (q and k L2 norm, q times dk^-0.5), then beta and g.
__global__ void qk_gates_generic(DeltaNetShape s, float* mixed, int64_t lm, const float* b, const float* a,
                                 int64_t lba, const float* a_log, const float* dt_bias, float* gates) {
  dev::grid_dependency_wait();
  const int r = blockIdx.x, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp,
            n_warps = blockDim.x / kWarp;
  float* m = mixed + int64_t{r} * lm;
  const float q_scale = __fdiv_rn(1.0f, sqrtf(static_cast<float>(s.dk)));
  for (int h = warp; h < 2 * s.nk; h += n_warps) {
    float* x = m + int64_t{h} * s.dk;  // q heads then k heads: both at h * dk
    double ss = 0;
    for (int i = lane; i < s.dk; i += kWarp) ss = __dadd_rn(ss, __dmul_rn(x[i], x[i]));
    const float inv =
        static_cast<float>(1.0 / sqrt(__dadd_rn(dev::warp_sum(ss), static_cast<double>(1e-6f))));
    for (int i = lane; i < s.dk; i += kWarp) {
      float v = __fmul_rn(x[i], inv);
      if (h < s.nk) v = __fmul_rn(v, q_scale);
      x[i] = v;
    }
  }
  for (int h = threadIdx.x; h < s.nv; h += blockDim.x) {
    const int64_t i = int64_t{r} * lba + h;
    gates[int64_t{r} * 2 * s.nv + h] = dev::sigmoid(b[i]);
    gates[int64_t{r} * 2 * s.nv + s.nv + h] =
        __fmul_rn(-expf(a_log[h]), dev::softplus(__fadd_rn(a[i], dt_bias[h])));
  }
}

// One block per (window, value head), one thread per value column: the per-token delta rule in the CPU's
// order (decay, k^T S, the update, q^T S), the state column in global memory.
__global__ void delta_rule_generic(DeltaNetShape s, const DeltaNetWindow* wins, const float* mixed,
                                   int64_t lm, const float* gates, float* core) {
  dev::grid_dependency_wait();
  const DeltaNetWindow win = wins[blockIdx.y];
  const int h = blockIdx.x, j = threadIdx.x;
  if (j >= s.dv || win.count <= 0) return;
  const int kh = h / (s.nv / s.nk);
  const int64_t kd = s.key_dim();
  float* S = win.state + int64_t{h} * s.dk * s.dv;
  for (int t = 0; t < win.count; ++t) {
    const int64_t r = win.row0 + t;
    const float* q = mixed + r * lm + int64_t{kh} * s.dk;
    const float* k = mixed + r * lm + kd + int64_t{kh} * s.dk;
    const float v = mixed[r * lm + 2 * kd + int64_t{h} * s.dv + j];
    const float beta = gates[r * 2 * s.nv + h], decay = expf(gates[r * 2 * s.nv + s.nv + h]);
    float u = 0.0f;
    for (int i = 0; i < s.dk; ++i) {
      const float sv = __fmul_rn(S[i * s.dv + j], decay);
      S[i * s.dv + j] = sv;
      u = __fadd_rn(u, __fmul_rn(k[i], sv));
    }
    const float delta = __fmul_rn(__fsub_rn(v, u), beta);
    float o = 0.0f;
    for (int i = 0; i < s.dk; ++i) {
      const float sv = __fadd_rn(S[i * s.dv + j], __fmul_rn(k[i], delta));
      S[i * s.dv + j] = sv;
      o = __fadd_rn(o, __fmul_rn(q[i], sv));
    }
    core[r * s.value_dim() + int64_t{h} * s.dv + j] = o;
  }
}

// One block per row, warps over value heads: RMSNorm with the stored weight, times the output gate of z.
__global__ void gated_norm_generic(DeltaNetShape s, float* core, const float* z, int64_t lz,
                                   const float* norm) {
  dev::grid_dependency_wait();
  const int r = blockIdx.x, warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp,
            n_warps = blockDim.x / kWarp;
  for (int h = warp; h < s.nv; h += n_warps) {
    float* o = core + int64_t{r} * s.value_dim() + int64_t{h} * s.dv;
    const float* zz = z + int64_t{r} * lz + int64_t{h} * s.dv;
    double ss = 0;
    for (int i = lane; i < s.dv; i += kWarp) ss = __dadd_rn(ss, __dmul_rn(o[i], o[i]));
    const float inv = dev::inv_rms(dev::warp_sum(ss), s.dv, s.rms_eps);
    for (int i = lane; i < s.dv; i += kWarp) {
      const float y = __fmul_rn(__fmul_rn(o[i], inv), norm[i]);
      o[i] = __fmul_rn(y, s.gate_sigmoid ? dev::sigmoid(zz[i]) : dev::silu(zz[i]));
    }
  }
}

__device__ inline bool attention_window_ok(const AttentionWindow& w, int n_rows) {
  return w.count > 0 && w.row0 >= 0 && w.pos0 >= 0 && w.row0 + w.count <= n_rows &&
         int64_t{w.pos0} + w.count <= w.capacity;
}

// Per (window, token): warps over the q heads then the kv heads: centred RMSNorm, RoPE; keys and values to
// the cache at the token's position.
__global__ void norm_rope_append_generic(AttentionShape s, AttentionWindow const* wins, AttentionRows rows,
                                         AttentionWeights w, int n_rows) {
  dev::grid_dependency_wait();
  extern __shared__ float scratch[];  // hd floats per warp
  const AttentionWindow win = wins[blockIdx.y];
  const int t = blockIdx.x;
  if (!attention_window_ok(win, n_rows) || t >= win.count) return;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n_warps = blockDim.x / kWarp;
  const int64_t row = win.row0 + t, pos = win.pos0 + t, kvw = s.kv_width();
  float* x = scratch + warp * s.hd;
  for (int h = warp; h < s.nh + s.nkv; h += n_warps) {
    const bool is_q = h < s.nh;
    const float* src = is_q ? rows.qg + row * rows.ld_qg(s) + int64_t{h} * 2 * s.hd
                            : rows.k + row * rows.ld_kv(s) + int64_t{h - s.nh} * s.hd;
    const float* mult = is_q ? w.q_norm : w.k_norm;
    double ss = 0;
    for (int i = lane; i < s.hd; i += kWarp) ss = __dadd_rn(ss, __dmul_rn(src[i], src[i]));
    const float inv = dev::inv_rms(dev::warp_sum(ss), s.hd, s.rms_eps);
    for (int i = lane; i < s.hd; i += kWarp) x[i] = __fmul_rn(__fmul_rn(src[i], inv), mult[i]);
    __syncwarp();
    dev::rope_shared(x, s.rotary_dim, pos, w.inv_freq, lane);
    float* dst = is_q ? rows.qg + row * rows.ld_qg(s) + int64_t{h} * 2 * s.hd
                      : win.keys + pos * kvw + int64_t{h - s.nh} * s.hd;
    for (int i = lane; i < s.hd; i += kWarp) dst[i] = x[i];
    __syncwarp();
  }
  for (int64_t i = threadIdx.x; i < kvw; i += blockDim.x)
    win.values[pos * kvw + i] = rows.v[row * rows.ld_kv(s) + i];
}

constexpr int kMaxDimsPerLane = 8;  // hd <= 256

// One warp per (head, window token): online softmax over the visible keys in ascending order, a running max
// and sum, each lane holding hd/32 dims of the output.
__global__ void attend_generic(AttentionShape s, const AttentionWindow* wins, AttentionRows rows, int n_rows,
                               AttentionSelection sel, bool only_selected) {
  dev::grid_dependency_wait();
  const AttentionWindow win = wins[blockIdx.z];
  const int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x;
  if (!attention_window_ok(win, n_rows) || t >= win.count) return;
  const int64_t row = win.row0 + t, pos = win.pos0 + t, kvw = s.kv_width();
  const int mode = sel.select_mode != nullptr ? sel.select_mode[row] : -1;
  if (only_selected && mode < 0) return;
  const int per_lane = s.hd / kWarp, kvh = h / (s.nh / s.nkv);
  const float* q = rows.qg + row * rows.ld_qg(s) + int64_t{h} * 2 * s.hd;
  const float* gate = q + s.hd;
  float qv[kMaxDimsPerLane], acc[kMaxDimsPerLane];
  for (int j = 0; j < per_lane; ++j) qv[j] = q[lane + j * kWarp], acc[j] = 0.0f;
  const float scale = __fdiv_rn(1.0f, sqrtf(static_cast<float>(s.hd)));
  float m = -INFINITY, l = 0.0f;
  auto visit = [&](int64_t key) {
    const float* kr = win.keys + key * kvw + int64_t{kvh} * s.hd;
    const float* vr = win.values + key * kvw + int64_t{kvh} * s.hd;
    float d = 0.0f;
    for (int j = 0; j < per_lane; ++j) d = __fmaf_rn(qv[j], kr[lane + j * kWarp], d);
    const float score = __fmul_rn(dev::warp_sum(d), scale);
    const float m_new = fmaxf(m, score);
    const float corr = expf(__fsub_rn(m, m_new)), p = expf(__fsub_rn(score, m_new));
    l = __fadd_rn(__fmul_rn(l, corr), p);
    for (int j = 0; j < per_lane; ++j)
      acc[j] = __fadd_rn(__fmul_rn(acc[j], corr), __fmul_rn(p, vr[lane + j * kWarp]));
    m = m_new;
  };
  if (mode < 0) {
    for (int64_t key = 0; key <= pos; ++key) visit(key);
  } else {
    const uint8_t* chosen = sel.chosen + row * sel.max_blocks;
    for (int b = 0; b < mode; ++b)
      if (chosen[b])
        for (int i = 0; i < sel.ratio; ++i) visit(int64_t{b} * sel.ratio + i);
    for (int64_t key = int64_t{mode} * sel.ratio; key <= pos; ++key) visit(key);
  }
  float* out = rows.out + row * int64_t{s.nh} * s.hd + int64_t{h} * s.hd;
  for (int j = 0; j < per_lane; ++j) {
    const int d = lane + j * kWarp;
    out[d] = __fmul_rn(__fdiv_rn(acc[j], l), dev::sigmoid(gate[d]));
  }
}

}  // namespace

void deltanet_decode_generic(const DeltaNetShape& s, const DeltaNetWeights& w, const DeltaNetWindow* windows,
                             int n_windows, const DeltaNetRows& rows, int n_rows, cudaStream_t stream) {
  if (s.conv_kernel < 2 || s.conv_kernel > kMaxConvKernel || s.dv > 1024 || s.nk <= 0 || s.nv % s.nk != 0)
    throw ArgumentError("deltanet_decode_generic: conv_kernel must be 2..8, dv <= 1024, nv a multiple of nk");
  if (n_windows <= 0 || n_rows <= 0) return;
  const int64_t cd = s.conv_dim(), lm = rows.ld_mixed(s);
  if (lm < cd || rows.ld_z(s) < s.value_dim() || rows.ld_gates_in(s) < s.nv)
    throw ArgumentError("deltanet_decode_generic: ld is shorter than a part");
  conv_silu_generic<<<dim3(static_cast<unsigned>((cd + 127) / 128), n_windows), 128, 0, stream>>>(
      s, windows, rows.mixed, lm, w.conv_taps);
  check_launch("deltanet_decode_generic: conv");
  qk_gates_generic<<<n_rows, 256, 0, stream>>>(s, rows.mixed, lm, rows.b, rows.a, rows.ld_gates_in(s),
                                               w.a_log, w.dt_bias, rows.gates);
  check_launch("deltanet_decode_generic: gates");
  const int threads = (s.dv + kWarp - 1) / kWarp * kWarp;
  delta_rule_generic<<<dim3(s.nv, n_windows), threads, 0, stream>>>(s, windows, rows.mixed, lm, rows.gates,
                                                                    rows.core);
  check_launch("deltanet_decode_generic: delta rule");
  gated_norm_generic<<<n_rows, 256, 0, stream>>>(s, rows.core, rows.z, rows.ld_z(s), w.norm);
  check_launch("deltanet_decode_generic: gated norm");
}

void attention_decode_generic(const AttentionShape& s, const AttentionWeights& w,
                              const AttentionWindow* windows, int n_windows, int max_count,
                              const AttentionRows& rows, int n_rows, const AttentionSelection& selection,
                              bool only_selected, cudaStream_t stream) {
  if (s.hd % kWarp != 0 || s.hd > kWarp * kMaxDimsPerLane || s.nkv <= 0 || s.nh % s.nkv != 0 ||
      s.rotary_dim > s.hd || s.rotary_dim % 2 != 0)
    throw ArgumentError(
        "attention_decode_generic: hd must be a multiple of 32 up to 256, nh a multiple of nkv");
  if (n_windows <= 0 || n_rows <= 0 || max_count <= 0) return;
  if (n_windows > 65535 || max_count > 65535)
    throw ArgumentError("attention_decode_generic: n_windows and max_count must be at most 65535");
  if (!only_selected) {
    constexpr int kWarps = 8;
    norm_rope_append_generic<<<dim3(max_count, n_windows), kWarps * kWarp, kWarps * s.hd * sizeof(float),
                               stream>>>(s, windows, rows, w, n_rows);
    check_launch("attention_decode_generic: norm, rope, append");
  }
  attend_generic<<<dim3(s.nh, max_count, n_windows), kWarp, 0, stream>>>(s, windows, rows, n_rows, selection,
                                                                         only_selected);
  check_launch("attention_decode_generic: attend");
}

}  // namespace ds::cuda
