// CudaModel::capture_graph and launch: the capture sequence and the graph-or-direct choice a decode round and
// the MTP head's call share.
#include <cxxabi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/model/graph_option_key.h"
#include "backend/cuda/model/hc_kernels.h"
#include "backend/cuda/model/programmatic_graph.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_products.h"
#include "backend/cuda/tc_products_ring.h"
#include "backend/cuda/wx_products.h"
#include "backend/cuda/wx_row_choice.h"
#include "core/error.h"

namespace ds::cuda {

namespace {

// A call's graph holds one copy (its upload) and no memset: anything else was enqueued on the stream by
// another thread during the capture, and would be replayed with every later call of the shape.
void expect_own_nodes(cudaGraph_t graph) {
  size_t n = 0;
  check(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) check(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes");
  int copies = 0, memsets = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    check(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    copies += type == cudaGraphNodeTypeMemcpy ? 1 : 0;
    memsets += type == cudaGraphNodeTypeMemset ? 1 : 0;
  }
  if (copies != 1 || memsets != 0)
    fail(
        "CudaModel: a captured call holds {} copies and {} memsets, not its one upload (work another thread "
        "enqueued on the model's stream during the capture)",
        copies, memsets);
}

// A graph's nodes by kind: kernels by their function's name (namespaces and parameters left out), copies,
// timing events.
std::map<std::string, int> node_kinds(cudaGraph_t graph) {
  size_t n = 0;
  check(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes");
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) check(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes");
  std::map<std::string, int> kinds;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    check(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    std::string kind = type == cudaGraphNodeTypeMemcpy        ? "(copy)"
                       : type == cudaGraphNodeTypeEventRecord ? "(event)"
                                                              : "(other)";
    cudaKernelNodeParams p{};
    const char* mangled = nullptr;
    if (type == cudaGraphNodeTypeKernel && cudaGraphKernelNodeGetParams(node, &p) == cudaSuccess &&
        cudaFuncGetName(&mangled, p.func) == cudaSuccess && mangled != nullptr) {
      int status = 0;
      char* plain = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
      kind = status == 0 && plain != nullptr ? plain : mangled;
      std::free(plain);
      for (const char* drop : {"void ", "ds::cuda::", "(anonymous namespace)::", "detail::", "dev::"})
        for (size_t at; (at = kind.find(drop)) != std::string::npos;) kind.erase(at, std::strlen(drop));
      kind = kind.substr(0, kind.find('('));  // the parameters
    }
    ++kinds[kind];
  }
  return kinds;
}

}  // namespace

cudaGraphExec_t CudaModel::capture_graph(const std::function<void()>& enqueue, size_t* nodes, size_t* edges) {
  const cudaStream_t st = stream_.get();
  const std::lock_guard lock(capture_mutex_);  // no other thread's copy joins the graph
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
    (void)cudaGetLastError();  // an invalidated capture's error is this call's, not the next launch's
    throw;
  }
  cudaGraph_t graph = nullptr;
  check(cudaStreamEndCapture(st, &graph), "cudaStreamEndCapture");
  if (nodes != nullptr) {
    *nodes = 0;
    cudaGraphGetNodes(graph, nullptr, nodes);
    graph_node_kinds_ = node_kinds(graph);
  }
  size_t made_programmatic = 0;
  try {
    expect_own_nodes(graph);
    if (opt_.programmatic_launch) made_programmatic = make_kernel_edges_programmatic(graph);
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
  if (edges != nullptr) *edges = made_programmatic;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check(made, "cudaGraphInstantiate");
  return exec;
}

void CudaModel::set_parked_graphs(int n, bool at_first_call) {
  opt_.parked_graphs = n;
  opt_.graph_at_first_call = at_first_call;
  round_graphs_.set_capacity(static_cast<size_t>(std::max(n, 1)), at_first_call);
  head_graphs_.set_capacity(static_cast<size_t>(std::max(n, 1)), at_first_call);
}

void CudaModel::forget_graphs(const void* address) {
  check(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize (dropping parked graphs)");
  round_graphs_.drop_holding(reinterpret_cast<int64_t>(address));
  head_graphs_.drop_holding(reinterpret_cast<int64_t>(address));
}

void CudaModel::append_option_key(GraphKey& key) const {
  GraphOptionKey o;
  o.time_ops = opt_.time_ops;
  o.expert_windows = opt_.expert_windows;
  o.programmatic_launch = opt_.programmatic_launch;
  o.fused_hc = opt_.fused_hc;
  o.hc_head_outputs = opt_.hc_head_outputs;
  o.fused_route = opt_.fused_route;
  o.fused_swiglu = opt_.fused_swiglu;
  o.fused_combine = opt_.fused_combine;
  o.decode_products = static_cast<int64_t>(opt_.decode_products);
  o.tensor_min_rows = opt_.tensor_min_rows;
  o.tensor_min_cols = opt_.tensor_min_cols;
  o.tensor_tall_only = opt_.tensor_tall_only;
  o.generic_mixers = opt_.generic_mixers;
  o.prompt_chunked_deltanet = opt_.prompt_chunked_deltanet;
  o.prompt_staged_deltanet = opt_.prompt_staged_deltanet;
  o.prompt_selected_tiles = opt_.prompt_selected_tiles;
  o.split_argmax = opt_.split_argmax;
  o.row_kernel = static_cast<int64_t>(one_row_kernel());
  o.paired_min_tasks = paired_min_tasks();
  o.paired_grouped = paired_grouped();
  o.tc_planes = static_cast<int64_t>(tc_decode_planes());
  o.tc_small_windows = tc_decode_small_windows_on();
  o.tc_one_row_in_block = tc_decode_one_row_in_block_on();
  o.tc_forced_slices = tc_decode_forced_column_slices();
  o.tc_row_kernel = tc_decode_row_kernel_on();
  o.tc_row_variant = tc_decode_row_variant();
  o.tc_swiglu = tc_decode_fold_swiglu_on();
  o.tc_group = tc_decode_fold_grouping_on();
  o.tc_expert_routed = tc_decode_expert_routed();
  // Read here, before any capture: a bad DS_CUDA_HC_TENSOR then fails before a stream is left capturing.
  o.hc_tensor = hc_tensor_tail_on();
  o.deltanet_one_launch = deltanet_one_launch();
  o.down_pairs_early = down_pairs_early();
  o.loads_first = loads_first();
  o.row_loads_first = row_loads_first();
  o.hc_tail_variant = hc_tensor_tail_variant();
  const TiledConfig tiled = tiled_config();
  o.tiled_outputs = tiled.tile_outputs;
  o.tiled_min_blocks = tiled.min_blocks;
  o.tiled_ring = tiled_ring();
  o.attend_warps = attention_attend_warps();
  o.route_fast = moe_route_fast();
  append_graph_option_key(key, o);
}

void CudaModel::launch(GraphCache& cache, const GraphKey& key, bool use_graph,
                       const std::function<void()>& enqueue, bool round) {
  destroy_events(op_events_);  // only a direct call's events live here, and only for this call
  TimingEvents* timed = nullptr;
  if (use_graph) {
    ParkedGraph* g = cache.find(key);
    if (g == nullptr && cache.capture_now(key)) {
      const auto start = std::chrono::steady_clock::now();
      cudaGraphExec_t exec =
          round ? capture_graph(enqueue, &graph_nodes_, &graph_programmatic_edges_) : capture_graph(enqueue);
      launches_.capture_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      ++launches_.captures;
      g = &cache.park(key, exec, std::move(op_events_));
      op_events_.clear();
    }
    if (g != nullptr) {
      check(cudaGraphLaunch(g->exec, stream_.get()), "cudaGraphLaunch");
      ++launches_.replays;
      timed = &g->events;
    }
  } else if (opt_.parked_graphs <= 1) {
    cache.clear();  // the earlier form: a direct call dropped the one graph (its timing events)
  }
  if (timed == nullptr) {
    enqueue();
    op("end");
    ++launches_.direct;
    timed = &op_events_;
  }
  if (!opt_.time_ops) return;
  stream_.synchronize();
  for (size_t i = 0; i + 1 < timed->size(); ++i) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, (*timed)[i].second, (*timed)[i + 1].second), "cudaEventElapsedTime");
    op_ms_[(*timed)[i].first] += ms;
  }
  destroy_events(op_events_);
}

}  // namespace ds::cuda
