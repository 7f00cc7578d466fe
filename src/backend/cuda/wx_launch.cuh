#pragma once
// Host-side pieces of launching the affine product kernels, shared by wx_products.cu and the kernels that run
// a product and a neighbouring op in one launch (moe_routing.cu): argument errors, the weight's device view,
// the persistent grid size.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/wx_kernels.cuh"
#include "backend/cuda/wx_products.h"

namespace ds::cuda::detail {

[[noreturn]] inline void bad_arg(const char* op, const std::string& what) {
  throw ArgumentError(std::string(op) + ": " + what);
}

// Checks an MLX affine weight for the kernels and returns log2 of its group.
inline int group_shift_of(const char* op, const AffineWeight& w) {
  if (w.bits != 2 && w.bits != 3 && w.bits != 4 && w.bits != 5 && w.bits != 6 && w.bits != 8)
    bad_arg(op, "bits must be 2, 3, 4, 5, 6 or 8 (got " + std::to_string(w.bits) + ")");
  if (w.group != 32 && w.group != 64 && w.group != 128)
    bad_arg(op, "group must be 32, 64 or 128 (got " + std::to_string(w.group) + ")");
  if (w.cols % w.group != 0)
    bad_arg(op, "cols must be a multiple of the group size (cols " + std::to_string(w.cols) + ", group " +
                    std::to_string(w.group) + ")");
  if (w.codes == nullptr || w.scales == nullptr || w.biases == nullptr)
    bad_arg(op, "codes, scales and biases must be device pointers");
  if (w.n_experts < 1) bad_arg(op, "n_experts must be >= 1");
  // The kernels address one matrix (one expert) with 32-bit word and group offsets.
  if (w.rows > 0 && w.cols > 0 && w.rows * (w.cols / 32 * w.bits) >= (int64_t{1} << 32))
    bad_arg(op, "one matrix must have fewer than 2^32 code words (rows " + std::to_string(w.rows) +
                    ", cols " + std::to_string(w.cols) + ")");
  // Codes are read as 16-, 8- or 4-byte vectors; rows keep that alignment (cols is a multiple of 32).
  if (reinterpret_cast<uintptr_t>(w.codes) % 16 != 0) bad_arg(op, "codes must be 16-byte aligned");
  return w.group == 32 ? 5 : w.group == 64 ? 6 : 7;
}

template <int Bits>
typename AffineUnit<Bits>::Matrix affine_matrix(const AffineWeight& w, int shift) {
  return {w.codes,
          w.scales,
          w.biases,
          w.cols,
          shift,
          static_cast<uint32_t>(w.cols / 32 * Bits),
          static_cast<uint32_t>(w.cols >> shift)};
}

// Blocks for a persistent one-row kernel: as many as fit on the current device at once (kernel_limits.h: read
// once per device), never more than the tasks.
template <auto Kernel>
int64_t resident_blocks(int64_t tasks) {
  return std::min(tasks, blocks_resident(Kernel, kWarpsPerBlock * 32, 0, "resident blocks (occupancy)"));
}

// One-row products on the kernel one_row_kernel() picks (wx_row_products.cu; Unit: AffineUnit<2..8> or
// DenseBf16Unit, Rows: F32Rows or Bf16Rows).
template <class Unit, class Rows>
void launch_row(const typename Unit::Matrix& m, int64_t n_out, const Rows& rows, float* y,
                cudaStream_t stream);

}  // namespace ds::cuda::detail
