// The greedy pick (glue_kernels.h argmax_rows): the split argmax (a block per slice, then a warp per row) ==
// the one-block kernel == a host reference, on random logits with planted ties, equal maxima in different
// slices, NaN, infinities and signed zeros, at several vocabulary sizes and row counts.
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/glue_kernels.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

// The kernels' rule on the host: a value enters only by `>`, so NaN and -inf never do; the first of equals
// stays; nothing entered: 0.
int32_t host_argmax(const float* row, int64_t V) {
  float best = -std::numeric_limits<float>::infinity();
  int64_t at = -1;
  for (int64_t i = 0; i < V; ++i)
    if (row[i] > best) best = row[i], at = i;
  return static_cast<int32_t>(at < 0 ? 0 : at);
}

// Row r of kind r % 10, each from its own generator.
void fill_row(float* row, int64_t V, int r, uint64_t seed) {
  std::mt19937_64 g(seed * 1000003 + static_cast<uint64_t>(r));
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::uniform_int_distribution<int64_t> any(0, V - 1);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t S = kArgmaxSlice;
  for (int64_t i = 0; i < V; ++i) row[i] = normal(g);
  // Positions in different slices where they exist (else wherever any() lands).
  auto in_slice = [&](int64_t slice) {
    const int64_t n = (V + S - 1) / S;
    const int64_t s = slice % n, lo = s * S, hi = std::min(V, lo + S);
    return lo + static_cast<int64_t>(g() % static_cast<uint64_t>(hi - lo));
  };
  switch (r % 10) {
    case 0:  // the largest value planted in three slices and twice in one
      for (int64_t s : {int64_t{7}, int64_t{3}, int64_t{90}, int64_t{3}}) row[in_slice(s)] = 40.0f;
      break;
    case 1:  // integers in [-8, 8]: the maximum repeated all over the row
      for (int64_t i = 0; i < V; ++i) row[i] = std::round(std::fmin(std::fmax(row[i], -8.0f), 8.0f));
      break;
    case 2:  // NaN sprinkled, one at index 0, and a planted maximum with a NaN before it
      for (int64_t k = 0; k < V / 50 + 1; ++k) row[any(g)] = nan;
      row[0] = nan;
      {
        const int64_t at = in_slice(5);
        row[at] = 50.0f;
        if (at > 0) row[at - 1] = nan;
        row[in_slice(11)] = 50.0f;
      }
      break;
    case 3:  // all -inf: 0
      for (int64_t i = 0; i < V; ++i) row[i] = -inf;
      break;
    case 4:  // all NaN: 0
      for (int64_t i = 0; i < V; ++i) row[i] = nan;
      break;
    case 5:  // NaN and -inf, the one finite value last
      for (int64_t i = 0; i < V; ++i) row[i] = (i % 3 == 0) ? nan : -inf;
      row[V - 1] = -1e30f;
      break;
    case 6:  // the largest value is zero, -0 and +0 in different slices (equal: the lower index)
      for (int64_t i = 0; i < V; ++i) row[i] = -std::fabs(row[i]) - 1.0f;
      row[in_slice(9)] = 0.0f;
      row[in_slice(4)] = -0.0f;
      row[in_slice(13)] = 0.0f;
      break;
    case 7:  // +inf twice, in different slices, and a NaN
      row[in_slice(20)] = inf;
      row[in_slice(2)] = inf;
      row[in_slice(1)] = nan;
      break;
    case 8:  // the maximum at the last index and again at index 0
      row[V - 1] = 30.0f;
      row[0] = 30.0f;
      break;
    default:  // the maximum at the last index alone, the first slice's largest just below it
      row[V - 1] = 30.0f;
      row[in_slice(0)] = std::nextafter(30.0f, 0.0f);
      break;
  }
}

}  // namespace

void run_argmax_checks(Tally& tally) {
  for (const int64_t V :
       {int64_t{248320}, int64_t{151936}, int64_t{2048}, int64_t{2049}, int64_t{1000}, int64_t{1}}) {
    for (const int rows : {1, 3, 8, 33}) {
      std::vector<float> logits(static_cast<size_t>(rows * V));
      for (int r = 0; r < rows; ++r) fill_row(logits.data() + r * V, V, r, static_cast<uint64_t>(V));
      std::vector<int32_t> want(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) want[r] = host_argmax(logits.data() + r * V, V);
      DeviceBuffer d(logits.size() * 4), ids(static_cast<size_t>(rows) * 4),
          pv(static_cast<size_t>(rows) * argmax_slices(V) * 4),
          pi(static_cast<size_t>(rows) * argmax_slices(V) * 4);
      d.upload(logits.data(), logits.size() * 4);
      std::vector<int32_t> one(want.size()), split(want.size());
      argmax_rows(d.as<float>(), rows, V, ids.as<int32_t>(), nullptr);
      check(cudaDeviceSynchronize(), "argmax checks: one block");
      ids.download(one.data(), one.size() * 4);
      ids.fill_bytes(0xff);
      argmax_rows(d.as<float>(), rows, V, ids.as<int32_t>(), nullptr, pv.as<float>(), pi.as<int32_t>());
      check(cudaDeviceSynchronize(), "argmax checks: split");
      ids.download(split.data(), split.size() * 4);
      int bad_one = 0, bad_split = 0;
      for (int r = 0; r < rows; ++r) bad_one += one[r] != want[r], bad_split += split[r] != want[r];
      const std::string at = "V " + std::to_string(V) + ", " + std::to_string(rows) + " rows";
      if (bad_one + bad_split > 0)
        std::printf("  argmax %s: %d one-block and %d split ids differ from the host's\n", at.c_str(),
                    bad_one, bad_split);
      tally.expect(bad_one == 0, "argmax: one-block kernel == host reference, " + at);
      tally.expect(bad_split == 0 && split == one, "argmax: split == one-block == host reference, " + at);
    }
  }
  std::printf(
      "  argmax: split == one-block == host reference (ties, NaN, infinities, signed zeros; V 248320, "
      "151936, 2048, 2049, 1000, 1; 1, 3, 8, 33 rows)\n");
}

}  // namespace ds::cuda::modelcheck
