#pragma once
// What the tensor-core decode checks share (tc_decode_checks.cpp, tc_row_checks.cpp): a product's rows
// downloaded, the layout and format names every check line carries, and the one-row kernel's checks.
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/stream.h"
#include "backend/cuda/tc_decode.h"
#include "checks.h"
#include "tc_weight.h"

namespace ds::cuda::wxcheck {

inline std::vector<float> run_decode(const TiledWeight& w, const DeviceBuffer& x, int64_t ldx, int row0,
                                     int n, const Stream& s) {
  DeviceBuffer y(std::max<int64_t>(n, 1) * w.rows * sizeof(float));
  y.fill_bytes(0xFF);  // NaN: an unwritten output fails every comparison
  DeviceBuffer scratch(tc_decode_scratch_bytes(w.cols, std::max(n, 1)));
  tc_decode_wx(w, x.as<float>() + row0 * ldx, ldx, n, y.as<float>(), w.rows, scratch.data(), scratch.bytes(),
               s.get());
  s.synchronize();
  return download<float>(y, static_cast<size_t>(n) * w.rows);
}

// The planes' layout the checks run under (tc_decode_set_planes), named in every check.
inline std::string layout_tag() {
  return std::string(" [") + tc_planes_name(tc_decode_planes()) + "]";
}

inline std::string format_name(int bits, int group) {
  return (bits == 0 ? "decode tc dense bf16"
                    : "decode tc affine " + std::to_string(bits) + "-bit g" + std::to_string(group)) +
         layout_tag();
}

// The one-row kernel (tc_row.cu, tc_row_par.cu) against the small kernel, bit for bit: every format and
// launch variant, the units-over-warps kernel's negative control, persistent blocks (tc_row_checks.cpp).
void check_one_row_kernels(Tally& tally, std::mt19937_64& rng, const Stream& s);

}  // namespace ds::cuda::wxcheck
