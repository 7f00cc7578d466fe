#pragma once
// Attention of prompt rows past the indexer's budget (docs/cuda-model.md "Prompt path"): each row attends
// over its chosen key blocks and its tail, as attend_generic (generic_mixers.cu) does one warp per (row,
// head), but one block per (row, kv head) whose warps are the kv head's q heads, so every gathered key and
// value is read once for all of them, in tiles of 32 keys staged in shared memory.
#include <cuda_runtime.h>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/model/generic_mixers.h"

namespace ds::cuda {

// hd 128 or 256; nh / nkv at most 16. The rows' q are normalised and rotated and their keys and values in
// the caches already (attention_norm_rope_append). Rows whose select_mode is negative are left alone.
// A row's keys, in order: each chosen block b < select_mode (ascending, its `ratio` keys in order), then the
// tail select_mode * ratio .. pos; cut into tiles of 32 in that order, online softmax per tile, so a row's
// bits depend on its own q, gate, selection and cache alone.
void attention_prompt_selected(const AttentionShape& shape, const AttentionWindow* windows, int n_windows,
                               int max_count, const AttentionRows& rows, int n_rows,
                               const AttentionSelection& selection, cudaStream_t stream);

}  // namespace ds::cuda
