// Timings of the tensor-core decode products (tc_decode.h), both plane layouts, against the FMA products
// (wx_products.h) on the Flash Next product shapes at 1, 8, 16 and 64 rows (x fp32, as the model passes it),
// and of the routed experts (top-10 of 512) as expert tiles against the per-pair products. Weights rotate
// over copies that together exceed the 60 MB L2; CUDA events over batches of launches.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/stream.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/wx_products.h"
#include "checks.h"
#include "host_reference.h"

namespace ds::cuda::wxcheck {

namespace {

constexpr size_t kRotateBytes = size_t(256) << 20;
constexpr double kCeilingGBs = 4300.0;

struct Shape {
  const char* name;
  int64_t rows, cols;
};
// The model's products at the real shape (joint matrices as one): hc up [4D, R]; DeltaNet qkvz|b|a; its out;
// attention q|gate|k|v|indexer; its o; one expert's gate|up and down; lm_head.
const Shape kShapes[] = {{"hc up", 10240, 320},        {"deltanet in", 16480, 2560},
                         {"deltanet out", 2560, 6144}, {"attn in", 13952, 2560},
                         {"attn o", 2560, 6144},       {"expert gate|up", 1280, 2560},
                         {"expert down", 2560, 640},   {"lm_head", 248320, 2560}};

struct Copies {
  std::vector<DeviceBuffer> keep;
  std::vector<AffineWeight> w;
};

Copies make_copies(int64_t rows, int64_t cols, int bits, int group, int64_t experts) {
  Copies c;
  const size_t codes = size_t(rows * cols / 32 * bits * experts),
               scales = size_t(rows * (cols / group) * experts);
  const size_t one = codes * 4 + 4 * scales;
  const int n = static_cast<int>(std::max<size_t>(1, kRotateBytes / one + 1));
  for (int i = 0; i < n; ++i) {
    c.keep.emplace_back(codes * 4);
    c.keep.back().fill_bytes(0x5A + i);
    const uint32_t* cd = c.keep.back().as<uint32_t>();
    c.keep.emplace_back(scales * 2);
    c.keep.back().fill_bytes(0x1C);  // bf16 0x1C1C: small and finite
    const uint16_t* sc = c.keep.back().as<uint16_t>();
    c.keep.emplace_back(scales * 2);
    c.keep.back().fill_bytes(0x9C);
    c.w.push_back(AffineWeight{cd, sc, c.keep.back().as<uint16_t>(), rows, cols, bits, group, experts});
  }
  return c;
}

TiledWeight tiled(const AffineWeight& a) {
  TiledWeight t;
  t.affine = a;
  t.rows = a.rows, t.cols = a.cols, t.n_experts = a.n_experts;
  return t;
}

}  // namespace

void run_tc_decode_bench(int reps) {
  Stream stream;
  std::mt19937_64 rng(5);
  const int kRows[] = {1, 8, 16, 64};
  const std::vector<float> xh = random_normal(int64_t{64} * 6144, 1.0f, rng);
  DeviceBuffer x = upload(xh), y(size_t(64) * 248320 * 4), scratch(tc_decode_scratch_bytes(6144, 640));
  // fma: affine_wx (the FMA products, windows of up to 16 rows); chained / columns: tc_decode_wx as shipped
  // (the shape's column slices, the small-window kernel up to 8 rows, one row split in the block) with the
  // three x planes chained in one accumulator or in B's columns (tc_decode_set_planes). GB/s: the weight's
  // bytes over the time; x: chained over columns.
  const TcPlanes shipped = tc_decode_planes();
  // DS_TC_BENCH_ONE_ROW set: the one-row tables alone (a short device call).
  const bool one_row_only = std::getenv("DS_TC_BENCH_ONE_ROW") != nullptr;
  if (!one_row_only) {
    std::printf(
        "\ndecode products, FMA vs tensor cores (chained / columns: the planes' layout, the shape's S), x "
        "fp32: "
        "us, weight GB/s\n");
    std::printf("%-15s %-9s %7s %2s", "shape", "format", "MB", "S");
    for (int n : kRows) std::printf(" | %2d rows: fma   GB/s chained columns   GB/s     x", n);
    std::printf("\n");
  }
  for (int bits : {4, 6}) {
    const int group = bits == 4 ? 32 : 64;
    for (const Shape& s : kShapes) {
      if (one_row_only) break;
      Copies c = make_copies(s.rows, s.cols, bits, group, 1);
      const double bytes = double(s.rows) * s.cols * bits / 8 + 4.0 * s.rows * (s.cols / group);
      std::printf("%-15s %d-bit g%-3d %7.2f %2d", s.name, bits, group, bytes / 1e6,
                  tc_decode_column_slices(s.rows, s.cols));
      for (int n : kRows) {
        const double fma = median_us(
            [&](int i) {
              for (int r0 = 0; r0 < n; r0 += kMaxWindowRows)
                affine_wx(c.w[i], Activations{x.as<float>() + r0 * s.cols, ActType::F32, s.cols},
                          std::min(kMaxWindowRows, n - r0), y.as<float>() + r0 * s.rows, s.rows,
                          stream.get());
            },
            static_cast<int>(c.w.size()), reps, stream);
        double tc[2] = {-1, -1};  // chained, columns
        for (int v = 0; v < 2 && tc_decode_supported(tiled(c.w[0])); ++v) {
          tc_decode_set_planes(v == 0 ? TcPlanes::Chained : TcPlanes::Columns);
          tc[v] = median_us(
              [&](int i) {
                tc_decode_wx(tiled(c.w[i]), x.as<float>(), s.cols, n, y.as<float>(), s.rows, scratch.data(),
                             scratch.bytes(), stream.get());
              },
              static_cast<int>(c.w.size()), reps, stream);
        }
        tc_decode_set_planes(shipped);
        std::printf(" | %11.1f %6.0f %7.1f %7.1f %6.0f %5.2f", fma, bytes / (fma * 1e3), tc[0], tc[1],
                    tc[1] > 0 ? bytes / (tc[1] * 1e3) : 0, tc[1] > 0 ? tc[0] / tc[1] : 0);
      }
      std::printf("\n");
    }
  }

  // One row: the one-row kernel (tc_row.cu, tc_decode_row_kernel) against the small kernel it replaces (the
  // same bits), both layouts; chained also per launch variant (DS_CUDA_TC_ROW_VARIANT: +1 one output block a
  // block, +2 registers for 3 blocks an SM); GB/s: the weight's bytes over variant 0's time.
  const bool row_shipped = tc_decode_row_kernel_on();
  // DS_TC_BENCH_ROW_VARIANTS: the launch variants timed (a comma list, default 0,2,6,10,14); GB/s and x of
  // the last; DS_TC_BENCH_SHAPE: that shape alone (for a profiler).
  std::vector<int> variants;
  {
    const char* v = std::getenv("DS_TC_BENCH_ROW_VARIANTS");
    std::stringstream ss(v != nullptr ? v : "0,2,6,10,14");
    for (std::string t; std::getline(ss, t, ',');) variants.push_back(std::atoi(t.c_str()));
  }
  const char* only_shape = std::getenv("DS_TC_BENCH_SHAPE");
  std::printf("\none row, small kernel vs one-row kernel (tc_row.cu): us\n%-15s %-9s %7s | %9s", "shape",
              "format", "MB", "chn small");
  for (int v : variants) std::printf("  row v%-2d", v);
  std::printf(" %6s %5s | %9s %9s %6s %5s\n", "GB/s", "x", "col small", "col row", "GB/s", "x");
  for (int bits : {4, 6}) {
    const int group = bits == 4 ? 32 : 64;
    for (const Shape& s : kShapes) {
      if (only_shape != nullptr && std::string(only_shape) != s.name) continue;
      Copies c = make_copies(s.rows, s.cols, bits, group, 1);
      const double bytes = double(s.rows) * s.cols * bits / 8 + 4.0 * s.rows * (s.cols / group);
      std::printf("%-15s %d-bit g%-3d %7.2f", s.name, bits, group, bytes / 1e6);
      auto time = [&](bool row, int variant) {
        tc_decode_row_kernel(row);
        setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(variant).c_str(), 1);
        return median_us(
            [&](int i) {
              tc_decode_wx(tiled(c.w[i]), x.as<float>(), s.cols, 1, y.as<float>(), s.rows, scratch.data(),
                           scratch.bytes(), stream.get());
            },
            static_cast<int>(c.w.size()), reps, stream);
      };
      tc_decode_set_planes(TcPlanes::Chained);
      const double small = time(false, 0);
      double last = 0;
      std::printf(" | %9.1f", small);
      for (int v : variants) std::printf(" %8.1f", last = time(true, v));
      std::printf(" %6.0f %5.2f", bytes / (last * 1e3), small / last);
      tc_decode_set_planes(TcPlanes::Columns);
      const double col_small = time(false, 0), col_row = time(true, variants.back());
      std::printf(" | %9.1f %9.1f %6.0f %5.2f\n", col_small, col_row, bytes / (col_row * 1e3),
                  col_small / col_row);
      unsetenv("DS_CUDA_TC_ROW_VARIANT");
    }
  }
  tc_decode_set_planes(shipped);
  tc_decode_row_kernel(row_shipped);

