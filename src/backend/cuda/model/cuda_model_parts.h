#pragma once
// The device weights of one layer and the host tables of a CudaModel (shared by its two source files).
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/model/cuda_model.h"

namespace ds::cuda {

constexpr size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

// Host staging of one call: consecutive 256-byte aligned regions, uploaded in one copy.
struct Staging {
  std::vector<uint8_t> bytes;
  size_t put(const void* p, size_t n) {
    const size_t at = align256(bytes.size());
    bytes.resize(at + n);
    if (n) std::memcpy(bytes.data() + at, p, n);
    return at;
  }
};

struct DeviceHc {
  DeviceBuffer norm;
  JointMatrix down_inject;  // down [R, S*D], then (a block's mix) inject [S, S*D]: one product
  DeviceMatrix up;
};

struct CudaModel::Layer {
  LayerKind kind = LayerKind::LinearAttention;
  // Gated DeltaNet
  JointMatrix qkvzba;  // qkv [conv_dim, D], z [value_dim, D], b, a [nv, D]: one product
  DeviceMatrix out;
  DeviceBuffer conv, a_log, dt_bias, dn_norm;
  // attention (+ QSA indexer)
  JointMatrix qkv_idx;  // q|gate, k, v [.., D] and with the indexer its q heads|key: one product
  DeviceMatrix o;
  DeviceBuffer q_norm, k_norm, iq_norm, ik_norm;
  bool has_indexer = false;
  // MoE (experts stacked), shared expert, or a dense MLP in the shared slots. gate|up of one expert are one
  // [2 inter, hidden] matrix (one product); when their encodings differ, *gate_up holds gate and *up_alone
  // up.
  // router_shared: the router [E, D], then with a shared expert (not stacked) its gate, up [shared_inter, D]
  // each, then its sigmoid gate [1, D]: one product over x. The dense MLP keeps sh_gate_up (+ sh_up_alone)
  // and sh_down.
  JointMatrix router_shared;
  DeviceMatrix gate_up, up_alone, down, sh_gate_up, sh_up_alone, sh_down;
  bool has_shared = false, dense = false;
  bool shared_stacked = false;  // the shared expert is expert n_experts of gate_up/down (no sh_* matrices)
  // qwen4_exp
  DeviceHc hc_attn, hc_mlp;
  bool has_ple = false;
  int ple_index = -1;
  DeviceMatrix ple_key, ple_value;
  DeviceBuffer ple_norm_key, ple_norm_query, ple_norm_conv, ple_conv;
  // qwen3_5_moe
  DeviceBuffer input_norm, post_norm;
};

// The MTP head (qwen4_exp form, docs/mtp.md): its own norms and input projections, one attention layer run by
// the main layers' functions, its own final mixer; pinned and device staging of its own (its graphs are
// parked in CudaModel::head_graphs_), so head calls and main rounds alternate without recapturing each
// other's graphs.
struct CudaModel::Mtp {
  DeviceBuffer norm_embedding, norm_hidden;  // [D], [S*D] (one joint norm over the streams)
  DeviceMatrix fc_embedding, fc_hidden;      // [D, D] each; fc_hidden per stream
  Layer layer;
  DeviceHc mixer;
  DeviceBuffer staged;
  uint8_t* pinned = nullptr;
  size_t pinned_bytes = 0;
  ~Mtp() {
    if (pinned) cudaFreeHost(pinned);
  }
};

// The embedding and PLE tables in host memory: views into the checkpoint, or random tables the model owns.
struct CudaModel::HostTables {
  MatrixWeight embed;
  std::vector<const PleWeights*> ple;  // per PLE layer (uploaded model)
  std::vector<PleWeights> own_ple;     // dummy tables' descriptions
  int64_t ple_rows_kept = 0;           // dummy: rows actually held (the hashed row is taken modulo this)
  std::vector<std::unique_ptr<uint8_t[]>> owned;
};

// Device scratch for one call's rows, carved from one allocation; pinned host staging for the uploads.
struct CudaModel::Scratch {
  int capacity = 0;  // rows
  DeviceBuffer arena;
  float *H, *x, *y, *normed, *low, *low_iota, *mix, *iota, *iota_next, *rjoint, *mixed, *gates, *core, *qg,
      *attn;
  float *scores, *weights, *gu, *h, *slots, *sgu, *sh, *shared, *pkey, *pval, *qn, *gated, *gn;
  float *xs, *logits;
  float* argmax_v;  // the split argmax's slice bests (argmax_slices(V) a row), and their indices
  int32_t* argmax_i;
  int32_t *select_mode, *ids, *want, *argmax, *row_ids, *slot_of;
  uint8_t* chosen;
  ExpertRow *up_pairs, *down_pairs;
  ExpertWindow* windows;
  uint32_t* counters;  // fused router/combine completion counters (zero between launches)
  void*
      attn_ws;  // attention_decode's split-KV partials (caller-owned, so a captured graph allocates nothing)
  size_t attn_ws_bytes = 0;
  // The decode tensor products' x planes (tc_decode_scratch_bytes) and their expert tiles and grouping
  // scratch.
  void* tc_split = nullptr;
  size_t tc_split_bytes = 0;
  ExpertWindow* tc_tiles = nullptr;
  void* tc_group = nullptr;
  DeviceBuffer staged_buf;
  uint8_t* pinned = nullptr;
  size_t pinned_bytes = 0;
  // This call's windows: per layer, the device array of its windows (by the mixer's type), or null.
  std::vector<const void*> win_mixer, win_indexer, win_ple;
  std::vector<const float*> emb;  // per PLE layer: the gathered rows [n, ple_embed_dim]
  int n_windows = 0, max_count = 0, max_blocks = 0;
  bool any_selecting = true;  // a row of the call may be past the indexer's budget
  ~Scratch() {
    if (pinned) cudaFreeHost(pinned);
  }
};

// Bytes of the decode tensor products' scratch for calls of up to n rows (cuda_model_prompt.cpp): x split
// into planes (the widest product input, or the routed experts' rows), the expert tiles and their grouping
// scratch.
struct TcScratchBytes {
  int64_t split, tiles, group;
};
TcScratchBytes tc_scratch_bytes(const ModelConfig& c, int n);

// Device scratch of a prompt pass (cuda_model_prompt.cpp): the expert tiles and their grouping scratch, the
// attention windows split at the indexer's budget, the chunked delta rule's per-row transforms.
struct CudaModel::PromptScratch {
  int rows = 0, windows = 0, max_tiles = 0;
  DeviceBuffer tiles, group, split, chunks;
};

}  // namespace ds::cuda
