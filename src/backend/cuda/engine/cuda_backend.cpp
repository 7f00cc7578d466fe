#include "backend/cuda/engine/cuda_backend.h"

#include <algorithm>
#include <cstdint>

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

CudaBackend::CudaBackend(std::unique_ptr<CudaModel> model, bool prompt_path)
    : model_(std::move(model)), prompt_path_(prompt_path) {
  if (!model_) fail("CudaBackend: no model");
  graphs_ = model_->options().graphs;
}

CudaBackend::~CudaBackend() = default;

int64_t CudaBackend::prompt_rows_per_round() const {
  return prompt_path_ ? model_->options().prompt_pass_rows : ModelBackend::prompt_rows_per_round();
}

int64_t CudaBackend::cache_mark_interval() const {
  return prompt_path_ ? model_->options().prompt_pass_rows : ModelBackend::cache_mark_interval();
}

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

// The call's CudaSegments: replays flushed, window records taken, hidden rows placed in one device scratch.
CudaBackend::Call CudaBackend::prepare(std::span<const ForwardSegment> segments) const {
  flush_replays(segments);
  Call c;
  c.runs.reserve(segments.size());
  // Hidden rows for the MTP head: one device scratch, each wanting segment's rows at its offset.
  const auto W = static_cast<size_t>(mtp_hidden_width());
  c.hidden_at.assign(segments.size(), SIZE_MAX);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].hidden == nullptr) continue;
    if (W == 0) fail("CudaBackend::forward: hidden rows asked for, but the model has no MTP head");
    c.hidden_at[i] = c.hidden_floats;
    c.hidden_floats += segments[i].tokens.size() * W;
  }
  c.hidden_dev = c.hidden_floats > 0 ? hidden_scratch(hidden_rows_, c.hidden_floats) : nullptr;
  for (size_t i = 0; i < segments.size(); ++i) {
    const ForwardSegment& sg = segments[i];
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
    // Prompt segments take the prompt path with prompt_path_, else run as decode windows (the same bits).
    const bool as_prompt = prompt_path_ && sg.prompt;
    c.runs.push_back({&s.current, sg.tokens, sg.all_logits, as_prompt,
                      c.hidden_at[i] == SIZE_MAX ? nullptr : c.hidden_dev + c.hidden_at[i]});
    c.steps_only = c.steps_only && (as_prompt || (!sg.prompt && sg.tokens.size() == 1));
    (as_prompt ? c.prompt : c.decode) = true;
  }
  return c;
}

// After the call: the engine's positions follow the device states; hidden rows go to the host.
void CudaBackend::finish(std::span<const ForwardSegment> segments, const Call& c) const {
  for (size_t i = 0; i < segments.size(); ++i) segments[i].state->position = c.runs[i].state->position;
  if (c.hidden_floats == 0) return;
  const auto W = static_cast<size_t>(mtp_hidden_width());
  for (size_t i = 0; i < segments.size(); ++i)
    if (c.hidden_at[i] != SIZE_MAX)
      check(cudaMemcpyAsync(segments[i].hidden, c.hidden_dev + c.hidden_at[i],
                            segments[i].tokens.size() * W * sizeof(float), cudaMemcpyDeviceToHost,
                            model_->stream()),
            "CudaBackend::forward: hidden rows to the host");
  check(cudaStreamSynchronize(model_->stream()), "CudaBackend::forward");
}

std::vector<float> CudaBackend::forward(std::span<const ForwardSegment> segments) const {
  const Call c = prepare(segments);
  std::vector<float> logits = forward_split(c.runs, c.steps_only);
  finish(segments, c);
  return logits;
}

