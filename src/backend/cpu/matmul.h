#pragma once
// Weight products on the CPU: y = x W^T for every MatrixWeight encoding, row invariant (docs/backend-cpu.md).
#include <cstdint>
#include <span>

#include "core/thread_pool.h"
#include "formats/matrix_weight.h"

namespace ds {

// y[r*ldy + o] = sum_i W[o,i] * x[r*ldx + i] for r < n_rows, o < w.rows. The bits of y[r, o] depend only on
// row r of x and on W: not on n_rows, the row's position, the thread count or how outputs are split.
void matmul(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* y, int64_t ldy,
            ThreadPool& pool = ThreadPool::global());

// One product of a batch for matmul_many: y = x W^T exactly as matmul(*w, x, n_rows, ldx, y, ldy).
struct MatmulTask {
  const MatrixWeight* w = nullptr;
  const float* x = nullptr;
  int64_t n_rows = 0, ldx = 0;
  float* y = nullptr;
  int64_t ldy = 0;
};

// Every task's product in one parallel region (one fork/join instead of one per weight); each task's bits
// equal matmul's. Tasks must not write where another task reads.
void matmul_many(std::span<const MatmulTask> tasks, ThreadPool& pool = ThreadPool::global());

// The same product restricted to outputs [o_begin, o_end), on the calling thread; matmul splits work with it.
void matmul_outputs(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* y, int64_t ldy,
                    int64_t o_begin, int64_t o_end);

// The same arithmetic written as plain scalar C++: the definition the SIMD kernels must match bit for bit,
// and the path used where AVX2/FMA are missing.
void matmul_outputs_portable(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* y,
                             int64_t ldy, int64_t o_begin, int64_t o_end);

// Embedding lookup: out[k*w.cols ..] = row ids[k] of w dequantized exactly as dequantize_row_reference does.
void gather_rows(const MatrixWeight& w, const int32_t* ids, int64_t n, float* out);

}  // namespace ds
