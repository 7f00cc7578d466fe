#pragma once
// A model matrix (or a stack of expert matrices) in device memory in its checkpoint encoding, and the
// products the model runs on it: the fast kernels of wx_products.h where they take the encoding and shape
// (MLX affine with bf16 scales, dense bf16), else the plain kernel (f32, or affine/f16 dequantized to f32 on
// upload).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/wx_products.h"
#include "formats/matrix_weight.h"

namespace ds::cuda {

struct DeviceMatrix {
  enum class Kind { None, Affine, Bf16, F32 };
  Kind kind = Kind::None;
  int64_t rows = 0, cols = 0, n_experts = 1;
  AffineWeight affine;          // Affine: points into storage
  const void* dense = nullptr;  // Bf16 / F32: [n_experts, rows, cols]
  DeviceBuffer storage;

  bool valid() const { return kind != Kind::None; }
  size_t expert_bytes() const { return storage.bytes() / static_cast<size_t>(n_experts); }
};

// Whether `w` runs on the fast affine kernels (MLX affine, bf16 scales, bits 2-6 or 8, group 32-128).
bool fast_affine(const MatrixWeight& w);
// Same cols and encoding (bits, group, scale type): their rows can share one device matrix.
bool same_encoding(const MatrixWeight& a, const MatrixWeight& b);

// Uploads one matrix, or the experts' matrices stacked (all the same shape and encoding); names the tensor
// on a mismatch. Refuses a MatrixWeight the CPU has repacked for its own kernels.
DeviceMatrix upload_matrix(const std::vector<const MatrixWeight*>& parts);
// gate|up of each expert (or of one MLP) as one [2 rows, cols] matrix, experts stacked: uploaded as the parts
// gate_0, up_0, gate_1, up_1 ..., whose storage is that layout already. False (m untouched) when the parts
// differ in shape or encoding.
bool upload_joined(const std::vector<const MatrixWeight*>& gate, const std::vector<const MatrixWeight*>& up,
                   DeviceMatrix& m);
// Several matrices over the same x as one product: their rows one after another in one matrix (`joined`),
// uploaded so when the parts share cols and encoding, else one product per part (`parts`). Output rows are
// `width` floats, part i at column offset[i]. A joined output equals its part's product bit for bit (a
// product's chain for an output depends on the encoding and cols alone, docs/cuda-products.md).
struct JointMatrix {
  DeviceMatrix joined;
  std::vector<DeviceMatrix> parts;
  std::vector<int64_t> offset;
  int64_t width = 0;
  bool valid() const { return joined.valid() || !parts.empty(); }
  size_t bytes() const;
};
// join false: always one product per part.
JointMatrix upload_joint(const std::vector<const MatrixWeight*>& parts, bool join);
// Random weights for a joint matrix of parts of `rows` rows each (one random matrix when joined).
JointMatrix random_joint(const std::vector<int64_t>& rows, int64_t cols, bool join, int bits, int group,
                         uint64_t seed, cudaStream_t stream);

// Random weights made on the GPU: MLX affine `bits`/`group` (bits 0: dense bf16). Values depend on `seed`.
DeviceMatrix random_matrix(int64_t rows, int64_t cols, int64_t n_experts, int bits, int group, uint64_t seed,
                           cudaStream_t stream);

// y[r*ldy + o] = W x[r] for n_rows rows of fp32 x (ldx a multiple of 8), in launches of at most 16 rows.
void wx(const DeviceMatrix& m, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
        cudaStream_t stream);
// Grouped expert products: y row p = expert pairs[p].expert on x row pairs[p].row (pairs in device memory).
// pairs_ready: affine_wx_grouped's (the pairs written two launches or more before).
void wx_grouped(const DeviceMatrix& m, const ExpertRow* pairs, int n_pairs, const float* x, int64_t ldx,
                int n_x_rows, float* y, int64_t ldy, cudaStream_t stream, bool pairs_ready = false);

// Expert windows (moe_expert_windows' grouping): each expert's weights read once for all rows it serves;
// affine matrices only. row_ids null: window slots index x rows directly (the down projection).
void wx_windows(const DeviceMatrix& m, const ExpertWindow* windows, int n_windows, const int32_t* row_ids,
                const float* x, int64_t ldx, int n_x_rows, float* y, int64_t ldy, cudaStream_t stream);

// fp32 vector to the device (norm weights, conv taps ...).
DeviceBuffer upload_floats(const std::vector<float>& v);
DeviceBuffer random_floats(int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

}  // namespace ds::cuda
