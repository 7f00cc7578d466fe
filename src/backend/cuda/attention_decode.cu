// Gated attention decode (attention_decode.h). One block per (row, head): the key order each warp walks and
// the merge of the warps depend on the row's key count alone, never on the other rows of the launch.
#include <string>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/cuda_error.h"

namespace ds::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kAttendWarps = 4;

__device__ __forceinline__ float warp_sum(float v) {
  for (int m = 16; m >= 1; m >>= 1) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

__device__ __forceinline__ bool window_ok(const AttentionWindow& w, int n_rows) {
  return w.count > 0 && w.row0 >= 0 && w.pos0 >= 0 && w.row0 + w.count <= n_rows &&
         int64_t{w.pos0} + w.count <= w.capacity;
}

// Per (window, token): centred RMSNorm + partial RoPE of the q heads (in place) and the k heads (into the key
// cache at the token's position), one warp per head; the value row copied into the value cache.
__global__ void norm_rope_append_kernel(AttentionShape s, const AttentionWindow* windows, AttentionRows r,
                                        AttentionWeights w, int n_rows) {
  extern __shared__ float buf_all[];
  const AttentionWindow win = windows[blockIdx.y];
  const int t = blockIdx.x;
  if (!window_ok(win, n_rows) || t >= win.count) return;
  const int64_t row = int64_t{win.row0} + t, pos = int64_t{win.pos0} + t, kvw = s.kv_width();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, n_warps = blockDim.x / kWarp;
  float* buf = buf_all + warp * s.hd;
  const int half = s.rotary_dim / 2;
  for (int head = warp; head < s.nh + s.nkv; head += n_warps) {
    const bool is_q = head < s.nh;
    const float* src = is_q ? r.qg + row * s.q_width() + int64_t{head} * 2 * s.hd
                            : r.k + row * kvw + int64_t{head - s.nh} * s.hd;
    float* dst = is_q ? r.qg + row * s.q_width() + int64_t{head} * 2 * s.hd
                      : win.keys + pos * kvw + int64_t{head - s.nh} * s.hd;
    const float* norm = is_q ? w.q_norm : w.k_norm;
    float ss = 0.0f;
    for (int i = lane; i < s.hd; i += kWarp) ss = __fmaf_rn(src[i], src[i], ss);
    ss = warp_sum(ss);
    const float inv =
        __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, static_cast<float>(s.hd)), s.rms_eps)));
    for (int i = lane; i < s.hd; i += kWarp) buf[i] = __fmul_rn(__fmul_rn(src[i], inv), norm[i]);
    __syncwarp();
    for (int i = lane; i < s.hd; i += kWarp) {
      float out = buf[i];
      if (i < s.rotary_dim) {
        const int j = i < half ? i : i - half;  // the pair (j, j + half)
        const float angle = __fmul_rn(static_cast<float>(pos), w.inv_freq[j]);
        const float c = cosf(angle), sn = sinf(angle), a = buf[j], b = buf[j + half];
        out = i < half ? __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, sn))
                       : __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, sn));
      }
      dst[i] = out;
    }
    __syncwarp();  // buf is reused by this warp's next head
  }
  for (int64_t i = threadIdx.x; i < kvw; i += blockDim.x) win.values[pos * kvw + i] = r.v[row * kvw + i];
}