// One CudaModel call with the logits left on the device: Host rows copied back, Draw rows drawn there by the
// DeviceSampler. A mixed round (two calls) or a call in prompt passes draws on the host (the same tokens).
DrawnRows CudaBackend::forward_rows(std::span<const ForwardSegment> segments,
                                    std::span<const RowDraw> rows) const {
  const int64_t V = model_->config().vocab_size;
  std::vector<RowDraw> uses(rows.begin(), rows.end());
  // Top-k / top-p rows are drawn on the device too unless turned off (set_device_filters(false): the host's
  // KeyedSampler, each row's logits copied back; the same tokens either way).
  if (!device_filters_)
    for (RowDraw& u : uses)
      if (u.use == RowUse::Draw && u.params != nullptr &&
          (u.params->top_k_active() || u.params->top_p_active()))
        u.use = RowUse::Host;
  const PackedDraws packed = pack_draws(uses, V);  // rows the device does not take become Host
  const Call c = prepare(segments);
  float* logits = nullptr;
  int64_t n = 0;
  if (!(c.prompt && c.decode)) {
    model_->set_graphs(graphs_ && c.steps_only);
    logits = model_->forward_on_device(c.runs, &n);
  }
  if (logits == nullptr) {
    const std::vector<float> host = forward_split(c.runs, c.steps_only);
    finish(segments, c);
    return draw_rows_on_host(host, V, uses);
  }
  if (n != static_cast<int64_t>(uses.size()))
    fail("CudaBackend::forward_rows: {} row uses for a call of {} logits rows", uses.size(), n);
  DrawnRows out;
  out.tokens.assign(uses.size(), kRowSkipped);
  size_t host = 0;
  for (const RowDraw& u : uses) host += u.use == RowUse::Host ? 1 : 0;
  out.logits.resize(host * static_cast<size_t>(V));
  host = 0;
  for (size_t i = 0; i < uses.size(); ++i) {
    if (uses[i].use != RowUse::Host) continue;
    out.tokens[i] = kRowOnHost;
    check(cudaMemcpyAsync(out.logits.data() + host++ * V, logits + i * V, V * sizeof(float),
                          cudaMemcpyDeviceToHost, model_->stream()),
          "CudaBackend::forward_rows: logits rows to the host");
  }
  const std::vector<int32_t> drawn = sampler_.draw(logits, V, packed, model_->stream());
  for (size_t k = 0; k < drawn.size(); ++k) out.tokens[static_cast<size_t>(packed.rows[k].row)] = drawn[k];
  draws_ += static_cast<int64_t>(drawn.size());
  finish(segments, c);
  return out;
}

// A CudaModel call is all prompt or all decode: a mixed round becomes a prompt call and a decode call, their
// logits rows joined back in segment order.
std::vector<float> CudaBackend::forward_split(std::span<const CudaSegment> runs, bool steps_only) const {
  std::vector<CudaSegment> prompt, decode;
  for (const CudaSegment& r : runs) (r.prompt ? prompt : decode).push_back(r);
  // Plain decode rounds repeat their shape and replay the model's one CUDA graph; prompt pieces and draft
  // windows (their depth changes round to round) would each capture a new graph and evict it.
  model_->set_graphs(graphs_ && steps_only);
  if (prompt.empty() || decode.empty()) return model_->forward(runs);
  const std::vector<float> from_prompt = model_->forward(prompt), from_decode = model_->forward(decode);
  const auto V = static_cast<size_t>(model_->config().vocab_size);
  std::vector<float> logits;
  logits.reserve(from_prompt.size() + from_decode.size());
  size_t at_prompt = 0, at_decode = 0;
  for (const CudaSegment& r : runs) {
    const size_t n = (r.all_logits ? r.tokens.size() : 1) * V;
    const std::vector<float>& from = r.prompt ? from_prompt : from_decode;
    size_t& at = r.prompt ? at_prompt : at_decode;
    if (at + n > from.size())
      fail("CudaBackend::forward: the {} call returned {} logits floats, fewer than its segments' rows",
           r.prompt ? "prompt" : "decode", from.size());
    logits.insert(logits.end(), from.begin() + static_cast<std::ptrdiff_t>(at),
                  from.begin() + static_cast<std::ptrdiff_t>(at + n));
    at += n;
  }
  if (at_prompt != from_prompt.size() || at_decode != from_decode.size())
    fail("CudaBackend::forward: {} + {} logits floats returned, {} + {} expected", from_prompt.size(),
         from_decode.size(), at_prompt, at_decode);
  return logits;
}

