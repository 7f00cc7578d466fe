// The keyed sampler's kernels: penalties in place, the row's argmax, the kept set of the filters by radix
// selection, Gumbel-max over it. Row-parallel passes split a row over blocks and combine their partial bests
// with the same tie rule, so no result depends on the split (docs/backend-cuda.md, "Sampling").
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/sampling/device_sampler.h"
#include "runtime/keyed_noise.h"
#include "runtime/logit_row.h"
#include "runtime/softmax_mass.h"

namespace ds::cuda {
namespace {

constexpr int kThreads = 256;         // row-parallel passes
constexpr int kChunk = 8192;          // tokens per block of a row-parallel pass
constexpr int kSelectThreads = 512;   // one block per row (80 registers a thread: 1,024 do not fit)
constexpr int kIdBits = 19;           // ids below kMaxSampledVocab = 2^19
static_assert((1 << kIdBits) == kMaxSampledVocab);
constexpr int kDigitBits = 11, kDigits = 1 << kDigitBits, kLevels = 5;  // 55 bits cover a 51-bit key
constexpr int kTopShift = kDigitBits * (kLevels - 1);
constexpr uint64_t kNoKey = ~uint64_t{0};  // a bound no key reaches: nothing kept

struct RowState {
  double max_s;    // s of the argmax (filtered rows), -inf otherwise
  uint64_t bound;  // kept: rank keys >= bound (0: every survivor)
};

struct Inputs {
  const PackedRow* rows;
  const TokenCounts::Entry* entries;
  const uint64_t* masks;
  int64_t vocab;
  int parts;
};

__device__ const uint64_t* row_mask(const Inputs& in, const PackedRow& r) {
  return r.mask_begin >= 0 ? in.masks + r.mask_begin : nullptr;
}

// LogitRow's prepared value before penalties (applied in place first): masked or not finite reads -inf.
__device__ float prepared(const float* row, const uint64_t* mask, int32_t id) {
  if (mask != nullptr && !((mask[id >> 6] >> (id & 63)) & 1)) return -INFINITY;
  const float v = row[id];
  return v < INFINITY ? v : -INFINITY;
}

// The ranking (logit descending, then id ascending) as one integer, larger = ahead. -0 and +0 are equal
// logits on the host, so they share a key prefix.
__device__ uint64_t rank_key(float z, int32_t id) {
  uint32_t b = __float_as_uint(z == 0.0f ? 0.0f : z);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (uint64_t{b} << kIdBits) | static_cast<uint64_t>((1 << kIdBits) - 1 - id);
}

__device__ bool survives(float z, const PackedRow& r, double max_s) {
  return z > -INFINITY && static_cast<double>(z) * r.inv_t - max_s >= r.log_min_p;
}

__device__ void offer_z(float& bz, int32_t& bi, float z, int32_t i) {
  if (z > bz || (z == bz && i < bi)) bz = z, bi = i;
}
__device__ void offer_score(double& bs, int32_t& bi, double s, int32_t i) {
  if (s > bs || (s == bs && i < bi)) bs = s, bi = i;
}

// Block-wide best (value descending, id ascending); every thread gets the result.
template <class T, class Offer>
__device__ void block_best(T& v, int32_t& id, Offer offer) {
  __shared__ T sv[32];
  __shared__ int32_t si[32];
  for (int o = 16; o > 0; o >>= 1)
    offer(v, id, __shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, id, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) sv[warp] = v, si[warp] = id;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? sv[lane] : sv[0];
    id = lane < warps ? si[lane] : si[0];
    for (int o = 16; o > 0; o >>= 1)
      offer(v, id, __shfl_down_sync(0xffffffffu, v, o), __shfl_down_sync(0xffffffffu, id, o));
    if (lane == 0) sv[0] = v, si[0] = id;
  }
  __syncthreads();
  v = sv[0], id = si[0];
  __syncthreads();
}

// Penalties in place, as LogitRow::Reader applies them: only to allowed finite logits; a result that is no
// longer finite reads -inf later, as on the host.
__global__ void penalize_kernel(Inputs in, float* logits) {
  const PackedRow& r = in.rows[blockIdx.x];
  if (r.entries_count == 0) return;
  float* row = logits + r.row * in.vocab;
  const uint64_t* mask = row_mask(in, r);
  const Penalties p{r.presence, r.frequency, r.repetition};
  for (int i = threadIdx.x; i < r.entries_count; i += blockDim.x) {
    const TokenCounts::Entry& e = in.entries[r.entries_begin + i];
    const float z = prepared(row, mask, e.id);
    if (z > -INFINITY) row[e.id] = penalize(z, e, p);
  }
}

// Pass A: each block's best prepared logit over its chunk (greedy and filtered rows).
__global__ void max_parts_kernel(Inputs in, const float* logits, float* part_z, int32_t* part_id) {
  const PackedRow& r = in.rows[blockIdx.y];
  if (r.mode == DrawMode::Dense) return;
  const float* row = logits + r.row * in.vocab;
  const uint64_t* mask = row_mask(in, r);
  float bz = -INFINITY;
  int32_t bi = INT_MAX;
  const int64_t end = min(in.vocab, int64_t{blockIdx.x + 1} * kChunk);
  for (int64_t i = int64_t{blockIdx.x} * kChunk + threadIdx.x; i < end; i += blockDim.x)
    offer_z(bz, bi, prepared(row, mask, static_cast<int32_t>(i)), static_cast<int32_t>(i));
  block_best(bz, bi, offer_z);
  if (threadIdx.x == 0) {
    part_z[blockIdx.y * in.parts + blockIdx.x] = bz;
    part_id[blockIdx.y * in.parts + blockIdx.x] = bi;
  }
}

// Radix selection over the rank keys of the row's survivors at or above `floor`, by count (top-k: the
// target-th key) or by integer mass (top-p: the first key where the mass from the top reaches the target;
// with `fraction` < 1 the target is ceil_fraction(fraction, total mass), found at the first level). Returns
// false when the candidates hold less than the target (top-k: fewer than k survivors).
template <bool kMass>
__device__ bool radix_select(const Inputs& in, const PackedRow& r, const float* row, const uint64_t* mask,
                             double max_s, uint64_t floor, uint64_t target, float fraction, uint64_t& key) {
  __shared__ unsigned long long hist[kDigits];
  __shared__ uint64_t s_target;
  __shared__ int s_digit;
  __shared__ bool s_found;
  uint64_t prefix = 0;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = kTopShift - kDigitBits * level;
    for (int d = threadIdx.x; d < kDigits; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < in.vocab; i += blockDim.x) {
      const auto id = static_cast<int32_t>(i);
      const float z = prepared(row, mask, id);
      if (!survives(z, r, max_s)) continue;
      const uint64_t k = rank_key(z, id);
      if (k < floor || (k >> (shift + kDigitBits)) != prefix) continue;
      const uint64_t w = kMass ? mass_of(static_cast<double>(z) * r.inv_t - max_s) : 1;
      if (w != 0) atomicAdd(&hist[(k >> shift) & (kDigits - 1)], static_cast<unsigned long long>(w));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l sums digits [kDigits - 64 (l + 1), kDigits - 64 l) from the top; one lane holds the target.
      const int lane = threadIdx.x, per = kDigits / 32, top = kDigits - 1 - per * lane;
      uint64_t sum = 0;
      for (int j = 0; j < per; ++j) sum += hist[top - j];
      uint64_t incl = sum;
      for (int o = 1; o < 32; o <<= 1) {
        const uint64_t v = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += v;
      }
      uint64_t want = target;
      if (level == 0 && kMass && fraction < 1.0f)
        want = ceil_fraction(fraction, __shfl_sync(0xffffffffu, incl, 31));
      const uint64_t excl = incl - sum;
      const unsigned hit = __ballot_sync(0xffffffffu, want > excl && want <= incl);
      if (lane == 0) s_found = hit != 0;
      if (hit != 0 && lane == __ffs(hit) - 1) {
        uint64_t before = excl;
        for (int j = 0; j < per; ++j) {
          const uint64_t h = hist[top - j];
          if (before + h >= want) {
            s_digit = top - j;
            s_target = want - before;
            break;
          }
          before += h;
        }
      }
    }
    __syncthreads();
    if (!s_found) return false;
    target = s_target;
    prefix = (prefix << kDigitBits) | static_cast<uint64_t>(s_digit);
    __syncthreads();
  }
  key = prefix;
  return true;
}

