// The kept set of a filtered row (min-p, then top-k, then top-p) as a bound on the rank key, found on a short
// candidate list instead of the whole row (docs/cuda-engine.md, "Sampling"):
// - plan: the row's argmax from pass A (greedy rows are done), then for top-k rows a floor, the k-th largest
//   of pass A's thread maxima (at most the k-th largest logit, as the host's select_top_k floor from block
//   maxima); top-p-alone rows get a histogram of mass by offset bin;
// - gather: top-k rows list the survivors at or above the floor; top-p rows add their masses into the bins;
// - select: top-k rows sort their list and cut it at k, then by mass (top-p); top-p rows find the cut bin;
// - gather and select again for top-p rows: the cut bin's tokens, sorted, cut by the mass still wanted.
// A list that overflows kCandidates (flat rows, plateaus) falls back to the radix selection over the row.
// Counts and masses are integers and lists are sorted before use, so no result depends on the order in which
// blocks append (or on how many rows share the call).
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/sampling/sampler_device.cuh"

namespace ds::cuda::sampling {
namespace {

constexpr int kDigitBits = 11, kDigits = 1 << kDigitBits, kLevels = 5;  // 55 bits cover a 51-bit key
constexpr int kTopShift = kDigitBits * (kLevels - 1);

// Inclusive prefix sum of v over the lanes of a warp (every lane calls it).
__device__ uint64_t warp_inclusive_sum(uint64_t v) {
  const int lane = threadIdx.x & 31;
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

// Warp 0 of a block, all lanes: the bin where the count (or mass) summed from the top bin down reaches the
// want-th unit, want = want_of(total of the bins). `rest` is want less the bins above it. False when the
// bins hold less than want.
template <int kBins, class T, class WantOf>
__device__ bool find_from_top(const T* hist, WantOf want_of, int& digit, uint64_t& rest) {
  const int lane = threadIdx.x & 31, per = kBins / 32, top = kBins - 1 - per * lane;
  uint64_t sum = 0;
  for (int j = 0; j < per; ++j) sum += hist[top - j];
  const uint64_t incl = warp_inclusive_sum(sum);
  const uint64_t want = want_of(__shfl_sync(0xffffffffu, incl, 31));
  const uint64_t excl = incl - sum;
  const unsigned hit = __ballot_sync(0xffffffffu, want > excl && want <= incl);
  if (hit == 0) return false;
  const int owner = __ffs(hit) - 1;
  int d = 0;
  uint64_t r = 0;
  if (lane == owner) {
    uint64_t before = excl;
    for (int j = 0; j < per; ++j) {
      const uint64_t h = hist[top - j];
      if (before + h >= want) {
        d = top - j, r = want - before;
        break;
      }
      before += h;
    }
  }
  digit = __shfl_sync(0xffffffffu, d, owner);
  rest = __shfl_sync(0xffffffffu, r, owner);
  return true;
}

// The k-th largest of n floats (k >= 1; -inf when n < k) by a radix selection on their order, counts in
// shared memory added once per distinct digit of a warp (the top digits of logits fall in a few bins).
__device__ float kth_largest(const float* v, int n, int k) {
  __shared__ unsigned hist[256];
  __shared__ uint32_t s_digit, s_target;
  if (n < k) return -INFINITY;
  uint32_t prefix = 0, target = static_cast<uint32_t>(k);
  for (int level = 0; level < 4; ++level) {
    const int shift = 24 - 8 * level;
    for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += blockDim.x) {
      const int i = base + threadIdx.x;
      const uint32_t o = i < n ? ordered(v[i]) : 0;
      const bool match = i < n && (level == 0 || (o >> (shift + 8)) == prefix);
      const uint32_t digit = (o >> shift) & 255u;
      const unsigned peers = __match_any_sync(0xffffffffu, match ? digit : 256u);
      if (match && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1)
        atomicAdd(&hist[digit], static_cast<unsigned>(__popc(peers)));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      int digit = 0;
      uint64_t rest = 0;
      find_from_top<256>(
          hist, [&](uint64_t) { return uint64_t{target}; }, digit, rest);  // n >= k: found
      if (threadIdx.x == 0) s_digit = static_cast<uint32_t>(digit), s_target = static_cast<uint32_t>(rest);
    }
    __syncthreads();
    prefix = (prefix << 8) | s_digit;
    target = s_target;
    __syncthreads();
  }
  return of_ordered(prefix);
}

// The fallback: radix selection over the rank keys of the whole row's survivors at or above `floor`, by
// count (top-k: the target-th key) or by integer mass (top-p: the first key where the mass from the top
// reaches the target; with `fraction` < 1 the target is ceil_fraction(fraction, total mass), found at the
// first level). `hist` is kDigits words of shared memory. False when the survivors hold less than the target.
template <bool kMass>
__device__ bool radix_select(const PackedRow& r, int64_t vocab, const float* row, const uint64_t* mask,
                             double max_s, uint64_t floor, uint64_t target, float fraction, uint64_t& key,
                             unsigned long long* hist) {
  __shared__ uint64_t s_target;
  __shared__ int s_digit;
  __shared__ bool s_found;
  uint64_t prefix = 0;
  for (int level = 0; level < kLevels; ++level) {
    const int shift = kTopShift - kDigitBits * level;
    for (int d = threadIdx.x; d < kDigits; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const auto id = static_cast<int32_t>(i);
      const float z = prepared(row, mask, id);
      if (!survives(z, r, max_s)) continue;
      const uint64_t k = rank_key(z, id);
      if (k < floor || (k >> (shift + kDigitBits)) != prefix) continue;
      const uint64_t w = kMass ? mass_of(offset_of(z, r, max_s)) : 1;
      if (w != 0) atomicAdd(&hist[(k >> shift) & (kDigits - 1)], static_cast<unsigned long long>(w));
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      int digit = 0;
      uint64_t rest = 0;
      const bool found = find_from_top<kDigits>(
          hist,
          [&](uint64_t total) {
            return level == 0 && kMass && fraction < 1.0f ? ceil_fraction(fraction, total) : target;
          },
          digit, rest);
      if (threadIdx.x == 0) s_found = found, s_digit = digit, s_target = rest;
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

// Sorts a[0, n_pad) descending (n_pad a power of two) by a bitonic network.
__device__ void sort_descending(uint64_t* a, int n_pad) {
  for (int size = 2; size <= n_pad; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int t = threadIdx.x; t < n_pad / 2; t += blockDim.x) {
        const int i = 2 * t - (t & (stride - 1)), j = i + stride;  // i has bit `stride` clear
        const uint64_t x = a[i], y = a[j];
        if ((i & size) == 0 ? x < y : x > y) a[i] = y, a[j] = x;
      }
    }
  __syncthreads();
}

// The key of the first entry of a sorted list[0, m) where the mass from the top reaches want =
// want_of(total mass of the list); the last entry when it never does.
template <class WantOf>
__device__ uint64_t mass_cut(const uint64_t* list, int m, const PackedRow& r, double max_s, WantOf want_of) {
  __shared__ uint64_t warp_sums[32];
  __shared__ uint64_t s_total;
  __shared__ int s_at;
  const int per = (m + static_cast<int>(blockDim.x) - 1) / static_cast<int>(blockDim.x);
  const int lo = min(m, static_cast<int>(threadIdx.x) * per), hi = min(m, lo + per);
  uint64_t sum = 0;
  for (int i = lo; i < hi; ++i) sum += mass_of(offset_of(key_z(list[i]), r, max_s));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  uint64_t incl = warp_inclusive_sum(sum);
  if (lane == 31) warp_sums[warp] = incl;
  if (threadIdx.x == 0) s_at = m - 1;
  __syncthreads();
  if (warp == 0) {
    const uint64_t w = lane < warps ? warp_sums[lane] : 0;
    const uint64_t wi = warp_inclusive_sum(w);
    if (lane < warps) warp_sums[lane] = wi - w;
    if (lane == 31) s_total = wi;
  }
  __syncthreads();
  incl += warp_sums[warp];
  const uint64_t want = want_of(s_total), excl = incl - sum;
  if (want > excl && want <= incl) {  // one thread: its entries hold the want-th unit of mass
    uint64_t before = excl;
    for (int i = lo; i < hi; ++i) {
      before += mass_of(offset_of(key_z(list[i]), r, max_s));
      if (before >= want) {
        s_at = i;
        break;
      }
    }
  }
  __syncthreads();
  return list[s_at];
}

// One block per row: the argmax from pass A's parts (greedy rows are done), max s, and the row's plan.
__global__ void __launch_bounds__(kSelectThreads) plan_kernel(Inputs in, Scratch s) {
  const PackedRow& r = in.rows[blockIdx.x];
  RowState& st = s.states[blockIdx.x];
  if (r.mode == DrawMode::Dense) {
    if (threadIdx.x == 0) st = {-INFINITY, 0, 0, -INFINITY, kDone, 0, 0};
    return;
  }
  float bz = -INFINITY;
  int32_t bi = INT_MAX;
  for (int p = threadIdx.x; p < in.parts; p += blockDim.x)
    offer_z(bz, bi, s.part_z[blockIdx.x * in.parts + p], s.part_zid[blockIdx.x * in.parts + p]);
  block_best(bz, bi, offer_z);
  if (r.mode == DrawMode::Greedy || bz == -INFINITY) {
    if (threadIdx.x == 0) {
      s.tokens[blockIdx.x] = bz == -INFINITY ? kNothingDrawable : bi;
      st = {-INFINITY, kNoKey, 0, -INFINITY, kDone, 0, 0};
    }
    return;
  }
  const double max_s = static_cast<double>(bz) * r.inv_t;
  int32_t plan = kSurvivors;
  float floor_z = -INFINITY;
  if (r.top_k > 0) {
    plan = kTopK;
    const int n = in.parts * kThreads;
    floor_z = kth_largest(s.thread_max + static_cast<int64_t>(blockIdx.x) * n, n, r.top_k);
  } else if (r.top_p < 1.0f) {
    plan = kTopP;
    for (int d = threadIdx.x; d < kMassBins; d += blockDim.x) s.bins[blockIdx.x * kMassBins + d] = 0;
  }
  if (threadIdx.x == 0) st = {max_s, 0, 0, floor_z, plan, 0, 0};
}

// Appends the keys of a warp's taking lanes to the row's list (one atomic a warp; the list's order is
// arbitrary, its contents are not). Every lane of the warp calls it.
__device__ void append(bool take, uint64_t key, uint32_t* count, uint64_t* list) {
  const unsigned takers = __ballot_sync(0xffffffffu, take);
  if (takers == 0) return;
  const int lane = threadIdx.x & 31;
  uint32_t base = 0;
  if (lane == 0) base = atomicAdd(count, static_cast<uint32_t>(__popc(takers)));
  base = __shfl_sync(0xffffffffu, base, 0);
  const uint32_t at = base + static_cast<uint32_t>(__popc(takers & ((1u << lane) - 1)));
  if (take && at < kCandidates) list[at] = key;
}

// Row-parallel over pass A's chunks. Stage 0: top-k rows list their survivors at or above the floor, top-p
// rows add mass by offset bin (bins stored top first: index kMassBins - 1 - bin). Stage 1: top-p rows list
// the cut bin's tokens with mass.
__global__ void gather_kernel(Inputs in, const float* logits, Scratch s, int stage) {
  __shared__ unsigned long long bins[kMassBins];
  RowState& shared_state = s.states[blockIdx.y];
  const int32_t plan = shared_state.plan;
  if (stage == 0 ? plan != kTopK && plan != kTopP : plan != kTopP) return;
  const PackedRow& r = in.rows[blockIdx.y];
  const double max_s = shared_state.max_s;
  const float floor_z = shared_state.floor_z;
  const int cut_bin = shared_state.cut_bin;
  const bool histogram = stage == 0 && plan == kTopP;
  if (histogram) {
    for (int d = threadIdx.x; d < kMassBins; d += blockDim.x) bins[d] = 0;
    __syncthreads();
  }
  const float* row = logits + r.row * in.vocab;
  const uint64_t* mask = row_mask(in, r);
  uint64_t* list = s.lists + static_cast<int64_t>(blockIdx.y) * kCandidates;
  const int64_t begin = int64_t{blockIdx.x} * kChunk, end = min(in.vocab, begin + kChunk);
  for (int64_t base = begin; base < end; base += blockDim.x) {
    const auto id = static_cast<int32_t>(base + threadIdx.x);
    const float z = id < end ? prepared(row, mask, id) : -INFINITY;
    bool take = false;
    if (survives(z, r, max_s)) {
      if (plan == kTopK) {
        take = z >= floor_z;
      } else {
        const double x = offset_of(z, r, max_s);
        if (x >= kMassFloor) {  // below it every mass is 0
          const int b = mass_bin(x);
          if (histogram || b == cut_bin) {
            const uint64_t m = mass_of(x);
            if (histogram && m != 0) atomicAdd(&bins[kMassBins - 1 - b], static_cast<unsigned long long>(m));
            take = !histogram && m != 0;
          }
        }
      }
    }
    if (!histogram) append(take, take ? rank_key(z, id) : 0, &shared_state.count, list);
  }
  if (histogram) {
    __syncthreads();
    for (int d = threadIdx.x; d < kMassBins; d += blockDim.x)
      if (bins[d] != 0)
        atomicAdd(reinterpret_cast<unsigned long long*>(s.bins) + blockIdx.y * kMassBins + d, bins[d]);
  }
}

// One block per row. Stage 0: top-k rows' bound from their list (or the row when the list overflowed);
// top-p rows' cut bin from the mass bins. Stage 1: top-p rows' bound from the cut bin's list (or the row).
__global__ void __launch_bounds__(kSelectThreads)
    select_kernel(Inputs in, const float* logits, Scratch s, int stage) {
  __shared__ uint64_t list[kCandidates];
  RowState& st = s.states[blockIdx.x];
  const PackedRow& r = in.rows[blockIdx.x];
  const int32_t plan = st.plan;
  if (stage == 0 && plan == kTopP) {
    if (threadIdx.x < 32) {
      int digit = 0;
      uint64_t rest = 0;
      const bool found = find_from_top<kMassBins>(
          s.bins + blockIdx.x * kMassBins, [&](uint64_t total) { return ceil_fraction(r.top_p, total); },
          digit, rest);
      // Not found only without mass, which the argmax always has: then keep every survivor.
      if (threadIdx.x == 0) {
        if (found)
          st.cut_bin = kMassBins - 1 - digit, st.want = rest;
        else
          st.plan = kSurvivors;
      }
    }
    return;
  }
  if (plan != (stage == 0 ? kTopK : kTopP)) return;
  const uint32_t n = st.count;
  const double max_s = st.max_s;
  uint64_t bound = 0;
  if (n == 0) {
    // Not reached: the argmax is listed (top-k) and the cut bin holds mass (top-p). Keep every survivor.
  } else if (n <= kCandidates) {
    int n_pad = 1;
    while (n_pad < static_cast<int>(n)) n_pad <<= 1;
    const uint64_t* g = s.lists + static_cast<int64_t>(blockIdx.x) * kCandidates;
    for (int i = threadIdx.x; i < n_pad; i += blockDim.x) list[i] = i < static_cast<int>(n) ? g[i] : 0;
    sort_descending(list, n_pad);
    if (plan == kTopK) {
      // Fewer than k listed means fewer than k survivors, every one of them listed: all are kept.
      int m = static_cast<int>(n);
      if (static_cast<int64_t>(n) >= r.top_k) m = r.top_k, bound = list[m - 1];
      if (r.top_p < 1.0f)
        bound = mass_cut(list, m, r, max_s, [&](uint64_t total) { return ceil_fraction(r.top_p, total); });
    } else {
      const uint64_t want = st.want;
      bound = mass_cut(list, static_cast<int>(n), r, max_s, [&](uint64_t) { return want; });
    }
  } else {
    const float* row = logits + r.row * in.vocab;
    const uint64_t* mask = row_mask(in, r);
    auto* hist = reinterpret_cast<unsigned long long*>(list);
    uint64_t key = 0;
    if (plan == kTopK && radix_select<false>(r, in.vocab, row, mask, max_s, 0, static_cast<uint64_t>(r.top_k),
                                             1.0f, key, hist))
      bound = key;
    if (r.top_p < 1.0f && radix_select<true>(r, in.vocab, row, mask, max_s, bound, 0, r.top_p, key, hist))
      bound = key;
  }
  if (threadIdx.x == 0) st.bound = bound;
}

}  // namespace

void launch_kept_set(const Inputs& in, const float* logits, const Scratch& s, int rows, bool topk, bool topp,
                     cudaStream_t stream) {
  plan_kernel<<<rows, kSelectThreads, 0, stream>>>(in, s);
  check_launch("DeviceSampler: plan");
  if (!topk && !topp) return;
  const dim3 grid(static_cast<unsigned>(in.parts), static_cast<unsigned>(rows));
  for (int stage = 0; stage < (topp ? 2 : 1); ++stage) {
    gather_kernel<<<grid, kThreads, 0, stream>>>(in, logits, s, stage);
    check_launch("DeviceSampler: gather");
    select_kernel<<<rows, kSelectThreads, 0, stream>>>(in, logits, s, stage);
    check_launch("DeviceSampler: select");
  }
}

}  // namespace ds::cuda::sampling
