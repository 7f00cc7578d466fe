// Error hygiene of the CUDA wrappers (cuda_error.h): a failed runtime call's code must not stay behind as the
// thread's last error, or the next check_launch reports it against an innocent launch (in the engine, the
// next round's streams fail with a cudaMalloc's out of memory from the round before).
#include <cuda_runtime.h>

#include <cstddef>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_buffer.h"
#include "checks.h"

namespace ds::cuda::wxcheck {

void run_error_checks(Tally& tally) {
  constexpr size_t kHuge = size_t{1} << 50;  // 1 PiB: no device has it
  // The premise (the negative control): a failing call left unchecked leaves its code as the last error.
  void* p = nullptr;
  const cudaError_t raw = cudaMalloc(&p, kHuge);
  tally.expect(raw == cudaErrorMemoryAllocation, "errors: a 1 PiB cudaMalloc fails with out of memory");
  tally.expect(cudaPeekAtLastError() == raw, "errors: an unchecked failure stays as the last error");
  (void)cudaGetLastError();
  // check(): the failure is thrown, named, and read off.
  bool thrown = false;
  try {
    DeviceBuffer b(kHuge);
  } catch (const CudaError& e) {
    thrown = e.code() == cudaErrorMemoryAllocation;
  }
  tally.expect(thrown, "errors: DeviceBuffer(1 PiB) throws CudaError(cudaErrorMemoryAllocation)");
  tally.expect(cudaPeekAtLastError() == cudaSuccess, "errors: no last error stays after a thrown failure");
  bool next_ok = true;
  try {
    check_launch("errors: the next launch");
  } catch (const CudaError&) {
    next_ok = false;
  }
  tally.expect(next_ok, "errors: the next check_launch passes");
}

}  // namespace ds::cuda::wxcheck
