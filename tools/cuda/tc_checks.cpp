// The tensor-core prompt products (backend/cuda/tc_products.h): float64 reference within the bound, negative
// control, rows alone == rows in a larger launch, expert tiles == each expert alone; and their timings at the
// Flash Next prompt shapes against cuBLAS on dequantized bf16 weights (a variant without row invariance).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "backend/cuda/stream.h"
#include "backend/cuda/tc_products.h"
#include "backend/cuda/tc_products_ring.h"
#include "checks.h"
#include "host_reference.h"
#include "tc_weight.h"
#ifdef DS_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

namespace ds::cuda::wxcheck {

namespace {

std::vector<float> run_tiled(const TcWeight& t, const DeviceBuffer& x, int64_t ldx, int row0, int n,
                             const Stream& s) {
  DeviceBuffer y(std::max<int64_t>(n, 1) * t.rows * sizeof(float));
  y.fill_bytes(0xFF);  // NaN: an unwritten output fails every comparison
  tiled_wx(t.w, x.as<float>() + row0 * ldx, ldx, n, y.as<float>(), t.rows, s.get());
  s.synchronize();
  return download<float>(y, static_cast<size_t>(n * t.rows));
}

// Default shape 200 x 384: a partial output tile, no k split; wider shapes take tiled_fixed_splits' k split.
void check_one(Tally& tally, int bits, int group, std::mt19937_64& rng, const Stream& s, double& worst,
               double& weakest, int64_t rows = 200, int64_t cols = 384) {
  const int n = 150;  // a partial row tile
  TcWeight t = make_weight(rows, cols, bits, group, 1, rng);
  const std::vector<float> xh = random_normal(n * cols, 1.0f, rng);
  const DeviceBuffer x = upload(xh);
  const std::vector<float> y = run_tiled(t, x, cols, 0, n, s);
  const int splits = tiled_fixed_splits(t.w);
  char label[96];
  if (bits == 0)
    std::snprintf(label, sizeof label, "tiled dense bf16");
  else
    std::snprintf(label, sizeof label, "tiled affine %d-bit g%d", bits, group);
  std::string name = label;
  if (splits > 1) {
    std::snprintf(label, sizeof label, " %lldx%lld (k split %d)", static_cast<long long>(rows),
                  static_cast<long long>(cols), splits);
    name += label;
  }
  expect_within_bound(tally, name, t, xh, cols, n, y, rows, worst, weakest);
  // Rows alone, and rows 37.. in a launch of their own, == the same rows of the 150-row launch.
  bool same = true;
  for (int r = 0; r < n && same; r += (r < 70 ? 1 : 7)) {
    const std::vector<float> one = run_tiled(t, x, cols, r, 1, s);
    same = std::memcmp(one.data(), &y[r * rows], rows * sizeof(float)) == 0;
  }
  const std::vector<float> part = run_tiled(t, x, cols, 37, n - 37, s);
  same = same && std::memcmp(part.data(), &y[37 * rows], part.size() * sizeof(float)) == 0;
  tally.expect(same, name + ": rows alone == rows in a launch of 150 == rows 37.. in a launch of 113");
}

// Experts: a routing grouped by moe_expert_tiles; every slot == its expert on its row alone (bits), through
// row_ids (gate|up) and in slot order (down).
void check_experts(Tally& tally, int bits, int n_rows, int k, int n_experts, std::mt19937_64& rng,
                   const Stream& s, int tile_rows = kTileRows) {
  const int64_t rows = 96, cols = 256;
  TcWeight t = make_weight(rows, cols, bits, 64, n_experts, rng);
  std::vector<int32_t> topk(n_rows * k);
  for (int r = 0; r < n_rows; ++r) {
    std::vector<int32_t> ids(n_experts);
    for (int e = 0; e < n_experts; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int j = 0; j < k; ++j) topk[r * k + j] = ids[j];
  }
  const int total = n_rows * k, max_tiles = max_expert_tiles(n_rows, k, n_experts, tile_rows);
  const DeviceBuffer d_topk = upload(topk);
  DeviceBuffer tiles(max_tiles * sizeof(ExpertWindow)), row_ids(total * 4), slot_of(total * 4),
      scratch(expert_tiles_scratch_bytes(n_experts));
  tiles.fill_bytes(0x7F);  // garbage: every tile must be written
  moe_expert_tiles(d_topk.as<int32_t>(), n_rows, k, n_experts, tiles.as<ExpertWindow>(), max_tiles,
                   row_ids.as<int32_t>(), slot_of.as<int32_t>(), scratch.data(), s.get(), tile_rows);
  s.synchronize();
  const auto h_tiles = download<ExpertWindow>(tiles, max_tiles);
  const auto h_rows = download<int32_t>(row_ids, total);
  const auto h_slot = download<int32_t>(slot_of, total);
  const std::string name = "expert tiles of " + std::to_string(tile_rows) + " (" + std::to_string(n_rows) +
                           " rows, top-" + std::to_string(k) + " of " + std::to_string(n_experts) +
                           (bits == 0 ? ", bf16)" : ", affine)");
  // Expected grouping: experts ascending, pairs in row order, tiles of up to tile_rows.
  std::vector<int32_t> exp_rows, exp_slot(total);
  std::vector<ExpertWindow> exp_tiles;
  for (int e = 0; e < n_experts; ++e) {
    const int first = static_cast<int>(exp_rows.size());
    for (int i = 0; i < total; ++i)
      if (topk[i] == e) exp_slot[i] = static_cast<int>(exp_rows.size()), exp_rows.push_back(i / k);
    const int c = static_cast<int>(exp_rows.size()) - first;
    for (int j = 0; j * tile_rows < c; ++j)
      exp_tiles.push_back({e, first + j * tile_rows, std::min(tile_rows, c - j * tile_rows)});
  }
  bool grouping = h_rows == exp_rows && h_slot == exp_slot;
  for (int i = 0; i < max_tiles; ++i) {
    const ExpertWindow want = i < static_cast<int>(exp_tiles.size()) ? exp_tiles[i] : ExpertWindow{0, 0, 0};
    const ExpertWindow got = h_tiles[i];
    if (got.count != want.count || (want.count > 0 && (got.expert != want.expert || got.first != want.first)))
      grouping = false;
  }
  tally.expect(grouping, name + ": grouping as specified (experts ascending, rows in order, tiles as asked)");

  const std::vector<float> xh = random_normal(std::max(n_rows, total) * cols, 1.0f, rng);
  const DeviceBuffer x = upload(xh);
  DeviceBuffer y(total * rows * sizeof(float));
  bool same = true;
  for (int pass = 0; pass < 2; ++pass) {  // 0: x rows through row_ids; 1: x rows in slot order
    y.fill_bytes(0xFF);
    tiled_wx_experts(t.w, tiles.as<ExpertWindow>(), max_tiles, pass == 0 ? row_ids.as<int32_t>() : nullptr,
                     x.as<float>(), cols, pass == 0 ? n_rows : total, y.as<float>(), rows, s.get(),
                     tile_rows);
    s.synchronize();
    const auto hy = download<float>(y, total * rows);
    for (int slot = 0; slot < total && same; slot += 3) {
      int e = 0;
      while (!(slot >= exp_tiles[e].first && slot < exp_tiles[e].first + exp_tiles[e].count)) ++e;
      TcWeight alone;
      alone.rows = rows, alone.cols = cols;
      alone.w = t.w;
      alone.w.n_experts = 1;
      const int64_t ex = exp_tiles[e].expert;
      if (bits == 0) {
        alone.w.dense = t.w.dense + ex * rows * cols;
      } else {
        const int64_t wpr = cols / 32 * bits, gpr = cols / 64;
        alone.w.affine.codes = t.w.affine.codes + ex * rows * wpr;
        alone.w.affine.scales = t.w.affine.scales + ex * rows * gpr;
        alone.w.affine.biases = t.w.affine.biases + ex * rows * gpr;
        alone.w.affine.n_experts = 1;
      }
      const int xrow = pass == 0 ? exp_rows[slot] : slot;
      const std::vector<float> one = run_tiled(alone, x, cols, xrow, 1, s);
      same = std::memcmp(one.data(), &hy[slot * rows], rows * sizeof(float)) == 0;
    }
  }
  tally.expect(same,
               name + ": every slot == its expert on its row alone (gate|up via row_ids, down in order)");
}

// An output tiling and the kernel of the affine tiles at 128 outputs (tc_products_ring.h).
struct Tiling {
  TiledConfig config;
  int ring;
};
Tiling current_tiling() {
  return {tiled_config(), tiled_ring()};
}
void set_tiling(const Tiling& t) {
  set_tiled_config(t.config);
  set_tiled_ring(t.ring);
}

// Every tiling of TiledConfig gives the same bits: dense products (with and without the k split) and
// expert tiles of 16, 32 and 64 rows under each config == under the default.
void check_configs_agree(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  const Tiling base = current_tiling();
  // The register-staged kernel at every tiling, and the ring kernel (128/2, affine) with both decodes.
  const Tiling others[] = {{{64, 4}, 0},  {{64, 3}, 0},  {{128, 2}, 0},
                           {{128, 2}, 1}, {{128, 2}, 2}, {{128, 2}, 3}};
  struct Case {
    int bits, group;
    int64_t rows, cols;
  };
  // The ring's copies: 16-byte chunks (4, 8 bits), 8-byte (2, 6), 4-byte (3, 5); 96 columns at group 32 hold
  // an odd count of groups a row (scales by plain loads).
  const Case cases[] = {{4, 32, 200, 384}, {6, 64, 136, 256}, {8, 128, 72, 2048}, {0, 0, 130, 320},
                        {3, 32, 90, 320},  {5, 128, 70, 512}, {2, 64, 40, 192},   {4, 32, 50, 96}};
  bool same = true;
  for (const Case& c : cases) {
    TcWeight t = make_weight(c.rows, c.cols, c.bits, c.group, 1, rng);
    const int n = 150;
    const DeviceBuffer x = upload(random_normal(n * c.cols, 1.0f, rng));
    const std::vector<float> want = run_tiled(t, x, c.cols, 0, n, s);
    for (const Tiling& o : others) {
      set_tiling(o);
      const std::vector<float> got = run_tiled(t, x, c.cols, 0, n, s);
      same = same && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
      set_tiling(base);
    }
  }
  // Experts: 120 rows top-3 of 8 (45 slots an expert), tiles of 64, 32 and 16, gate|up style (row_ids).
  const int n_rows = 120, k = 3, E = 8, total = n_rows * k;
  const int64_t rows = 160, cols = 256;
  TcWeight t = make_weight(rows, cols, 4, 64, E, rng);
  std::vector<int32_t> topk(total);
  for (int r = 0; r < n_rows; ++r)
    for (int j = 0; j < k; ++j) topk[r * k + j] = (r * 5 + j * 3) % E;  // 3 distinct experts a row
  const DeviceBuffer d_topk = upload(topk), x = upload(random_normal(n_rows * cols, 1.0f, rng));
  std::vector<float> first;
  for (int tile_rows : {kTileRows, 32, 16})
    for (const Tiling& o : {base, others[0], others[1], others[2], others[3], others[4], others[5]}) {
      const int max_tiles = max_expert_tiles(n_rows, k, E, tile_rows);
      DeviceBuffer tiles(max_tiles * sizeof(ExpertWindow)), row_ids(total * 4), slot_of(total * 4),
          scratch(expert_tiles_scratch_bytes(E)), y(total * rows * 4);
      moe_expert_tiles(d_topk.as<int32_t>(), n_rows, k, E, tiles.as<ExpertWindow>(), max_tiles,
                       row_ids.as<int32_t>(), slot_of.as<int32_t>(), scratch.data(), s.get(), tile_rows);
      y.fill_bytes(0xFF);
      set_tiling(o);
      tiled_wx_experts(t.w, tiles.as<ExpertWindow>(), max_tiles, row_ids.as<int32_t>(), x.as<float>(), cols,
                       n_rows, y.as<float>(), rows, s.get(), tile_rows);
      set_tiling(base);
      s.synchronize();
      const std::vector<float> got = download<float>(y, total * rows);
      if (first.empty()) first = got;
      same = same && std::memcmp(got.data(), first.data(), got.size() * sizeof(float)) == 0;
    }
  tally.expect(same,
               "tiled products: output tiles of 64 (4 or 3 blocks an SM) and 128, the ring kernel and the "
               "register-staged one, expert tiles of 64, 32 and 16 rows: the same bits");
  bool refused = false;
  try {
    set_tiled_config({128, 4});
  } catch (const ArgumentError& e) {
    refused = std::string(e.what()).find("tile_outputs") != std::string::npos;
  }
  tally.expect(refused && tiled_config().tile_outputs == base.config.tile_outputs,
               "set_tiled_config refuses 128/4 naming the field");
  refused = false;
  try {
    set_tiled_ring(4);
  } catch (const ArgumentError& e) {
    refused = std::string(e.what()).find("ring") != std::string::npos;
  }
  tally.expect(refused && tiled_ring() == base.ring, "set_tiled_ring refuses 4 naming the field");
}

}  // namespace

void run_tc_checks(Tally& tally) {
  std::mt19937_64 rng(77);
  Stream s;
  double worst = 0, weakest = 1e300;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) check_one(tally, bits, group, rng, s, worst, weakest);
  check_one(tally, 0, 0, rng, s, worst, weakest);
  // Short, wide weights take a k split fixed by their shape (hc down / inject are 320 / 4 x 10240).
  TiledWeight hc_down, inject;
  hc_down.rows = 320, inject.rows = 4, hc_down.cols = inject.cols = 10240;
  hc_down.dense = inject.dense = reinterpret_cast<const uint16_t*>(16);
  const int hc_splits = tiled_fixed_splits(hc_down), inject_splits = tiled_fixed_splits(inject);
  std::printf("k splits fixed by the shape: hc down 320x10240 %d, inject 4x10240 %d\n", hc_splits,
              inject_splits);
  tally.expect(hc_splits > 1 && inject_splits > 1, "hc down and inject take a k split");
  for (const auto& [bits, group] : {std::pair{4, 32}, std::pair{3, 128}, std::pair{8, 64}, std::pair{0, 0}}) {
    check_one(tally, bits, group, rng, s, worst, weakest, 72, 2048);
    check_one(tally, bits, group, rng, s, worst, weakest, 4, 4096);
  }
  std::printf("tiled products: worst err/bound %.4f, weakest negative control %.1fx the bound\n", worst,
              weakest);
  for (int tile_rows : {kTileRows, 32, 16}) {
    check_experts(tally, 4, 90, 3, 6, rng, s, tile_rows);
    check_experts(tally, 0, 70, 2, 5, rng, s, tile_rows);
    check_experts(tally, 6, 200, 2, 3, rng, s, tile_rows);  // about 133 rows an expert: several tiles each
  }
  check_experts(tally, 2, 50, 4, 7, rng, s, 9);  // tiles of 9 slots run in kernel tiles of 16
  check_configs_agree(tally, rng, s);
  TiledWeight bad;
  bad.rows = 64, bad.cols = 64;
  bad.affine.codes = reinterpret_cast<const uint32_t*>(16);
  bad.affine.bits = 7;
  bool refused = false;
  try {
    tiled_wx(bad, nullptr, 64, 1, nullptr, 64, s.get());
  } catch (const ArgumentError& e) {
    refused = std::string(e.what()).find("bits") != std::string::npos;
  }
  tally.expect(refused, "tiled_wx refuses 7-bit codes naming the bits");
}

