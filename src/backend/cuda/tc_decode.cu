// Tensor-core decode products (tc_decode.h). A split launch writes x as three exact bf16 planes, the 8 values
// of each lane's columns in MMA-fragment order, and each 32-column tile's sum. The product launch: blocks of
// 4 warps, each warp owns 16 outputs (one A fragment) and streams their weights through its own ring of
// shared-memory stages by cp.async (4 stages of 4 units of 32 columns: three in flight while one is decoded);
// each lane decodes its 8 codes per output row and unit straight into bf16 A fragments, reads the rows' x
// fragments (L1) and runs 6 MMAs per 8 rows (2 k steps x 3 terms) into the tile's d (chained: one
// accumulator; columns: one per term, met as (d2 + d1) + d0, tc_decode_parts.cuh), then y = fma(bias,
// sum(x), fma(scale, d, y)). Rows come in tiers of 8/16/32/64 (template NF); a tile row past the count is a
// zero column of B, so the tier changes no bits.
//
// The lane <-> column map (MMA k slots are a sum, so any permutation applied to A and B alike is the same
// dot product): lane (g, t) of a warp holds, per unit, the codes of columns 8t .. 8t+7, contiguous in the
// bit stream. Register pair p (p = 0..3) packs columns (8t + p, 8t + p + 4) as bf16x2: k step s takes pairs
// 2s (k slots 2t, 2t+1) and 2s + 1 (slots 2t+8, 2t+9). x is stored in the same order: per 8 columns
// x0 x4 x1 x5 x2 x6 x3 x7, one 16-byte load per lane and term. Codes become bf16 with the integer trick
// (learned from Marlin's dequantizers, IST-DASLab/marlin, ideas only: (q | 0x4300) is the bf16 128 + q,
// exact for q < 128; minus 128 in one bf16x2 FMA); 8-bit codes go through fp32 (2^23 + q) instead.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backend/cuda/code_bits.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/tc_common.cuh"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_decode_kernel.cuh"
#include "backend/cuda/tc_decode_parts.cuh"

