// The chunked gated delta rule of prompt passes (deltanet_chunked.h). The split into a parallel per-chunk
// transform and a sequential pass over chunks that carries the state follows the organisation of FLA's
// chunk_gated_delta_rule (fla-org/flash-linear-attention: WY/UT representation, then the state recurrence
// over chunks), here in fp32 on the CUDA cores with every sum in a fixed order (no tensor cores, no atomics).
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/deltanet_chunked.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"

namespace ds::cuda {

namespace {

constexpr int C = kDeltaRuleChunk;
constexpr int kDk = 128;       // key dim (as the per-token kernel)
constexpr int kPad = kDk + 1;  // padded rows: lanes reading one column of different rows hit distinct banks
constexpr int kColumns = 32;   // value columns per state block (one per lane)
constexpr int kRowsPerWarp = C / 4;  // chunk rows per warp of the state block (4 warps)

// Per row and value head of the step: W [dk], U [dv], P [C] (row i's q.k decay against the chunk's rows),
// cum (the log decay summed from the chunk's start through the row).
struct ChunkScratch {
  float* w = nullptr;
  float* u = nullptr;
  float* p = nullptr;
  float* cum = nullptr;
};

__device__ __forceinline__ bool window_ok(const DeltaNetWindow& win, int n_rows) {
  return win.count > 0 && win.row0 >= 0 && win.row0 + win.count <= n_rows && win.pos0 >= 0;
}

// Chunk ci of a window: its first row t0 (relative to row0) and length, chunks ending at absolute multiples
// of C positions (the first may start mid-chunk, the last end mid-chunk).
__device__ __forceinline__ int chunk_rows(const DeltaNetWindow& win, int ci, int& t0) {
  const int off = win.pos0 % C;
  t0 = max(0, ci * C - off);
  return min(win.count, (ci + 1) * C - off) - t0;
}

__device__ __forceinline__ int n_chunks(const DeltaNetWindow& win) {
  return (win.pos0 % C + win.count + C - 1) / C;
}

// One block per (chunk, value head, window), 256 threads. A[i][j] = beta_i (k_i.k_j) exp(cum_i - cum_j) for
// j < i and P[i][j] = (q_i.k_j) exp(cum_i - cum_j) for j <= i (dots over r = 0..127 in order); then one
// thread per column solves (I + A) x = b by forward substitution (j = 0..i-1 in order) for the columns of
// W (b = beta k exp(cum)) and U (b = beta v), the same recurrence as delta_rule_chunk on the CPU.
__global__ void __launch_bounds__(256)
    chunk_prepare_kernel(DeltaNetShape s, const DeltaNetWindow* windows, const float* mixed, int64_t lm,
                         const float* gates, ChunkScratch sc, int n_rows) {
  extern __shared__ float smem[];
  float* k_sh = smem;                  // [C][kPad]
  float* q_sh = k_sh + C * kPad;       // [C][kPad]
  float* a_sh = q_sh + C * kPad;       // [C][C + 1]
  float* cum_sh = a_sh + C * (C + 1);  // [C]
  float* beta_sh = cum_sh + C;         // [C]
  float* ecum_sh = beta_sh + C;        // [C]: exp(cum)
  float* x_sh = ecum_sh + C;           // [C][dk + dv]: the solved W | U columns
  dev::grid_dependency_wait();
  const DeltaNetWindow win = windows[blockIdx.z];
  if (!window_ok(win, n_rows)) return;
  int t0 = 0;
  const int len = chunk_rows(win, static_cast<int>(blockIdx.x), t0);
  if (len <= 0) return;
  const int h = blockIdx.y, kh = h / (s.nv / s.nk), tid = threadIdx.x;
  const int64_t kd = s.key_dim(), nv = s.nv, row0 = int64_t{win.row0} + t0;
  for (int e = tid; e < C * kDk; e += blockDim.x) {
    const int i = e / kDk, r = e % kDk;
    float qv = 0.0f, kv = 0.0f;
    if (i < len) {
      const float* m = mixed + (row0 + i) * lm;
      qv = m[int64_t{kh} * kDk + r];
      kv = m[kd + int64_t{kh} * kDk + r];
    }
    q_sh[i * kPad + r] = qv;
    k_sh[i * kPad + r] = kv;
  }
  if (tid < C) beta_sh[tid] = tid < len ? gates[(row0 + tid) * 2 * nv + h] : 0.0f;
  if (tid == 0) {
    float run = 0.0f;
    for (int i = 0; i < C; ++i) {
      if (i < len) run = __fadd_rn(run, gates[(row0 + i) * 2 * nv + nv + h]);
      cum_sh[i] = run;
    }
  }
  __syncthreads();
  for (int e = tid; e < C * C; e += blockDim.x) {
    const int i = e / C, j = e % C;
    float a = 0.0f, p = 0.0f;
    if (i < len && j <= i) {
      float dk = 0.0f, dq = 0.0f;
      for (int r = 0; r < kDk; ++r) {
        const float kj = k_sh[j * kPad + r];
        dk = __fmaf_rn(k_sh[i * kPad + r], kj, dk);
        dq = __fmaf_rn(q_sh[i * kPad + r], kj, dq);
      }
      const float decay = expf(__fsub_rn(cum_sh[i], cum_sh[j]));
      p = __fmul_rn(dq, decay);
      if (j < i) a = __fmul_rn(__fmul_rn(beta_sh[i], dk), decay);
    }
    a_sh[i * (C + 1) + j] = a;
    if (i < len) sc.p[((row0 + i) * nv + h) * C + j] = p;
  }
  if (tid < len) sc.cum[(row0 + tid) * nv + h] = cum_sh[tid];
  if (tid < C) ecum_sh[tid] = expf(cum_sh[tid]);
  __syncthreads();
  // Each thread solves its own columns in x_sh (no other thread reads them: no barrier).
  const int cols = kDk + s.dv;
  for (int col = tid; col < cols; col += blockDim.x) {
    const float* v = mixed + row0 * lm + 2 * kd + int64_t{h} * s.dv + (col - kDk);
    for (int i = 0; i < len; ++i) {
      float x = col < kDk ? __fmul_rn(__fmul_rn(beta_sh[i], k_sh[i * kPad + col]), ecum_sh[i])
                          : __fmul_rn(beta_sh[i], v[i * lm]);
      for (int j = 0; j < i; ++j) x = __fmaf_rn(-a_sh[i * (C + 1) + j], x_sh[j * cols + col], x);
      x_sh[i * cols + col] = x;
      if (col < kDk)
        sc.w[((row0 + i) * nv + h) * kDk + col] = x;
      else
        sc.u[((row0 + i) * nv + h) * s.dv + (col - kDk)] = x;
    }
  }
}

// acc[m] = sum over r = 0..127 in order of rows[(warp*kRowsPerWarp + m)][r] * S[r][lane]: a warp's 16 chunk
// rows against the state's column (rows broadcast as float4, S's column conflict-free).
__device__ __forceinline__ void rows_times_state(const float* rows, const float* S_sh, int warp, int lane,
                                                 float (&acc)[kRowsPerWarp]) {
#pragma unroll
  for (int m = 0; m < kRowsPerWarp; ++m) acc[m] = 0.0f;
  for (int r = 0; r < kDk; r += 4) {
    const float s0 = S_sh[r * kColumns + lane], s1 = S_sh[(r + 1) * kColumns + lane],
                s2 = S_sh[(r + 2) * kColumns + lane], s3 = S_sh[(r + 3) * kColumns + lane];
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m) {
      const float4 w = *reinterpret_cast<const float4*>(rows + (warp * kRowsPerWarp + m) * kDk + r);
      acc[m] = __fmaf_rn(w.x, s0, acc[m]);
      acc[m] = __fmaf_rn(w.y, s1, acc[m]);
      acc[m] = __fmaf_rn(w.z, s2, acc[m]);
      acc[m] = __fmaf_rn(w.w, s3, acc[m]);
    }
  }
}

// One block per (32 value columns, value head, window), 4 warps, chunk after chunk; the state slice
// S[128][32] lives in shared memory for the whole window. Lane = column; in vnew and o warp w owns chunk
// rows 16w..16w+15, in the state update key rows 32w..32w+31.
__global__ void __launch_bounds__(128)
    chunk_state_kernel(DeltaNetShape s, const DeltaNetWindow* windows, const float* mixed, int64_t lm,
                       ChunkScratch sc, float* core, int n_rows) {
  extern __shared__ float4 smem4[];
  float* S_sh = reinterpret_cast<float*>(smem4);  // [kDk][kColumns]
  float* buf = S_sh + kDk * kColumns;             // [C][kDk]: W, then q, then k exp(cum_last - cum)
  float* vn = buf + C * kDk;                      // [C][kColumns]
  float* p_sh = vn + C * kColumns;                // [C][C]
  float* cum_sh = p_sh + C * C;                   // [C]
  dev::grid_dependency_wait();
  const DeltaNetWindow win = windows[blockIdx.z];
  if (!window_ok(win, n_rows)) return;
  const int h = blockIdx.y, kh = h / (s.nv / s.nk), tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int c = blockIdx.x * kColumns + lane;
  const int64_t kd = s.key_dim(), nv = s.nv, dv = s.dv, vd = s.value_dim();
  float* S = win.state + int64_t{h} * kDk * dv;
  for (int r = warp; r < kDk; r += 4) S_sh[r * kColumns + lane] = S[r * dv + c];
  const int chunks = n_chunks(win);
  for (int ci = 0; ci < chunks; ++ci) {
    int t0 = 0;
    const int len = chunk_rows(win, ci, t0);
    const int64_t row0 = int64_t{win.row0} + t0;
    __syncthreads();  // the previous chunk is done with buf, vn, p_sh, cum_sh and S_sh
    for (int e = tid; e < C * kDk / 4; e += blockDim.x) {
      const int i = e / (kDk / 4), r4 = e % (kDk / 4);
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < len) v = reinterpret_cast<const float4*>(sc.w + ((row0 + i) * nv + h) * kDk)[r4];
      reinterpret_cast<float4*>(buf)[e] = v;
    }
    for (int e = tid; e < C * C / 4; e += blockDim.x) {
      const int i = e / (C / 4), j4 = e % (C / 4);
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < len) v = reinterpret_cast<const float4*>(sc.p + ((row0 + i) * nv + h) * C)[j4];
      reinterpret_cast<float4*>(p_sh)[e] = v;
    }
    if (tid < C) cum_sh[tid] = tid < len ? sc.cum[(row0 + tid) * nv + h] : 0.0f;
    __syncthreads();
    float acc[kRowsPerWarp];
    rows_times_state(buf, S_sh, warp, lane, acc);  // W S
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m) {
      const int i = warp * kRowsPerWarp + m;
      vn[i * kColumns + lane] = i < len ? __fsub_rn(sc.u[((row0 + i) * nv + h) * dv + c], acc[m]) : 0.0f;
    }
    __syncthreads();  // vn complete, buf's W no longer read
    for (int e = tid; e < C * kDk; e += blockDim.x) {
      const int i = e / kDk, r = e % kDk;
      buf[e] = i < len ? mixed[(row0 + i) * lm + int64_t{kh} * kDk + r] : 0.0f;
    }
    __syncthreads();
    rows_times_state(buf, S_sh, warp, lane, acc);  // q S