  // Routed experts: top-10 of 512 at 1, 8, 32, 64 streams; tiles (each expert read once) vs per-pair
  // products.
  std::printf(
      "\nrouted experts (512, top-10; gate|up 1280x2560, down 2560x640, 4-bit g32, x fp32): us per step\n");
  std::printf(
      "(tiles of one slot at one stream, else of up to 8, as the model cuts them; the shape's slices, %d for "
      "gate|up, %d for down; chained / columns: the planes' layout)\n",
      tc_decode_column_slices(1280, 2560), tc_decode_column_slices(2560, 640));
  std::printf("%7s %8s | %9s %6s %9s %9s | %9s %6s %9s %9s | %8s %7s\n", "streams", "experts", "pairs gu",
              "GB/s", "chain gu", "cols gu", "pairs dn", "GB/s", "chain dn", "cols dn", "cols GB/s", "%");
  const int n_experts = 512, k = 10, bits = 4, group = 32;
  Copies gu = make_copies(1280, 2560, bits, group, n_experts),
         dn = make_copies(2560, 640, bits, group, n_experts);
  for (int streams : {1, 8, 32, 64}) {
    if (one_row_only && streams != 1) break;
    if (only_shape != nullptr && std::string(only_shape) != "experts") break;
    const int lists = 16, total = streams * k;
    std::vector<DeviceBuffer> d_tiles, d_rows, d_slot, d_pairs_up, d_pairs_dn;
    std::vector<int> n_tiles;
    double distinct = 0;
    DeviceBuffer group_scratch(expert_tiles_scratch_bytes(n_experts));
    for (int l = 0; l < lists; ++l) {
      std::vector<int32_t> topk(total);
      for (int r = 0; r < streams; ++r) {
        std::vector<int32_t> ids(n_experts);
        for (int e = 0; e < n_experts; ++e) ids[e] = e;
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int j = 0; j < k; ++j) topk[r * k + j] = ids[j];
      }
      distinct += std::set<int32_t>(topk.begin(), topk.end()).size();
      std::vector<ExpertRow> up, down;
      for (int p = 0; p < total; ++p) up.push_back({topk[p], p / k}), down.push_back({topk[p], p});
      d_pairs_up.push_back(upload(up));
      d_pairs_dn.push_back(upload(down));
      const int max_tiles = max_expert_tiles(streams, k, n_experts, std::min(streams, kDecodeExpertTileRows));
      n_tiles.push_back(max_tiles);
      DeviceBuffer d_topk = upload(topk);
      d_tiles.emplace_back(max_tiles * sizeof(ExpertWindow));
      d_rows.emplace_back(total * 4);
      d_slot.emplace_back(total * 4);
      moe_expert_tiles(d_topk.as<int32_t>(), streams, k, n_experts, d_tiles.back().as<ExpertWindow>(),
                       max_tiles, d_rows.back().as<int32_t>(), d_slot.back().as<int32_t>(),
                       group_scratch.data(), stream.get(), std::min(streams, kDecodeExpertTileRows));
      stream.synchronize();
    }
    distinct /= lists;
    DeviceBuffer ygu(size_t(total) * 1280 * 4), ydn(size_t(total) * 2560 * 4),
        sc(tc_decode_scratch_bytes(2560, total));
    DeviceBuffer h = upload(random_normal(int64_t{total} * 640, 1.0f, rng));
    const int tier = std::min(streams, kDecodeExpertTileRows);
    const int copies = static_cast<int>(gu.w.size());
    auto pick = [&](int i) { return i % lists; };
    const double p_gu = median_us(
        [&](int i) {
          affine_wx_grouped(gu.w[i % copies], d_pairs_up[pick(i)].as<ExpertRow>(), total,
                            Activations{x.data(), ActType::F32, 2560}, streams, ygu.as<float>(), 1280,
                            stream.get());
        },
        lists, reps, stream);
    double t_gu[2], t_dn[2];
    for (int v = 0; v < 2; ++v) {
      tc_decode_set_planes(v == 0 ? TcPlanes::Chained : TcPlanes::Columns);
      t_gu[v] = median_us(
          [&](int i) {
            tc_decode_experts(tiled(gu.w[i % copies]), d_tiles[pick(i)].as<ExpertWindow>(), n_tiles[pick(i)],
                              tier, d_rows[pick(i)].as<int32_t>(), x.as<float>(), 2560, streams,
                              ygu.as<float>(), 1280, sc.data(), sc.bytes(), stream.get());
          },
          lists, reps, stream);
      t_dn[v] = median_us(
          [&](int i) {
            tc_decode_experts(tiled(dn.w[i % dn.w.size()]), d_tiles[pick(i)].as<ExpertWindow>(),
                              n_tiles[pick(i)], tier, nullptr, h.as<float>(), 640, total, ydn.as<float>(),
                              2560, sc.data(), sc.bytes(), stream.get());
          },
          lists, reps, stream);
    }
    if (streams == 1) {  // tiles of one slot: the one-row kernel against the small kernel (shipped layout)
      double off[2];
      tc_decode_row_kernel(!row_shipped);
      tc_decode_set_planes(shipped);
      off[0] = median_us(
          [&](int i) {
            tc_decode_experts(tiled(gu.w[i % copies]), d_tiles[pick(i)].as<ExpertWindow>(), n_tiles[pick(i)],
                              tier, d_rows[pick(i)].as<int32_t>(), x.as<float>(), 2560, streams,
                              ygu.as<float>(), 1280, sc.data(), sc.bytes(), stream.get());
          },
          lists, reps, stream);
      off[1] = median_us(
          [&](int i) {
            tc_decode_experts(tiled(dn.w[i % dn.w.size()]), d_tiles[pick(i)].as<ExpertWindow>(),
                              n_tiles[pick(i)], tier, nullptr, h.as<float>(), 640, total, ydn.as<float>(),
                              2560, sc.data(), sc.bytes(), stream.get());
          },
          lists, reps, stream);
      tc_decode_row_kernel(row_shipped);
      std::printf("(one stream, %s, one-row kernel %s: gate|up %.1f us, down %.1f us)\n",
                  tc_planes_name(shipped), row_shipped ? "off" : "on", off[0], off[1]);
      // The one-row kernel's launch variants on the tiles (chained).
      tc_decode_row_kernel(true);
      tc_decode_set_planes(TcPlanes::Chained);
      for (int v : variants) {
        setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(v).c_str(), 1);
        const double vg = median_us(
            [&](int i) {
              tc_decode_experts(tiled(gu.w[i % copies]), d_tiles[pick(i)].as<ExpertWindow>(),
                                n_tiles[pick(i)], tier, d_rows[pick(i)].as<int32_t>(), x.as<float>(), 2560,
                                streams, ygu.as<float>(), 1280, sc.data(), sc.bytes(), stream.get());
            },
            lists, reps, stream);
        const double vd = median_us(
            [&](int i) {
              tc_decode_experts(tiled(dn.w[i % dn.w.size()]), d_tiles[pick(i)].as<ExpertWindow>(),
                                n_tiles[pick(i)], tier, nullptr, h.as<float>(), 640, total, ydn.as<float>(),
                                2560, sc.data(), sc.bytes(), stream.get());
            },
            lists, reps, stream);
        std::printf("(one stream, chained, one-row kernel variant %d: gate|up %.1f us, down %.1f us)\n", v,
                    vg, vd);
      }
      unsetenv("DS_CUDA_TC_ROW_VARIANT");
      tc_decode_row_kernel(row_shipped);
      tc_decode_set_planes(shipped);
    }
    tc_decode_set_planes(shipped);
    const double p_dn = median_us(
        [&](int i) {
          affine_wx_grouped(dn.w[i % dn.w.size()], d_pairs_dn[pick(i)].as<ExpertRow>(), total,
                            Activations{h.data(), ActType::F32, 640}, total, ydn.as<float>(), 2560,
                            stream.get());
        },
        lists, reps, stream);
    const double unit = bits / 8.0 + 4.0 / group;
    const double gu_bytes = distinct * 1280.0 * 2560 * unit, dn_bytes = distinct * 2560.0 * 640 * unit;
    const double gbs = (gu_bytes + dn_bytes) / ((t_gu[1] + t_dn[1]) * 1e3);
    std::printf("%7d %8.1f | %9.1f %6.0f %9.1f %9.1f | %9.1f %6.0f %9.1f %9.1f | %8.0f %6.0f%%\n", streams,
                distinct, p_gu, gu_bytes / (p_gu * 1e3), t_gu[0], t_gu[1], p_dn, dn_bytes / (p_dn * 1e3),
                t_dn[0], t_dn[1], gbs, 100.0 * gbs / kCeilingGBs);
  }
}

}  // namespace ds::cuda::wxcheck
