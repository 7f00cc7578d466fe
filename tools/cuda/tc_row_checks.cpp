// The one-row tensor decode kernel (tc_row.cu, tc_row_par.cu) against the small kernel it replaces, bit for
// bit (split from tc_decode_checks.cpp; run under each planes layout from run_tc_decode_checks).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "backend/cuda/stream.h"
#include "backend/cuda/tc_decode.h"
#include "checks.h"
#include "host_reference.h"
#include "tc_decode_check_parts.h"
#include "tc_weight.h"

namespace ds::cuda::wxcheck {

namespace {

// The one-row kernel (tc_row.cu) against the kernel it replaces (the small kernel, one row split in the
// block), bit for bit, for every bits x group on shapes with 1, 2 and 4 column slices (the shape's rule, and
// forced 1 and 2 on 2560 columns), a partial last stage (2592 columns: 81 units, 4- and 8-bit: the others'
// rows are not whole 16-byte chunks there and keep the small kernel) and partial output blocks, at rows 0
// and 5 of x. Run under each layout.
// The launch variants compared (tc_decode_row_variant's bits: 1 one output block a block, 2 three blocks an
// SM, 4 the lean stage copy; 8 only moves expert tiles between the 4- and 3-block kernels; 16 kLean2, 32
// kPair with kLean2: tc_row.cu's launch modes; 64, 128, 192 the units spread over a block's warps,
// tc_row_par.cu, chained single matrices only: under the columns layout those variants run bits 0-5's).
constexpr int kRowVariants[] = {0, 1, 2, 3, 4, 5, 6, 7, 22, 23, 54, 55, 94, 158, 222};
void check_row_kernel(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  const std::pair<int64_t, int64_t> shapes[] = {
      {1030, 384}, {300, 2560}, {5000, 1280}, {9000, 640}, {200, 2592}};
  const bool shipped = tc_decode_row_kernel_on();
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) {
      int compared = 0;
      std::string bad;
      for (const auto& [rows, cols] : shapes) {
        if ((cols / 32 * bits) % 4 != 0 || cols % group != 0) continue;  // the small kernel keeps these
        const TcWeight t = make_weight(rows, cols, bits, group, 1, rng);
        const DeviceBuffer x = upload(random_normal(8 * cols, 1.0f, rng));
        for (int forced : {0, 1, 2}) {
          if (forced != 0 && cols != 2560) continue;
          tc_decode_force_column_slices(forced);
          for (int row : {0, 5}) {
            tc_decode_row_kernel(false);
            const std::vector<float> small = run_decode(t.w, x, cols, row, 1, s);
            tc_decode_row_kernel(true);
            for (int variant : kRowVariants) {  // DS_CUDA_TC_ROW_VARIANT: launch variants
              setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(variant).c_str(), 1);
              const std::vector<float> one = run_decode(t.w, x, cols, row, 1, s);
              ++compared;
              if (std::memcmp(small.data(), one.data(), small.size() * sizeof(float)) != 0 && bad.empty())
                bad = " (first mismatch: " + std::to_string(rows) + "x" + std::to_string(cols) + ", " +
                      std::to_string(tc_decode_column_slices(rows, cols)) + " slices, row " +
                      std::to_string(row) + ", variant " + std::to_string(variant) + ")";
            }
            unsetenv("DS_CUDA_TC_ROW_VARIANT");
          }
        }
        tc_decode_force_column_slices(0);
      }
      tally.expect(bad.empty() && compared > 0,
                   format_name(bits, group) + ": one-row kernel == small kernel at one row, bit for bit, " +
                       std::to_string(compared) + " launches (1, 2 and 4 column slices, " +
                       std::to_string(std::size(kRowVariants)) + " launch variants)" + bad);
    }
  tc_decode_row_kernel(shipped);
}

