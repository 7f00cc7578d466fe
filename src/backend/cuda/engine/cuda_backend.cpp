#include "backend/cuda/engine/cuda_backend.h"

#include <algorithm>

#include "core/error.h"

namespace ds::cuda {

namespace {

// A stream's device state, carried in StreamState::backend.
struct CudaEngineState final : BackendState {
  const CudaModel* model = nullptr;
  CudaStreamState current;
  // Before the last window that ran with a WindowRecord: its recurrent parts (rewind restores them).
  DeviceBuffer before;
  int64_t before_position = -1;
  // Rows kept by a rewind, re-run at the next forward that takes this state: `current` stands before them.
  std::vector<int32_t> replay;

  std::unique_ptr<BackendState> clone() const override {
    auto c = std::make_unique<CudaEngineState>();
    c->model = model;
    c->current.device = DeviceBuffer(model->state_bytes());
    model->copy_state(current, c->current);
    c->replay = replay;  // a copy taken before the re-run carries it (the engine takes none such today)
    return c;
  }
  size_t bytes() const override { return current.device.bytes() + before.bytes(); }
};

CudaEngineState& state_of(const StreamState& state, const CudaModel& model, const char* op) {
  auto* s = dynamic_cast<CudaEngineState*>(state.backend.get());
  if (s == nullptr || s->model != &model)
    fail("{}: a stream state was not made by this CUDA backend's new_state()", op);
  return *s;
}

}  // namespace

CudaBackend::CudaBackend(std::unique_ptr<CudaModel> model) : model_(std::move(model)) {
  if (!model_) fail("CudaBackend: no model");
  graphs_ = model_->options().graphs;
}

CudaBackend::~CudaBackend() = default;

int64_t CudaBackend::max_context() const {
  const int64_t cfg = model_->config().max_positions, caches = model_->options().max_context;
  return cfg > 0 ? std::min(cfg, caches) : caches;
}

// No CPU caches: the host side only keeps the position (the engine's) and the device state.
StreamState CudaBackend::new_state() const {
  auto s = std::make_unique<CudaEngineState>();
  s->model = model_.get();
  s->current = model_->new_state();
  // new_state() zeroes the buffer on the legacy stream; the model's stream does not wait for it by itself.
  check(cudaStreamSynchronize(nullptr), "CudaBackend::new_state");
  StreamState state;
  state.backend = BackendStateSlot(std::move(s));
  return state;
}

// Rollback re-runs of every state this call takes, in one pass (their logits are not needed).
void CudaBackend::flush_replays(std::span<const ForwardSegment> segments) const {
  std::vector<CudaSegment> runs;
  std::vector<CudaEngineState*> owners;
  for (const ForwardSegment& sg : segments) {
    CudaEngineState& s = state_of(*sg.state, *model_, "CudaBackend::forward");
    if (s.replay.empty()) continue;
    runs.push_back({&s.current, s.replay, false});
    owners.push_back(&s);
  }
  if (runs.empty()) return;
  model_->set_graphs(false);  // a one-off shape: capturing it would only evict the decode round's graph
  model_->forward_greedy(runs);
  for (CudaEngineState* s : owners) {
    replay_rows_ += static_cast<int64_t>(s->replay.size());
    s->replay.clear();
  }
  ++replays_;
}

std::vector<float> CudaBackend::forward(std::span<const ForwardSegment> segments) const {
  flush_replays(segments);
  std::vector<CudaSegment> runs;
  runs.reserve(segments.size());
  bool steps_only = true;
  for (const ForwardSegment& sg : segments) {
    if (sg.hidden != nullptr)
      fail("CudaBackend::forward: hidden rows for the MTP head are not available on CUDA yet");
    CudaEngineState& s = state_of(*sg.state, *model_, "CudaBackend::forward");
    if (sg.record != nullptr) {
      // What rewind() needs: the position, PLE context and recurrent parts before the window, its tokens.
      WindowRecord& r = *sg.record;
      r.pos0 = s.current.position;
      r.count = static_cast<int64_t>(sg.tokens.size());
      r.tokens.assign(sg.tokens.begin(), sg.tokens.end());
      r.ple_context = s.current.ple_context;
      model_->save_recurrent(s.current, s.before);
      s.before_position = s.current.position;
    }
    // Prompt segments run as decode windows (the same bits). CudaSegment::prompt would take sg.prompt, but a
    // CudaModel call is all prompt or all decode: a round would become two calls (docs/backend-cuda.md).
    runs.push_back({&s.current, sg.tokens, sg.all_logits});
    steps_only = steps_only && !sg.prompt && sg.tokens.size() == 1;
  }
  // Plain decode rounds repeat their shape and replay the model's one CUDA graph; prompt pieces and draft
  // windows (their depth changes round to round) would each capture a new graph and evict it.
  model_->set_graphs(graphs_ && steps_only);
  std::vector<float> logits = model_->forward(runs);
  for (size_t i = 0; i < segments.size(); ++i) segments[i].state->position = runs[i].state->position;
  return logits;
}

void CudaBackend::rewind(const WindowRecord& record, int64_t keep, StreamState& state) const {
  CudaEngineState& s = state_of(state, *model_, "CudaBackend::rewind");
  if (keep < 1 || keep > record.count)
    fail("CudaBackend::rewind: keep {} is outside the window's 1..{} rows", keep, record.count);
  if (s.before_position != record.pos0 || s.current.position != record.pos0 + record.count ||
      !s.replay.empty())
    fail("CudaBackend::rewind: the state is not just after the recorded window (at {}, window {}..{})",
         s.current.position, record.pos0, record.pos0 + record.count);
  model_->restore_recurrent(s.before, s.current);
  s.current.position = record.pos0;
  s.current.ple_context = record.ple_context;
  s.replay.assign(record.tokens.begin(), record.tokens.begin() + keep);
  s.before_position = -1;
  state.position = record.pos0 + keep;
}

std::vector<float> CudaBackend::mtp_forward(std::span<const MtpSegment>) const {
  fail("CudaBackend: no MTP head on CUDA yet (the engine drafts n-gram copies)");
}

}  // namespace ds::cuda
