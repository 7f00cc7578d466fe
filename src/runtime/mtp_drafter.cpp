#include "runtime/mtp_drafter.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace ds {
namespace {

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

namespace {

// Pending rows: host floats, or (keeps_hidden_rows) a count of rows the backend keeps.
int64_t pending_rows(const ModelBackend& model, const StreamState& state) {
  if (model.keeps_hidden_rows()) return state.mtp_kept_rows;
  return static_cast<int64_t>(state.mtp_pending.size()) / model.mtp_hidden_width();
}

}  // namespace

bool head_in_sync(const ModelBackend& model, const StreamState& state) {
  if (!model.has_mtp()) return false;
  if (!model.keeps_hidden_rows() && state.mtp_pending.size() % static_cast<size_t>(model.mtp_hidden_width()))
    return false;
  return state.mtp_position + pending_rows(model, state) == state.position;
}

int64_t head_rows_pending(const ModelBackend& model, const StreamState& state) {
  if (!head_in_sync(model, state)) return 0;
  return pending_rows(model, state);
}

void add_head_rows(const ModelBackend& model, StreamState& state, std::span<const float> host, int64_t rows) {
  if (model.keeps_hidden_rows()) {
    state.mtp_kept_rows += rows;
    return;
  }
  const auto floats = static_cast<size_t>(rows * model.mtp_hidden_width());
  if (host.size() < floats) fail("add_head_rows: {} floats for {} rows", host.size(), rows);
  state.mtp_pending.insert(state.mtp_pending.end(), host.begin(), host.begin() + floats);
}

void drop_head_rows(StreamState& state) {
  state.mtp_pending.clear();
  state.mtp_kept_rows = 0;
}

void run_head_rows(const ModelBackend& model, std::span<HeadRows> items, MtpLogits logits_wanted) {
  const int64_t W = model.mtp_hidden_width(), V = model.config().vocab_size;
  const bool kept = model.keeps_hidden_rows();
  std::vector<MtpSegment> segs;
  std::vector<std::vector<int32_t>> next(items.size());
  std::vector<std::vector<float>> outs(items.size());
  std::vector<size_t> which;
  for (size_t i = 0; i < items.size(); ++i) {
    HeadRows& h = items[i];
    h.last_logits.clear();
    h.last_hidden.clear();
    h.output_kept = false;
    const int64_t np = static_cast<int64_t>(h.prompt.size());
    const int64_t known = np + static_cast<int64_t>(h.reply.size());
    const int64_t pos0 = h.state->mtp_position, rows_pending = pending_rows(model, *h.state);
    // Row k reads the token at k + 1, so it runs only once that token is known.
    const int64_t rows = std::min(rows_pending, known - 1 - pos0);
    if (rows <= 0) continue;
    for (int64_t k = pos0 + 1; k <= pos0 + rows; ++k)
      next[i].push_back(k < np ? h.prompt[k] : h.reply[k - np]);
    const bool drafts = logits_wanted != MtpLogits::None;
    MtpSegment seg{h.state, {}, next[i], pos0, nullptr, logits_wanted};
    if (kept) {
      // The rows and the last output stay in the backend: the output's row is the next chain call's input.
      seg.input = MtpInput::KeptRows;
      seg.keep_output = drafts;
    } else {
      seg.hidden = std::span<const float>(h.state->mtp_pending.data(), static_cast<size_t>(rows * W));
      if (drafts) outs[i].resize(static_cast<size_t>(rows * W));
      seg.hidden_out = drafts ? outs[i].data() : nullptr;
    }
    segs.push_back(seg);
    which.push_back(i);
  }
  if (segs.empty()) return;
  const std::vector<float> logits = model.mtp_forward(segs);
  int64_t row = 0;
  for (size_t j = 0; j < which.size(); ++j) {
    HeadRows& h = items[which[j]];
    const auto rows = static_cast<int64_t>(segs[j].next_tokens.size());
    if (logits_wanted == MtpLogits::Last) {
      h.last_logits.assign(logits.begin() + row * V, logits.begin() + (row + 1) * V);
      ++row;
    } else if (logits_wanted == MtpLogits::All) {
      row += rows;
      h.last_logits.assign(logits.begin() + (row - 1) * V, logits.begin() + row * V);
    }
    if (logits_wanted != MtpLogits::None) {
      h.output_kept = kept;
      if (!kept) h.last_hidden.assign(outs[which[j]].end() - W, outs[which[j]].end());
    }
    if (kept) {
      h.state->mtp_kept_rows -= rows;
    } else {
      std::vector<float>& pending = h.state->mtp_pending;
      pending.erase(pending.begin(), pending.begin() + rows * W);
    }
  }
}

MtpDrafter::MtpDrafter(const ModelBackend& model, NgramOptions ngram, HeadCosts* observed)
    : model_(model), ngram_(ngram), observed_(observed) {
  if (!model.has_mtp()) fail("MtpDrafter: the model has no MTP head");
}

MtpDrafter::MtpDrafter(const Model& model, NgramOptions ngram, HeadCosts* observed)
    : owned_(std::make_unique<CpuBackend>(model)), model_(*owned_), ngram_(ngram), observed_(observed) {
  if (!model.has_mtp()) fail("MtpDrafter: the model has no MTP head");
}

void MtpDrafter::propose(std::span<DraftAsk> asks) {
  const int64_t V = model_.config().vocab_size;
  std::vector<HeadRows> items;
  std::vector<size_t> owner;
  for (size_t i = 0; i < asks.size(); ++i) {
    DraftAsk& a = asks[i];
    a.drafts = ngram_.propose_one(a.prompt, a.reply, a.max);
    // A hint of 0: the head's rows would cost more than its drafts bring; copies only.
    if (!a.state || a.depth_hint <= 0 || !head_in_sync(model_, *a.state)) continue;
    items.push_back({a.state, a.prompt, a.reply, {}, {}});
    owner.push_back(i);
  }
  int64_t catch_up_rows = 0;
  for (const HeadRows& h : items) catch_up_rows += head_rows_pending(model_, *h.state);  // host or kept rows
  const auto catch_up_start = Clock::now();
  run_head_rows(model_, items, MtpLogits::Last);
  if (observed_ && catch_up_rows > 0) observed_->catch_up.observe(catch_up_rows, ms_since(catch_up_start));

  // Draft 1 from the last verified row; chains go on from the head's own hidden and the previous draft.
  std::vector<size_t> chaining;
  for (size_t j = 0; j < items.size(); ++j) {
    if (items[j].last_logits.empty()) continue;
    DraftAsk& a = asks[owner[j]];
    const int chain = std::min(a.max, a.depth_hint);
    const int32_t d1 = argmax(items[j].last_logits.data(), V);
    // Copies that agree with the head and reach as far are kept: they cost no head rows.
    if (!a.drafts.empty() && a.drafts[0] == d1 && static_cast<int>(a.drafts.size()) >= chain) continue;
    a.drafts.assign(1, d1);
    if (chain > 1) chaining.push_back(j);
  }
  for (int depth = 2; !chaining.empty(); ++depth) {
    std::vector<MtpSegment> segs;
    std::vector<std::vector<float>> outs(chaining.size());
    for (size_t c = 0; c < chaining.size(); ++c) {
      HeadRows& h = items[chaining[c]];
      DraftAsk& a = asks[owner[chaining[c]]];
      MtpSegment seg{
          h.state, h.last_hidden, std::span<const int32_t>(&a.drafts.back(), 1), h.state->mtp_position,
          nullptr, MtpLogits::All};
      if (h.output_kept) {
        // From the output row the head's last call kept, keeping this one's for the next depth.
        seg.input = MtpInput::KeptOutput;
        seg.keep_output = true;
      } else {
        outs[c].resize(h.last_hidden.size());
        seg.hidden_out = outs[c].data();
      }
      segs.push_back(seg);
    }
    const auto chain_start = Clock::now();
    const std::vector<float> logits = model_.mtp_forward(segs);
    if (observed_) observed_->chain.observe(static_cast<int64_t>(segs.size()), ms_since(chain_start));
    std::vector<size_t> still;
    for (size_t c = 0; c < chaining.size(); ++c) {
      HeadRows& h = items[chaining[c]];
      DraftAsk& a = asks[owner[chaining[c]]];
      a.drafts.push_back(argmax(logits.data() + c * V, V));
      if (!h.output_kept) h.last_hidden = std::move(outs[c]);
      if (depth < std::min(a.max, a.depth_hint)) still.push_back(chaining[c]);
    }
    chaining = std::move(still);
  }
  // Chained rows read guessed tokens: the head's cache goes back to the verified rows.
  for (size_t j = 0; j < items.size(); ++j)
    if (items[j].state->mtp_position > items[j].state->position)
      items[j].state->truncate_mtp(items[j].state->position);
}

}  // namespace ds
