// One round: a single Model::forward over every running stream's decode window, prompt pieces of streams
// still prefilling, and warm-pass pieces, then the draws, the cache marks and the events.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>

#include "core/error.h"
#include "runtime/engine_impl.h"

namespace ds {
namespace {

constexpr int64_t kGrid = PromptCache::kGrid;

double seconds(EngineClock::time_point a, EngineClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The last grid point a later request can resume a prompt of `len` tokens from (one token must still run).
int64_t final_mark(int64_t len) {
  return (len - 1) / kGrid * kGrid;
}

// Whether the state at `pos` is stored in the cache: a multiple of the mark spacing, or the final mark.
bool is_mark(int64_t pos, int64_t mark_every, int64_t final) {
  return pos > 0 && (pos % mark_every == 0 || pos == final);
}

// The end of the next prompt piece from `pos` (on the grid, or `len`). With the cache on (mark_every > 0) a
// piece stops at the next mark (a multiple of mark_every, or `final`), so every mark is a piece end; the
// budget may cut it sooner at a grid point. `pos` when not one grid chunk fits the budget.
int64_t piece_end(int64_t pos, int64_t len, int64_t budget, int64_t mark_every, int64_t final) {
  int64_t end = len;
  if (mark_every > 0) {
    end = std::min(end, (pos / mark_every + 1) * mark_every);
    if (final > pos) end = std::min(end, final);
  }
  if (end - pos <= budget) return end;
  return std::max(pos, (pos + budget) / kGrid * kGrid);
}

enum class RowKind { Decode, Prompt, Warm };

struct RowOwner {
  RowKind kind;
  Stream* stream = nullptr;
  WarmJob* warm = nullptr;
  int64_t rows = 1;           // logits rows this segment returns
  int64_t position = 0;       // the stream's position before the round
  size_t generated = 0;       // the stream's reply tokens before the round
  bool head = false;          // every row's H captured for the MTP head (in `hidden`, or kept by the backend)
  std::vector<float> hidden;  // those rows on the host (a backend that does not keep them)
};

// What each logits row of the round is for, when the backend draws: a decode window's rows and the last row
// of a prompt's final piece are drawn (on the host when the request wants logprobs); other rows are unread.
std::vector<RowDraw> row_uses(std::span<const RowOwner> owners, std::span<const ForwardSegment> segs) {
  std::vector<RowDraw> uses;
  for (size_t i = 0; i < owners.size(); ++i) {
    const RowOwner& o = owners[i];
    const Stream* s = o.stream;
    const bool drawn =
        s != nullptr && (o.kind == RowKind::Decode ||
                         o.position + static_cast<int64_t>(segs[i].tokens.size()) == s->prompt_len());
    if (!drawn) {
      uses.insert(uses.end(), static_cast<size_t>(o.rows), row_with(RowUse::Skip));
      continue;
    }
    // Row r draws the token at this position + r, after the window's drafts 1..r (plain decoding's history).
    const int64_t next = s->prompt_len() + static_cast<int64_t>(s->generated.size());
    for (int64_t r = 0; r < o.rows; ++r) {
      RowDraw d;
      d.use = s->request.top_logprobs >= 0 ? RowUse::Host : RowUse::Draw;
      d.params = &s->request.sampling;
      d.position = next + r;
      d.history = &s->history;
      if (o.kind == RowKind::Decode) d.drafted = std::span<const int32_t>(s->window).subspan(1, r);
      uses.push_back(d);
    }
  }
  return uses;
}

}  // namespace

RoundRows::RoundRows(DrawnRows drawn, int64_t vocab, size_t rows) : drawn_(std::move(drawn)), vocab_(vocab) {
  if (drawn_.tokens.size() != rows)
    fail("forward_rows: {} row results for {} rows", drawn_.tokens.size(), rows);
  size_t host = 0;
  host_at_.resize(drawn_.tokens.size());
  for (size_t i = 0; i < drawn_.tokens.size(); ++i)
    host_at_[i] = drawn_.tokens[i] == kRowOnHost ? host++ : SIZE_MAX;
  if (host * static_cast<size_t>(vocab_) != drawn_.logits.size())
    fail("forward_rows: {} logits floats for {} host rows of {}", drawn_.logits.size(), host, vocab_);
}

std::span<const float> RoundRows::logits(size_t row) const {
  if (host_at_[row] == SIZE_MAX) return {};
  return std::span<const float>(drawn_.logits)
      .subspan(host_at_[row] * static_cast<size_t>(vocab_), static_cast<size_t>(vocab_));
}

std::mutex& forward_mutex() {
  static std::mutex m;
  return m;
}

void Engine::Impl::run_round() {
  std::vector<ForwardSegment> segs;
  std::vector<RowOwner> owners;
  owners.reserve(running.size() + warm.size());  // segments point into owners' hidden buffers
  // A stream's rows are captured for the MTP head while the head follows it (and drafts or caching want it):
  // into host rows, or kept by the backend (keeps_hidden_rows).
  const bool kept = model.keeps_hidden_rows();
  auto capture = [&](ForwardSegment& seg, RowOwner& o, int64_t rows, bool wanted, const StreamState& state) {
    if (!wanted || !captures_hidden(state)) return;
    o.head = true;
    if (kept) {
      seg.keep_hidden = true;
      return;
    }
    o.hidden.resize(static_cast<size_t>(rows * model.mtp_hidden_width()));
    seg.hidden = o.hidden.data();
  };
  const auto round_start = EngineClock::now();
  round_drafting = round_source_failed = round_catch_up = false;
  plan_windows();
  int64_t decode_rows = 0;
  for (auto& s : running)
    if (!s->done && !s->prefilling()) {
      // A window with drafts keeps its per-row states (rollback) and returns logits for every row.
      const bool drafts = s->window.size() > 1;
      const auto rows = static_cast<int64_t>(s->window.size());
      owners.push_back(
          {RowKind::Decode, s.get(), nullptr, rows, s->state.position, s->generated.size(), false, {}});
      segs.push_back({&s->state, s->window, false, drafts, nullptr, drafts ? &s->record : nullptr});
      capture(segs.back(), owners.back(), rows, s->drafting, s->state);
      decode_rows += static_cast<int64_t>(s->window.size());
    }
  int64_t budget = round_prompt_rows;
  for (auto& s : running) {
    if (s->done || !s->prefilling()) continue;
    const int64_t pos = s->state.position;
    const int64_t end =
        piece_end(pos, s->prompt_len(), budget, s->caching ? mark_interval : 0, final_mark(s->prompt_len()));
    if (end == pos) continue;
    owners.push_back({RowKind::Prompt, s.get(), nullptr, 1, pos, 0, false, {}});
    segs.push_back({&s->state, std::span<const int32_t>(s->request.prompt).subspan(pos, end - pos), true});
    capture(segs.back(), owners.back(), end - pos, s->drafting || s->caching, s->state);
    budget -= end - pos;
  }
  // Warm passes only take what prompts left over: they never delay a reply.
  for (auto& w : warm) {
    const int64_t pos = w.state.position, end = piece_end(pos, w.target, budget, mark_interval, w.target);
    if (end == pos) break;
    owners.push_back({RowKind::Warm, nullptr, &w, 1, pos, 0, false, {}});
    segs.push_back({&w.state, std::span<const int32_t>(w.tokens).subspan(pos, end - pos), true});
    capture(segs.back(), owners.back(), end - pos, true, w.state);
    budget -= end - pos;
  }
  if (segs.empty()) return;

  const int64_t V = model.config().vocab_size;
  int64_t rows = 0;
  for (const RowOwner& o : owners) rows += o.rows;
  std::optional<RoundRows> out;
  try {
    std::lock_guard lock(forward_mutex());
    const auto start = EngineClock::now();
    if (model.draws_rows()) {
      out.emplace(model.forward_rows(segs, row_uses(owners, segs)), V, static_cast<size_t>(rows));
    } else {
      out.emplace(DrawnRows{std::vector<int32_t>(static_cast<size_t>(rows), kRowOnHost), model.forward(segs)},
                  V, static_cast<size_t>(rows));
    }
    // Rounds of decode rows alone refine the cost table the draft depths are chosen by.
    if (decode_rows == rows) round_costs.observe(decode_rows, 1000.0 * seconds(start, EngineClock::now()));
  } catch (const std::exception& e) {
    // States of this round's streams may be half advanced: they end; warm passes are dropped.
    for (auto& o : owners)
      if (o.stream) finish(*o.stream, FinishReason::Error, fmt::format("forward failed: {}", e.what()));
    warm.clear();
    return;
  }

  // Prompt and warm rows go through the head now, so snapshots below hold its cache at the same mark.
  std::vector<HeadRows> follow;
  for (auto& o : owners) {
    if (o.kind == RowKind::Decode || !o.head) continue;
    StreamState& state = o.stream ? o.stream->state : o.warm->state;
    add_head_rows(model, state, o.hidden, state.position - o.position);
    const std::span<const int32_t> known = o.stream ? std::span<const int32_t>(o.stream->request.prompt)
                                                    : std::span<const int32_t>(o.warm->tokens);
    follow.push_back({&state, known, {}, {}, {}});
  }
  follow_prompt_rows(follow);

  size_t row = 0;
  for (size_t i = 0; i < owners.size(); ++i) {
    const RowOwner& o = owners[i];
    const size_t first = row, last = row + static_cast<size_t>(o.rows) - 1;
    row += static_cast<size_t>(o.rows);
    if (o.kind == RowKind::Warm) {
      if (is_mark(o.warm->state.position, mark_interval, o.warm->target))
        snapshot(std::span<const int32_t>(o.warm->tokens).first(o.warm->state.position), o.warm->state);
      continue;
    }
    Stream& s = *o.stream;
    if (s.done) continue;
    try {
      if (o.kind == RowKind::Prompt) {
        if (s.caching && is_mark(s.state.position, mark_interval, final_mark(s.prompt_len())))
          snapshot(std::span<const int32_t>(s.request.prompt).first(s.state.position), s.state);
        if (s.prefilling()) continue;
        s.first_token = EngineClock::now();
        draw(s, out->logits(last), out->token(last));
        continue;
      }
      verify(s, *out, first, o.rows);
      // The rows kept (the state's advance) are the ones the head reads next round.
      const int64_t kept = s.state.position - o.position;
      if (!s.done && o.head && kept > 0) add_head_rows(model, s.state, o.hidden, kept);
    } catch (const std::exception& e) {
      finish(s, FinishReason::Error, e.what());
    }
  }
  std::erase_if(warm, [](const WarmJob& w) { return w.state.position >= w.target; });
  if (options.draft_guard && decode_rows == rows && options.drafts && options.draft_depth == 0 &&
      round_costs.calibrated() && !round_source_failed) {
    // A round of decode rows alone, start to finish (the head's calls and the host's draws included).
    int64_t tokens = 0;
    for (const RowOwner& o : owners) tokens += static_cast<int64_t>(o.stream->generated.size() - o.generated);
    const auto streams = static_cast<int64_t>(owners.size());
    // A resting round whose head caught up is a plain round plus a head call: it counts toward the rest, but
    // its time is not a plain round's (it would raise the figure drafting is judged against).
    if (round_catch_up && !round_drafting)
      draft_guard.observe_catch_up();
    else
      draft_guard.observe(round_drafting, streams, tokens, 1000.0 * seconds(round_start, EngineClock::now()),
                          round_costs.cost(streams));
    std::lock_guard lock(mutex);
    stats.draft_rests = draft_guard.rests();
  }
  if (round_catch_up) {
    std::lock_guard lock(mutex);
    ++stats.draft_catch_ups;
  }
}

void Engine::Impl::draw(Stream& s, std::span<const float> row, int32_t drawn) {
  report(s, draw_token(s, row, drawn), row);
}

int32_t Engine::Impl::draw_token(Stream& s, std::span<const float> row, int32_t drawn) {
  // The drawn token occupies absolute position prompt_len + its index in the reply.
  const int64_t position = s.prompt_len() + static_cast<int64_t>(s.generated.size());
  if (row.empty() && drawn < 0)
    fail("{}", drawn == kNothingDrawable ? kNothingDrawableMessage
                                         : "a row to draw was neither drawn nor returned");
  const int32_t t = row.empty() ? drawn : sampler.sample(row, s.request.sampling, position, s.history);
  s.history.add_generated(t);
  s.generated.push_back(t);
  s.window.assign(1, t);
  {
    std::lock_guard lock(mutex);
    ++stats.completion_tokens_total;
  }
  return t;
}

// The token's event, or the final event when it ends the reply.
void Engine::Impl::report(Stream& s, int32_t t, std::span<const float> row) {
  const GenerationRequest& r = s.request;
  TokenEvent ev;
  ev.token = t;
  if (r.top_logprobs >= 0) {
    if (row.empty()) fail("logprobs asked for, but the row was drawn on the device");  // row_uses keeps it
    ev.logprobs = raw_logprobs(row, {}, t, r.top_logprobs);
  }
  const auto& eos = model.config().eos_ids;
  const bool stop = (!r.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end()) ||
                    std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), t) != r.stop_token_ids.end();
  if (stop || static_cast<int64_t>(s.generated.size()) >= r.max_tokens) {
    // The last token travels on the final event.
    finish(s, stop ? FinishReason::Stop : FinishReason::Length, {}, &ev);
    return;
  }
  emit(s, ev);
}

