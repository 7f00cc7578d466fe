// Selected-blocks attention of prompt rows (attention_prompt.h). Keys are gathered per row in a fixed order
// and staged 32 at a time for all the q heads of a kv head; FlashAttention's online softmax over key tiles,
// here with tiles cut from the row's own key list, so no row's bits depend on another's.
#include <cmath>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/model/attention_prompt.h"

namespace ds::cuda {

namespace {

constexpr int kTile = 32;      // keys per tile (one per lane in the scores)
constexpr int kMaxGroup = 16;  // q heads per kv head (warps per block)
using dev::kWarp;

__device__ __forceinline__ bool window_ok(const AttentionWindow& w, int n_rows) {
  return w.count > 0 && w.row0 >= 0 && w.pos0 >= 0 && w.row0 + w.count <= n_rows &&
         int64_t{w.pos0} + w.count <= w.capacity;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int m = 16; m >= 1; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

// One block per (kv head, window token, window); warp w is q head kvh * G + w. Warp 0 enumerates the row's
// keys into `list` (32 blocks or 32 tail keys a round: at most 32 * ratio new keys); whenever a tile's worth
// is listed (or the list is complete), the block stages those keys' K and V rows and every warp folds the
// tile into its online softmax: scores (lane = key, dims in order in 4 interleaved partial sums added as
// (a + b) + (c + d)), the tile's max and sum (butterflies), then acc += p_j v_j for j in order.
template <int HD>
__global__ void __launch_bounds__(kMaxGroup* kWarp)
    attend_selected_kernel(AttentionShape s, const AttentionWindow* windows, AttentionRows rows, int n_rows,
                           AttentionSelection sel, float scale) {
  extern __shared__ float4 smem4[];
  constexpr int kPerLane = HD / kWarp;
  const int G = s.nh / s.nkv;
  float* q_sh = reinterpret_cast<float*>(smem4);                // [G][HD]
  float* v_sh = q_sh + G * HD;                                  // [kTile][HD]
  float* k_sh = v_sh + kTile * HD;                              // [kTile][HD + 1]
  int* list = reinterpret_cast<int*>(k_sh + kTile * (HD + 1));  // [kTile + 32 * ratio]
  __shared__ int n_sh, done_sh, block_next, tail_next;
  dev::grid_dependency_wait();
  const AttentionWindow win = windows[blockIdx.z];
  const int t = blockIdx.y, kvh = blockIdx.x;
  if (!window_ok(win, n_rows) || t >= win.count) return;
  const int64_t row = int64_t{win.row0} + t, pos = int64_t{win.pos0} + t, kvw = s.kv_width();
  const int mode = sel.select_mode[row];
  if (mode < 0) return;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, h = kvh * G + warp;
  const int64_t lq = rows.ld_qg(s);
  for (int i = threadIdx.x; i < G * HD; i += blockDim.x)
    q_sh[i] = rows.qg[row * lq + int64_t{kvh * G + i / HD} * 2 * HD + i % HD];
  if (threadIdx.x == 0) {
    n_sh = 0, done_sh = 0, block_next = 0;
    tail_next = mode * sel.ratio;
  }
  const uint8_t* chosen = sel.chosen + row * sel.max_blocks;
  float m = -INFINITY, l = 0.0f, acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;
  for (;;) {
    __syncthreads();  // the last round's reads of n_sh, done_sh and list are done
    if (warp == 0 && n_sh < kTile && !done_sh) {
      const int n = n_sh;
      if (block_next < mode) {
        const int b = block_next + lane;
        const bool c = b < mode && chosen[b] != 0;
        const unsigned mask = __ballot_sync(0xffffffffu, c);
        if (c) {
          const int at = n + __popc(mask & ((1u << lane) - 1u)) * sel.ratio;
          for (int i = 0; i < sel.ratio; ++i) list[at + i] = b * sel.ratio + i;
        }
        __syncwarp();
        if (lane == 0) n_sh = n + __popc(mask) * sel.ratio, block_next += kWarp;
      } else {
        const int k0 = tail_next;
        if (k0 + lane <= pos) list[n + lane] = k0 + lane;
        __syncwarp();
        if (lane == 0) {
          const int64_t left = pos - k0 + 1;
          n_sh = n + (left <= 0 ? 0 : left < kWarp ? static_cast<int>(left) : kWarp);
          tail_next = k0 + kWarp;
          done_sh = k0 + kWarp > pos;
        }
      }
    }
    __syncthreads();
    const int n = n_sh;
    const bool done = done_sh != 0;
    if (n < kTile && !(done && n > 0)) {
      if (done) break;
      continue;
    }
    const int nt = min(n, kTile);
    for (int e = threadIdx.x; e < kTile * HD / 4; e += blockDim.x) {
      const int j = e / (HD / 4), d = 4 * (e % (HD / 4));
      float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
      if (j < nt) {
        const int64_t off = int64_t{list[j]} * kvw + int64_t{kvh} * HD + d;
        kv = *reinterpret_cast<const float4*>(win.keys + off);
        vv = *reinterpret_cast<const float4*>(win.values + off);
      }
      float* kd = k_sh + j * (HD + 1) + d;
      kd[0] = kv.x, kd[1] = kv.y, kd[2] = kv.z, kd[3] = kv.w;
      *reinterpret_cast<float4*>(v_sh + j * HD + d) = vv;
    }
    __syncthreads();
    float score = -INFINITY;
    if (lane < nt) {
      const float* q = q_sh + warp * HD;
      const float* k = k_sh + lane * (HD + 1);
      float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
      for (int i = 0; i < HD; i += 4) {
        d0 = __fmaf_rn(q[i], k[i], d0);
        d1 = __fmaf_rn(q[i + 1], k[i + 1], d1);
        d2 = __fmaf_rn(q[i + 2], k[i + 2], d2);
        d3 = __fmaf_rn(q[i + 3], k[i + 3], d3);
      }
      score = __fmul_rn(__fadd_rn(__fadd_rn(d0, d1), __fadd_rn(d2, d3)), scale);
    }
    const float m_new = fmaxf(m, warp_max(score));
    const float corr = expf(__fsub_rn(m, m_new));
    const float p = lane < nt ? expf(__fsub_rn(score, m_new)) : 0.0f;
    l = __fadd_rn(__fmul_rn(l, corr), dev::warp_sum(p));
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[i] = __fmul_rn(acc[i], corr);
    for (int j = 0; j < nt; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] = __fmaf_rn(pj, v_sh[j * HD + lane + i * kWarp], acc[i]);
    }
    m = m_new;
    __syncthreads();  // every warp is done with this tile's K, V and list entries
    if (warp == 0) {
      // Shift the remainder to the front, 32 at a time (nt == kTile whenever a remainder is left).
      for (int i0 = 0; i0 < n - nt; i0 += kWarp) {
        const int i = i0 + lane;
        const int v = i < n - nt ? list[i + nt] : 0;
        __syncwarp();
        if (i < n - nt) list[i] = v;
        __syncwarp();
      }
      if (lane == 0) n_sh = n - nt;
    }
  }
  const float* gate = rows.qg + row * lq + int64_t{h} * 2 * HD + HD;
  float* out = rows.out + row * int64_t{s.nh} * HD + int64_t{h} * HD;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = lane + i * kWarp;
    out[d] = __fmul_rn(__fdiv_rn(acc[i], l), dev::sigmoid(gate[d]));
  }
}

template <int HD>
void launch(const AttentionShape& s, const AttentionWindow* windows, int n_windows, int max_count,
            const AttentionRows& rows, int n_rows, const AttentionSelection& sel, float scale,
            cudaStream_t stream) {
  const int G = s.nh / s.nkv;
  const size_t shared = (size_t(G) * HD + size_t(kTile) * HD + size_t(kTile) * (HD + 1)) * sizeof(float) +
                        size_t(kTile + kWarp * sel.ratio) * sizeof(int);
  opt_in_dynamic_smem(attend_selected_kernel<HD>, 160 * 1024,
                      "attention_prompt_selected: cudaFuncSetAttribute");
  const dim3 grid(static_cast<unsigned>(s.nkv), static_cast<unsigned>(max_count),
                  static_cast<unsigned>(n_windows));
  attend_selected_kernel<HD><<<grid, G * kWarp, shared, stream>>>(s, windows, rows, n_rows, sel, scale);
}

void fail(const std::string& what) {
  throw ArgumentError("attention_prompt_selected: " + what);
}

}  // namespace