// Negative control of the units-over-warps kernel (tc_row_par.cu, variants 64-255): its output on 300 x
// 2560 (4 column slices by the shape's rule) differs, bit for bit, from the small kernel's with the slices
// forced to 1 and 2 (other roundings), so the memcmp above sees its rounding; run under each layout (the
// columns layout runs bits 0-5's kernel there, which must differ too).
void check_row_par_negative(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  const bool shipped = tc_decode_row_kernel_on();
  const TcWeight t = make_weight(300, 2560, 4, 32, 1, rng);
  const DeviceBuffer x = upload(random_normal(8 * 2560, 1.0f, rng));
  tc_decode_row_kernel(true);
  int differ = 0, total = 0;
  for (int forced : {1, 2}) {
    tc_decode_force_column_slices(forced);
    tc_decode_row_kernel(false);
    const std::vector<float> other = run_decode(t.w, x, 2560, 5, 1, s);
    tc_decode_row_kernel(true);
    tc_decode_force_column_slices(0);
    for (int variant : {94, 158, 222}) {
      setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(variant).c_str(), 1);
      const std::vector<float> one = run_decode(t.w, x, 2560, 5, 1, s);
      for (size_t i = 0; i < one.size(); ++i) differ += std::memcmp(&one[i], &other[i], sizeof(float)) != 0;
      total += static_cast<int>(one.size());
    }
    unsetenv("DS_CUDA_TC_ROW_VARIANT");
  }
  tc_decode_row_kernel(shipped);
  tally.expect(differ > total / 4,
               "negative control: one-row kernel variants 94/158/222 on 300x2560 (4 slices) "
               "differ from the small kernel forced to 1 and 2 slices (" +
                   std::to_string(differ) + " of " + std::to_string(total) + " floats)");
}

// The one-row kernel's persistent blocks taking several output blocks each (check_row_kernel's shapes have
// at most 157 output blocks, fewer than the 396-660 resident at once, so each block there runs one task):
// 100000 x 128 (1 slice, 1563 output blocks: the ring runs on into the next task's stages) and 24000 x 640
// forced to 2 and 4 slices (750 and 1500 output blocks: the merge area's parity alternates), at row 5, the
// persistent variants 0, 2, 4 and 6 (the lean stage copy), 20 and 22 (kLean2), 52 and 54 (kPair) == the small
// kernel, bit for bit.
void check_row_kernel_persistent(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  const bool shipped = tc_decode_row_kernel_on();
  struct Case {
    int bits, group;
    int64_t rows, cols;
    int forced;
  };
  const Case cases[] = {{4, 32, 100000, 128, 0}, {6, 64, 100000, 128, 0}, {3, 128, 100000, 128, 0},
                        {4, 32, 24000, 640, 2},  {4, 32, 24000, 640, 4},  {8, 128, 24000, 640, 4}};
  for (const Case& c : cases) {
    const TcWeight t = make_weight(c.rows, c.cols, c.bits, c.group, 1, rng);
    const DeviceBuffer x = upload(random_normal(8 * c.cols, 1.0f, rng));
    tc_decode_force_column_slices(c.forced);
    const int slices = tc_decode_column_slices(c.rows, c.cols);
    tc_decode_row_kernel(false);
    const std::vector<float> small = run_decode(t.w, x, c.cols, 5, 1, s);
    tc_decode_row_kernel(true);
    bool same = true;
    for (int variant : {0, 2, 4, 6, 20, 22, 52, 54}) {
      setenv("DS_CUDA_TC_ROW_VARIANT", std::to_string(variant).c_str(), 1);
      const std::vector<float> one = run_decode(t.w, x, c.cols, 5, 1, s);
      same = same && std::memcmp(small.data(), one.data(), small.size() * sizeof(float)) == 0;
    }
    unsetenv("DS_CUDA_TC_ROW_VARIANT");
    tc_decode_force_column_slices(0);
    tally.expect(same, format_name(c.bits, c.group) + ": one-row kernel, persistent blocks over several " +
                           "output blocks (" + std::to_string(c.rows) + "x" + std::to_string(c.cols) + ", " +
                           std::to_string(slices) +
                           " slices, variants 0, 2, 4, 6, 20, 22, 52 and 54) == small kernel, bit for bit");
  }
  tc_decode_row_kernel(shipped);
}

}  // namespace

void check_one_row_kernels(Tally& tally, std::mt19937_64& rng, const Stream& s) {
  check_row_kernel(tally, rng, s);
  check_row_par_negative(tally, rng, s);
  check_row_kernel_persistent(tally, rng, s);
}

}  // namespace ds::cuda::wxcheck