#pragma unroll
    for (int m = 0; m < kRowsPerWarp; ++m) {
      const int i = warp * kRowsPerWarp + m;
      if (i >= len) break;
      float o = __fmul_rn(acc[m], expf(cum_sh[i]));
      for (int j = 0; j <= i; ++j) o = __fmaf_rn(p_sh[i * C + j], vn[j * kColumns + lane], o);
      core[(row0 + i) * vd + int64_t{h} * dv + c] = o;
    }
    __syncthreads();  // every warp is done reading buf's q and S_sh
    const float last = cum_sh[len - 1];
    for (int e = tid; e < C * kDk; e += blockDim.x) {
      const int i = e / kDk, r = e % kDk;
      buf[e] = i < len ? __fmul_rn(mixed[(row0 + i) * lm + kd + int64_t{kh} * kDk + r],
                                   expf(__fsub_rn(last, cum_sh[i])))
                       : 0.0f;
    }
    __syncthreads();
    const float el = expf(last);
    float st[kDk / 4];
#pragma unroll
    for (int m = 0; m < kDk / 4; ++m) st[m] = __fmul_rn(S_sh[(warp * (kDk / 4) + m) * kColumns + lane], el);
    for (int j = 0; j < len; ++j) {
      const float v = vn[j * kColumns + lane];
#pragma unroll
      for (int m4 = 0; m4 < kDk / 16; ++m4) {
        const float4 k = *reinterpret_cast<const float4*>(buf + j * kDk + warp * (kDk / 4) + 4 * m4);
        st[4 * m4] = __fmaf_rn(k.x, v, st[4 * m4]);
        st[4 * m4 + 1] = __fmaf_rn(k.y, v, st[4 * m4 + 1]);
        st[4 * m4 + 2] = __fmaf_rn(k.z, v, st[4 * m4 + 2]);
        st[4 * m4 + 3] = __fmaf_rn(k.w, v, st[4 * m4 + 3]);
      }
    }
    // Only this thread reads these S_sh cells between the barriers above and the next chunk's.
