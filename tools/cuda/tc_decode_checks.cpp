// The tensor-core decode products (backend/cuda/tc_decode.h), under both layouts of x's planes (TcPlanes):
// float64 reference within the bound with a negative control, for every bits x group and dense bf16; a row
// alone == the same row in every row count 1..64 at every position (and in a 2-tile launch), bit for bit;
// expert tiles: every slot == its expert on its row alone; bad shapes refused by name; whether decode rows
// equal the prompt products' rows (reported). Then timings on the Flash Next shapes at 1/8/16/64 rows against
// the FMA products.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>

#include "backend/cuda/stream.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/wx_products.h"
#include "checks.h"
#include "host_reference.h"
#include "tc_decode_check_parts.h"
#include "tc_weight.h"

namespace ds::cuda::wxcheck {

namespace {

// By default 1030 outputs (a partial warp), 320 columns (a partial stage; 3- and 5-bit rows not a multiple of
// 16 bytes; 384 for group 128; one column slice). shape: other outputs x columns.
void check_format(Tally& tally, int bits, int group, std::mt19937_64& rng, const Stream& s, double& worst,
                  double& weakest, int& prompt_equal, int& prompt_total,
                  std::pair<int64_t, int64_t> shape = {}) {
  const int64_t rows = shape.first > 0 ? shape.first : 1030, cols = shape.first > 0 ? shape.second
                                                                    : group == 128  ? 384
                                                                                    : 320;
  const int n = 70;  // two row tiles (64 + 6)
  TcWeight t = make_weight(rows, cols, bits, group, 1, rng);
  const std::string name =
      format_name(bits, group) +
      (shape.first > 0 ? " " + std::to_string(rows) + "x" + std::to_string(cols) : std::string()) + " (" +
      std::to_string(tc_decode_column_slices(rows, cols)) + " column slices)";
  const std::vector<float> xh = random_normal(128 * cols, 1.0f, rng);
  const DeviceBuffer x = upload(xh);
  const std::vector<float> y = run_decode(t.w, x, cols, 0, n, s);
  expect_within_bound(tally, name, t, xh, cols, n, y, rows, worst, weakest);

  // Each of 128 rows alone; then for every count c in 1..64 a launch of rows s_c .. s_c+c-1 (every position
  // of every count), and the 70-row launch: each row == alone, bit for bit.
  std::vector<std::vector<float>> alone(128);
  for (int r = 0; r < 128; ++r) alone[r] = run_decode(t.w, x, cols, r, 1, s);
  bool same = true;
  int first_bad = -1;
  for (int r = 0; r < n && same; ++r)
    if (std::memcmp(alone[r].data(), &y[r * rows], rows * sizeof(float)) != 0) same = false, first_bad = r;
  for (int c = 1; c <= 64 && same; ++c) {
    const int start = (c * 37) % (128 - c + 1);
    const std::vector<float> yc = run_decode(t.w, x, cols, start, c, s);
    for (int p = 0; p < c && same; ++p)
      if (std::memcmp(alone[start + p].data(), &yc[p * rows], rows * sizeof(float)) != 0)
        same = false, first_bad = 1000 * c + p;
  }
  tally.expect(same,
               name + ": a row alone == the same row in every count 1..64 at every position and in 2 tiles" +
                   (same ? "" : " (first mismatch " + std::to_string(first_bad) + ")"));

  // Not required: whether a decode row has the prompt products' bits (their k order inside a tile differs).
  DeviceBuffer yp(n * rows * sizeof(float));
  tiled_wx(t.w, x.as<float>(), cols, n, yp.as<float>(), rows, s.get());
  s.synchronize();
  const auto hp = download<float>(yp, static_cast<size_t>(n) * rows);
  for (size_t i = 0; i < hp.size(); ++i) prompt_equal += std::memcmp(&hp[i], &y[i], 4) == 0;
  prompt_total += static_cast<int>(hp.size());
}

// Experts grouped by moe_expert_tiles; every slot == tc_decode_wx of its expert on its row alone. shared: one
// more expert stacked last, taken by every row (the model's shared expert in the tiles).
void check_experts(Tally& tally, int bits, int n_rows, int k, int n_experts, std::mt19937_64& rng,
                   const Stream& s, int tile_rows, bool shared = false, int64_t cols = 256,
                   const std::string& note = "") {
  const int64_t rows = 1024;
  const int stack = n_experts + (shared ? 1 : 0);
  TcWeight t = make_weight(rows, cols, bits, 64, stack, rng);
  std::vector<int32_t> topk(n_rows * k);
  for (int r = 0; r < n_rows; ++r) {
    std::vector<int32_t> ids(n_experts);
    for (int e = 0; e < n_experts; ++e) ids[e] = e;
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int j = 0; j < k; ++j) topk[r * k + j] = ids[j];
  }
  const int routed = n_rows * k, total = routed + (shared ? n_rows : 0),
            max_tiles = max_expert_tiles(n_rows, k + (shared ? 1 : 0), stack, tile_rows);
  const DeviceBuffer d_topk = upload(topk);
  DeviceBuffer tiles(max_tiles * sizeof(ExpertWindow)), row_ids(total * 4), slot_of(routed * 4),
      group(expert_tiles_scratch_bytes(stack));
  moe_expert_tiles(d_topk.as<int32_t>(), n_rows, k, stack, tiles.as<ExpertWindow>(), max_tiles,
                   row_ids.as<int32_t>(), slot_of.as<int32_t>(), group.data(), s.get(), tile_rows,
                   shared ? n_experts : -1);
  s.synchronize();
  const auto h_tiles = download<ExpertWindow>(tiles, max_tiles);
  const auto h_rows = download<int32_t>(row_ids, total);
  const std::string name =
      "decode tc expert tiles (" + std::to_string(n_rows) + " rows, top-" + std::to_string(k) + " of " +
      std::to_string(n_experts) + (shared ? " + shared" : "") + (bits == 0 ? ", bf16" : ", affine") + ", " +
      std::to_string(cols) + " columns, " + std::to_string(tc_decode_column_slices(rows, cols)) + " slices" +
      note + ")" + layout_tag();
  const std::vector<float> xh = random_normal(std::max(n_rows, total) * cols, 1.0f, rng);
  const DeviceBuffer x = upload(xh);
  DeviceBuffer y(total * rows * sizeof(float));
  bool same = true;
  for (int pass = 0; pass < 2; ++pass) {  // 0: x rows through row_ids; 1: x rows in slot order
    y.fill_bytes(0xFF);
    const int n_x = pass == 0 ? n_rows : total;
    DeviceBuffer scratch(tc_decode_scratch_bytes(cols, n_x));
    tc_decode_experts(t.w, tiles.as<ExpertWindow>(), max_tiles, std::min(n_rows, tile_rows),
                      pass == 0 ? row_ids.as<int32_t>() : nullptr, x.as<float>(), cols, n_x, y.as<float>(),
                      rows, scratch.data(), scratch.bytes(), s.get());
    s.synchronize();
    const auto hy = download<float>(y, total * rows);
    for (int slot = 0; slot < total && same; slot += 2) {
      int e = -1;
      for (int i = 0; i < max_tiles && e < 0; ++i)
        if (h_tiles[i].count > 0 && slot >= h_tiles[i].first && slot < h_tiles[i].first + h_tiles[i].count)
          e = h_tiles[i].expert;
      if (e < 0) {
        same = false;
        break;
      }
      TiledWeight one = t.w;
      one.n_experts = 1;
      if (bits == 0) {
        one.dense = t.w.dense + e * rows * cols;
      } else {
        const int64_t wpr = cols / 32 * bits, gpr = cols / 64;  // group 64
        one.affine.codes += e * rows * wpr;
        one.affine.scales += e * rows * gpr;
        one.affine.biases += e * rows * gpr;
        one.affine.n_experts = 1;
      }
      const std::vector<float> ref = run_decode(one, x, cols, pass == 0 ? h_rows[slot] : slot, 1, s);
      same = std::memcmp(ref.data(), &hy[slot * rows], rows * sizeof(float)) == 0;
    }
  }
  // The shared expert's slots follow the routed ones in row order, where the model's combine reads them.
  for (int r = 0; shared && r < n_rows && same; ++r) same = h_rows[routed + r] == r;
  tally.expect(same,
               name + ": every slot == its expert on its row alone (gate|up via row_ids, down in order)");
}

// moe_expert_tiles against a host grouping (experts ascending, each expert's pairs in pair order; the shared
// expert's slots after the routed ones; tiles of up to tile_rows; unused tiles zero; slot_of -1 for a bad
// id): tiles, row_ids and slot_of equal, for small routings (one block) and large ones (three kernels). Bad
// ids: one past the stack, -1 and, with a shared expert, the shared expert's own id (no routed expert: it
// must take no slot, where it once took one past the routing's).
void check_grouping(Tally& tally, int n_rows, int k, int n_experts, int tile_rows, bool shared, bool bad_id,
                    std::mt19937_64& rng, const Stream& s) {
  const int routed = n_rows * k, all = routed + (shared ? n_rows : 0), stack = n_experts + (shared ? 1 : 0);
  std::vector<int32_t> topk(routed);
  for (auto& id : topk) id = static_cast<int32_t>(rng() % n_experts);  // repeats within a row too
  if (bad_id) topk[routed / 2] = n_experts + (shared ? 1 : 0), topk[routed / 3] = -1;
  if (bad_id && shared) topk[routed / 4] = n_experts;
  const int max_tiles = max_expert_tiles(n_rows, k + (shared ? 1 : 0), stack, tile_rows);
  // Host grouping (a routed id equal to the shared expert's is a bad id).
  auto expert = [&](int i) {
    return i < routed ? (shared && topk[i] == n_experts ? -1 : topk[i]) : n_experts;
  };
  auto row = [&](int i) { return i < routed ? i / k : i - routed; };
  std::vector<ExpertWindow> want_tiles(max_tiles, ExpertWindow{0, 0, 0});
  std::vector<int32_t> want_rows(all, -7), want_slot(routed, -1);
  int slot = 0, tile = 0;
  for (int e = 0; e < stack; ++e) {
    if (shared && e == n_experts) slot = routed;
    const int first = slot;
    for (int i = 0; i < all; ++i)
      if (expert(i) == e) {
        want_rows[slot] = row(i);
        if (i < routed) want_slot[i] = slot;
        ++slot;
      }
    for (int j = first; j < slot; j += tile_rows) want_tiles[tile++] = {e, j, std::min(tile_rows, slot - j)};
  }
  const DeviceBuffer d_topk = upload(topk);
  DeviceBuffer tiles(max_tiles * sizeof(ExpertWindow)), row_ids(all * 4), slot_of(routed * 4),
      group(expert_tiles_scratch_bytes(stack));
  row_ids.fill_bytes(0xFF);
  moe_expert_tiles(d_topk.as<int32_t>(), n_rows, k, stack, tiles.as<ExpertWindow>(), max_tiles,
                   row_ids.as<int32_t>(), slot_of.as<int32_t>(), group.data(), s.get(), tile_rows,
                   shared ? n_experts : -1);
  s.synchronize();
  const auto got_tiles = download<ExpertWindow>(tiles, max_tiles);
  const auto got_rows = download<int32_t>(row_ids, all);
  const auto got_slot = download<int32_t>(slot_of, routed);
  bool same = got_slot == want_slot;
  for (int i = 0; i < max_tiles && same; ++i)
    same = got_tiles[i].expert == want_tiles[i].expert && got_tiles[i].first == want_tiles[i].first &&
           got_tiles[i].count == want_tiles[i].count;
  for (int i = 0; i < all && same; ++i) same = want_rows[i] == -7 || got_rows[i] == want_rows[i];
  // One row in tiles of one slot with the shared expert: the gate|up launch that groups the routing itself
  // (one_row_tile) against the same host grouping (its tiles, row_ids and slot_of; its products are checked
  // by cuda_model_check's "tensor expert swiglu").
  if (n_rows == 1 && tile_rows == 1 && shared && k + 1 <= 32) {
    const int64_t half = 64, cols = 256;  // 1 slice, blocks of 64 outputs: half a whole block
    const TcWeight w = make_weight(2 * half, cols, 4, 32, stack, rng);
    const DeviceBuffer x = upload(random_normal(cols, 1.0f, rng));
    DeviceBuffer rt(max_tiles * sizeof(ExpertWindow)), rr(all * 4), rs(routed * 4), h(all * half * 4),
        scratch(tc_decode_scratch_bytes(cols, 1));
    rt.fill_bytes(0xFF), rr.fill_bytes(0xFF), rs.fill_bytes(0xFF);
    const bool fold = tc_decode_fold_swiglu_on(), group_fold = tc_decode_fold_grouping_on();
    tc_decode_fold_swiglu(true), tc_decode_fold_grouping(true);
    const bool took = tc_decode_experts_swiglu_routed(
        w.w, d_topk.as<int32_t>(), k, n_experts, rt.as<ExpertWindow>(), max_tiles, rr.as<int32_t>(),
        rs.as<int32_t>(), x.as<float>(), h.as<float>(), half, scratch.data(), scratch.bytes(), s.get());
    tc_decode_fold_swiglu(fold), tc_decode_fold_grouping(group_fold);
    s.synchronize();
    const auto r_tiles = download<ExpertWindow>(rt, max_tiles);
    const auto r_rows = download<int32_t>(rr, all);
    bool r_same = took && download<int32_t>(rs, routed) == want_slot;
    for (int i = 0; i < max_tiles && r_same; ++i)
      r_same = r_tiles[i].expert == want_tiles[i].expert && r_tiles[i].first == want_tiles[i].first &&
               r_tiles[i].count == want_tiles[i].count;
    for (int i = 0; i < all && r_same; ++i) r_same = want_rows[i] == -7 || r_rows[i] == want_rows[i];
    tally.expect(r_same, std::string("tc_decode_experts_swiglu_routed's grouping (one row, top-") +
                             std::to_string(k) + " of " + std::to_string(n_experts) + " + shared" +
                             (bad_id ? ", three bad ids (one the shared expert's)" : "") +
                             (took ? "" : ", NOT TAKEN") + ") == the host grouping");
  }
  tally.expect(same,
               "moe_expert_tiles (" + std::to_string(all) + " pairs, " + std::to_string(stack) + " experts" +
                   (shared ? " with the shared one" : "") + ", tiles of " + std::to_string(tile_rows) +
                   (bad_id ? (shared ? ", three bad ids (one the shared expert's)" : ", two bad ids") : "") +
                   ", " + (all <= 4096 && stack <= 1024 ? "one block" : "three kernels") +
                   ") == the host grouping");
}

// The small-window kernel (tc_gemv.cu, windows of up to 8 rows) against the general kernel, bit for bit, on
// 2560 columns (20 stages: its ring wraps several times) at every count 1..8, for six formats, with the
// shape's 4 column slices (5 stages each) and forced to 1 and 2.
void check_small_windows(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  const int64_t rows = 200, cols = 2560;
  const int formats[][2] = {{4, 32}, {6, 64}, {3, 64}, {8, 128}, {2, 32}, {5, 32}};
  for (const auto& f : formats) {
    const TcWeight t = make_weight(rows, cols, f[0], f[1], 1, rng);
    const DeviceBuffer x = upload(random_normal(16 * cols, 1.0f, rng));
    int first_bad = -1;
    // Steps 1..8: the shape's slices (4); 9..16: forced 1; 17..24: forced 2; each at 1..8 rows.
    for (int step = 1; step <= 24 && first_bad < 0; ++step) {
      const int c = (step - 1) % 8 + 1;
      tc_decode_force_column_slices(step <= 8 ? 0 : step <= 16 ? 1 : 2);
      tc_decode_small_windows(false);
      const std::vector<float> general = run_decode(t.w, x, cols, c % 5, c, s);
      tc_decode_small_windows(true);
      const std::vector<float> small = run_decode(t.w, x, cols, c % 5, c, s);  // one row: split in the block
      tc_decode_one_row_in_block(false);
      const std::vector<float> ring = run_decode(t.w, x, cols, c % 5, c, s);  // one row: planes in the ring
      tc_decode_one_row_in_block(true);
      const size_t bytes = general.size() * sizeof(float);
      if (std::memcmp(general.data(), small.data(), bytes) != 0 ||
          std::memcmp(general.data(), ring.data(), bytes))
        first_bad = step;
    }
    tc_decode_force_column_slices(0);
    tally.expect(first_bad < 0,
                 format_name(f[0], f[1]) +
                     ": small-window kernel (ring; one row also split in the block) == "
                     "general kernel, bit for bit, 1..8 rows x 2560 columns, 4, 1 and 2 column slices" +
                     (first_bad < 0 ? "" : " (first mismatch at step " + std::to_string(first_bad) + ")"));
  }
}

// The fixtures' small shapes (a few outputs, 32-512 columns), dense and 4-bit, at 1, 3 and 16 rows, within
// the bound; and three products back to back on one scratch without a sync == each run alone (the model's
// sequence: each split overwrites the planes the previous product read).
void check_small_shapes(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  const int64_t shapes[][2] = {{20, 512}, {137, 128}, {320, 128}, {128, 32}, {200, 128}, {64, 64}, {4, 128}};
  bool ok = true, repeatable = true;
  std::string first_bad, first_differing;
  for (int bits : {0, 4})
    for (const auto& sh : shapes)
      for (int n : {1, 3, 16}) {
        const int64_t rows = sh[0], cols = sh[1];
        TcWeight t = make_weight(rows, cols, bits, 32, 1, rng);
        const std::vector<float> xh = random_normal(n * cols, 1.0f, rng);
        const DeviceBuffer x = upload(xh);
        const std::vector<float> y = run_decode(t.w, x, cols, 0, n, s);
        // The same launch again: the same bits (a race in a kernel would show here first).
        const std::vector<float> again = run_decode(t.w, x, cols, 0, n, s);
        if (std::memcmp(y.data(), again.data(), y.size() * sizeof(float)) != 0 && repeatable) {
          repeatable = false;
          first_differing = std::to_string(bits) + "-bit " + std::to_string(rows) + "x" +
                            std::to_string(cols) + " n " + std::to_string(n);
        }
        for (int r = 0; r < n; ++r)
          for (int64_t o = 0; o < rows; ++o) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < cols; ++i) {
              ref += t.value(0, o, i, 1.0) * xh[r * cols + i];
              mag += t.magnitude(0, o, i) * std::fabs(xh[r * cols + i]);
            }
            const double err = std::fabs(y[r * rows + o] - ref), bound = tc_bound_factor(cols) * mag + 1e-30;
            if (!(err <= bound) && ok) {
              ok = false;
              first_bad = std::to_string(bits) + "-bit " + std::to_string(rows) + "x" + std::to_string(cols) +
                          " n " + std::to_string(n) + " row " + std::to_string(r) + " out " +
                          std::to_string(o) + ": got " + std::to_string(y[r * rows + o]) + ", float64 " +
                          std::to_string(ref) + ", err/bound " + std::to_string(err / bound);
            }
          }
      }
  tally.expect(ok, "decode tc small shapes (dense and 4-bit, 4-320 outputs, 32-512 columns) within bound" +
                       layout_tag() + (ok ? "" : " (first bad: " + first_bad + ")"));
  tally.expect(repeatable, "decode tc small shapes: the same launch twice gives the same bits" +
                               layout_tag() +
                               (repeatable ? "" : " (first differing: " + first_differing + ")"));
  TcWeight a = make_weight(200, 128, 0, 0, 1, rng), b = make_weight(1030, 512, 4, 32, 1, rng),
           c = make_weight(320, 64, 6, 64, 1, rng);
  const int n = 13;
  const DeviceBuffer xa = upload(random_normal(n * 128, 1.0f, rng)),
                     xb = upload(random_normal(n * 512, 1.0f, rng)),
                     xc = upload(random_normal(n * 64, 1.0f, rng));
  DeviceBuffer scratch(tc_decode_scratch_bytes(512, n)), ya(n * 200 * 4), yb(n * 1030 * 4), yc(n * 320 * 4);
  tc_decode_wx(a.w, xa.as<float>(), 128, n, ya.as<float>(), 200, scratch.data(), scratch.bytes(), s.get());
  tc_decode_wx(b.w, xb.as<float>(), 512, n, yb.as<float>(), 1030, scratch.data(), scratch.bytes(), s.get());
  tc_decode_wx(c.w, xc.as<float>(), 64, n, yc.as<float>(), 320, scratch.data(), scratch.bytes(), s.get());
  s.synchronize();
  const bool same = download<float>(ya, n * 200) == run_decode(a.w, xa, 128, 0, n, s) &&
                    download<float>(yb, n * 1030) == run_decode(b.w, xb, 512, 0, n, s) &&
                    download<float>(yc, n * 320) == run_decode(c.w, xc, 64, 0, n, s);
  tally.expect(same, "decode tc: three products back to back on one scratch == each alone" + layout_tag());
}

