#pragma once
// Everything one stream carries between forward calls. A plain value: copying it snapshots the stream,
// assigning a copy back restores it (the prompt cache and draft rollback build on this).
#include <cstdint>
#include <vector>

#include "model/backend_state.h"
#include "model/model_config.h"

namespace ds {

struct DeltaNetState {
  std::vector<float> conv;   // last K-1 pre-conv rows, oldest first: [(K-1), conv_dim]
  std::vector<float> state;  // per value head [dk, dv], f32
};

struct AttentionState {
  std::vector<float> keys, values;  // [positions, n_kv * head_dim], keys normed and rotated
  std::vector<float> index_keys;    // raw indexer keys [positions, idx_hd]
  std::vector<float> index_blocks;  // pooled, normed, rotated block keys [complete blocks, idx_hd]
};

struct PleState {
  std::vector<float> conv;  // last (K-1)*dilation normed gated rows: [(K-1)*dil, S*D], oldest first
};

struct StreamState {
  int64_t position = 0;                   // tokens consumed so far
  std::vector<int32_t> ple_context;       // the last ngram_size-1 tokens (EOS before the start), oldest first
  std::vector<DeltaNetState> deltanet;    // per layer (empty for attention layers)
  std::vector<AttentionState> attention;  // per layer, then one slot per MTP layer (the head's KV cache)
  std::vector<PleState> ple;
  int64_t mtp_position = 0;  // positions the MTP head has consumed (docs/mtp.md)
  // Main-model H rows for positions mtp_position.. that the head has not read yet (their next token was not
  // known): kept with the state so a snapshot at the end of the known tokens resumes with the head in step.
  std::vector<float> mtp_pending;
  // The same rows' count where the backend keeps them itself (ModelBackend::keeps_hidden_rows: on its
  // device).
  int64_t mtp_kept_rows = 0;
  int64_t mtp_index_ratio = 0;  // the head's indexer block size, 0 without indexer
  BackendStateSlot backend;     // the device state of a non-CPU backend (empty on the CPU)

  static StreamState fresh(const ModelConfig& cfg);
  size_t bytes() const;  // memory held, for accounting
  // Rolls the MTP head's cache back to its first `positions` entries (draft rollback).
  void truncate_mtp(int64_t positions);
};

}  // namespace ds