#pragma unroll
    for (int m = 0; m < kDk / 4; ++m) S_sh[(warp * (kDk / 4) + m) * kColumns + lane] = st[m];
  }
  __syncthreads();
  for (int r = warp; r < kDk; r += 4) S[r * dv + c] = S_sh[r * kColumns + lane];
}

size_t prepare_shared(const DeltaNetShape& s) {
  return (2 * C * kPad + C * (C + 1) + 3 * C + C * (kDk + s.dv)) * sizeof(float);
}
constexpr size_t kStateShared = (kDk * kColumns + C * kDk + C * kColumns + C * C + C) * sizeof(float);

void fail(const std::string& what) {
  throw ArgumentError("delta_rule_chunked: " + what);
}

ChunkScratch split_scratch(const DeltaNetShape& s, int n_rows, float* base) {
  ChunkScratch sc;
  const int64_t per = int64_t{n_rows} * s.nv;
  sc.w = base;
  sc.u = sc.w + per * kDk;
  sc.p = sc.u + per * s.dv;
  sc.cum = sc.p + per * C;
  return sc;
}

}  // namespace

size_t deltanet_chunked_scratch_bytes(const DeltaNetShape& s, int n_rows) {
  return static_cast<size_t>(n_rows) * static_cast<size_t>(s.nv) * static_cast<size_t>(s.dk + s.dv + C + 1) *
         sizeof(float);
}