// One block per row: the argmax from pass A's parts (greedy rows are done), then for filtered rows the
// bound of the kept set: min-p survivors, their top k, the shortest top-p prefix of those.
__global__ void __launch_bounds__(kSelectThreads) select_kernel(Inputs in, const float* logits, const float* part_z, const int32_t* part_id,
                              RowState* states, int32_t* tokens) {
  const PackedRow& r = in.rows[blockIdx.x];
  RowState& st = states[blockIdx.x];
  if (r.mode == DrawMode::Dense) {
    if (threadIdx.x == 0) st = {-INFINITY, 0};
    return;
  }
  float bz = -INFINITY;
  int32_t bi = INT_MAX;
  for (int p = threadIdx.x; p < in.parts; p += blockDim.x)
    offer_z(bz, bi, part_z[blockIdx.x * in.parts + p], part_id[blockIdx.x * in.parts + p]);
  block_best(bz, bi, offer_z);
  if (r.mode == DrawMode::Greedy || bz == -INFINITY) {
    if (threadIdx.x == 0) {
      tokens[blockIdx.x] = bz == -INFINITY ? kNothingDrawable : bi;
      st = {-INFINITY, kNoKey};
    }
    return;
  }
  const double max_s = static_cast<double>(bz) * r.inv_t;
  const float* row = logits + r.row * in.vocab;
  const uint64_t* mask = row_mask(in, r);
  uint64_t bound = 0, key = 0;
  if (r.top_k > 0 &&
      radix_select<false>(in, r, row, mask, max_s, 0, static_cast<uint64_t>(r.top_k), 1.0f, key))
    bound = key;
  if (r.top_p < 1.0f && radix_select<true>(in, r, row, mask, max_s, bound, 0, r.top_p, key)) bound = key;
  if (threadIdx.x == 0) st = {max_s, bound};
}

