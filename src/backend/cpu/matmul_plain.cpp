// Temporary plain implementation (dequantize a weight row, dot with every input row); replaced by the
// tuned kernels.
#include <vector>

#include "backend/cpu/matmul.h"
#include "core/error.h"

namespace ds::cpu {

void matmul(const MatrixWeight& w, const float* x, int64_t n, int64_t ldx, float* y, int64_t ldy,
            ThreadPool& pool) {
  pool.parallel_for(w.rows, 16, [&](int64_t o0, int64_t o1) {
    std::vector<float> row(w.cols);
    for (int64_t o = o0; o < o1; ++o) {
      dequantize_row_reference(w, o, row.data());
      for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * ldx;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t i = 0;
        for (; i + 8 <= w.cols; i += 8)
          for (int l = 0; l < 8; ++l) acc[l] += row[i + l] * xr[i + l];
        for (; i < w.cols; ++i) acc[i % 8] += row[i] * xr[i];
        y[r * ldy + o] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      }
    }
  });
}

void gather_rows(const MatrixWeight& w, const int32_t* ids, int64_t n, float* out) {
  for (int64_t k = 0; k < n; ++k) {
    if (ids[k] < 0 || ids[k] >= w.rows)
      fail("token id {} is out of range for '{}' ({} rows)", ids[k], w.name, w.rows);
    dequantize_row_reference(w, ids[k], out + k * w.cols);
  }
}

}  // namespace ds::cpu
