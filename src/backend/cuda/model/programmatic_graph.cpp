#include "backend/cuda/model/programmatic_graph.h"

#include <vector>

#include "backend/cuda/cuda_error.h"

namespace ds::cuda {

size_t make_kernel_edges_programmatic(cudaGraph_t graph) {
  size_t n = 0;
  check(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n), "cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n > 0) check(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n), "cudaGraphGetEdges");
  std::vector<cudaGraphNode_t> kfrom, kto;
  std::vector<cudaGraphEdgeData> old_data;
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType a, b;
    check(cudaGraphNodeGetType(from[i], &a), "cudaGraphNodeGetType");
    check(cudaGraphNodeGetType(to[i], &b), "cudaGraphNodeGetType");
    if (a != cudaGraphNodeTypeKernel || b != cudaGraphNodeTypeKernel) continue;
    if (data[i].type != cudaGraphDependencyTypeDefault || data[i].from_port != cudaGraphKernelNodePortDefault)
      continue;
    kfrom.push_back(from[i]), kto.push_back(to[i]), old_data.push_back(data[i]);
  }
  if (kfrom.empty()) return 0;
  check(cudaGraphRemoveDependencies(graph, kfrom.data(), kto.data(), old_data.data(), kfrom.size()),
        "cudaGraphRemoveDependencies");
  cudaGraphEdgeData prog{};
  prog.from_port = cudaGraphKernelNodePortProgrammatic;
  prog.type = cudaGraphDependencyTypeProgrammatic;
  const std::vector<cudaGraphEdgeData> new_data(kfrom.size(), prog);
  check(cudaGraphAddDependencies(graph, kfrom.data(), kto.data(), new_data.data(), kfrom.size()),
        "cudaGraphAddDependencies (programmatic)");
  return kfrom.size();
}

}  // namespace ds::cuda
