// CudaModel::capture_graph: the capture sequence a decode round and the MTP head's call share.
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/model/programmatic_graph.h"

namespace ds::cuda {

cudaGraphExec_t CudaModel::capture_graph(const std::function<void()>& enqueue, size_t* nodes, size_t* edges) {
  const cudaStream_t st = stream_.get();
  check(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  capturing_ = true;
  try {
    enqueue();
    op("end");
    capturing_ = false;
  } catch (...) {
    capturing_ = false;
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(st, &broken);
    if (broken) cudaGraphDestroy(broken);
    throw;
  }
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(st, &graph), "cudaStreamEndCapture");
  if (nodes != nullptr) {
    *nodes = 0;
    cudaGraphGetNodes(graph, nullptr, nodes);
  }
  size_t made_programmatic = 0;
  if (opt_.programmatic_launch) {
    try {
      made_programmatic = make_kernel_edges_programmatic(graph);
    } catch (...) {
      cudaGraphDestroy(graph);
      throw;
    }
  }
  if (edges != nullptr) *edges = made_programmatic;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(made, "cudaGraphInstantiate");
  return exec;
}

}  // namespace ds::cuda
