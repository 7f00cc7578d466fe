// Speculative decoding that never changes a reply: each decoding stream's window is its last drawn token plus
// drafts; every row is drawn at its absolute position exactly as plain decoding would draw it, drafts are
// kept while they equal the drawn token, and the state is rewound to the last row whose input was real.
#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "runtime/engine_impl.h"

namespace ds {

namespace {

double ms_since(EngineClock::time_point start) {
  return std::chrono::duration<double, std::milli>(EngineClock::now() - start).count();
}

// Passes over all widths at calibration; each width keeps its fastest.
constexpr int kCalibrationPasses = 3;
// Calibration reuses one scratch state (a new state a call costs an allocation on a GPU) until it would pass
// this many positions.
constexpr int64_t kCalibrationPositions = 128;

}  // namespace

// Times a verify window of each width on a scratch state, before the first drafted round; with the
// MTP head as the source, also the head's catch-up call by rows and its chain call by streams. Each call is
// shaped as the drafted rounds' (hidden rows captured, the head's output rows), so a backend that keeps
// work by call shape (CUDA graphs) has it ready for them.
void Engine::Impl::calibrate_costs() {
  const auto calibration_start = EngineClock::now();
  const int64_t widths = static_cast<int64_t>(options.max_drafts) + 1;
  const int64_t vocab = model.config().vocab_size;
  auto tokens_of = [&](int64_t rows) {
    std::vector<int32_t> tokens(rows);
    for (int64_t i = 0; i < rows; ++i) tokens[i] = static_cast<int32_t>((i + 3) % vocab);
    return tokens;
  };
  // A window's rows drawn as a round draws them: on the backend's device when it draws (greedy), else logits
  // to the host, so the table and the rounds it is refined by (RoundCosts::observe) time the same work.
  SamplingParams greedy;
  greedy.temperature = 0;
  const TokenCounts no_history;
  const bool head = drafter->uses_hidden() && model.has_mtp();
  const auto W = static_cast<size_t>(head ? model.mtp_hidden_width() : 0);
  const int64_t positions = std::min(kCalibrationPositions, model.max_context());
  StreamState scratch = model.new_state();
  std::vector<float> hidden_rows(static_cast<size_t>(widths) * W);
  round_costs.calibrate(
      widths,
      [&](int64_t rows) {
        const std::vector<int32_t> tokens = tokens_of(rows);
        if (scratch.position + rows > positions) scratch = model.new_state();
        WindowRecord record;
        ForwardSegment seg{&scratch, tokens, false, rows > 1, nullptr, rows > 1 ? &record : nullptr};
        if (head && model.keeps_hidden_rows())
          seg.keep_hidden = true;
        else if (head)
          seg.hidden = hidden_rows.data();
        std::vector<RowDraw> uses(static_cast<size_t>(rows), row_with(RowUse::Draw));
        for (int64_t i = 0; i < rows; ++i) {
          uses[static_cast<size_t>(i)].params = &greedy;
          uses[static_cast<size_t>(i)].position = i;
          uses[static_cast<size_t>(i)].history = &no_history;
        }
        std::lock_guard lock(forward_mutex());
        const auto start = EngineClock::now();
        if (model.draws_rows())
          model.forward_rows({&seg, 1}, uses);
        else
          model.forward({&seg, 1});
        return ms_since(start);
      },
      kCalibrationPasses);
  if (!head) {
    note_calibration(ms_since(calibration_start));
    return;
  }
  scratch = model.new_state();
  head_costs.catch_up.calibrate(
      widths,
      [&](int64_t rows) {
        const std::vector<int32_t> tokens = tokens_of(rows);
        const std::vector<float> hidden(rows * W, 0.5f);
        std::vector<float> out(rows * W);
        if (scratch.mtp_position + rows > positions) scratch = model.new_state();
        MtpSegment seg{&scratch, hidden, tokens, scratch.mtp_position, out.data(), MtpLogits::Last};
        std::lock_guard lock(forward_mutex());
        const auto start = EngineClock::now();
        model.mtp_forward({&seg, 1});
        return ms_since(start);
      },
      kCalibrationPasses);
  // Chain calls over more streams than the table holds extrapolate linearly (RoundCosts::cost).
  std::vector<StreamState> chain_states;
  head_costs.chain.calibrate(
      std::clamp<int64_t>(options.parallel, 2, widths),
      [&](int64_t streams) {
        const std::vector<int32_t> token = tokens_of(1);
        const std::vector<float> hidden(W, 0.5f);
        while (static_cast<int64_t>(chain_states.size()) < streams) chain_states.push_back(model.new_state());
        std::vector<std::vector<float>> outs(streams, std::vector<float>(W));
        std::vector<MtpSegment> segs;
        for (int64_t i = 0; i < streams; ++i) {
          StreamState& st = chain_states[static_cast<size_t>(i)];
          if (st.mtp_position + 1 > positions) st = model.new_state();
          segs.push_back({&st, hidden, token, st.mtp_position, outs[i].data(), MtpLogits::All});
        }
        std::lock_guard lock(forward_mutex());
        const auto start = EngineClock::now();
        model.mtp_forward(segs);
        return ms_since(start);
      },
      kCalibrationPasses);
  note_calibration(ms_since(calibration_start));
}

bool Engine::Impl::try_calibrate_costs() {
  // A calibration that keeps failing (a device out of memory) is retried after 1, 2, 4 ... 256 rounds, so
  // the rounds between pay nothing for it.
  if (calibration_skips > 0) {
    --calibration_skips;
    return false;
  }
  try {
    calibrate_costs();
    calibration_backoff = 1;
    return true;
  } catch (const std::exception&) {
    // A calibration that fails (its scratch state or a timed call failing on the device) costs only drafts:
    // the windows stay one row until a later round that could draft calibrates.
    round_costs = RoundCosts{};
    head_costs = HeadCosts{};
    calibration_skips = calibration_backoff;
    calibration_backoff = std::min(2 * calibration_backoff, 256);
    return false;
  }
}

void Engine::Impl::note_calibration(double ms) {
  std::lock_guard lock(mutex);
  stats.draft_calibration_ms += ms;
}

// The head follows a stream only while the engine may draft at all and its cache is in step with the state.
bool Engine::Impl::captures_hidden(const StreamState& state) const {
  return options.drafts && options.max_drafts > 0 && drafter->uses_hidden() && head_in_sync(model, state);
}

// Runs the MTP head over prompt rows whose next token is known, so the head's cache stands at the same mark
// as the stream's when a snapshot is taken. A failure only costs drafts: the head stops following.
void Engine::Impl::follow_prompt_rows(std::span<HeadRows> items) {
  if (items.empty()) return;
  try {
    std::lock_guard lock(forward_mutex());  // the head runs on the shared thread pool
    run_head_rows(model, items, MtpLogits::None);
  } catch (const std::exception&) {
    for (HeadRows& h : items) {
      drop_head_rows(*h.state);
      h.state->truncate_mtp(0);
    }
  }
}

// Sets each decoding stream's window for this round: the last drawn token, then the drafts worth verifying.
void Engine::Impl::plan_windows() {
  std::vector<Stream*> streams;
  std::vector<DraftAsk> asks;
  for (auto& s : running) {
    if (s->done || s->prefilling() || s->window.empty()) continue;
    s->window.erase(s->window.begin() + 1, s->window.end());
    // A window never draws past max_tokens: its rows draw the reply's tokens generated.size() onward.
    const int64_t room = s->request.max_tokens - static_cast<int64_t>(s->generated.size()) - 1;
    const int max = static_cast<int>(std::min<int64_t>(options.max_drafts, room));
    if (!s->drafting || max <= 0) continue;
    streams.push_back(s.get());
    asks.push_back({s->request.prompt, s->generated, &s->state, max, 0, {}});
  }
  if (asks.empty()) return;
  if (options.draft_depth == 0 && !round_costs.calibrated() && !try_calibrate_costs()) return;
  // Drafting that measured slower than plain rounds rests: no head calls, no windows (DraftGuard).
  const bool rest = options.draft_guard && options.draft_depth == 0 && draft_guard.resting();
  // Plain streams' rows are in the round too: they make drafting rows relatively cheaper.
  int64_t plain = 0;
  for (auto& s : running)
    if (!s->done && !s->prefilling()) ++plain;
  plain -= static_cast<int64_t>(asks.size());
  auto depths = [&](auto offered, const HeadCosts* head) {
    std::vector<DepthChoice> choices(asks.size());
    for (size_t i = 0; i < asks.size(); ++i) {
      choices[i].rates = &streams[i]->landing;
      choices[i].offered = offered(asks[i]);
      choices[i].head_rows = head ? head_rows_pending(model, streams[i]->state) : 0;
    }
    if (options.draft_depth > 0) {
      for (auto& c : choices) c.depth = std::min(c.offered, options.draft_depth);
    } else {
      choose_depths(round_costs, choices, plain, head, model.rewind_reruns(),
                    model.reruns_join_next_window());
    }
    return choices;
  };
  // What the policy would verify if every stream offered its max, the head's own calls counted: a chained
  // source drafts that deep (and not at all for 0).
  const auto hints = depths([&](const DraftAsk& a) { return rest ? 0 : a.max; },
                            drafter->uses_hidden() ? &head_costs : nullptr);
  bool head_calls = false;
  for (size_t i = 0; i < asks.size(); ++i) {
    asks[i].depth_hint = hints[i].depth;
    head_calls = head_calls || hints[i].depth > 0;
  }
  try {
    std::lock_guard lock(forward_mutex());  // a model-based source runs on the shared thread pool
    drafter->propose(asks);
  } catch (const std::exception&) {
    // Drafts never change a reply, so a failed source (the MTP head's call failing on the GPU) only costs
    // this round's drafts; the head stops following these streams, as after a failed follow_prompt_rows.
    // The round drafts nothing: the guard must not count it as drafting (nor, its time spent on a failure,
    // as a plain round).
    for (DraftAsk& a : asks) {
      drop_head_rows(*a.state);
      a.state->truncate_mtp(0);
    }
    round_source_failed = true;
    return;
  }
  round_drafting = round_drafting || head_calls;
  // A head idle past kMaxIdleHeadRows (the policy chose no drafts) stops following its stream, so its
  // pending rows do not grow with the reply. Idle because the guard rests, it catches up instead (one head
  // call, no logits): a rest ends, and dropping would end drafting for every running stream for good once
  // a rest outlasts kMaxIdleHeadRows rounds (rests double to DraftGuard::kMaxRest).
  std::vector<HeadRows> catch_up;
  for (size_t i = 0; i < asks.size(); ++i) {
    Stream& s = *streams[i];
    if (head_rows_pending(model, s.state) <= kMaxIdleHeadRows) continue;
    if (rest)
      catch_up.push_back({&s.state, s.request.prompt, s.generated, {}, {}});
    else
      drop_head_rows(s.state);
  }
  follow_prompt_rows(catch_up);
  round_catch_up = !catch_up.empty();

  // The drafts are made: what they cost to make no longer matters, only the window's rows.
  const auto choices = depths(
      [&](const DraftAsk& a) {
        return rest ? 0 : static_cast<int>(std::min<size_t>(a.drafts.size(), a.max));
      },
      nullptr);
  for (size_t i = 0; i < asks.size(); ++i) {
    streams[i]->window.insert(streams[i]->window.end(), asks[i].drafts.begin(),
                              asks[i].drafts.begin() + choices[i].depth);
    round_drafting = round_drafting || choices[i].depth > 0;
  }
}

// Draws the window's rows in order while drafts land; on the first miss (or the end of the reply) the rest
// of the window is dropped and the state rewound to the rows kept.
void Engine::Impl::verify(Stream& s, const RoundRows& out, size_t first, int64_t rows) {
  const std::vector<int32_t> window = s.window;  // draw_token overwrites s.window
  if (static_cast<int64_t>(window.size()) != rows)
    fail("verify: window of {} rows, logits of {}", window.size(), rows);
  const int offered = static_cast<int>(rows - 1);
  int landed = 0;
  int64_t kept = 0;
  if (offered > 0) {
    s.drafted += offered;
    std::lock_guard lock(mutex);
    stats.drafted_total += offered;
  }
  for (int64_t i = 0; i < rows; ++i) {
    const std::span<const float> row = out.logits(first + static_cast<size_t>(i));
    const int32_t t = draw_token(s, row, out.token(first + static_cast<size_t>(i)));
    kept = i + 1;
    // Row i+1 read draft i+1 as its input: it is a plain row exactly when that draft is the token drawn here.
    const bool lands = i + 1 < rows && window[i + 1] == t;
    if (lands) {
      ++landed;
      ++s.accepted;
      std::lock_guard lock(mutex);
      ++stats.accepted_total;
    }
    report(s, t, row);  // may finish the stream (EOS, stop id, max_tokens, a throwing callback)
    if (s.done || !lands) break;
  }
  if (offered > 0) s.landing.record(offered, landed);
  if (!s.done && kept < rows) model.rewind(s.record, kept, s.state);
}

}  // namespace ds
