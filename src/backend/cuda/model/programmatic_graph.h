#pragma once
// Programmatic dependent launch for a captured decode round (docs/cuda-model.md "Programmatic launch").
#include <cuda_runtime.h>

#include <cstddef>

namespace ds::cuda {

// Turns every kernel-to-kernel edge of `graph` into a programmatic one: the downstream kernel may launch once
// every block of the upstream one has started (each kernel calls dev::grid_dependency_wait() before touching
// memory, grid_dependency.cuh), so its launch overlaps the upstream's run. Edges to or from other nodes
// (copies, timing events) stay full dependencies. Returns the edges changed.
size_t make_kernel_edges_programmatic(cudaGraph_t graph);

}  // namespace ds::cuda
