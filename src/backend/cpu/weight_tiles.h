#pragma once
// Tiled copies of weight matrices for the CPU kernels (issue 4, docs/backend-cpu.md "Tiled weights"): rows in
// tiles of 8, the tile's rows interleaved unit by unit, so a product over a tile reads one sequential stream
// that the hardware prefetchers follow, instead of 8 short row streams. The arithmetic is unchanged: a tiled
// product equals the row-major one bit for bit.
#include <cstdint>
#include <memory>
#include <span>

#include "core/thread_pool.h"
#include "formats/matrix_weight.h"

namespace ds::cpu {

constexpr int64_t kRowTile = 8;

// Bytes of one unit: 8 dense values; an 8-byte span of 2/4-bit codes (kPermutedLanes); 8 codes (bits bytes)
// otherwise. 0 when the matrix is not tiled (affine widths other than 2-6/8, or nothing to tile).
int64_t tile_unit_bytes(const MatrixWeight& w);
// Whole units per row (a dense row's cols % 8 tail stays in `data` only).
int64_t tile_units(const MatrixWeight& w);
// Bytes of one tile of kRowTile rows, and of the whole tiled copy (rows padded to whole tiles with zeros,
// plus 8 bytes the affine unpacking may read past the last unit).
int64_t tile_bytes(const MatrixWeight& w);
int64_t tiled_copy_bytes(const MatrixWeight& w);

// Where unit u of row o lives in w.tiled.
inline const uint8_t* tiled_unit(const MatrixWeight& w, int64_t o, int64_t u, int64_t unit_bytes,
                                 int64_t tile_size) {
  return static_cast<const uint8_t*>(w.tiled) + o / kRowTile * tile_size +
         (u * kRowTile + o % kRowTile) * unit_bytes;
}

// Writes the tiled copy of w (tiled_copy_bytes(w) bytes) to out.
void tile_matrix(const MatrixWeight& w, uint8_t* out);

// Owns the tiled copies of a set of matrices in one huge-page-advised arena and points each matrix's `tiled`
// at its copy. Matrices tile_unit_bytes rejects are left as they are.
class WeightTiles {
 public:
  WeightTiles() = default;
  explicit WeightTiles(std::span<MatrixWeight* const> matrices, ThreadPool& pool = ThreadPool::global());
  uint64_t bytes() const { return bytes_; }

 private:
  std::unique_ptr<uint8_t, void (*)(uint8_t*)> arena_{nullptr, nullptr};
  uint64_t bytes_ = 0;
};

}  // namespace ds::cpu