void attention_prompt_selected(const AttentionShape& s, const AttentionWindow* windows, int n_windows,
                               int max_count, const AttentionRows& rows, int n_rows,
                               const AttentionSelection& sel, cudaStream_t stream) {
  if (s.hd != 128 && s.hd != 256) fail("hd must be 128 or 256 (got " + std::to_string(s.hd) + ")");
  if (s.nkv <= 0 || s.nh % s.nkv != 0 || s.nh / s.nkv > kMaxGroup)
    fail("nh must be a multiple of nkv, at most 16 q heads per kv head");
  if (sel.ratio <= 0 || sel.ratio > 64 || sel.select_mode == nullptr || sel.chosen == nullptr)
    fail("the selection needs select_mode, chosen and a ratio of 1..64");
  if (n_windows <= 0 || n_windows > 65535 || max_count <= 0 || max_count > 65535 || n_rows <= 0)
    fail("n_windows and max_count must be in 1..65535, n_rows positive");
  if (!windows || !rows.qg || !rows.out) fail("a row buffer pointer is null");
  // The attention's 1/sqrt(hd), as attention_decode forms it.
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.hd)));
  if (s.hd == 256)
    launch<256>(s, windows, n_windows, max_count, rows, n_rows, sel, scale, stream);
  else
    launch<128>(s, windows, n_windows, max_count, rows, n_rows, sel, scale, stream);
  check_launch("attention_prompt_selected");
}

}  // namespace ds::cuda
