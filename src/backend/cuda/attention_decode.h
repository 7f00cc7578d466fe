#pragma once
// Gated attention decode on the GPU (docs/cuda-ops.md): per row, centred RMSNorm of q and k per head,
// partial RoPE (rotate-half on the first rotary_dim values, f32 angles as torch computes them), the K/V cache
// append, softmax attention over the stream's cached keys (GQA) and the sigmoid output gate. The CPU
// reference math is src/model/layers/attention.cpp (without the indexer's block selection).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace ds::cuda {

// hd 128 or 256; nh a multiple of nkv; rotary_dim even and <= hd.
struct AttentionShape {
  int nh = 24, nkv = 2, hd = 256, rotary_dim = 64;
  float rms_eps = 1e-6f;
  __host__ __device__ int64_t q_width() const { return int64_t{nh} * 2 * hd; }  // per head: q, then the gate
  __host__ __device__ int64_t kv_width() const { return int64_t{nkv} * hd; }
};

// Device memory, fp32: q_norm, k_norm [hd] (effective weights, 1 + w for a centred norm); inv_freq
// [rotary_dim / 2] as ds::Rope computes it on the host (1 / theta^(2i/rd) in f32).
struct AttentionWeights {
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  const float* inv_freq = nullptr;
};

// One stream's window: rows row0 .. row0+count-1 at positions pos0 .. pos0+count-1; the caches [capacity,
// kv_width] hold positions 0 .. pos0-1 and receive the window's keys and values. A window out of range of
// n_rows or capacity (checked on the device) is skipped.
struct AttentionWindow {
  int32_t row0 = 0;
  int32_t count = 0;
  int32_t pos0 = 0;
  int32_t capacity = 0;
  float* keys = nullptr;
  float* values = nullptr;
};

// qg [n_rows, q_width]: q and gate per head on entry; q is normalised and rotated in place. k, v [n_rows,
// kv_width] (k is normalised and rotated into the cache). out [n_rows, nh*hd]. ld: when qg, k and v are parts
// of one joint row (one product over concatenated weights), the row stride of all three; 0: each packed.
struct AttentionRows {
  float* qg = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int64_t ld = 0;
  __host__ __device__ int64_t ld_qg(const AttentionShape& s) const { return ld ? ld : s.q_width(); }
  __host__ __device__ int64_t ld_kv(const AttentionShape& s) const { return ld ? ld : s.kv_width(); }
};

// Enqueues the step on `stream` (2 launches). windows: a device array of n_windows disjoint windows of at
// most max_count tokens. A row's output bits depend only on its own q, gate and its stream's cache: not on
// the other windows, nor on whether earlier tokens of the window ran in the same step.
// Scratch is taken from the device's stream-ordered pool (cudaMallocAsync) for the step.
void attention_decode(const AttentionShape& shape, const AttentionWeights& w, const AttentionWindow* windows,
                      int n_windows, int max_count, const AttentionRows& rows, int n_rows,
                      cudaStream_t stream);

// Only the first launch of the step: the norms and RoPE of q (in place) and k, the K/V cache append, for
// attention kernels of their own (the prompt path's selected-blocks attention).
void attention_norm_rope_append(const AttentionShape& shape, const AttentionWeights& w,
                                const AttentionWindow* windows, int n_windows, int max_count,
                                const AttentionRows& rows, int n_rows, cudaStream_t stream);

// The same with caller-owned scratch (device memory of at least attention_decode_workspace_bytes(shape,
// n_rows) bytes, 16-byte aligned, not used by anything else until the step has run): nothing is allocated.
size_t attention_decode_workspace_bytes(const AttentionShape& shape, int n_rows);

// Warps a block of the split-KV attend kernel: DS_CUDA_ATTEND_WARPS (4, 8 or 16; anything else is refused
// naming the variable), read at every call (in the graphs' key), else 0: the launch picks by its rows
// (attend_warps_for). A head's arithmetic is one warp's at every count, so the bits never depend on it; more
// warps spread the tile's staging and a kv head's q heads (each warp then reads the tile from shared memory
// for fewer heads). Measured (docs/receipts/cuda-decode-merged.md "session 14"): 8 warps at one row 9% faster
// than 4 at 8k and 32k keys, 4 best from 8 rows (16 warps take 41% more time there at 32k keys).
int attention_attend_warps();
// The warps for a launch of n_rows rows: attention_attend_warps() when set, else 8 at one row and 4 above.
int attend_warps_for(int n_rows);
void attention_decode(const AttentionShape& shape, const AttentionWeights& w, const AttentionWindow* windows,
                      int n_windows, int max_count, const AttentionRows& rows, int n_rows, void* workspace,
                      size_t workspace_bytes, cudaStream_t stream);

}  // namespace ds::cuda
