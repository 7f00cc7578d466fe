#include "backend/cuda/engine/cuda_backend.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_error.h"
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
  int64_t before_quiet = 0;  // re-run rows that rode ahead of that window (its record holds them first)
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
  size_t bytes() const override { return current.device.bytes() + current.kept.bytes() + before.bytes(); }
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
  // A measuring switch: unset or empty -> `fallback`, "0" or "1"; anything else fails naming the variable
  // (a mistyped value must not quietly measure the other path).
  auto env_flag = [](const char* name, bool fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || v[0] == '\0') return fallback;
    const std::string s(v);
    if (s != "0" && s != "1") fail("{} must be 0 or 1 (got '{}')", name, s);
    return s == "1";
  };
  // DS_CUDA_DRAFTS_LEGACY=1: the earlier draft forms (one graph per round, no window graphs or merged
  // re-runs), for comparison; DS_CUDA_WINDOW_GRAPHS=0 / DS_CUDA_MERGED_RERUNS=0 turn off one part of the
  // parked forms.
  if (env_flag("DS_CUDA_DRAFTS_LEGACY", false)) {
    window_graphs_ = merge_reruns_ = false;
    model_->set_parked_graphs(1, true);
  } else {
    // One-off shapes (a prompt run as a window) launch directly; a shape seen twice gets its graph.
    model_->set_parked_graphs(std::max(model_->options().parked_graphs, 2), false);
    if (!env_flag("DS_CUDA_WINDOW_GRAPHS", true)) window_graphs_ = false;
    if (!env_flag("DS_CUDA_MERGED_RERUNS", true)) merge_reruns_ = false;
  }
  time_phases_ = env_flag("DS_CUDA_PHASES", false);
  // The head's hidden rows stay on the device (the default); DS_CUDA_HOST_HIDDEN=1: the earlier round trip
  // through the host, to measure against.
  keep_hidden_ = !env_flag("DS_CUDA_HOST_HIDDEN", false);
}

CudaBackend::~CudaBackend() {
  if (time_phases_ && !phases_.empty()) std::fputs(phase_table().c_str(), stderr);
}

void CudaBackend::add_phase(const char* name, int64_t rows,
                            std::chrono::steady_clock::time_point start) const {
  if (!time_phases_) return;
  // The host's wall time of the call, the device's work included (every call ends in a sync).
  Phase& p = phases_[name];
  ++p.calls;
  p.rows += rows;
  p.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

const char* CudaBackend::round_phase(const Call& c) const {
  if (c.prompt) return "round with prompt rows";
  if (c.reruns > 0) return "round: windows + re-run rows";
  return c.steps_only ? "round: one row a stream" : "round: draft windows";
}

std::string CudaBackend::phase_table() const {
  std::string out = "[cuda phases: calls, rows, host ms, ms a call]\n";
  double total = 0;
  for (const auto& [name, p] : phases_) {
    out += fmt::format("  {:<32} {:>6} {:>7} {:>9.2f} {:>7.3f}\n", name, p.calls, p.rows, p.ms,
                       p.calls > 0 ? p.ms / static_cast<double>(p.calls) : 0.0);
    total += p.ms;
  }
  const CudaModel::LaunchCounts& l = model_->launch_counts();
  out += fmt::format("  {:<32} {:>24.2f}\n", "all phases", total);
  out += fmt::format("  graph captures {} ({:.2f} host ms, inside the phases), replays {}, direct calls {}\n",
                     l.captures, l.capture_ms, l.replays, l.direct);
  return out;
}

std::string CudaBackend::failure() const {
  return LostContext::message();
}

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
  s->current = model_->new_state();  // zeroed on the model's stream, so before any forward that takes it
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
    if (s.replay.empty() || joins_replay(sg)) continue;
    runs.push_back({&s.current, s.replay, false});
    owners.push_back(&s);
  }
  if (runs.empty()) return;
  const auto start = std::chrono::steady_clock::now();
  // A shape seen before replays its parked graph, a new one launches directly (the earlier form: always
  // directly, since a capture would evict the round's one graph).
  model_->set_graphs(graphs_ && window_graphs_);
  model_->forward_greedy(runs);
  add_phase("re-run pass", static_cast<int64_t>(runs.size()), start);
  for (CudaEngineState* s : owners) {
    replay_rows_ += static_cast<int64_t>(s->replay.size());
    s->replay.clear();
  }
  ++replays_;
}

