// The prompt products' rules that depend on shapes and settings alone (tc_products.h): which weights the
// tiles take, the k split fixed by a weight's shape, the experts' tile rows, and the process's output tiling.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/tc_products.h"
#include "backend/cuda/tc_products_ring.h"

namespace ds::cuda {

namespace {

bool valid_config(const TiledConfig& c) {
  return (c.tile_outputs == 64 && (c.min_blocks == 3 || c.min_blocks == 4)) ||
         (c.tile_outputs == 128 && c.min_blocks == 2);
}

// The process's tiling: the default, or DS_CUDA_TILED_OUTPUTS ("64/4", "64/3", "128/2") at first use.
TiledConfig& current_config() {
  static TiledConfig config = [] {
    TiledConfig c;
    const char* env = std::getenv("DS_CUDA_TILED_OUTPUTS");
    if (env == nullptr || *env == '\0') return c;
    const std::string v = env;
    const size_t slash = v.find('/');
    c = slash == std::string::npos
            ? TiledConfig{0, 0}
            : TiledConfig{std::atoi(v.substr(0, slash).c_str()), std::atoi(v.substr(slash + 1).c_str())};
    if (!valid_config(c))
      throw ArgumentError("DS_CUDA_TILED_OUTPUTS must be 64/4, 64/3 or 128/2 (got '" + v + "')");
    return c;
  }();
  return config;
}

int& current_ring() {
  static int ring = [] {
    const char* env = std::getenv("DS_CUDA_TILED_RING");
    if (env == nullptr || *env == '\0') return 3;
    const std::string v = env;
    if (v != "0" && v != "1" && v != "2" && v != "3")
      throw ArgumentError("DS_CUDA_TILED_RING must be 0, 1, 2 or 3 (got '" + v + "')");
    return v[0] - '0';
  }();
  return ring;
}

}  // namespace

int tiled_ring() {
  return current_ring();
}

void set_tiled_ring(int ring) {
  if (ring < 0 || ring > 3)
    throw ArgumentError("set_tiled_ring: ring must be 0, 1, 2 or 3 (got " + std::to_string(ring) + ")");
  current_ring() = ring;
}

TiledConfig tiled_config() {
  return current_config();
}

void set_tiled_config(const TiledConfig& c) {
  if (!valid_config(c))
    throw ArgumentError("set_tiled_config: tile_outputs/min_blocks must be 64/4, 64/3 or 128/2 (got " +
                        std::to_string(c.tile_outputs) + "/" + std::to_string(c.min_blocks) + ")");
  current_config() = c;
}

bool tiled_supported(const TiledWeight& w) {
  if (w.rows <= 0 || w.cols <= 0 || w.cols % kTileCols != 0 || w.n_experts < 1) return false;
  // The kernels address the stacked arrays by 32-bit offsets (fewer registers than pointers): the dense
  // values or the code words of all experts under 2^31 (the scales and biases are fewer).
  constexpr int64_t kMaxOffset = int64_t{1} << 31;
  if (w.rows >= kMaxOffset / w.n_experts) return false;
  const int64_t stacked_rows = w.n_experts * w.rows;
  if (w.dense != nullptr) return w.cols < kMaxOffset / stacked_rows;
  const int b = w.affine.bits, g = w.affine.group;
  return w.affine.codes != nullptr && (b == 2 || b == 3 || b == 4 || b == 5 || b == 6 || b == 8) &&
         (g == 32 || g == 64 || g == 128) && w.cols % g == 0 && w.cols / 32 * b < kMaxOffset / stacked_rows;
}

int tiled_fixed_splits(const TiledWeight& w) {
  const int64_t out_tiles = (w.rows + kTileOutputs - 1) / kTileOutputs, k_tiles = w.cols / kTileCols;
  if (out_tiles >= kSplitMaxOutputTiles || k_tiles < kSplitMinKTiles) return 1;
  return static_cast<int>(
      std::min<int64_t>(k_tiles / (kSplitMinKTiles / 2), (kSplitTargetTiles + out_tiles - 1) / out_tiles));
}

int prompt_expert_tile_rows(int n_rows, int k, int n_experts) {
  const int64_t per_expert = (int64_t{n_rows} * k + n_experts - 1) / std::max(n_experts, 1);
  return per_expert <= 16 ? 16 : per_expert <= 32 ? 32 : kTileRows;
}

}  // namespace ds::cuda
