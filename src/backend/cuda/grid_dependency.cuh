#pragma once
// Programmatic dependent launch (Hopper, docs/cuda-model.md "Programmatic launch"): a decode round's graph
// lets each kernel start while the one before it finishes (CudaModel turns the graph's kernel-to-kernel edges
// into programmatic ones). So EVERY kernel that can run in that graph calls grid_dependency_wait() first,
// before it reads or writes any memory: it returns once the previous kernel has completed and its writes are
// visible (at once when launched normally), then lets the next kernel begin launching. Changes no bits.
#include <cuda_runtime.h>

namespace ds::cuda::dev {

__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace ds::cuda::dev