void Engine::Impl::emit(Stream& s, const TokenEvent& ev) {
  try {
    s.on_event(ev);
  } catch (const std::exception& e) {
    if (!ev.finished) finish(s, FinishReason::Error, fmt::format("the event callback threw: {}", e.what()));
  } catch (...) {
    if (!ev.finished) finish(s, FinishReason::Error, "the event callback threw");
  }
}

void Engine::Impl::finish(Stream& s, FinishReason reason, const std::string& error, const TokenEvent* last) {
  if (s.done) return;
  s.done = true;
  TokenEvent ev = last ? *last : TokenEvent{};
  ev.finished = true;
  ev.reason = reason;
  ev.error = error;
  ev.prompt_tokens = s.prompt_len();
  ev.completion_tokens = static_cast<int64_t>(s.generated.size());
  ev.cached_tokens = s.cached_tokens;
  ev.drafted_tokens = s.drafted;
  ev.accepted_tokens = s.accepted;
  const auto now = EngineClock::now();
  const bool started = !s.generated.empty();
  ev.prefill_seconds = seconds(s.admitted, started ? s.first_token : now);
  ev.decode_seconds = started ? seconds(s.first_token, now) : 0;
  if (s.caching && (reason == FinishReason::Stop || reason == FinishReason::Length)) {
    try {
      queue_warm_pass(s);
    } catch (const std::exception&) {
      // A warm pass is only an optimisation; the reply is already complete.
    }
  }
  {
    // Published before the final event, so a caller that saw it also sees the slot free and the warm pass.
    std::lock_guard lock(mutex);
    active.erase(s.id);
    if (s.counted) --stats.running;
    stats.warm_pending = static_cast<int64_t>(warm.size());
  }
  emit(s, ev);
}

