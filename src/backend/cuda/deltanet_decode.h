#pragma once
// Gated DeltaNet decode step on the GPU (docs/cuda-ops.md): for windows of tokens of many streams in one
// launch sequence, the causal conv + SiLU, q/k L2 norm, beta and the log decay, the per-token delta rule on
// the fp32 state and the gated RMSNorm; the CPU reference math is src/model/layers/deltanet.cpp.
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

// The layer's shape. dk must be 128 (the 4 warps of a block own 32 key rows each), dv a multiple of 32,
// nv a multiple of nk, conv_kernel 2..4.
struct DeltaNetShape {
  int nk = 16, nv = 48, dk = 128, dv = 128, conv_kernel = 4;
  bool gate_sigmoid = true;  // output gate: sigmoid(z) (qwen4_exp) or silu(z) (qwen3_next)
  float rms_eps = 1e-6f;
  __host__ __device__ int64_t key_dim() const { return int64_t{nk} * dk; }
  __host__ __device__ int64_t value_dim() const { return int64_t{nv} * dv; }
  __host__ __device__ int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// Layer weights in device memory, fp32: conv taps [conv_dim, conv_kernel]; a_log, dt_bias [nv]; the gated
// norm's effective weight [dv].
struct DeltaNetWeights {
  const float* conv_taps = nullptr;
  const float* a_log = nullptr;
  const float* dt_bias = nullptr;
  const float* norm = nullptr;
};

// One stream's window: rows row0 .. row0+count-1 of the step's rows, in token order. conv_state [K-1,
// conv_dim] holds the stream's last K-1 pre-conv rows; state [nv, dk, dv] the recurrent state (row = key
// index). Both are updated in place. A window out of range of n_rows (checked on the device) is skipped.
// pos0: the stream's position of row0 (the chunked prompt form aligns its chunks to absolute positions).
struct DeltaNetWindow {
  int32_t row0 = 0;
  int32_t count = 0;
  float* conv_state = nullptr;
  float* state = nullptr;
  int32_t pos0 = 0;
};

// Per-row buffers of the step in device memory. mixed [n_rows, conv_dim] holds the qkv projection on entry
// and is overwritten with the conv'd, normalised q|k|v; z [n_rows, value_dim]; b, a [n_rows, nv]; gates
// [n_rows, 2*nv] is scratch (beta, then g); core [n_rows, value_dim] receives the gated-normed output.
// ld: when mixed, z, b and a are parts of one joint row (one product over concatenated weights), the row
// stride of all four; 0: each packed (conv_dim, value_dim, nv, nv).
struct DeltaNetRows {
  float* mixed = nullptr;
  const float* z = nullptr;
  const float* b = nullptr;
  const float* a = nullptr;
  float* gates = nullptr;
  float* core = nullptr;
  int64_t ld = 0;
  int64_t ld_mixed(const DeltaNetShape& s) const { return ld ? ld : s.conv_dim(); }
  int64_t ld_z(const DeltaNetShape& s) const { return ld ? ld : s.value_dim(); }
  int64_t ld_gates_in(const DeltaNetShape& s) const { return ld ? ld : s.nv; }
};

// The chunked delta rule of prompt passes (deltanet_chunked.h) in place of the per-token one: max_count is
// the longest window's count; scratch of deltanet_chunked_scratch_bytes(shape, n_rows) bytes.
struct DeltaRuleChunks {
  int max_count = 0;
  float* scratch = nullptr;
  size_t scratch_bytes = 0;
};

// Enqueues the step on `stream`: 2 launches (dv <= 128: the per-token delta rule and the gated norm in one
// block per value head), else 3; 4 with `chunks`; separate_norm keeps the per-token rule and the norm apart
// (the same bits: for checks). `windows` is a device array of n_windows disjoint windows. The bits of a
// stream's outputs and states depend only on its own rows and states, not on the other windows, and a window
// of L tokens gives the same bits as L successive one-token steps. With `chunks` the rule runs in chunks of
// 64 positions aligned to each window's pos0 (a prompt pass): the bits then depend on the stream's own rows
// and on where its windows start relative to the 64-grid. staged (prompt passes): the conv and the per-token
// rule run as deltanet_prompt.h's kernels, built for long windows (the same bits; the norm apart).
void deltanet_decode(const DeltaNetShape& shape, const DeltaNetWeights& w, const DeltaNetWindow* windows,
                     int n_windows, const DeltaNetRows& rows, int n_rows, cudaStream_t stream,
                     const DeltaRuleChunks* chunks = nullptr, bool separate_norm = false, bool staged = false,
                     bool fused_conv = false, bool loads_first = false);

// loads_first (the two-launch decode path, dv <= 128): the rule + norm kernel that issues each token's loads
// together (sass13; the same bits; docs/receipts/cuda-decode-batch1.md).
// fused_conv (decode; no chunks, separate_norm or staged): the whole step in ONE launch where
// conv_rule_norm_supported (dk == dv == 128, at most 8 value heads a key head: one thread-block cluster per
// key head), the same bits as the two launches; mixed then keeps the projection (it is not overwritten) and
// gates is not written. Elsewhere the flag is ignored.
bool conv_rule_norm_supported(const DeltaNetShape& shape);

}  // namespace ds::cuda
