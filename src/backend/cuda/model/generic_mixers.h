#pragma once
// Gated DeltaNet and gated attention decode steps for any head shape (the fixtures' small heads): the same
// interfaces as deltanet_decode / attention_decode (src/backend/cuda/), which take only the real shapes
// (dk 128; hd 128 or 256). Plain one-warp or one-thread-per-column kernels: simple, row invariant, not fast.
// CPU math: src/model/layers/{deltanet,delta_rule,attention}.cpp.
#include <cuda_runtime.h>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/deltanet_decode.h"

namespace ds::cuda {

// Any dk and dv up to 1024, conv kernel 2..8.
void deltanet_decode_generic(const DeltaNetShape& shape, const DeltaNetWeights& w,
                             const DeltaNetWindow* windows, int n_windows, const DeltaNetRows& rows,
                             int n_rows, cudaStream_t stream);

// hd a multiple of 32 up to 256. Norms, RoPE and the K/V append (as attention_decode), then for every row
// softmax attention over its visible keys: all of 0..pos, or, where select_mode[row] >= 0, the indexer's
// chosen blocks (see indexer_kernels.h). With only_selected, rows whose select_mode is < 0 are left alone
// (attention_decode has written them) and the norm/append step is skipped.
struct AttentionSelection {
  const int32_t* select_mode = nullptr;  // [n_rows]: -1 all keys, else the row's complete block count
  const uint8_t* chosen = nullptr;       // [n_rows, max_blocks] 1 where the block is chosen
  int max_blocks = 0, ratio = 0;
};
void attention_decode_generic(const AttentionShape& shape, const AttentionWeights& w,
                              const AttentionWindow* windows, int n_windows, int max_count,
                              const AttentionRows& rows, int n_rows, const AttentionSelection& selection,
                              bool only_selected, cudaStream_t stream);

}  // namespace ds::cuda
