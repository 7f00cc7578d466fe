#pragma once
// CUDA graphs of a CudaModel's calls parked by call shape (docs/cuda-model.md "CUDA graphs"): a drafted
// round alternates a few shapes (the plain round, verify windows of each depth, the MTP head's catch-up rows
// and one-row chain steps), each replayed from its own graph instead of captured again at every change.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

namespace ds::cuda {

using GraphKey = std::vector<int64_t>;
using TimingEvents = std::vector<std::pair<std::string, cudaEvent_t>>;

struct ParkedGraph {
  GraphKey key;
  cudaGraphExec_t exec = nullptr;
  TimingEvents events;  // time_ops: the graph's timing events (nodes of the graph)
};

// At most `capacity` graphs, the least recently launched dropped first. A shape is captured at its first
// call, or at its second (`capture_first_call` false: a one-off shape, a long prompt run as a window, is
// launched directly, since a capture costs more than a direct launch). Capacity 1 with capture at the first
// call is the earlier one-graph form (one graph, captured again at every change of shape), kept to measure
// against.
class GraphCache {
 public:
  explicit GraphCache(size_t capacity = 32, bool capture_first_call = false)
      : capacity_(capacity), capture_first_(capture_first_call) {}
  ~GraphCache() { clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // The graph parked for `key` (now the most recently used), or null.
  ParkedGraph* find(const GraphKey& key);
  // Whether a call of `key`, not parked, should be captured now (else launched directly); notes the sighting.
  bool capture_now(const GraphKey& key);
  // Parks a captured graph (the cache owns it and its events), dropping the least recently used past
  // capacity.
  ParkedGraph& park(GraphKey key, cudaGraphExec_t exec, TimingEvents events);
  void clear();
  // Drops the graphs whose key holds `value` (a buffer's address about to be freed).
  void drop_holding(int64_t value);
  void set_capacity(size_t capacity, bool capture_first_call);
  size_t size() const { return graphs_.size(); }

 private:
  size_t capacity_;
  bool capture_first_;
  std::list<ParkedGraph> graphs_;  // most recently used first
  std::vector<GraphKey> seen_;     // shapes called once and not captured (bounded)
};

void destroy_events(TimingEvents& events);

}  // namespace ds::cuda