// The call's CudaSegments: replays flushed or joined ahead of their windows, window records taken, hidden
// rows placed in one device scratch.
CudaBackend::Call CudaBackend::prepare(std::span<const ForwardSegment> segments) const {
  flush_replays(segments);
  Call c;
  c.runs.reserve(segments.size());
  c.joined.resize(segments.size());
  c.quiet.assign(segments.size(), 0);
  for (size_t i = 0; i < segments.size(); ++i) {
    CudaEngineState& s = state_of(*segments[i].state, *model_, "CudaBackend::forward");
    if (s.replay.empty()) continue;  // flushed above unless it rides along
    c.quiet[i] = s.replay.size();
    c.joined[i] = std::move(s.replay);
    c.joined[i].insert(c.joined[i].end(), segments[i].tokens.begin(), segments[i].tokens.end());
    s.replay.clear();
    replay_rows_ += static_cast<int64_t>(c.quiet[i]);
    c.reruns += c.quiet[i];
  }
  if (c.reruns > 0) ++replays_;
  // Hidden rows for the MTP head: one device scratch, each wanting segment's rows (re-run rows first, not
  // read back) at its offset.
  const auto W = static_cast<size_t>(mtp_hidden_width());
  c.hidden_at.assign(segments.size(), SIZE_MAX);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (segments[i].keep_hidden && !keep_hidden_)
      fail("CudaBackend::forward: keep_hidden asked for, but this backend returns hidden rows to the host");
    if ((segments[i].keep_hidden || segments[i].hidden != nullptr) && W == 0)
      fail("CudaBackend::forward: hidden rows asked for, but the model has no MTP head");
    if (segments[i].hidden == nullptr) continue;
    c.hidden_at[i] = c.hidden_floats;
    c.hidden_floats += (c.quiet[i] + segments[i].tokens.size()) * W;
  }
  c.hidden_dev = c.hidden_floats > 0 ? hidden_scratch(hidden_rows_, c.hidden_floats) : nullptr;
  for (size_t i = 0; i < segments.size(); ++i) {
    const ForwardSegment& sg = segments[i];
    CudaEngineState& s = state_of(*sg.state, *model_, "CudaBackend::forward");
    const std::span<const int32_t> tokens =
        c.quiet[i] > 0 ? std::span<const int32_t>(c.joined[i]) : std::span<const int32_t>(sg.tokens);
    if (sg.record != nullptr) {
      // What rewind() needs: the position, PLE context and recurrent parts before the call's rows (the
      // re-run rows ahead of the window included), its tokens.
      WindowRecord& r = *sg.record;
      r.pos0 = s.current.position;
      r.count = static_cast<int64_t>(tokens.size());
      r.tokens.assign(tokens.begin(), tokens.end());
      r.ple_context = s.current.ple_context;
      model_->save_recurrent(s.current, s.before);
      s.before_position = s.current.position;
      s.before_quiet = static_cast<int64_t>(c.quiet[i]);
    }
    // Prompt segments take the prompt path with prompt_path_, else run as decode windows (the same bits).
    const bool as_prompt = prompt_path_ && sg.prompt;
    CudaSegment run{&s.current, tokens, sg.all_logits, as_prompt,
                    c.hidden_at[i] == SIZE_MAX ? nullptr : c.hidden_dev + c.hidden_at[i]};
    run.quiet_rows = static_cast<int64_t>(c.quiet[i]);
    if (sg.keep_hidden) {
      // Kept on the device from the head's next row (the stream's mtp_position) to the call's last.
      run.keep_hidden = true;
      model_->reserve_kept_rows(s.current, sg.state->mtp_position,
                                s.current.position + static_cast<int64_t>(tokens.size()));
    }
    c.runs.push_back(run);
    c.steps_only = c.steps_only && (as_prompt || (!sg.prompt && tokens.size() == 1));
    (as_prompt ? c.prompt : c.decode) = true;
    if (!as_prompt) c.rows += tokens.size();
  }
  return c;
}

