#pragma once
// The QSA indexer's decode step on the GPU (CPU math: indexer_select and complete_blocks in
// src/model/layers/attention.cpp): indexer q heads normed and rotated, raw keys cached, every block completed
// by the window pooled (mean), normed and rotated at its first position, and for each row whose complete
// blocks exceed the budget the top budget/ratio blocks by score (sum over heads of relu(q . block) /
// sqrt(ihd), in double as the CPU; ties to the earlier block).
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

struct IndexerShape {
  int heads = 4, head_dim = 128, rotary_dim = 64, ratio = 4, budget = 2048;
  float rms_eps = 1e-6f;
  int64_t ld = 0;  // row stride of idx when it is part of a joint row; 0: (heads + 1) * head_dim
  __host__ __device__ int64_t ld_idx() const { return ld ? ld : int64_t{heads + 1} * head_dim; }
};

// One stream's window; index_keys [capacity, head_dim] raw keys, index_blocks [capacity / ratio, head_dim].
struct IndexerWindow {
  int32_t row0 = 0, count = 0, pos0 = 0, capacity = 0;
  float* index_keys = nullptr;
  float* index_blocks = nullptr;
};

// idx [n_rows, (heads + 1) * head_dim]: the indexer projection (q heads, then the raw key); q is normed and
// rotated in place. select_mode [n_rows] receives -1 (every key visible: within the budget) or the row's
// complete block count; scores [n_rows, max_blocks] is scratch; chosen [n_rows, max_blocks] marks the chosen
// blocks. q_norm/k_norm are effective multipliers [head_dim]; inv_freq [rotary_dim / 2]. select false: the
// caller knows every row is within the budget; the selection launch (which would only write -1s) is skipped
// and select_mode is left unwritten (read nothing from it).
void indexer_decode(const IndexerShape& s, const float* q_norm, const float* k_norm, const float* inv_freq,
                    const IndexerWindow* windows, int n_windows, int max_count, float* idx, int n_rows,
                    int max_blocks, int32_t* select_mode, float* scores, uint8_t* chosen, cudaStream_t stream,
                    bool select = true);

}  // namespace ds::cuda