namespace ds::cuda {

namespace {

using namespace tcd;

[[noreturn]] void bad(const char* op, const std::string& what) {
  throw ArgumentError(std::string(op) + ": " + what);
}

// Several x rows ldx apart must not overlap (one row's stride is never used).
void check_x_stride(const char* op, int64_t ldx, int64_t cols, int64_t n_x) {
  if (n_x > 1 && ldx < cols)
    bad(op, "ldx must be >= the weight's cols when more than one x row is read (ldx " + std::to_string(ldx) +
                ", cols " + std::to_string(cols) + ", " + std::to_string(n_x) + " rows)");
}

size_t plane_bytes(int64_t cols, int64_t n_x) {
  return (static_cast<size_t>(kTerms * n_x * cols * 2) + 255) / 256 * 256;
}

DecodeWeight decode_weight(const TiledWeight& w) {
  DecodeWeight d{};
  d.rows = w.rows;
  d.cols = w.cols;
  if (w.dense != nullptr) {
    d.codes = reinterpret_cast<const uint32_t*>(w.dense);
    d.words_per_row = w.cols / 2;
    d.chunk16 = true;
  } else {
    d.codes = w.affine.codes;
    // Scales and biases are read as 4-byte words: from the aligned word at or below each array's start.
    const uintptr_t sp = reinterpret_cast<uintptr_t>(w.affine.scales),
                    bp = reinterpret_cast<uintptr_t>(w.affine.biases);
    if (sp % 4 != bp % 4)
      throw ArgumentError("tc_decode: scales and biases must share their alignment mod 4");
    d.scales = reinterpret_cast<const uint32_t*>(sp & ~uintptr_t{3});
    d.biases = reinterpret_cast<const uint32_t*>(bp & ~uintptr_t{3});
    d.sb_base = static_cast<int64_t>(sp % 4) / 2;
    d.words_per_row = w.cols / 32 * w.affine.bits;
    d.groups_per_row = w.cols / w.affine.group;
    d.group_shift = w.affine.group == 32 ? 5 : w.affine.group == 64 ? 6 : 7;
    d.chunk16 = d.words_per_row % 4 == 0;
  }
  return d;
}

template <int Bits, int NF, bool PC>
void launch_nf(const DecodeWeight& W, Slicing sl, dim3 grid, const ExpertWindow* tiles, int n_rows,
               const int32_t* row_ids, const DecodeX& X, float* y, int64_t ldy, int64_t n_experts,
               cudaStream_t stream) {
  constexpr auto kernel = decode_kernel<Bits, NF, PC>;
  opt_in_dynamic_smem(kernel, static_cast<int>(Stage<Bits>::kBlockBytes), "tc_decode: cudaFuncSetAttribute");
  kernel<<<grid, kThreads, Stage<Bits>::kBlockBytes, stream>>>(W, sl, tiles, n_rows, row_ids, X, y, ldy,
                                                               n_experts);
}

bool small_windows = true;     // tc_decode_small_windows
int planes = -1;               // tc_decode_set_planes (a TcPlanes; -1: not yet read from the environment)
bool one_row_in_block = true;  // tc_decode_one_row_in_block
int forced_slices = 0;         // tc_decode_force_column_slices (0: the shape's rule)
int row_kernel = -1;           // tc_decode_row_kernel: 1 on, 0 off; -1: not yet read
int swiglu_fold = -1;          // tc_decode_fold_swiglu: 1 on, 0 off; -1: not yet read
int group_fold = -1;           // tc_decode_fold_grouping: 1 on, 0 off; -1: not yet read

// The layout, from DS_CUDA_TC_PLANES (columns | chained) on first use when no caller has set it.
TcPlanes planes_now() {
  if (planes < 0) {
    const char* v = std::getenv("DS_CUDA_TC_PLANES");
    const std::string name = v != nullptr ? v : "";
    if (name.empty())
      planes = static_cast<int>(kDefaultTcPlanes);
    else if (name == "columns" || name == "chained")
      planes = static_cast<int>(name == "columns" ? TcPlanes::Columns : TcPlanes::Chained);
    else
      bad("DS_CUDA_TC_PLANES", "must be columns or chained (got '" + name + "')");
  }
  return static_cast<TcPlanes>(planes);
}

// Whether one-row launches take the one-row kernel (tc_row.cu): DS_CUDA_TC_ROW (1: on, 0: off) on first use
// when no caller has set it; unset: kDefaultTcRowKernel, under both layouts (the Columns layout's one-row
// kernel passed the device checks in tc11; tcrow10 had shipped it for Chained only).
bool row_kernel_now() {
  if (row_kernel < 0) row_kernel = env_on_off("DS_CUDA_TC_ROW", kDefaultTcRowKernel) ? 1 : 0;
  return row_kernel == 1;
}

// The SwiGLU fold, from DS_CUDA_TC_SWIGLU (1: on, 0: off) on first use when no caller has set it; unset:
// kDefaultTcSwiglu.
bool swiglu_fold_now() {
  if (swiglu_fold < 0) swiglu_fold = env_on_off("DS_CUDA_TC_SWIGLU", kDefaultTcSwiglu) ? 1 : 0;
  return swiglu_fold == 1;
}

// The grouping fold, from DS_CUDA_TC_GROUP (1: on, 0: off) on first use when no caller has set it; unset:
// kDefaultTcGroupFold.
bool group_fold_now() {
  if (group_fold < 0) group_fold = env_on_off("DS_CUDA_TC_GROUP", kDefaultTcGroupFold) ? 1 : 0;
  return group_fold == 1;
}

// Whether a launch takes the small-window kernel, and whether its one row is split in the block (no split
// launch): affine weights (dense keeps the general kernel), windows of up to 8 rows, expert tiles of one slot
// (tiles of 8 measured slower on it than on the general kernel: 8 staged rows a warp, 2 blocks an SM).
bool takes_small(const TiledWeight& w, int tier_rows, bool tiles) {
  return w.dense == nullptr && tier_rows <= (tiles ? 1 : 8) && small_windows;
}
bool takes_in_block(const TiledWeight& w, int tier_rows, bool tiles) {
  return takes_small(w, tier_rows, tiles) && tier_rows <= 1 && one_row_in_block && w.cols <= kInBlockMaxCols;
}

// The one-row kernel: the in-block launches whose rows of codes are whole 16-byte chunks.
bool takes_row(const TiledWeight& w, int tier_rows, bool tiles) {
  return takes_in_block(w, tier_rows, tiles) && (w.cols / 32 * w.affine.bits) % 4 == 0 && row_kernel_now();
}

template <int Bits, bool PC>
void launch_bits(const DecodeWeight& W, Slicing sl, dim3 grid, int tier_rows, bool small, bool in_block,
                 bool row, const ExpertWindow* tiles, int n_rows, const int32_t* row_ids, const DecodeX& X,
                 float* y, int64_t ldy, int64_t n_experts, int64_t half, const OneRowTiles& group,
                 cudaStream_t stream) {
  if (Bits != 0 && row)
    launch_row<Bits, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, half, group, stream);
  else if (Bits != 0 && small)
    launch_small<Bits, PC>(W, sl, grid, tier_rows, in_block, tiles, n_rows, row_ids, X, y, ldy, n_experts,
                           stream);
  else if (tier_rows <= 8)
    launch_nf<Bits, 1, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
  else if (tier_rows <= 16)
    launch_nf<Bits, 2, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
  else if (tier_rows <= 32)
    launch_nf<Bits, 4, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
  else
    launch_nf<Bits, 8, PC>(W, sl, grid, tiles, n_rows, row_ids, X, y, ldy, n_experts, stream);
}

// Splits x into scratch, then runs the products over grid (output blocks, row tiles or expert tiles). half >
// 0: the one-row kernel's SwiGLU (swiglu_takes holds), y then holds h rows of half outputs; group.topk set
// (with half > 0): the launch groups one row's routing itself (OneRowTiles).
void dispatch(const char* op, const TiledWeight& w, unsigned grid_y, int tier_rows, const ExpertWindow* tiles,
              int n_rows, const int32_t* row_ids, const float* x, int64_t ldx, int64_t n_x, float* y,
              int64_t ldy, void* scratch, size_t scratch_bytes, cudaStream_t stream, int64_t half = 0,
              const OneRowTiles& group = OneRowTiles{}) {
  if (!tc_decode_supported(w))
    bad(op,
        "the weight must be dense bf16 or MLX affine bits 2-6/8, group 32/64/128, cols a multiple of 32, "
        "codes "
        "16-byte and scales 4-byte aligned (rows " +
            std::to_string(w.rows) + ", cols " + std::to_string(w.cols) + ")");
  if (ldx % 4 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    bad(op, "x must be 16-byte aligned with ldx a multiple of 4 (ldx " + std::to_string(ldx) + ")");
  check_x_stride(op, ldx, w.cols, n_x);
  if (ldy < (half > 0 ? half : w.rows))
    bad(op, "ldy must be >= the weight's rows (got " + std::to_string(ldy) + ")");
  if (y == nullptr) bad(op, "y must be a device pointer");
  if (grid_y == 0 || n_x <= 0) return;
  if (grid_y > 65535) bad(op, "at most 65535 row tiles a launch");
  const size_t need = tc_decode_scratch_bytes(w.cols, n_x);
  if (scratch == nullptr || scratch_bytes < need)
    bad(op,
        "scratch must hold " + std::to_string(need) + " bytes (got " + std::to_string(scratch_bytes) + ")");
  auto* planes = static_cast<uint16_t*>(scratch);
  auto* sums = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + plane_bytes(w.cols, n_x));
  const bool small = takes_small(w, tier_rows, tiles != nullptr),
             in_block = takes_in_block(w, tier_rows, tiles != nullptr),
             row = takes_row(w, tier_rows, tiles != nullptr);
  if (!in_block) {  // the one-row in-block kernel splits its row itself
    const int64_t units = n_x * (w.cols / 32);
    decode_split_kernel<<<static_cast<unsigned>((units + 127) / 128), 128, 0, stream>>>(x, ldx, n_x, w.cols,
                                                                                        planes, sums);
    check_launch(op);
  }
  const DecodeWeight W = decode_weight(w);
  const DecodeX X{reinterpret_cast<const uint4*>(planes), sums, n_x, w.cols, x, ldx};
  const Slicing sl{tc_decode_column_slices(w.rows, w.cols)};
  const int64_t outputs = half > 0 ? half : w.rows;  // SwiGLU: a block takes a gate block and its up block
  const dim3 grid(static_cast<unsigned>((outputs + sl.block_outputs() - 1) / sl.block_outputs()), grid_y);
  auto with_layout = [&](auto pc) {
    constexpr bool PC = decltype(pc)::value;
    if (w.dense != nullptr)
      launch_bits<0, PC>(W, sl, grid, tier_rows, false, false, false, tiles, n_rows, row_ids, X, y, ldy,
                         w.n_experts, 0, group, stream);
    else
      with_bits(w.affine.bits, [&](auto bits) {
        launch_bits<decltype(bits)::value, PC>(W, sl, grid, tier_rows, small, in_block, row, tiles, n_rows,
                                               row_ids, X, y, ldy, w.n_experts, half, group, stream);
      });
  };
  if (planes_now() == TcPlanes::Columns)
    with_layout(std::true_type{});
  else
    with_layout(std::false_type{});
  check_launch(op);
}

}  // namespace

