#include "backend/cuda/model/graph_cache.h"

#include <algorithm>

namespace ds::cuda {

namespace {

constexpr size_t kMaxSeen = 64;  // one-off shapes remembered; past it the oldest is forgotten

}  // namespace

void destroy_events(TimingEvents& events) {
  for (auto& e : events) cudaEventDestroy(e.second);
  events.clear();
}

ParkedGraph* GraphCache::find(const GraphKey& key) {
  auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const ParkedGraph& g) { return g.key == key; });
  if (it == graphs_.end()) return nullptr;
  graphs_.splice(graphs_.begin(), graphs_, it);
  return &graphs_.front();
}

bool GraphCache::capture_now(const GraphKey& key) {
  if (capture_first_) return true;
  auto it = std::find(seen_.begin(), seen_.end(), key);
  if (it != seen_.end()) {
    seen_.erase(it);
    return true;
  }
  if (seen_.size() >= kMaxSeen) seen_.erase(seen_.begin());
  seen_.push_back(key);
  return false;
}

ParkedGraph& GraphCache::park(GraphKey key, cudaGraphExec_t exec, TimingEvents events) {
  while (!graphs_.empty() && graphs_.size() >= std::max<size_t>(capacity_, 1)) {
    ParkedGraph& last = graphs_.back();
    destroy_events(last.events);
    if (last.exec != nullptr) cudaGraphExecDestroy(last.exec);
    graphs_.pop_back();
  }
  graphs_.push_front({std::move(key), exec, std::move(events)});
  return graphs_.front();
}

void GraphCache::clear() {
  for (ParkedGraph& g : graphs_) {
    destroy_events(g.events);
    if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
  }
  graphs_.clear();
  seen_.clear();
}

void GraphCache::drop_holding(int64_t value) {
  auto holds = [&](const GraphKey& key) { return std::find(key.begin(), key.end(), value) != key.end(); };
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (!holds(it->key)) {
      ++it;
      continue;
    }
    destroy_events(it->events);
    if (it->exec != nullptr) cudaGraphExecDestroy(it->exec);
    it = graphs_.erase(it);
  }
  std::erase_if(seen_, holds);
}

void GraphCache::set_capacity(size_t capacity, bool capture_first_call) {
  clear();
  capacity_ = capacity;
  capture_first_ = capture_first_call;
}

}  // namespace ds::cuda