// Pass B: each block's best Gumbel score s + g over the kept tokens of its chunk (dense and filtered rows).
__global__ void gumbel_parts_kernel(Inputs in, const float* logits, const RowState* states, double* part_s,
                                    int32_t* part_id) {
  const PackedRow& r = in.rows[blockIdx.y];
  if (r.mode == DrawMode::Greedy) return;
  const RowState st = states[blockIdx.y];
  const float* row = logits + r.row * in.vocab;
  const uint64_t* mask = row_mask(in, r);
  double bs = -INFINITY;
  int32_t bi = INT_MAX;
  const int64_t end = min(in.vocab, int64_t{blockIdx.x + 1} * kChunk);
  for (int64_t i = int64_t{blockIdx.x} * kChunk + threadIdx.x; i < end; i += blockDim.x) {
    const auto id = static_cast<int32_t>(i);
    const float z = prepared(row, mask, id);
    if (!survives(z, r, st.max_s)) continue;
    if (st.bound != 0 && rank_key(z, id) < st.bound) continue;
    offer_score(bs, bi, static_cast<double>(z) * r.inv_t + gumbel_of_bits(token_bits(r.key, id)), id);
  }
  block_best(bs, bi, offer_score);
  if (threadIdx.x == 0) {
    part_s[blockIdx.y * in.parts + blockIdx.x] = bs;
    part_id[blockIdx.y * in.parts + blockIdx.x] = bi;
  }
}

__global__ void finish_kernel(Inputs in, const double* part_s, const int32_t* part_id, int32_t* tokens) {
  const PackedRow& r = in.rows[blockIdx.x];
  if (r.mode == DrawMode::Greedy) return;
  double bs = -INFINITY;
  int32_t bi = INT_MAX;
  for (int p = threadIdx.x; p < in.parts; p += blockDim.x)
    offer_score(bs, bi, part_s[blockIdx.x * in.parts + p], part_id[blockIdx.x * in.parts + p]);
  block_best(bs, bi, offer_score);
  if (threadIdx.x == 0) tokens[blockIdx.x] = bi == INT_MAX ? kNothingDrawable : bi;
}

size_t align256(size_t n) {
  return (n + 255) / 256 * 256;
}

}  // namespace