// The two layouts are two arithmetics (the switch is not a no-op): on 1030 x 2560 4-bit (80 units a row), at
// one and 16 rows, most outputs differ in their last bits; both stay within the bound (checked above).
void check_layouts_differ(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  const TcPlanes shipped = tc_decode_planes();
  const TcWeight t = make_weight(1030, 2560, 4, 32, 1, rng);
  const DeviceBuffer x = upload(random_normal(16 * 2560, 1.0f, rng));
  size_t equal = 0, total = 0;
  for (int n : {1, 16}) {
    tc_decode_set_planes(TcPlanes::Chained);
    const std::vector<float> chained = run_decode(t.w, x, 2560, 0, n, s);
    tc_decode_set_planes(TcPlanes::Columns);
    const std::vector<float> columns = run_decode(t.w, x, 2560, 0, n, s);
    for (size_t i = 0; i < chained.size(); ++i) equal += std::memcmp(&chained[i], &columns[i], 4) == 0;
    total += chained.size();
  }
  tc_decode_set_planes(shipped);
  tally.expect(equal < total, "decode tc: chained and columns layouts give different bits (" +
                                  std::to_string(equal) + " of " + std::to_string(total) + " outputs equal)");
}

template <class F>
bool refused_naming(F&& f, const char* word) {
  try {
    f();
  } catch (const ArgumentError& e) {
    return std::string(e.what()).find(word) != std::string::npos;
  }
  return false;
}

}  // namespace

