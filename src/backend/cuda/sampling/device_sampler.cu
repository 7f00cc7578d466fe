// The keyed sampler's row-parallel passes and its call: penalties in place, pass A (each chunk's best logit),
// the kept set (kept_set.cu), pass B (Gumbel-max over it). Passes split a row over blocks and combine their
// partial bests with the same tie rule, so no result depends on the split (docs/cuda-engine.md, "Sampling").
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <iterator>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/sampling/device_sampler.h"
#include "backend/cuda/sampling/sampler_device.cuh"
#include "runtime/keyed_noise.h"

namespace ds::cuda {
namespace sampling {
namespace {

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

// Pass A: each block's best prepared logit over its chunk (greedy and filtered rows), and for top-k rows each
// thread's best (the maxima of a partition of the row, whose k-th largest is a floor for top-k).
__global__ void max_parts_kernel(Inputs in, const float* logits, float* part_z, int32_t* part_id,
                                 float* thread_max) {
  const PackedRow& r = in.rows[blockIdx.y];
  if (r.mode == DrawMode::Dense) return;
  const float* row = logits + r.row * in.vocab;
  const uint64_t* mask = row_mask(in, r);
  float bz = -INFINITY;
  int32_t bi = INT_MAX;
  const int64_t end = min(in.vocab, int64_t{blockIdx.x + 1} * kChunk);
  for (int64_t i = int64_t{blockIdx.x} * kChunk + threadIdx.x; i < end; i += blockDim.x)
    offer_z(bz, bi, prepared(row, mask, static_cast<int32_t>(i)), static_cast<int32_t>(i));
  if (r.mode == DrawMode::Filtered && r.top_k > 0)
    thread_max[(int64_t{blockIdx.y} * in.parts + blockIdx.x) * kThreads + threadIdx.x] = bz;
  block_best(bz, bi, offer_z);
  if (threadIdx.x == 0) {
    part_z[blockIdx.y * in.parts + blockIdx.x] = bz;
    part_id[blockIdx.y * in.parts + blockIdx.x] = bi;
  }
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
}  // namespace sampling

std::vector<int32_t> DeviceSampler::draw(float* logits, int64_t vocab, const PackedDraws& draws,
                                         cudaStream_t stream) {
  using namespace sampling;
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
  // Scratch, carved in this order from one buffer.
  const auto rows_n = static_cast<size_t>(n), parts_n = rows_n * static_cast<size_t>(parts);
  const size_t sizes[] = {parts_n * 4,
                          parts_n * 4,
                          parts_n * 8,
                          parts_n * 4,
                          parts_n * kThreads * 4,
                          rows_n * sizeof(RowState),
                          rows_n * kCandidates * 8,
                          rows_n * kMassBins * 8,
                          rows_n * 4};
  size_t scratch_need = 0;
  for (size_t b : sizes) scratch_need += align256(b);
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
  void* at[std::size(sizes)];
  auto* p = scratch_.as<unsigned char>();
  for (size_t i = 0; i < std::size(sizes); ++i) at[i] = p, p += align256(sizes[i]);
  const Scratch s{static_cast<float*>(at[0]),    static_cast<int32_t*>(at[1]),  static_cast<double*>(at[2]),
                  static_cast<int32_t*>(at[3]),  static_cast<float*>(at[4]),    static_cast<RowState*>(at[5]),
                  static_cast<uint64_t*>(at[6]), static_cast<uint64_t*>(at[7]), static_cast<int32_t*>(at[8])};
  bool topk = false, topp = false;
  for (const PackedRow& r : draws.rows)
    if (r.mode == DrawMode::Filtered) {
      topk = topk || r.top_k > 0;
      topp = topp || (r.top_k <= 0 && r.top_p < 1.0f);
    }
  if (!draws.entries.empty()) {
    penalize_kernel<<<n, kThreads, 0, stream>>>(in, logits);
    check_launch("DeviceSampler: penalties");
  }
  const dim3 grid(static_cast<unsigned>(parts), static_cast<unsigned>(n));
  max_parts_kernel<<<grid, kThreads, 0, stream>>>(in, logits, s.part_z, s.part_zid, s.thread_max);
  check_launch("DeviceSampler: max parts");
  launch_kept_set(in, logits, s, n, topk, topp, stream);
  gumbel_parts_kernel<<<grid, kThreads, 0, stream>>>(in, logits, s.states, s.part_s, s.part_sid);
  check_launch("DeviceSampler: gumbel parts");
  finish_kernel<<<n, 32, 0, stream>>>(in, s.part_s, s.part_sid, s.tokens);
  check_launch("DeviceSampler: finish");
  std::vector<int32_t> out(rows_n);
  check(cudaMemcpyAsync(out.data(), s.tokens, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream),
        "DeviceSampler: tokens");
  check(cudaStreamSynchronize(stream), "DeviceSampler: draw");
  return out;
}

}  // namespace ds::cuda