void tc_decode_small_windows(bool on) {
  small_windows = on;
}

bool tc_decode_small_windows_on() {
  return small_windows;
}

void tc_decode_set_planes(TcPlanes p) {
  planes = static_cast<int>(p);
}

TcPlanes tc_decode_planes() {
  return planes_now();
}

const char* tc_planes_name(TcPlanes p) {
  return p == TcPlanes::Columns ? "columns" : "chained";
}

void tc_decode_one_row_in_block(bool on) {
  one_row_in_block = on;
}

void tc_decode_row_kernel(bool on) {
  row_kernel = on ? 1 : 0;
}

bool tc_decode_row_kernel_on() {
  return row_kernel_now();
}

// Read at every launch (not cached), so the checks and bench can switch it with setenv between launches.
int tc_decode_row_variant() {
  const char* v = std::getenv("DS_CUDA_TC_ROW_VARIANT");
  if (v == nullptr || v[0] == '\0') return tcd::kDefaultRowVariant;
  const std::string name(v);
  const bool digits = name.size() <= 3 && name.find_first_not_of("0123456789") == std::string::npos;
  const int n = digits ? std::atoi(v) : -1;
  if (n < 0 || n > 255) bad("DS_CUDA_TC_ROW_VARIANT", "must be 0..255 (got '" + name + "')");
  return n;
}