namespace {

// Weights filled with a byte pattern (speed does not depend on the values; finite either way).
TiledWeight pattern_weight(int64_t rows, int64_t cols, int bits, int group, int64_t experts,
                           std::vector<DeviceBuffer>& keep) {
  TiledWeight w;
  w.rows = rows, w.cols = cols, w.n_experts = experts;
  const int64_t words = rows * cols / 32 * bits * experts, groups = rows * (cols / group) * experts;
  keep.emplace_back(words * 4);
  keep.back().fill_bytes(0x5A);
  const uint32_t* codes = keep.back().as<uint32_t>();
  keep.emplace_back(groups * 2);
  keep.back().fill_bytes(0x3C);  // bf16 0x3C3C = 0.0115
  const uint16_t* scales = keep.back().as<uint16_t>();
  keep.emplace_back(groups * 2);
  keep.back().fill_bytes(0xBC);  // -0.0230
  w.affine = AffineWeight{codes, scales, keep.back().as<uint16_t>(), rows, cols, bits, group, experts};
  return w;
}

template <class F>
double time_ms(int reps, const Stream& s, F&& f) {
  f();
  s.synchronize();
  Event a, b;
  a.record(s.get());
  for (int i = 0; i < reps; ++i) f();
  b.record(s.get());
  b.synchronize();
  return b.ms_since(a) / reps;
}

// The routed experts of one MoE layer at prompt sizes: grouping + gate|up + down, 512 experts top-10. Under
// DS_TC_BENCH_EXPERTS_ONLY (for a profiler: run_tc_bench does nothing else) 2048 rows in tiles of 64 only.
void run_tc_expert_bench(int reps, const Stream& s, std::mt19937_64& rng, bool one_shape) {
  const Tiling base = current_tiling();
  std::printf("\nprompt expert path (512 experts top-10, gate|up 1280x2560, down 2560x640, 4-bit g32)\n");
  std::printf("%6s %5s %7s %10s %10s %10s %10s %6s\n", "rows", "tile", "outputs", "group ms", "gate|up ms",
              "down ms", "TFLOP/s", "rule");
  const int E = 512, K = 10;
  std::vector<DeviceBuffer> keep;
  const TiledWeight gu = pattern_weight(1280, 2560, 4, 32, E, keep);
  const TiledWeight dn = pattern_weight(2560, 640, 4, 32, E, keep);
  for (int n : {512, 1024, 2048})
    for (int tile_rows : {kTileRows, 32, 16}) {
      if (one_shape && (n != 2048 || tile_rows != kTileRows)) continue;
      std::vector<int32_t> topk(n * K);
      std::vector<int32_t> ids(E);
      for (int e = 0; e < E; ++e) ids[e] = e;
      for (int r = 0; r < n; ++r) {
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int j = 0; j < K; ++j) topk[r * K + j] = ids[j];
      }
      const int total = n * K, max_tiles = max_expert_tiles(n, K, E, tile_rows);
      const DeviceBuffer d_topk = upload(topk);
      const std::vector<float> xh = random_normal(int64_t{total} * 2560, 1.0f, rng);
      const DeviceBuffer x = upload(xh);
      DeviceBuffer tiles(max_tiles * sizeof(ExpertWindow)), row_ids(total * 4), slot_of(total * 4),
          scratch(expert_tiles_scratch_bytes(E)), y1(int64_t{total} * 1280 * 4),
          y2(int64_t{total} * 2560 * 4);
      const double g_ms = time_ms(reps, s, [&] {
        moe_expert_tiles(d_topk.as<int32_t>(), n, K, E, tiles.as<ExpertWindow>(), max_tiles,
                         row_ids.as<int32_t>(), slot_of.as<int32_t>(), scratch.data(), s.get(), tile_rows);
      });
      // The variant the default takes at 128 outputs (tiled_ring 3: the ring for expert tiles).
      const int rule_variant = base.ring == 0 ? 1 : base.ring == 1 ? 2 : 3;
      for (int variant = 0; variant < 4; ++variant) {  // 64/4; 128/2 register-staged, ring 1, ring 2
        const int outputs = variant == 0 ? 64 : 128;
        set_tiling({{outputs, variant == 0 ? 4 : 2}, variant == 0 ? 0 : variant - 1});
        const double u_ms = time_ms(reps, s, [&] {
          tiled_wx_experts(gu, tiles.as<ExpertWindow>(), max_tiles, row_ids.as<int32_t>(), x.as<float>(),
                           2560, n, y1.as<float>(), 1280, s.get(), tile_rows);
        });
        const double d_ms = time_ms(reps, s, [&] {
          tiled_wx_experts(dn, tiles.as<ExpertWindow>(), max_tiles, nullptr, x.as<float>(), 640, total,
                           y2.as<float>(), 2560, s.get(), tile_rows);
        });
        set_tiling(base);
        const double flop = 2.0 * total * (1280.0 * 2560 + 2560.0 * 640);
        const bool rule = prompt_expert_tile_rows(n, K, E) == tile_rows &&
                          base.config.tile_outputs == outputs && (outputs == 64 || rule_variant == variant);
        std::printf("%6d %5d %7s %10.3f %10.3f %10.3f %10.1f %6s\n", n, tile_rows,
                    variant == 0   ? "64"
                    : variant == 1 ? "128"
                    : variant == 2 ? "128r1"
                                   : "128r2",
                    g_ms, u_ms, d_ms, flop / (g_ms + u_ms + d_ms) * 1e-9, rule ? "<-" : "");
      }
    }
}

}  // namespace

