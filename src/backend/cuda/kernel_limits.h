#pragma once
// A kernel's launch limits on the current device: the dynamic shared memory opt-in and the blocks resident at
// once. Both are per device (a cudaFuncSetAttribute on device 0 leaves device 1's launch of the same kernel
// failing), so each is set or read once per (kernel, device), never once per process.
#include <cstddef>
#include <cstdint>

namespace ds::cuda {

// Lets `kernel` launch with up to `bytes` of dynamic shared memory on the current device: sets
// cudaFuncAttributeMaxDynamicSharedMemorySize the first time this (kernel, device) asks for more than it was
// given; later calls are a lookup under a mutex. A failure throws CudaError naming `op` and is not remembered
// (the next call tries again).
void opt_in_dynamic_smem(const void* kernel, int bytes, const char* op);
template <class... Args>
void opt_in_dynamic_smem(void (*kernel)(Args...), int bytes, const char* op) {
  opt_in_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes, op);
}

// The current device's multiprocessor count, read once per device.
int multiprocessors(const char* op);

// Blocks of `kernel` resident at once on the current device with `threads` threads and `bytes` of dynamic
// shared memory: the multiprocessors times max(1, cudaOccupancyMaxActiveBlocksPerMultiprocessor), computed
// once per (kernel, device, threads, bytes). Above 48 KB the kernel must have opted in on this device first.
int64_t blocks_resident(const void* kernel, int threads, size_t bytes, const char* op);
template <class... Args>
int64_t blocks_resident(void (*kernel)(Args...), int threads, size_t bytes, const char* op) {
  return blocks_resident(reinterpret_cast<const void*>(kernel), threads, bytes, op);
}

}  // namespace ds::cuda