// After the call: the engine's positions follow the device states; hidden rows go to the host. `synced`: the
// call's last step already waited for the stream (host logits, or the sampler's tokens).
void CudaBackend::finish(std::span<const ForwardSegment> segments, const Call& c, bool synced) const {
  for (size_t i = 0; i < segments.size(); ++i) segments[i].state->position = c.runs[i].state->position;
  if (c.hidden_floats == 0 && synced) return;
  const auto W = static_cast<size_t>(mtp_hidden_width());
  for (size_t i = 0; i < segments.size(); ++i)
    if (c.hidden_at[i] != SIZE_MAX)
      check(cudaMemcpyAsync(segments[i].hidden, c.hidden_dev + c.hidden_at[i] + c.quiet[i] * W,
                            segments[i].tokens.size() * W * sizeof(float), cudaMemcpyDeviceToHost,
                            model_->stream()),
            "CudaBackend::forward: hidden rows to the host");
  // Also a call that drew no row and kept no hidden rows (a prompt piece short of the prompt's end): the next
  // call rewrites the pinned staging its upload may still be reading.
  check(cudaStreamSynchronize(model_->stream()), "CudaBackend::forward");
}

std::vector<float> CudaBackend::forward(std::span<const ForwardSegment> segments) const {
  const auto start = std::chrono::steady_clock::now();
  const Call c = prepare(segments);
  std::vector<float> logits = forward_split(c.runs, c.steps_only);
  finish(segments, c, true);
  add_phase(round_phase(c), static_cast<int64_t>(c.rows), start);
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
  const auto start = std::chrono::steady_clock::now();
  const Call c = prepare(segments);
  float* logits = nullptr;
  int64_t n = 0;
  if (!(c.prompt && c.decode)) {
    model_->set_graphs(graphs_ && (c.steps_only || window_graphs_));
    logits = model_->forward_on_device(c.runs, &n);
  }
  if (logits == nullptr) {
    const std::vector<float> host = forward_split(c.runs, c.steps_only);
    finish(segments, c, true);
    add_phase(round_phase(c), static_cast<int64_t>(c.rows), start);
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
  finish(segments, c, !drawn.empty());  // the sampler waits for its tokens when it draws any
  add_phase(round_phase(c), static_cast<int64_t>(c.rows), start);
  return out;
}

// A CudaModel call is all prompt or all decode: a mixed round becomes a prompt call and a decode call, their
// logits rows joined back in segment order.
std::vector<float> CudaBackend::forward_split(std::span<const CudaSegment> runs, bool steps_only) const {
  std::vector<CudaSegment> prompt, decode;
  for (const CudaSegment& r : runs) (r.prompt ? prompt : decode).push_back(r);
  // Decode rounds replay the graph parked for their shape (draft windows too, unless in the earlier form);
  // prompt passes launch directly.
  model_->set_graphs(graphs_ && (steps_only || window_graphs_));
  if (prompt.empty() || decode.empty()) return model_->forward(runs);
  const std::vector<float> from_prompt = model_->forward(prompt), from_decode = model_->forward(decode);
  const auto V = static_cast<size_t>(model_->config().vocab_size);
  std::vector<float> logits;
  logits.reserve(from_prompt.size() + from_decode.size());
  size_t at_prompt = 0, at_decode = 0;
  for (const CudaSegment& r : runs) {
    // Re-run rows riding ahead of a window return no logits (CudaSegment::quiet_rows).
    const size_t n = (r.all_logits ? r.tokens.size() - static_cast<size_t>(r.quiet_rows) : 1) * V;
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
  // The record starts with the re-run rows that rode ahead of the engine's window (before_quiet of them).
  const int64_t quiet = s.before_quiet;
  if (keep < 1 || keep > record.count - quiet)
    fail("CudaBackend::rewind: keep {} is outside the window's 1..{} rows", keep, record.count - quiet);
  if (s.before_position != record.pos0 || s.current.position != record.pos0 + record.count ||
      !s.replay.empty())
    fail("CudaBackend::rewind: the state is not just after the recorded window (at {}, window {}..{})",
         s.current.position, record.pos0, record.pos0 + record.count);
  model_->restore_recurrent(s.before, s.current);
  s.current.position = record.pos0;
  s.current.ple_context = record.ple_context;
  s.replay.assign(record.tokens.begin(), record.tokens.begin() + quiet + keep);
  s.before_position = -1;
  s.before_quiet = 0;
  state.position = record.pos0 + quiet + keep;
}

// The host's MtpSegments as CudaMtpSegments: given hidden rows up to the device and output rows back, or
// (keeps_hidden_rows) the stream's kept rows and kept output row read and written where they are. The head's
// cache length is StreamState::mtp_position (truncate_mtp on the host moves only that): the device state
// follows it here, dropping entries a rollback left behind (they are rewritten before any row reads them).
std::vector<float> CudaBackend::mtp_forward(std::span<const MtpSegment> segments) const {
  if (!model_->has_mtp()) fail("CudaBackend::mtp_forward: the model has no MTP head");
  const auto start = std::chrono::steady_clock::now();
  const auto W = static_cast<size_t>(model_->mtp_hidden_width());
  size_t in_floats = 0, out_floats = 0;
  bool chain = true, follow = true;  // every segment a one-row chain step / prompt rows without logits
  int64_t head_rows = 0;
  for (const MtpSegment& sg : segments) {
    const size_t rows = sg.next_tokens.size();
    chain = chain && rows == 1 && (sg.hidden_out != nullptr || sg.keep_output) && sg.logits == MtpLogits::All;
    follow = follow && sg.logits == MtpLogits::None;
    head_rows += static_cast<int64_t>(rows);
    if (sg.input != MtpInput::Given || sg.keep_output) {
      if (!keep_hidden_)
        fail(
            "CudaBackend::mtp_forward: kept hidden rows asked for, but this backend returns them to the "
            "host");
      if (!sg.hidden.empty() || sg.hidden_out != nullptr)
        fail("CudaBackend::mtp_forward: a segment with kept rows also gives host rows");
      if (sg.input == MtpInput::KeptOutput && rows != 1)
        fail("CudaBackend::mtp_forward: {} rows from the one kept output row", rows);
    }
    if (sg.input != MtpInput::Given) continue;
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
    CudaMtpSegment run{&s.current, nullptr, sg.next_tokens, sg.position, nullptr, sg.logits};
    KeptHiddenRows& kept = s.current.kept;
    if (sg.input == MtpInput::Given) {
      check(cudaMemcpyAsync(in_dev + in_at, sg.hidden.data(), sg.hidden.size() * sizeof(float),
                            cudaMemcpyHostToDevice, model_->stream()),
            "CudaBackend::mtp_forward: hidden rows to the device");
      run.hidden = in_dev + in_at;
      in_at += sg.hidden.size();
    } else if (sg.input == MtpInput::KeptRows) {
      run.from_kept = true;
    } else {
      if (kept.last_out.bytes() != W * sizeof(float))
        fail("CudaBackend::mtp_forward: no kept output row to chain from (no head call kept one)");
      run.hidden = kept.last_out.as<float>();  // in place: read, then rewritten by this call
    }
    if (sg.hidden_out != nullptr) {
      run.hidden_out = out_dev + out_at;
      out_at += sg.hidden.size();
    }
    if (sg.keep_output) {
      if (kept.last_out.bytes() != W * sizeof(float)) kept.last_out = DeviceBuffer(W * sizeof(float));
      run.keep_last_out = true;
    }
    runs.push_back(run);
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
  add_phase(chain ? "head: chain steps" : follow ? "head: prompt rows" : "head: catch-up", head_rows, start);
  return logits;
}

}  // namespace ds::cuda
