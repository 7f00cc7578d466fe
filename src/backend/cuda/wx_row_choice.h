#pragma once
// The shape rule between the paired and the lockstep one-row kernels (docs/cuda-products.md "Kernels"): a
// paired task holds twice the outputs, so a product with few of them (a router, one expert) runs on half the
// warps; below paired_min_tasks() tasks the paired and paired-staged choices run lockstep-exact instead, for
// affine_wx / dense_wx at one row and the grouped expert products alike. The same bits either way.
#include <cstdint>

namespace ds::cuda {

// Tasks a paired launch needs to be taken: by default DS_CUDA_PAIRED_MIN_TASKS when set, else 2 x the GPU's
// SMs (the device current at the first call); 0 takes it for every shape. Process-wide; for benches and
// checks.
void set_paired_min_tasks(int64_t n);
int64_t paired_min_tasks();

// Whether the grouped expert products take the paired layout under the rule above (default on); off: their
// lockstep kernel whatever the one-row kernel. Process-wide; for benches.
void set_paired_grouped(bool on);
bool paired_grouped();

// Whether the paired-staged one-row kernel stages x with each thread's loads in groups (stage_row_grouped,
// sass13; the same bits): DS_CUDA_LOADS_FIRST (1 or 0) read at every call when set, else the value set here
// (kDefaultRowLoadsFirst: on since session 14; CudaModelOptions::loads_first, the model's kernels, is a
// separate setting that DS_CUDA_LOADS_FIRST also overrides). Process-wide; in the graphs' key.
constexpr bool kDefaultRowLoadsFirst = true;
void set_row_loads_first(bool on);
bool row_loads_first();

}  // namespace ds::cuda