void delta_rule_chunked(const DeltaNetShape& s, const DeltaNetWindow* windows, int n_windows,
                        const float* mixed, int64_t lm, const float* gates, float* core, int n_rows,
                        const DeltaRuleChunks& chunks, cudaStream_t stream) {
  if (s.dk != kDk) fail("dk must be 128 (got " + std::to_string(s.dk) + ")");
  if (s.dv <= 0 || s.dv % kColumns != 0) fail("dv must be a positive multiple of 32");
  if (s.nk <= 0 || s.nv <= 0 || s.nv % s.nk != 0) fail("nv must be a positive multiple of nk");
  if (n_windows <= 0 || n_rows <= 0 || n_windows > 65535) fail("n_windows must be 1..65535, n_rows positive");
  if (chunks.max_count <= 0 || chunks.max_count > n_rows)
    fail("max_count must be 1..n_rows (got " + std::to_string(chunks.max_count) + ")");
  if (chunks.scratch == nullptr || chunks.scratch_bytes < deltanet_chunked_scratch_bytes(s, n_rows))
    fail("scratch is null or smaller than deltanet_chunked_scratch_bytes");
  if (reinterpret_cast<uintptr_t>(chunks.scratch) % 16 != 0) fail("scratch must be 16-byte aligned");
  const size_t prepare_bytes = prepare_shared(s);
  if (prepare_bytes > 200 * 1024) fail("dv too large for the prepare kernel's shared memory");
  // Opted in once per device for the most the check above allows (dv up to 320), as the attention kernel
  // does.
  opt_in_dynamic_smem(chunk_prepare_kernel, 200 * 1024, "delta_rule_chunked: cudaFuncSetAttribute (prepare)");
  opt_in_dynamic_smem(chunk_state_kernel, static_cast<int>(kStateShared),
                      "delta_rule_chunked: cudaFuncSetAttribute (state)");
  const ChunkScratch sc = split_scratch(s, n_rows, chunks.scratch);
  // A window of max_count rows starting mid-chunk spans at most this many chunks.
  const int max_chunks = (chunks.max_count + C - 1) / C + 1;
  const dim3 prepare_grid(static_cast<unsigned>(max_chunks), static_cast<unsigned>(s.nv),
                          static_cast<unsigned>(n_windows));
  chunk_prepare_kernel<<<prepare_grid, 256, prepare_bytes, stream>>>(s, windows, mixed, lm, gates, sc,
                                                                     n_rows);
  check_launch("delta_rule_chunked prepare");
  const dim3 state_grid(static_cast<unsigned>(s.dv / kColumns), static_cast<unsigned>(s.nv),
                        static_cast<unsigned>(n_windows));
  chunk_state_kernel<<<state_grid, 128, kStateShared, stream>>>(s, windows, mixed, lm, sc, core, n_rows);
  check_launch("delta_rule_chunked state");
}

}  // namespace ds::cuda