std::vector<int32_t> DeviceSampler::draw(float* logits, int64_t vocab, const PackedDraws& draws,
                                         cudaStream_t stream) {
  const auto n = static_cast<int>(draws.rows.size());
  if (n == 0) return {};
  if (vocab <= 0 || vocab > kMaxSampledVocab)
    throw ArgumentError("DeviceSampler::draw: vocabulary of " + std::to_string(vocab) + " outside 1.." +
                        std::to_string(kMaxSampledVocab));
  const int parts = static_cast<int>((vocab + kChunk - 1) / kChunk);
  // Inputs: one upload of rows, entries and masks.
  const size_t rows_b = align256(draws.rows.size() * sizeof(PackedRow)),
               entries_b = align256(draws.entries.size() * sizeof(TokenCounts::Entry)),
               masks_b = align256(draws.mask_words.size() * sizeof(uint64_t));
  staging_.resize(rows_b + entries_b + masks_b);
  std::memcpy(staging_.data(), draws.rows.data(), draws.rows.size() * sizeof(PackedRow));
  if (!draws.entries.empty())
    std::memcpy(staging_.data() + rows_b, draws.entries.data(),
                draws.entries.size() * sizeof(TokenCounts::Entry));
  if (!draws.mask_words.empty())
    std::memcpy(staging_.data() + rows_b + entries_b, draws.mask_words.data(),
                draws.mask_words.size() * sizeof(uint64_t));
  if (inputs_.bytes() < staging_.size()) {
    check(cudaStreamSynchronize(stream), "DeviceSampler: grow inputs");
    inputs_ = DeviceBuffer(std::max(staging_.size(), inputs_.bytes() * 2));
  }
  const size_t parts_n = static_cast<size_t>(n) * parts;
  const size_t pz_b = align256(parts_n * 4), pid_b = align256(parts_n * 4), ps_b = align256(parts_n * 8),
               st_b = align256(static_cast<size_t>(n) * sizeof(RowState)),
               tok_b = align256(static_cast<size_t>(n) * 4);
  const size_t scratch_need = pz_b + pid_b + ps_b + pid_b + st_b + tok_b;
  if (scratch_.bytes() < scratch_need) {
    check(cudaStreamSynchronize(stream), "DeviceSampler: grow scratch");
    scratch_ = DeviceBuffer(scratch_need * 2);
  }
  check(cudaMemcpyAsync(inputs_.data(), staging_.data(), staging_.size(), cudaMemcpyHostToDevice, stream),
        "DeviceSampler: upload");
  auto* base = inputs_.as<unsigned char>();
  const Inputs in{reinterpret_cast<const PackedRow*>(base),
                  reinterpret_cast<const TokenCounts::Entry*>(base + rows_b),
                  reinterpret_cast<const uint64_t*>(base + rows_b + entries_b), vocab, parts};
  auto* s = scratch_.as<unsigned char>();
  auto* part_z = reinterpret_cast<float*>(s);
  auto* part_zid = reinterpret_cast<int32_t*>(s + pz_b);
  auto* part_s = reinterpret_cast<double*>(s + pz_b + pid_b);
  auto* part_sid = reinterpret_cast<int32_t*>(s + pz_b + pid_b + ps_b);
  auto* states = reinterpret_cast<RowState*>(s + pz_b + pid_b + ps_b + pid_b);
  auto* tokens = reinterpret_cast<int32_t*>(s + pz_b + pid_b + ps_b + pid_b + st_b);
  if (!draws.entries.empty()) {
    penalize_kernel<<<n, kThreads, 0, stream>>>(in, logits);
    check_launch("DeviceSampler: penalties");
  }
  const dim3 grid(static_cast<unsigned>(parts), static_cast<unsigned>(n));
  max_parts_kernel<<<grid, kThreads, 0, stream>>>(in, logits, part_z, part_zid);
  check_launch("DeviceSampler: max parts");
  select_kernel<<<n, kSelectThreads, 0, stream>>>(in, logits, part_z, part_zid, states, tokens);
  check_launch("DeviceSampler: select");
  gumbel_parts_kernel<<<grid, kThreads, 0, stream>>>(in, logits, states, part_s, part_sid);
  check_launch("DeviceSampler: gumbel parts");
  finish_kernel<<<n, 32, 0, stream>>>(in, part_s, part_sid, tokens);
  check_launch("DeviceSampler: finish");
  std::vector<int32_t> out(static_cast<size_t>(n));
  check(cudaMemcpyAsync(out.data(), tokens, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
        "DeviceSampler: tokens");
  check(cudaStreamSynchronize(stream), "DeviceSampler: draw");
  return out;
}

}  // namespace ds::cuda