void Engine::Impl::snapshot(std::span<const int32_t> tokens, const StreamState& state) {
  cache.set_capacity(cache_budget());
  try {
    cache.insert(tokens, state);
  } catch (const std::exception&) {
    // A copy that cannot be made (no GPU memory for it) only leaves the cache without this mark; the stream
    // that reached it, and a warm pass's neighbours in the round, go on (insert leaves the cache consistent).
  }
}

// Re-runs prompt + reply as a prompt pass from the longest cached mark, so the next chat turn resumes from
// the states a fresh server would compute (decode-path states never enter the cache).
void Engine::Impl::queue_warm_pass(const Stream& s) {
  WarmJob w;
  w.tokens = s.request.prompt;
  w.tokens.insert(w.tokens.end(), s.generated.begin(), s.generated.end());
  w.target = static_cast<int64_t>(w.tokens.size()) / kGrid * kGrid;
  if (w.target == 0) return;
  auto hit = cache.find(w.tokens, w.target);
  if (hit && hit->length == w.target) return;
  // Not `hit ? *hit->state : new_state()`: that conditional is a const prvalue, so a fresh state would be
  // copied (on a GPU a second whole device state allocated and filled).
  if (hit)
    w.state = *hit->state;
  else
    w.state = model.new_state();
  warm.push_back(std::move(w));
}

void Engine::Impl::sweep_done() {
  std::erase_if(running, [](const std::unique_ptr<Stream>& s) { return s->done; });
}

}  // namespace ds