// The expert grouping (moe_expert_tiles, and at one row the gate|up launch's own): its own section
// ("decode-tc grouping"), so a short call can run it alone (--only grouping).
void run_tc_grouping_checks(Tally& tally) {
  std::mt19937_64 rng(92);
  Stream s;
  for (bool shared : {false, true}) {
    check_grouping(tally, 1, 10, 512, 1, shared, false, rng, s);
    check_grouping(tally, 1, 10, 512, 1, shared, true, rng, s);
    check_grouping(tally, 64, 10, 512, 8, shared, false, rng, s);
    check_grouping(tally, 37, 10, 512, 8, shared, true, rng, s);
    check_grouping(tally, 100, 40, 100, 64, shared, false, rng, s);  // past 1024 pairs: chunks
    check_grouping(tally, 500, 10, 512, 64, shared, true, rng, s);   // past 4096 pairs: three kernels
    check_grouping(tally, 30, 4, 2000, 8, shared, false, rng, s);    // past 1024 experts: three kernels
  }
}

void run_tc_decode_checks(Tally& tally) {
  std::mt19937_64 rng(91);
  Stream s;
  // The arithmetic checks under both layouts of the planes (the shipped one first; with
  // DS_TC_CHECK_ONE_LAYOUT set, the shipped one alone: a short device call), then the grouping and the
  // arguments once.
  const TcPlanes shipped = tc_decode_planes();
  const bool one_layout = std::getenv("DS_TC_CHECK_ONE_LAYOUT") != nullptr;
  for (const TcPlanes planes :
       {shipped, shipped == TcPlanes::Columns ? TcPlanes::Chained : TcPlanes::Columns}) {
    if (one_layout && planes != shipped) continue;
    tc_decode_set_planes(planes);
    double worst = 0, weakest = 1e300;
    int prompt_equal = 0, prompt_total = 0;
    for (int bits : {2, 3, 4, 5, 6, 8})
      for (int group : {32, 64, 128})
        check_format(tally, bits, group, rng, s, worst, weakest, prompt_equal, prompt_total);
    check_format(tally, 0, 0, rng, s, worst, weakest, prompt_equal, prompt_total);
    // Four slices of 5, 5, 5 and 6 stages (82 units: the last stage partial), and two of 5 stages.
    for (int bits : {4, 6, 0})
      check_format(tally, bits, bits == 6 ? 64 : 32, rng, s, worst, weakest, prompt_equal, prompt_total,
                   {300, 2624});
    check_format(tally, 4, 32, rng, s, worst, weakest, prompt_equal, prompt_total, {5000, 1280});
    std::printf(
        "decode tc products%s: worst err/bound %.4f, weakest negative control %.1fx the bound; decode rows "
        "with the prompt products' bits: %d of %d outputs\n",
        layout_tag().c_str(), worst, weakest, prompt_equal, prompt_total);
    check_small_shapes(tally, rng, s);
    check_experts(tally, 4, 90, 3, 6, rng, s, kDecodeTileRows);
    check_experts(tally, 0, 40, 2, 5, rng, s, kDecodeTileRows);
    check_experts(tally, 6, 130, 2, 3, rng, s, kDecodeTileRows);  // about 87 rows an expert: two tiles each
    check_experts(tally, 4, 90, 3, 6, rng, s, kDecodeExpertTileRows);  // the model's decode tiles of 8
    check_experts(tally, 0, 16, 2, 8, rng, s, kDecodeExpertTileRows);
    check_small_windows(tally, rng, s);
    check_one_row_kernels(tally, rng, s);
    // One stream: tiles of one slot (the one-row kernel, or the 1-row small kernel), each == alone.
    check_experts(tally, 4, 1, 10, 16, rng, s, 1);
    // The model's decode tiles with the shared expert; 2560 columns: 4 column slices.
    check_experts(tally, 4, 1, 10, 16, rng, s, 1, true, 2560);
    for (int variant : {30, 62}) {  // the one-row kernel's launch modes (tcmid12) on tiles of one slot
      setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(variant).c_str(), 1);
      check_experts(tally, 4, 1, 10, 16, rng, s, 1, true, 2560, ", row variant " + std::to_string(variant));
      check_experts(tally, 6, 1, 10, 16, rng, s, 1, false, 2560, ", row variant " + std::to_string(variant));
      unsetenv("DS_CUDA_TC_ROW_VARIANT");
    }
    check_experts(tally, 4, 13, 10, 24, rng, s, kDecodeExpertTileRows, true, 2560);
    check_experts(tally, 0, 9, 3, 8, rng, s, kDecodeExpertTileRows, true);
    check_experts(tally, 6, 3, 4, 8, rng, s, 2);
    check_experts(tally, 4, 7, 4, 8, rng, s, 4);
  }
  tc_decode_set_planes(shipped);
  check_layouts_differ(tally, rng, s);

  // Bad shapes and arguments, refused by name.
  std::vector<float> xh(64, 1.0f);
  const DeviceBuffer x = upload(xh);
  DeviceBuffer y(1 << 20), scratch(1 << 20);
  // One row of `w` with these leading dimensions and scratch bytes: each case below spoils one of them.
  auto refuses = [&](const TiledWeight& w, int64_t ldx, int64_t ldy, size_t scratch_bytes,
                     const char* names) {
    return refused_naming(
        [&] {
          tc_decode_wx(w, x.as<float>(), ldx, 1, y.as<float>(), ldy, scratch.data(), scratch_bytes, s.get());
        },
        names);
  };
  TcWeight stacked = make_weight(64, 64, 4, 32, 2, rng);
  tally.expect(refuses(stacked.w, 64, 64, scratch.bytes(), "n_experts"),
               "tc_decode_wx refuses stacked experts naming n_experts");
  TcWeight ok = make_weight(1024, 64, 4, 32, 1, rng);
  TiledWeight seven = ok.w;
  seven.affine.bits = 7;
  tally.expect(refuses(seven, 64, 1024, scratch.bytes(), "bits"),
               "tc_decode_wx refuses 7-bit codes naming the bits");
  TiledWeight odd = ok.w;
  odd.cols = 48;
  tally.expect(refuses(odd, 64, 1024, scratch.bytes(), "cols"),
               "tc_decode_wx refuses cols not a multiple of 32 naming the cols");
  tally.expect(refuses(ok.w, 6, 1024, scratch.bytes(), "ldx"),
               "tc_decode_wx refuses an ldx not a multiple of 4 naming it");
  tally.expect(refuses(ok.w, 64, 1024, 16, "scratch"), "tc_decode_wx refuses too small a scratch naming it");
  tally.expect(refuses(ok.w, 64, 100, scratch.bytes(), "ldy"),
               "tc_decode_wx refuses ldy under the rows naming it");
  tally.expect(refused_naming(
                   [&] {
                     tc_decode_experts(ok.w, nullptr, 4, 80, nullptr, x.as<float>(), 64, 1, y.as<float>(),
                                       1024, scratch.data(), scratch.bytes(), s.get());
                   },
                   "tile_rows"),
               "tc_decode_experts refuses tile_rows over 64 naming it");
}

}  // namespace ds::cuda::wxcheck