float* CudaBackend::hidden_scratch(DeviceBuffer& buffer, size_t floats) const {
  if (buffer.bytes() < floats * sizeof(float)) {
    // The model's stream may still read the old buffer (an earlier call's rows).
    check(cudaStreamSynchronize(model_->stream()), "CudaBackend: hidden scratch");
    buffer = DeviceBuffer(floats * sizeof(float));
  }
  return buffer.as<float>();
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

// The host's MtpSegments as CudaMtpSegments: hidden rows up to the device, output hidden rows back. The
// head's cache length is StreamState::mtp_position (truncate_mtp on the host moves only that): the device
// state follows it here, dropping entries a rollback left behind (they are rewritten before any row reads
// them).
std::vector<float> CudaBackend::mtp_forward(std::span<const MtpSegment> segments) const {
  if (!model_->has_mtp()) fail("CudaBackend::mtp_forward: the model has no MTP head");
  const auto W = static_cast<size_t>(model_->mtp_hidden_width());
  size_t in_floats = 0, out_floats = 0;
  for (const MtpSegment& sg : segments) {
    const size_t rows = sg.next_tokens.size();
    if (sg.hidden.size() != rows * W)
      fail("CudaBackend::mtp_forward: {} hidden floats for {} rows of {}", sg.hidden.size(), rows, W);
    in_floats += rows * W;
    if (sg.hidden_out != nullptr) out_floats += rows * W;
  }
  float* in_dev = in_floats > 0 ? hidden_scratch(hidden_rows_, in_floats) : nullptr;
  float* out_dev = out_floats > 0 ? hidden_scratch(hidden_out_, out_floats) : nullptr;
  std::vector<CudaMtpSegment> runs;
  runs.reserve(segments.size());
  size_t in_at = 0, out_at = 0;
  for (const MtpSegment& sg : segments) {
    CudaEngineState& s = state_of(*sg.state, *model_, "CudaBackend::mtp_forward");
    if (sg.state->mtp_position > s.current.mtp_position)
      fail("CudaBackend::mtp_forward: the stream's head position {} is past its device cache's {}",
           sg.state->mtp_position, s.current.mtp_position);
    s.current.truncate_mtp(sg.state->mtp_position);
    check(cudaMemcpyAsync(in_dev + in_at, sg.hidden.data(), sg.hidden.size() * sizeof(float),
                          cudaMemcpyHostToDevice, model_->stream()),
          "CudaBackend::mtp_forward: hidden rows to the device");
    runs.push_back({&s.current, in_dev + in_at, sg.next_tokens, sg.position,
                    sg.hidden_out != nullptr ? out_dev + out_at : nullptr, sg.logits});
    in_at += sg.hidden.size();
    if (sg.hidden_out != nullptr) out_at += sg.hidden.size();
  }
  std::vector<float> logits = model_->mtp_forward(runs);
  out_at = 0;
  for (size_t i = 0; i < segments.size(); ++i) {
    const MtpSegment& sg = segments[i];
    sg.state->mtp_position = runs[i].state->mtp_position;
    if (sg.hidden_out == nullptr) continue;
    check(cudaMemcpyAsync(sg.hidden_out, out_dev + out_at, sg.hidden.size() * sizeof(float),
                          cudaMemcpyDeviceToHost, model_->stream()),
          "CudaBackend::mtp_forward: output hidden rows to the host");
    out_at += sg.hidden.size();
  }
  if (out_floats > 0) check(cudaStreamSynchronize(model_->stream()), "CudaBackend::mtp_forward");
  return logits;
}

}  // namespace ds::cuda
