#pragma once
// The keyed sampler on the GPU (docs/cuda-engine.md, "Sampling"): draws rows of logits that stay on the
// device, each the token ds::KeyedSampler::sample gives for the same row, params, position, history and mask
// (bit for bit: the same IEEE double operations through the DS_HOST_DEVICE noise and mass functions, and
// order-free reductions: Gumbel-max ties to the lower id, integer masses, radix selection of the kept set).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "runtime/packed_draws.h"

namespace ds::cuda {

class DeviceSampler {
 public:
  // Draws every packed row from `logits` [rows, vocab] (device memory; the penalised entries of a drawn row
  // are rewritten in place). Returns one token per packed row, kNothingDrawable where KeyedSampler would
  // fail for want of a finite allowed token. Enqueued on `stream`, which it synchronises.
  std::vector<int32_t> draw(float* logits, int64_t vocab, const PackedDraws& draws, cudaStream_t stream);

 private:
  DeviceBuffer inputs_, scratch_;  // packed rows, entries and masks; partial results and row states
  std::vector<unsigned char> staging_;
};

}  // namespace ds::cuda