void run_tc_bench(int reps) {
  Stream s;
  std::mt19937_64 rng(5);
  if (std::getenv("DS_TC_BENCH_EXPERTS_ONLY") != nullptr) return run_tc_expert_bench(reps, s, rng, true);
  struct Shape {
    const char* name;
    int64_t rows, cols;
  };
  const Shape shapes[] = {{"deltanet qkv", 10240, 2560}, {"deltanet z", 6144, 2560},
                          {"deltanet out", 2560, 6144},  {"attention q|gate", 12288, 2560},
                          {"hc up", 10240, 320},         {"shared gate|up", 1280, 2560},
                          {"hc down", 320, 10240},       {"hc inject", 4, 10240}};
#ifdef DS_HAVE_CUBLAS
  cublasHandle_t handle;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  cublasSetStream(handle, s.get());
#endif
  std::printf(
      "\nprompt products, MLX 4-bit g32, fp32 x (tiled, row invariant) vs cuBLAS bf16 GEMM on the\n"
      "dequantized weights and bf16 x (CUBLAS_GEMM_DEFAULT: its own heuristics, no invariance)\n");
  std::printf("%-18s %6s %8s %10s %8s %10s %8s\n", "matrix", "rows", "tiled ms", "TFLOP/s", "cuBLAS",
              "TFLOP/s", "tiled/cuBLAS");
  double sum_tiled = 0, sum_cublas = 0;
  for (int n : {2048, 512}) {
    const std::vector<float> xh = random_normal(int64_t{n} * 10240, 1.0f, rng);
    const DeviceBuffer x = upload(xh);
    for (const Shape& sh : shapes) {
      std::vector<DeviceBuffer> keep;
      const TiledWeight w = pattern_weight(sh.rows, sh.cols, 4, 32, 1, keep);
      DeviceBuffer y(int64_t{n} * sh.rows * 4);
      const double ms =
          time_ms(reps, s, [&] { tiled_wx(w, x.as<float>(), sh.cols, n, y.as<float>(), sh.rows, s.get()); });
      const double flop = 2.0 * n * sh.rows * sh.cols;
      double cms = 0;
#ifdef DS_HAVE_CUBLAS
      DeviceBuffer wb(sh.rows * sh.cols * 2), xb(int64_t{n} * sh.cols * 2);
      wb.fill_bytes(0x3C), xb.fill_bytes(0x3C);
      const float one = 1.0f, zero = 0.0f;
      cms = time_ms(reps, s, [&] {
        const cublasStatus_t st =
            cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(sh.rows), n,
                         static_cast<int>(sh.cols), &one, wb.data(), CUDA_R_16BF, static_cast<int>(sh.cols),
                         xb.data(), CUDA_R_16BF, static_cast<int>(sh.cols), &zero, y.data(), CUDA_R_32F,
                         static_cast<int>(sh.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (st != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasGemmEx failed");
      });
#endif
      if (n == 2048) sum_tiled += ms, sum_cublas += cms;
      std::printf("%-18s %6d %8.3f %10.1f %8.3f %10.1f %8.2f\n", sh.name, n, ms, flop / ms * 1e-9, cms,
                  cms > 0 ? flop / cms * 1e-9 : 0.0, cms > 0 ? ms / cms : 0.0);
    }
  }
  if (sum_cublas > 0)
    std::printf("sum over the 2048-row shapes: tiled %.3f ms, cuBLAS %.3f ms: tiled costs %+.1f%%\n",
                sum_tiled, sum_cublas, (sum_tiled / sum_cublas - 1.0) * 100.0);

  // The k split fixed by the weight's shape against the same tiles unsplit.
  std::printf("\nk split fixed by the shape (tiled_fixed_splits) vs unsplit, 4-bit g32\n");
  std::printf("%-18s %6s %7s %10s %10s %8s\n", "matrix", "rows", "splits", "unsplit ms", "split ms",
              "speed-up");
  for (int n : {2048, 512}) {
    const std::vector<float> xh = random_normal(int64_t{n} * 10240, 1.0f, rng);
    const DeviceBuffer x = upload(xh);
    for (const Shape& sh : shapes) {
      std::vector<DeviceBuffer> keep;
      const TiledWeight w = pattern_weight(sh.rows, sh.cols, 4, 32, 1, keep);
      const int splits = tiled_fixed_splits(w);
      if (splits == 1) continue;
      DeviceBuffer y(int64_t{n} * sh.rows * 4);
      const double one = time_ms(reps, s, [&] {
        tiled_wx_split_k(w, x.as<float>(), sh.cols, n, y.as<float>(), sh.rows, 1, nullptr, s.get());
      });
      const double ms =
          time_ms(reps, s, [&] { tiled_wx(w, x.as<float>(), sh.cols, n, y.as<float>(), sh.rows, s.get()); });
      std::printf("%-18s %6d %7d %10.3f %10.3f %7.2fx\n", sh.name, n, splits, one, ms, one / ms);
    }
  }
#ifdef DS_HAVE_CUBLAS
  cublasDestroy(handle);
#endif

  // The output tiles (TiledConfig) on the same shapes.
  const Tiling base = current_tiling();
  const Tiling configs[] = {{{64, 4}, 0}, {{64, 3}, 0}, {{128, 2}, 0}, {{128, 2}, 2}};
  std::printf(
      "\noutput tiles (outputs/blocks an SM; ring: tc_products_ring.h), 4-bit g32, ms (default %d/%d, "
      "ring %d)\n",
      base.config.tile_outputs, base.config.min_blocks, base.ring);
  std::printf("%-18s %6s %10s %10s %10s %10s\n", "matrix", "rows", "64/4", "64/3", "128/2", "128/2 ring");
  for (int n : {2048, 512}) {
    const std::vector<float> xh = random_normal(int64_t{n} * 10240, 1.0f, rng);
    const DeviceBuffer x = upload(xh);
    double sums[4] = {0, 0, 0, 0};
    for (const Shape& sh : shapes) {
      std::vector<DeviceBuffer> keep;
      const TiledWeight w = pattern_weight(sh.rows, sh.cols, 4, 32, 1, keep);
      DeviceBuffer y(int64_t{n} * sh.rows * 4);
      double ms[4];
      for (int c = 0; c < 4; ++c) {
        set_tiling(configs[c]);
        ms[c] = time_ms(reps, s,
                        [&] { tiled_wx(w, x.as<float>(), sh.cols, n, y.as<float>(), sh.rows, s.get()); });
        sums[c] += ms[c];
      }
      set_tiling(base);
      std::printf("%-18s %6d %10.3f %10.3f %10.3f %10.3f\n", sh.name, n, ms[0], ms[1], ms[2], ms[3]);
    }
    std::printf("%-18s %6d %10.3f %10.3f %10.3f %10.3f\n", "sum", n, sums[0], sums[1], sums[2], sums[3]);
  }

  // The same kernel without row invariance: k cut into 2, 4 or 8 splits by separate blocks (the best per
  // shape and row count, as a heuristic knowing the launch's size would pick), against the fixed tiles.
  std::printf(
      "\ncost of row invariance: fixed tiles vs the best batch-dependent split-K of the same kernel\n");
  std::printf("%-18s %6s %10s %10s %7s %8s\n", "matrix", "rows", "fixed ms", "split ms", "splits", "cost");
  for (int n : {64, 256, 2048}) {
    const std::vector<float> xh = random_normal(int64_t{n} * 10240, 1.0f, rng);
    const DeviceBuffer x = upload(xh);
    double sum_fixed = 0, sum_split = 0;
    for (const Shape& sh : shapes) {
      std::vector<DeviceBuffer> keep;
      const TiledWeight w = pattern_weight(sh.rows, sh.cols, 4, 32, 1, keep);
      DeviceBuffer y(int64_t{n} * sh.rows * 4), ws(int64_t{8} * n * sh.rows * 4);
      const double fixed =
          time_ms(reps, s, [&] { tiled_wx(w, x.as<float>(), sh.cols, n, y.as<float>(), sh.rows, s.get()); });
      double best = fixed;
      int best_splits = 1;
      for (int splits : {2, 4, 8}) {
        if (splits > sh.cols / kTileCols) break;
        const double ms = time_ms(reps, s, [&] {
          tiled_wx_split_k(w, x.as<float>(), sh.cols, n, y.as<float>(), sh.rows, splits, ws.as<float>(),
                           s.get());
        });
        if (ms < best) best = ms, best_splits = splits;
      }
      sum_fixed += fixed, sum_split += best;
      std::printf("%-18s %6d %10.3f %10.3f %7d %+7.1f%%\n", sh.name, n, fixed, best, best_splits,
                  (fixed / best - 1.0) * 100.0);
    }
    std::printf("%-18s %6d %10.3f %10.3f %7s %+7.1f%%\n", "sum", n, sum_fixed, sum_split, "",
                (sum_fixed / sum_split - 1.0) * 100.0);
  }
  run_tc_expert_bench(reps, s, rng, false);
}

}  // namespace ds::cuda::wxcheck
