#include "backend/cpu/weight_tiles.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/matmul_kernels.h"
#include "core/error.h"
#include "core/host_memory.h"

namespace ds::cpu {

int64_t tile_unit_bytes(const MatrixWeight& w) {
  if (!w.valid() || w.rows <= 0 || w.cols <= 0) return 0;
  switch (w.encoding) {
    case MatrixEncoding::F32:
      return kLanes * 4;
    case MatrixEncoding::BF16:
    case MatrixEncoding::F16:
      return kLanes * 2;
    case MatrixEncoding::Affine:
      if (w.bits == 2 || w.bits == 4) return 8;
      if (w.bits == 3 || w.bits == 5 || w.bits == 6 || w.bits == 8) return w.bits;
      return 0;
  }
  return 0;
}

int64_t tile_units(const MatrixWeight& w) {
  const int64_t unit = tile_unit_bytes(w);
  if (unit == 0) return 0;
  // Affine rows are whole units (cols is a multiple of the group, >= 32); dense rows drop their tail.
  return w.encoding == MatrixEncoding::Affine ? w.row_bytes() / unit : w.cols / kLanes;
}

int64_t tile_bytes(const MatrixWeight& w) {
  return kRowTile * tile_units(w) * tile_unit_bytes(w);
}

int64_t tiled_copy_bytes(const MatrixWeight& w) {
  if (tile_units(w) == 0) return 0;
  return (w.rows + kRowTile - 1) / kRowTile * tile_bytes(w) + 8;
}

void tile_matrix(const MatrixWeight& w, uint8_t* out) {
  const int64_t unit = tile_unit_bytes(w), units = tile_units(w), tb = tile_bytes(w);
  const int64_t total = tiled_copy_bytes(w);
  if (total == 0) fail("tile_matrix: '{}' cannot be tiled", w.name);
  std::memset(out, 0, static_cast<size_t>(total));
  const auto* src = static_cast<const uint8_t*>(w.data);
  const int64_t rb = w.row_bytes();
  for (int64_t o = 0; o < w.rows; ++o)
    for (int64_t u = 0; u < units; ++u)
      std::memcpy(out + o / kRowTile * tb + (u * kRowTile + o % kRowTile) * unit, src + o * rb + u * unit,
                  static_cast<size_t>(unit));
}

WeightTiles::WeightTiles(std::span<MatrixWeight* const> matrices, ThreadPool& pool) {
  constexpr uint64_t kAlign = 64, kHuge = uint64_t{1} << 21;
  std::vector<uint64_t> offset(matrices.size());
  for (size_t i = 0; i < matrices.size(); ++i) {
    offset[i] = bytes_;
    bytes_ += (static_cast<uint64_t>(tiled_copy_bytes(*matrices[i])) + kAlign - 1) / kAlign * kAlign;
  }
  if (bytes_ == 0) return;
  const uint64_t alloc = (bytes_ + kHuge - 1) / kHuge * kHuge;
  auto* raw = static_cast<uint8_t*>(std::aligned_alloc(kHuge, alloc));
  if (raw == nullptr) fail("cannot allocate {} bytes for the CPU's tiled weight copies", alloc);
  arena_ = {raw, [](uint8_t* p) { std::free(p); }};
  advise_huge_pages(raw, alloc);
  pool.parallel_for(static_cast<int64_t>(matrices.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      if (tiled_copy_bytes(*matrices[i]) > 0) tile_matrix(*matrices[i], raw + offset[i]);
  });
  for (size_t i = 0; i < matrices.size(); ++i)
    if (tiled_copy_bytes(*matrices[i]) > 0) matrices[i]->tiled = raw + offset[i];
}

}  // namespace ds::cpu