bool tc_decode_one_row_in_block_on() {
  return one_row_in_block;
}

void tc_decode_force_column_slices(int slices) {
  if (slices != 0 && slices != 1 && slices != 2 && slices != 4)
    bad("tc_decode_force_column_slices",
        "slices must be 0 (the shape's rule), 1, 2 or 4 (got " + std::to_string(slices) + ")");
  forced_slices = slices;
}

int tc_decode_forced_column_slices() {
  return forced_slices;
}

int tc_decode_column_slices(int64_t rows, int64_t cols) {
  const int64_t stages = (cols / 32 + kUnitsPerStage - 1) / kUnitsPerStage;
  const int64_t warps = (rows + kWarpOutputs - 1) / kWarpOutputs;  // output groups of one slice
  int s = warps <= kSplitMaxGroups4 ? 4 : warps <= kSplitMaxGroups2 ? 2 : 1;
  if (forced_slices != 0) s = forced_slices;
  // The rule's slices hold kMinSliceStages stages or more; forced ones at least one.
  const int64_t least = forced_slices != 0 ? 1 : kMinSliceStages;
  while (s > 1 && stages < s * least) s /= 2;
  return s;
}

bool tc_decode_supported(const TiledWeight& w) {
  if (!tiled_supported(w)) return false;
  if (w.dense != nullptr) return reinterpret_cast<uintptr_t>(w.dense) % 16 == 0;
  const uintptr_t sp = reinterpret_cast<uintptr_t>(w.affine.scales),
                  bp = reinterpret_cast<uintptr_t>(w.affine.biases);
  return reinterpret_cast<uintptr_t>(w.affine.codes) % 16 == 0 && sp != 0 && bp != 0 && sp % 2 == 0 &&
         sp % 4 == bp % 4;
}

size_t tc_decode_scratch_bytes(int64_t cols, int64_t n_x) {
  return plane_bytes(cols, n_x) + static_cast<size_t>(n_x * (cols / 32)) * 4;
}

void tc_decode_wx(const TiledWeight& w, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
                  void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  constexpr const char* op = "tc_decode_wx";
  if (n_rows < 0) bad(op, "n_rows must be >= 0 (got " + std::to_string(n_rows) + ")");
  if (w.n_experts != 1) bad(op, "n_experts must be 1 (use tc_decode_experts for stacked experts)");
  const unsigned tiles = static_cast<unsigned>((n_rows + kDecodeTileRows - 1) / kDecodeTileRows);
  dispatch(op, w, tiles, std::min(n_rows, kDecodeTileRows), nullptr, n_rows, nullptr, x, ldx, n_rows, y, ldy,
           scratch, scratch_bytes, stream);
}

