#pragma once
// Small kernels of the prompt path (docs/cuda-model.md, "Prompt path").
#include <cuda_runtime.h>

#include "backend/cuda/attention_decode.h"

namespace ds::cuda {

// Splits each window at position `threshold`: prefix[i] keeps its rows at positions < threshold, suffix[i]
// the rest (a part without rows gets count 0, which the attention kernels skip).
void split_windows(const AttentionWindow* windows, int n_windows, int threshold, AttentionWindow* prefix,
                   AttentionWindow* suffix, cudaStream_t stream);

}  // namespace ds::cuda