// Per (window, token, q head): softmax over the cached keys 0..pos. Warp w walks keys w, w+4, ... with an
// online softmax (running max m, sum l, accumulator per value dim); lane holds dims [lane*D, lane*D + D). The
// warps meet as (w0 + w1) + (w2 + w3) after rescaling to the common max.
template <int D>
__global__ void __launch_bounds__(kAttendWarps* kWarp)
    attend_kernel(AttentionShape s, const AttentionWindow* windows, AttentionRows r, int n_rows,
                  float scale) {
  constexpr int hd = D * kWarp;
  __shared__ float m_sh[kAttendWarps], l_sh[kAttendWarps], acc_sh[kAttendWarps][hd];
  const AttentionWindow win = windows[blockIdx.z];
  const int t = blockIdx.y, h = blockIdx.x;
  if (!window_ok(win, n_rows) || t >= win.count) return;
  const int64_t row = int64_t{win.row0} + t, n_keys = int64_t{win.pos0} + t + 1, kvw = s.kv_width();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int kv_head = h / (s.nh / s.nkv);
  const float* q = r.qg + row * s.q_width() + int64_t{h} * 2 * hd;
  float qd[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qd[d] = q[lane * D + d];
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = warp; j < n_keys; j += kAttendWarps) {
    const float* key = win.keys + j * kvw + int64_t{kv_head} * hd + lane * D;
    const float* val = win.values + j * kvw + int64_t{kv_head} * hd + lane * D;
    float dot = 0.0f;
#pragma unroll
    for (int d = 0; d < D; ++d) dot = __fmaf_rn(qd[d], key[d], dot);
    const float score = __fmul_rn(warp_sum(dot), scale);
    const float m_new = fmaxf(m, score);
    const float c = expf(m - m_new), p = expf(score - m_new);
    l = __fmaf_rn(l, c, p);
#pragma unroll
    for (int d = 0; d < D; ++d) acc[d] = __fmaf_rn(p, val[d], __fmul_rn(acc[d], c));
    m = m_new;
  }
  if (lane == 0) {
    m_sh[warp] = m;
    l_sh[warp] = l;
  }
#pragma unroll
  for (int d = 0; d < D; ++d) acc_sh[warp][lane * D + d] = acc[d];
  __syncthreads();
  const float mx = fmaxf(fmaxf(m_sh[0], m_sh[1]), fmaxf(m_sh[2], m_sh[3]));
  float e[kAttendWarps];
#pragma unroll
  for (int k = 0; k < kAttendWarps; ++k) e[k] = m_sh[k] == -INFINITY ? 0.0f : expf(m_sh[k] - mx);
  const float total = __fadd_rn(__fadd_rn(__fmul_rn(l_sh[0], e[0]), __fmul_rn(l_sh[1], e[1])),
                                __fadd_rn(__fmul_rn(l_sh[2], e[2]), __fmul_rn(l_sh[3], e[3])));
  const float* gate = q + hd;
  float* out = r.out + row * int64_t{s.nh} * hd + int64_t{h} * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    const float sum = __fadd_rn(__fadd_rn(__fmul_rn(acc_sh[0][d], e[0]), __fmul_rn(acc_sh[1][d], e[1])),
                                __fadd_rn(__fmul_rn(acc_sh[2][d], e[2]), __fmul_rn(acc_sh[3][d], e[3])));
    const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate[d])));
    out[d] = __fmul_rn(__fdiv_rn(sum, total), sig);
  }
}

void fail(const std::string& what) {
  throw ArgumentError("attention_decode: " + what);
}

}  // namespace

void attention_decode(const AttentionShape& s, const AttentionWeights& w, const AttentionWindow* windows,
                      int n_windows, int max_count, const AttentionRows& rows, int n_rows,
                      cudaStream_t stream) {
  if (s.hd != 128 && s.hd != 256) fail("hd must be 128 or 256 (got " + std::to_string(s.hd) + ")");
  if (s.nkv <= 0 || s.nh <= 0 || s.nh % s.nkv != 0) fail("nh must be a positive multiple of nkv");
  if (s.rotary_dim < 0 || s.rotary_dim % 2 != 0 || s.rotary_dim > s.hd)
    fail("rotary_dim must be even and at most hd");
  if (n_windows <= 0 || n_windows > 65535 || max_count <= 0 || max_count > 65535 || n_rows <= 0)
    fail("n_windows and max_count must be in 1..65535, n_rows positive");
  if (!w.q_norm || !w.k_norm || (s.rotary_dim > 0 && !w.inv_freq)) fail("a weight pointer is null");
  if (!windows || !rows.qg || !rows.k || !rows.v || !rows.out) fail("a row buffer pointer is null");
  const int prep_threads = 256;
  const size_t prep_shared = static_cast<size_t>(prep_threads / kWarp) * s.hd * sizeof(float);
  norm_rope_append_kernel<<<dim3(max_count, n_windows), prep_threads, prep_shared, stream>>>(s, windows, rows,
                                                                                             w, n_rows);
  check_launch("attention_decode norm/rope/append");
  // 1/sqrt(hd) is a power of two for hd 256 (exact); for 128 it is the f32 rounding of the CPU's double
  // scale.
  const float scale = static_cast<float>(1.0 / __builtin_sqrt(static_cast<double>(s.hd)));
  const dim3 grid(s.nh, max_count, n_windows);
  if (s.hd == 256) {
    attend_kernel<8><<<grid, kAttendWarps * kWarp, 0, stream>>>(s, windows, rows, n_rows, scale);
  } else {
    attend_kernel<4><<<grid, kAttendWarps * kWarp, 0, stream>>>(s, windows, rows, n_rows, scale);
  }
  check_launch("attention_decode attend");
}

}  // namespace ds::cuda