namespace {

// The expert-tile launches' arguments (tc_decode_experts and its SwiGLU form), each refusal naming `op`.
void check_tile_args(const char* op, const ExpertWindow* tiles, int max_tiles, int tile_rows) {
  if (max_tiles < 0) bad(op, "max_tiles must be >= 0 (got " + std::to_string(max_tiles) + ")");
  if (tile_rows < 1 || tile_rows > kDecodeTileRows)
    bad(op, "tile_rows must be 1..64 (got " + std::to_string(tile_rows) + ")");
  if (tiles == nullptr && max_tiles > 0) bad(op, "tiles must be a device pointer");
}

}  // namespace

void tc_decode_experts(const TiledWeight& w, const ExpertWindow* tiles, int max_tiles, int tile_rows,
                       const int32_t* row_ids, const float* x, int64_t ldx, int n_x_rows, float* y,
                       int64_t ldy, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  constexpr const char* op = "tc_decode_experts";
  check_tile_args(op, tiles, max_tiles, tile_rows);
  dispatch(op, w, static_cast<unsigned>(max_tiles), tile_rows, tiles, 0, row_ids, x, ldx, n_x_rows, y, ldy,
           scratch, scratch_bytes, stream);
}

void tc_decode_fold_swiglu(bool on) {
  swiglu_fold = on ? 1 : 0;
}

bool tc_decode_fold_swiglu_on() {
  return swiglu_fold_now();
}

bool tc_decode_swiglu_takes(const TiledWeight& w, int tile_rows) {
  if (!swiglu_fold_now() || w.dense != nullptr || w.rows % 2 != 0 || !tc_decode_supported(w) ||
      !takes_row(w, tile_rows, true))
    return false;
  const Slicing sl{tc_decode_column_slices(w.rows, w.cols)};
  return (w.rows / 2) % sl.block_outputs() == 0;
}

bool tc_decode_experts_swiglu(const TiledWeight& w, const ExpertWindow* tiles, int max_tiles, int tile_rows,
                              const int32_t* row_ids, const float* x, int64_t ldx, int n_x_rows, float* h,
                              int64_t ldh, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  constexpr const char* op = "tc_decode_experts_swiglu";
  check_tile_args(op, tiles, max_tiles, tile_rows);
  check_x_stride(op, ldx, w.cols, n_x_rows);  // refused whether or not the fold takes w
  if (!tc_decode_swiglu_takes(w, tile_rows)) return false;
  dispatch(op, w, static_cast<unsigned>(max_tiles), tile_rows, tiles, 0, row_ids, x, ldx, n_x_rows, h, ldh,
           scratch, scratch_bytes, stream, w.rows / 2);
  return true;
}

void tc_decode_fold_grouping(bool on) {
  group_fold = on ? 1 : 0;
}

bool tc_decode_fold_grouping_on() {
  return group_fold_now();
}

bool tc_decode_grouping_takes(const TiledWeight& w, int k, bool shared) {
  return group_fold_now() && k >= 1 && k + (shared ? 1 : 0) <= 32 && tc_decode_swiglu_takes(w, 1);
}

bool tc_decode_experts_swiglu_routed(const TiledWeight& w, const int32_t* topk, int k, int shared_expert,
                                     ExpertWindow* tiles, int max_tiles, int32_t* row_ids, int32_t* slot_of,
                                     const float* x, float* h, int64_t ldh, void* scratch,
                                     size_t scratch_bytes, cudaStream_t stream, const TcRoute* route) {
  constexpr const char* op = "tc_decode_experts_swiglu_routed";
  const int n_experts = static_cast<int>(w.n_experts);
  if (shared_expert != -1 && shared_expert != n_experts - 1)
    bad(op, "shared_expert must be -1 or n_experts - 1 (got " + std::to_string(shared_expert) + ")");
  if (!tc_decode_grouping_takes(w, k, shared_expert >= 0)) return false;
  const int with_shared = shared_expert >= 0 ? 1 : 0;
  if (max_tiles < max_expert_tiles(1, k + with_shared, n_experts, 1))
    bad(op, "max_tiles is below max_expert_tiles(1, k (+ 1 with a shared expert), n_experts, 1)");
  if (topk == nullptr || tiles == nullptr || row_ids == nullptr || slot_of == nullptr)
    bad(op, "topk, tiles, row_ids and slot_of must be device pointers");
  OneRowTiles g;
  g.topk = topk, g.k = k, g.shared = shared_expert, g.max_tiles = max_tiles;
  g.tiles = tiles, g.row_ids = row_ids, g.slot_of = slot_of;
  if (route != nullptr) {
    if (route->logits == nullptr || route->weights == nullptr || route->E < k || route->E > kRouteSlots * 32)
      bad(op, "route needs logits and weights (device) and k <= E <= 512");
    g.logits = route->logits, g.route_E = route->E, g.renormalise = route->renormalise;
    g.route_fast = moe_route_fast();
    g.ids_out = const_cast<int32_t*>(topk), g.weights_out = route->weights;
  }
  // The routed forms (session 13): blocks for the k (+ 1) tiles a routing can have, not max_tiles.
  const int grid_y =
      (tc_decode_expert_routed() & kTcRoutedDown) != 0 ? std::min(max_tiles, k + with_shared) : max_tiles;
  dispatch(op, w, static_cast<unsigned>(grid_y), 1, tiles, 0, nullptr, x, w.cols, 1, h, ldh, scratch,
           scratch_bytes, stream, w.rows / 2, g);
  return true;
}

