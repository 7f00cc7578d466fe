// Gated attention decode (attention_decode.h). One block per (row, head): the key order each warp walks and
// the merge of the warps depend on the row's key count alone, never on the other rows of the launch.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"

namespace ds::cuda {

namespace {

using dev::kWarp;
using dev::warp_max;
using dev::warp_sum;

__device__ __forceinline__ bool window_ok(const AttentionWindow& w, int n_rows) {
  return w.count > 0 && w.row0 >= 0 && w.pos0 >= 0 && w.row0 + w.count <= n_rows &&
         int64_t{w.pos0} + w.count <= w.capacity;
}

// Per (window, token): centred RMSNorm + partial RoPE of the q heads (in place) and the k heads (into the key
// cache at the token's position), one warp per head; the value row copied into the value cache.
__global__ void norm_rope_append_kernel(AttentionShape s, const AttentionWindow* windows, AttentionRows r,
                                        AttentionWeights w, int n_rows) {
  dev::grid_dependency_wait();
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
    const float* src = is_q ? r.qg + row * r.ld_qg(s) + int64_t{head} * 2 * s.hd
                            : r.k + row * r.ld_kv(s) + int64_t{head - s.nh} * s.hd;
    float* dst = is_q ? r.qg + row * r.ld_qg(s) + int64_t{head} * 2 * s.hd
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
  for (int64_t i = threadIdx.x; i < kvw; i += blockDim.x)
    win.values[pos * kvw + i] = r.v[row * r.ld_kv(s) + i];
}

// Split-KV attend (FlashDecoding's split over the keys, with the split fixed by the key count): the keys
// 0..pos of a row are cut into chunks of chunk_keys(n_keys) keys; one block per (row, kv head, chunk, group
// of up to 16 q heads) walks its chunk in tiles of 32 keys staged in shared memory (K and V read once for all
// the q heads of the kv head), with an online softmax per head; attend_merge_kernel folds the chunks in
// order. Every sum's order depends on n_keys and hd alone: never on the other rows, nor on the launch.
constexpr int kTileKeys = 32;
constexpr int kMaxChunks = 64;
constexpr int kMinChunkKeys = 64;
constexpr int kHeadsPerBlock = 16;

__host__ __device__ __forceinline__ int64_t chunk_keys(int64_t n_keys) {
  int64_t c = kMinChunkKeys;
  while ((n_keys + c - 1) / c > kMaxChunks) c *= 2;
  return c;
}

// Partial result of (row, head, chunk) c: m (max score), l (sum of exp(score - m)), acc[hd] (sum of
// exp(score - m) * v).
struct Partials {
  float* ml;   // [n_rows, nh, kMaxChunks, 2]
  float* acc;  // [n_rows, nh, kMaxChunks, hd]
};

// W warps a block (attend_warps(): 4, 8 or 16); a head's arithmetic is one warp's whatever W, so every W
// gives the same bits (W only spreads the tile's staging and the heads over more warps).
template <int HD, int W>
__global__ void __launch_bounds__(W* kWarp)
    attend_chunk_kernel(AttentionShape s, const AttentionWindow* windows, AttentionRows r, int n_rows,
                        float scale, Partials part) {
  dev::grid_dependency_wait();
  constexpr int KS = HD + 4;            // padded key row: lane-per-key float4 reads hit distinct banks
  constexpr int DS = HD / (4 * kWarp);  // float4 slots of value dims per lane: dims s*128 + lane*4 .. +3
  extern __shared__ float4 smem4[];
  const AttentionWindow win = windows[blockIdx.z];
  const int t = blockIdx.y;
  if (!window_ok(win, n_rows) || t >= win.count) return;
  const int chunk = blockIdx.x % kMaxChunks, kv_head = (blockIdx.x / kMaxChunks) % s.nkv;
  const int head_group = blockIdx.x / kMaxChunks / s.nkv;
  const int64_t row = int64_t{win.row0} + t, n_keys = int64_t{win.pos0} + t + 1, kvw = s.kv_width();
  const int64_t ck = chunk_keys(n_keys), k_begin = chunk * ck;
  if (k_begin >= n_keys) return;
  const int64_t k_end = k_begin + ck < n_keys ? k_begin + ck : n_keys;
  const int group = s.nh / s.nkv, h_first = kv_head * group + head_group * kHeadsPerBlock;
  const int n_heads = min(kHeadsPerBlock, group - head_group * kHeadsPerBlock);
  static_assert(kHeadsPerBlock % W == 0, "each warp holds kHeadsPerBlock / W heads");
  static_assert(kTileKeys * HD / 4 % (W * kWarp) == 0, "the tile's float4s split evenly over the threads");
  constexpr int kHPW = kHeadsPerBlock / W;  // heads a warp at most
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int mine = (n_heads - warp + W - 1) / W;  // heads warp, warp + W, ... < n_heads

  float* q_sh = reinterpret_cast<float*>(smem4);  // [n_heads][HD]
  float* k_sh = q_sh + kHeadsPerBlock * HD;       // [kTileKeys][KS]
  float* v_sh = k_sh + kTileKeys * KS;            // [kTileKeys][HD]
  for (int i = threadIdx.x; i < n_heads * HD; i += blockDim.x)
    q_sh[i] = r.qg[row * r.ld_qg(s) + int64_t{h_first + i / HD} * 2 * HD + i % HD];

  float m[kHPW], l[kHPW], acc[kHPW][DS][4];
#pragma unroll
  for (int i = 0; i < kHPW; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int d = 0; d < DS; ++d) acc[i][d][0] = acc[i][d][1] = acc[i][d][2] = acc[i][d][3] = 0.0f;
  }
  const float* k_base = win.keys + int64_t{kv_head} * HD;
  const float* v_base = win.values + int64_t{kv_head} * HD;
  for (int64_t j0 = k_begin; j0 < k_end; j0 += kTileKeys) {
    const int n_valid = static_cast<int>(k_end - j0 < kTileKeys ? k_end - j0 : kTileKeys);
    __syncthreads();  // the previous tile is no longer read
    // All of the tile's loads are issued before any is used: 32 keys x HD x 2 in flight per block.
    constexpr int kF4 = kTileKeys * HD / 4 / (W * kWarp);
    float4 kt[kF4], vt[kF4];
#pragma unroll
    for (int i = 0; i < kF4; ++i) {
      const int f = threadIdx.x + i * W * kWarp, key = f / (HD / 4), d4 = f % (HD / 4);
      const bool ok = key < n_valid;
      const int64_t off = (j0 + key) * kvw + d4 * 4;
      kt[i] = ok ? *reinterpret_cast<const float4*>(k_base + off) : make_float4(0.f, 0.f, 0.f, 0.f);
      vt[i] = ok ? *reinterpret_cast<const float4*>(v_base + off) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int i = 0; i < kF4; ++i) {
      const int f = threadIdx.x + i * W * kWarp, key = f / (HD / 4), d4 = f % (HD / 4);
      *reinterpret_cast<float4*>(k_sh + key * KS + d4 * 4) = kt[i];
      *reinterpret_cast<float4*>(v_sh + key * HD + d4 * 4) = vt[i];
    }
    __syncthreads();
    // The warp's heads go together, so each key and value read from shared memory serves all of them.
    // Score of key j0 + lane per head: four interleaved FMA chains over the dims (d mod 4), then
    // (a0 + a1) + (a2 + a3).
    const float4* kr = reinterpret_cast<const float4*>(k_sh + lane * KS);
    float a[kHPW][4];
#pragma unroll
    for (int i = 0; i < kHPW; ++i) a[i][0] = a[i][1] = a[i][2] = a[i][3] = 0.f;
#pragma unroll 4
    for (int d4 = 0; d4 < HD / 4; ++d4) {
      const float4 kk = kr[d4];
#pragma unroll
      for (int i = 0; i < kHPW; ++i) {
        if (i < mine) {
          const float4 qq = reinterpret_cast<const float4*>(q_sh + (warp + i * W) * HD)[d4];
          a[i][0] = __fmaf_rn(qq.x, kk.x, a[i][0]);
          a[i][1] = __fmaf_rn(qq.y, kk.y, a[i][1]);
          a[i][2] = __fmaf_rn(qq.z, kk.z, a[i][2]);
          a[i][3] = __fmaf_rn(qq.w, kk.w, a[i][3]);
        }
      }
    }
    const bool valid = lane < n_valid;
    float p[kHPW];
#pragma unroll
    for (int i = 0; i < kHPW; ++i) {
      if (i < mine) {
        const float score =
            valid ? __fmul_rn(__fadd_rn(__fadd_rn(a[i][0], a[i][1]), __fadd_rn(a[i][2], a[i][3])), scale)
                  : -INFINITY;
        const float m_new = fmaxf(m[i], warp_max(score));  // finite: a tile holds at least one key
        const float c = expf(m[i] - m_new);
        p[i] = valid ? expf(score - m_new) : 0.0f;
        l[i] = __fmaf_rn(l[i], c, warp_sum(p[i]));
        m[i] = m_new;
#pragma unroll
        for (int d = 0; d < DS; ++d)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[i][d][e] = __fmul_rn(acc[i][d][e], c);
      } else {
        p[i] = 0.0f;
      }
    }
    for (int jj = 0; jj < n_valid; ++jj) {
      float pj[kHPW];
#pragma unroll
      for (int i = 0; i < kHPW; ++i) pj[i] = __shfl_sync(0xffffffffu, p[i], jj);
#pragma unroll
      for (int d = 0; d < DS; ++d) {
        const float4 vv = *reinterpret_cast<const float4*>(v_sh + jj * HD + d * 4 * kWarp + lane * 4);
#pragma unroll
        for (int i = 0; i < kHPW; ++i) {
          if (i < mine) {
            acc[i][d][0] = __fmaf_rn(pj[i], vv.x, acc[i][d][0]);
            acc[i][d][1] = __fmaf_rn(pj[i], vv.y, acc[i][d][1]);
            acc[i][d][2] = __fmaf_rn(pj[i], vv.z, acc[i][d][2]);
            acc[i][d][3] = __fmaf_rn(pj[i], vv.w, acc[i][d][3]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kHPW; ++i) {
    const int hb = warp + i * W;
    if (hb >= n_heads) break;
    const int64_t slot = (row * s.nh + h_first + hb) * kMaxChunks + chunk;
    if (lane == 0) {
      part.ml[slot * 2] = m[i];
      part.ml[slot * 2 + 1] = l[i];
    }
#pragma unroll
    for (int d = 0; d < DS; ++d)
      *reinterpret_cast<float4*>(part.acc + slot * HD + d * 4 * kWarp + lane * 4) =
          make_float4(acc[i][d][0], acc[i][d][1], acc[i][d][2], acc[i][d][3]);
  }
}

// Per (window, token, q head): the chunks' partials folded in chunk order, then acc / l times sigmoid(gate).
__global__ void attend_merge_kernel(AttentionShape s, const AttentionWindow* windows, AttentionRows r,
                                    int n_rows, Partials part) {
  dev::grid_dependency_wait();
  const AttentionWindow win = windows[blockIdx.z];
  const int t = blockIdx.y, h = blockIdx.x;
  if (!window_ok(win, n_rows) || t >= win.count) return;
  const int64_t row = int64_t{win.row0} + t, n_keys = int64_t{win.pos0} + t + 1;
  const int64_t ck = chunk_keys(n_keys), n_chunks = (n_keys + ck - 1) / ck;
  const int64_t slot0 = (row * s.nh + h) * kMaxChunks;
  __shared__ float e_sh[kMaxChunks];
  __shared__ float total_sh;
  if (threadIdx.x == 0) {
    float mx = -INFINITY;
    for (int64_t c = 0; c < n_chunks; ++c) mx = fmaxf(mx, part.ml[(slot0 + c) * 2]);
    float total = 0.0f;
    for (int64_t c = 0; c < n_chunks; ++c) {
      e_sh[c] = expf(part.ml[(slot0 + c) * 2] - mx);
      total = __fmaf_rn(part.ml[(slot0 + c) * 2 + 1], e_sh[c], total);
    }
    total_sh = total;
  }
  __syncthreads();
  const float* q = r.qg + row * r.ld_qg(s) + int64_t{h} * 2 * s.hd;
  const float* gate = q + s.hd;
  float* out = r.out + row * int64_t{s.nh} * s.hd + int64_t{h} * s.hd;
  for (int d = threadIdx.x; d < s.hd; d += blockDim.x) {
    float sum = 0.0f;
    for (int64_t c = 0; c < n_chunks; ++c) sum = __fmaf_rn(part.acc[(slot0 + c) * s.hd + d], e_sh[c], sum);
    const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gate[d])));
    out[d] = __fmul_rn(__fdiv_rn(sum, total_sh), sig);
  }
}

template <int HD, int W>
void attend_chunk_launch_w(dim3 grid, cudaStream_t stream, const AttentionShape& s,
                           const AttentionWindow* windows, const AttentionRows& rows, int n_rows, float scale,
                           const Partials& part) {
  constexpr size_t shared =
      (size_t{kHeadsPerBlock} * HD + size_t{kTileKeys} * (HD + 4) + size_t{kTileKeys} * HD) * sizeof(float);
  // Above 48 KB of dynamic shared memory a kernel must opt in, once per device.
  opt_in_dynamic_smem(attend_chunk_kernel<HD, W>, static_cast<int>(shared),
                      "attention_decode: cudaFuncSetAttribute");
  attend_chunk_kernel<HD, W><<<grid, W * kWarp, shared, stream>>>(s, windows, rows, n_rows, scale, part);
}

template <int HD>
void attend_chunk_launch(dim3 grid, cudaStream_t stream, const AttentionShape& s,
                         const AttentionWindow* windows, const AttentionRows& rows, int n_rows, float scale,
                         const Partials& part) {
  switch (attend_warps_for(n_rows)) {
    case 8:
      return attend_chunk_launch_w<HD, 8>(grid, stream, s, windows, rows, n_rows, scale, part);
    case 16:
      return attend_chunk_launch_w<HD, 16>(grid, stream, s, windows, rows, n_rows, scale, part);
    default:
      return attend_chunk_launch_w<HD, 4>(grid, stream, s, windows, rows, n_rows, scale, part);
  }
}

void fail(const std::string& what) {
  throw ArgumentError("attention_decode: " + what);
}

}  // namespace

int attention_attend_warps() {
  const char* v = std::getenv("DS_CUDA_ATTEND_WARPS");
  if (v == nullptr || v[0] == '\0') return 0;
  const std::string name(v);
  if (name != "4" && name != "8" && name != "16")
    throw ArgumentError("DS_CUDA_ATTEND_WARPS: must be 4, 8 or 16 (got '" + name + "')");
  return std::stoi(name);
}

int attend_warps_for(int n_rows) {
  const int set = attention_attend_warps();
  return set != 0 ? set : (n_rows == 1 ? 8 : 4);
}

size_t attention_decode_workspace_bytes(const AttentionShape& s, int n_rows) {
  return size_t(n_rows) * s.nh * kMaxChunks * (s.hd + 2) * sizeof(float);
}

void attention_norm_rope_append(const AttentionShape& s, const AttentionWeights& w,
                                const AttentionWindow* windows, int n_windows, int max_count,
                                const AttentionRows& rows, int n_rows, cudaStream_t stream) {
  if (n_windows <= 0 || n_windows > 65535 || max_count <= 0 || max_count > 65535 || n_rows <= 0)
    fail("n_windows and max_count must be in 1..65535, n_rows positive");
  if (s.nh <= 0 || s.nkv <= 0 || s.hd <= 0) fail("nh, nkv and hd must be positive");
  // A warp per head (up to 32 warps): each head's arithmetic is its warp's alone, so the bits do not depend
  // on the warp count; 8 warps walked 26 heads of the real shape (24 q + 2 k) in 4 rounds (12.2 us a token in
  // ncu, session 14). Each warp's head buffer in shared memory, within the 48 KB that needs no opt-in.
  const int64_t fit = std::max<int64_t>(1, (48 * 1024) / (int64_t{s.hd} * 4));
  const int prep_threads = kWarp * static_cast<int>(std::min<int64_t>({32, s.nh + s.nkv, fit}));
  const size_t prep_shared = static_cast<size_t>(prep_threads / kWarp) * s.hd * sizeof(float);
  norm_rope_append_kernel<<<dim3(max_count, n_windows), prep_threads, prep_shared, stream>>>(s, windows, rows,
                                                                                             w, n_rows);
  check_launch("attention_decode norm/rope/append");
}

void attention_decode(const AttentionShape& s, const AttentionWeights& w, const AttentionWindow* windows,
                      int n_windows, int max_count, const AttentionRows& rows, int n_rows, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream) {
  if (s.hd != 128 && s.hd != 256) fail("hd must be 128 or 256 (got " + std::to_string(s.hd) + ")");
  if (s.nkv <= 0 || s.nh <= 0 || s.nh % s.nkv != 0) fail("nh must be a positive multiple of nkv");
  if (s.rotary_dim < 0 || s.rotary_dim % 2 != 0 || s.rotary_dim > s.hd)
    fail("rotary_dim must be even and at most hd");
  if (n_windows <= 0 || n_windows > 65535 || max_count <= 0 || max_count > 65535 || n_rows <= 0)
    fail("n_windows and max_count must be in 1..65535, n_rows positive");
  if (!w.q_norm || !w.k_norm || (s.rotary_dim > 0 && !w.inv_freq)) fail("a weight pointer is null");
  if (!windows || !rows.qg || !rows.k || !rows.v || !rows.out) fail("a row buffer pointer is null");
  if (!workspace || workspace_bytes < attention_decode_workspace_bytes(s, n_rows))
    fail("workspace must hold attention_decode_workspace_bytes(shape, n_rows) = " +
         std::to_string(attention_decode_workspace_bytes(s, n_rows)) + " bytes (got " +
         std::to_string(workspace_bytes) + ")");
  attention_norm_rope_append(s, w, windows, n_windows, max_count, rows, n_rows, stream);
  // 1/sqrt(hd) is a power of two for hd 256 (exact); for 128 it is the f32 rounding of the CPU's double
  // scale.
  const float scale = static_cast<float>(1.0 / __builtin_sqrt(static_cast<double>(s.hd)));
  float* ws = static_cast<float*>(workspace);
  const Partials part{ws, ws + size_t(n_rows) * s.nh * kMaxChunks * 2};
  const int head_groups = (s.nh / s.nkv + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const dim3 grid(kMaxChunks * s.nkv * head_groups, max_count, n_windows);
  if (s.hd == 256)
    attend_chunk_launch<256>(grid, stream, s, windows, rows, n_rows, scale, part);
  else
    attend_chunk_launch<128>(grid, stream, s, windows, rows, n_rows, scale, part);
  check_launch("attention_decode attend");
  attend_merge_kernel<<<dim3(s.nh, max_count, n_windows), 128, 0, stream>>>(s, windows, rows, n_rows, part);
  check_launch("attention_decode merge");
}

void attention_decode(const AttentionShape& s, const AttentionWeights& w, const AttentionWindow* windows,
                      int n_windows, int max_count, const AttentionRows& rows, int n_rows,
                      cudaStream_t stream) {
  // Stream-ordered scratch from the device's pool: free to reuse once the step's kernels have run.
  const size_t bytes = n_rows > 0 ? attention_decode_workspace_bytes(s, n_rows) : 0;
  void* ws = nullptr;
  if (bytes > 0) check(cudaMallocAsync(&ws, bytes, stream), "attention_decode: cudaMallocAsync");
  try {
    attention_decode(s, w, windows, n_windows, max_count, rows, n_rows, ws, bytes, stream);
  } catch (...) {
    if (ws) cudaFreeAsync(ws, stream);
    throw;
  }
  check(cudaFreeAsync(ws, stream), "attention_decode: cudaFreeAsync");
}

}  // namespace ds::cuda
