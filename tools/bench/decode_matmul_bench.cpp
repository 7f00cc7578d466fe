// Decode-shaped weight products (1 row x an expert-sized matrix, 512 x 1024) cycled through a ~512 MB set so
// the weights come from DRAM; prints the median and 10th-percentile time per call. Each call takes tens of
// microseconds, so on a shared machine most calls run undisturbed and the median tracks the kernels rather
// than the scheduler (unlike whole decode rounds). Usage: decode_matmul_bench [bf16|q4] [threads] [rows]
// [rows|tiled] (tiled: the CPU's tiled weight copies, backend/cpu/weight_tiles.h).
// Results: docs/receipts/decode-bench-cpu.md.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/weight_tiles.h"
#include "core/thread_pool.h"

int main(int argc, char** argv) {
  using namespace ds;
  const bool q4 = argc > 1 && std::string(argv[1]) == "q4";
  const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
  const int64_t rows = argc > 3 ? std::atoll(argv[3]) : 512, cols = 1024;
  ThreadPool pool(threads);
  MatrixWeight w;
  w.rows = rows, w.cols = cols, w.name = "bench";
  if (q4)
    w.encoding = MatrixEncoding::Affine, w.bits = 4, w.group = 64, w.scale_dtype = DType::BF16;
  else
    w.encoding = MatrixEncoding::BF16;
  const int64_t data_bytes = rows * w.row_bytes(), scale_bytes = q4 ? rows * (cols / 64) * 2 : 0;
  const int64_t per = data_bytes + 2 * scale_bytes, count = (int64_t{512} << 20) / per;
  // Codes and bf16 mantissas from a hash (finite values); scales 1.0 and biases -1.0 in bf16.
  std::vector<uint8_t> data(static_cast<size_t>(count * data_bytes));
  std::vector<uint16_t> scales(static_cast<size_t>(count * scale_bytes / 2), 0x3f80),
      biases(static_cast<size_t>(count * scale_bytes / 2), 0xbf80);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 2654435761u) >> 13) & 0x37;
  std::vector<MatrixWeight> mats(static_cast<size_t>(count), w);
  for (int64_t k = 0; k < count; ++k) {
    mats[k].data = data.data() + k * data_bytes;
    if (q4)
      mats[k].scales = scales.data() + k * scale_bytes / 2,
      mats[k].biases = biases.data() + k * scale_bytes / 2;
  }
  const bool tiled = argc > 4 && std::string(argv[4]) == "tiled";
  std::vector<MatrixWeight*> ptrs;
  for (MatrixWeight& m : mats) ptrs.push_back(&m);
  cpu::WeightTiles tiles;
  if (tiled) tiles = cpu::WeightTiles(ptrs, pool);
  std::vector<float> x(cols, 0.01f), y(rows);
  std::vector<double> t;
  for (int rep = 0; rep < 3; ++rep)
    for (const MatrixWeight& m : mats) {
      const auto a = std::chrono::steady_clock::now();
      matmul(m, x.data(), 1, cols, y.data(), rows, pool);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
    }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2], p10 = t[t.size() / 10];
  std::printf(
      "%s%s %ldx%ld, 1 row, %d threads, %ld calls: median %.1f us (%.2f GB/s), p10 %.1f us (%.2f GB/s)\n",
      q4 ? "q4g64" : "bf16", tiled ? " tiled" : "", static_cast<long>(rows), static_cast<long>(cols), threads,
      static_cast<long>(t.size()), med * 1e6, static_cast<double>(per) / med / 1e9, p10 * 1e6,
      static_cast<double>(per) / p10 / 1e9);
  return 0;
}
