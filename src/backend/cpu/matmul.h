#pragma once
// Weight products on the CPU: y[r, o] = sum_i W[o, i] * x[r, i]. Row-invariant: each (r, o) is reduced in an
// order fixed by W's shape, never by the number of rows, the row's position, or the thread count.
#include <cstdint>

#include "core/thread_pool.h"
#include "formats/matrix_weight.h"

namespace ds::cpu {

void matmul(const MatrixWeight& w, const float* x, int64_t n_rows, int64_t ldx, float* y, int64_t ldy,
            ThreadPool& pool = ThreadPool::global());

// Embedding lookup: out[k, :] = dequantized row ids[k] of w; an id out of range throws naming w.name.
void gather_rows(const MatrixWeight& w, const int32_t* ids, int64_t n, float* out);

}  // namespace ds::cpu