// Read at every call (not cached), so the checks and bench can switch it with setenv between launches.
int tc_decode_expert_routed() {
  const char* v = std::getenv("DS_CUDA_TC_EXPERT_ROUTED");
  if (v == nullptr || v[0] == '\0') return kDefaultTcExpertRouted;
  const std::string name(v);
  const bool digits =
      !name.empty() && name.size() <= 2 && name.find_first_not_of("0123456789") == std::string::npos;
  const int n = digits ? std::atoi(v) : -1;
  if (n < 0 || n > 15) bad("DS_CUDA_TC_EXPERT_ROUTED", "must be 0..15 (got '" + name + "')");
  return n;
}

int tc_decode_experts_routed(const TiledWeight& w, const int32_t* topk, int k, int shared_expert,
                             const float* x, int64_t ldx, float* y, int64_t ldy, const TcCombine* combine,
                             void* scratch, size_t scratch_bytes, cudaStream_t stream, bool topk_settled) {
  constexpr const char* op = "tc_decode_experts_routed";
  const int mode = tc_decode_expert_routed(), n_experts = static_cast<int>(w.n_experts);
  if (shared_expert != -1 && shared_expert != n_experts - 1)
    bad(op, "shared_expert must be -1 or n_experts - 1 (got " + std::to_string(shared_expert) + ")");
  const int with_shared = shared_expert >= 0 ? 1 : 0, all = k + with_shared;
  check_x_stride(op, ldx, w.cols, all);  // refused whether or not the routed form takes w
  if ((mode & kTcRoutedDown) == 0 || k < 1 || all > 32 || w.dense != nullptr || !tc_decode_supported(w) ||
      !takes_row(w, 1, true))
    return 0;
  if (topk == nullptr) bad(op, "topk must be a device pointer");
  OneRowTiles g;
  g.topk = topk, g.k = k, g.shared = shared_expert, g.x_by_slot = true;
  g.early = (mode & kTcRoutedEarly) != 0 && topk_settled;
  const Slicing sl{tc_decode_column_slices(w.rows, w.cols)};
  const int64_t blocks = (w.rows + sl.block_outputs() - 1) / sl.block_outputs();
  // The combine: with the shared expert (so a tile always arrives), rows a whole number of blocks, a
  // counter a block.
  const bool fold = (mode & kTcRoutedCombine) != 0 && combine != nullptr && shared_expert >= 0 &&
                    w.rows % sl.block_outputs() == 0 && combine->n_counters >= blocks;
  if (fold) {
    if (combine->weights == nullptr || combine->slot_of == nullptr || combine->shared_gate == nullptr ||
        combine->out == nullptr || combine->counters == nullptr)
      bad(op, "the combine's weights, slot_of, shared_gate, out and counters must be device pointers");
    g.combine = dev::OneRowCombine{
        combine->weights, combine->slot_of, combine->shared_gate, combine->out, combine->counters, k, true};
  }
  dispatch(op, w, static_cast<unsigned>(all), 1, nullptr, 0, nullptr, x, ldx, all, y, ldy, scratch,
           scratch_bytes, stream, 0, g);
  return fold ? 2 : 1;
}

}  // namespace ds::cuda
