#pragma once
// MTP head drafts (docs/speculative.md): the head reads the main model's H rows and the token after each, its
// cache follows the stream one row behind, and drafts 2..k are chained from the head's own output hidden.
// N-gram copies are kept when they agree with the head's first draft and run at least as far.
#include <memory>
#include <span>
#include <vector>

#include "model/model.h"
#include "runtime/cpu_backend.h"
#include "runtime/draft_policy.h"
#include "runtime/draft_source.h"
#include "runtime/ngram_drafter.h"

namespace ds {

// One stream's H rows for the head: the state's pending rows (positions state->mtp_position onward: the
// floats of mtp_pending, or mtp_kept_rows rows the backend keeps); the stream's known tokens are `prompt`
// then `reply` (the token at position k is the k-th of them).
struct HeadRows {
  StreamState* state = nullptr;
  std::span<const int32_t> prompt, reply;
  std::vector<float> last_logits, last_hidden;  // out: the last row run's logits and output hidden
  bool output_kept = false;  // out: the output hidden stayed in the backend (MtpInput::KeptOutput), not here
};

// Whether the head's cache plus the pending rows reach exactly the stream's position (else the head cannot
// follow this stream: a snapshot stored by a failed head call, say).
bool head_in_sync(const ModelBackend& model, const StreamState& state);
// Rows the head would run to draft for this stream (its pending rows), 0 when it cannot follow it.
int64_t head_rows_pending(const ModelBackend& model, const StreamState& state);
// Adds a round's first `rows` captured rows to the pending ones: the floats of `host` (rows * width), or
// on a backend that keeps hidden rows only their count (it keeps them by position).
void add_head_rows(const ModelBackend& model, StreamState& state, std::span<const float> host, int64_t rows);
// Forgets the pending rows: the head stops following the stream.
void drop_head_rows(StreamState& state);

// Runs the head, in one mtp_forward, over every item's pending rows whose next token is known, and erases
// them from the state's mtp_pending. `logits`: Last to draft from the last row, None to only fill the
// head's cache (prompt rows). Items with no such row are left alone (empty last_logits).
void run_head_rows(const ModelBackend& model, std::span<HeadRows> items, MtpLogits logits);
inline void run_head_rows(const Model& model, std::span<HeadRows> items, MtpLogits logits) {
  run_head_rows(CpuBackend(model), items, logits);
}

class MtpDrafter final : public DraftSource {
 public:
  // `observed`, when set, is refined with the measured time of every head call (as RoundCosts are by rounds).
  explicit MtpDrafter(const ModelBackend& model, NgramOptions ngram = {}, HeadCosts* observed = nullptr);
  // The CPU backend over `model` (which must outlive the drafter).
  explicit MtpDrafter(const Model& model, NgramOptions ngram = {}, HeadCosts* observed = nullptr);
  void propose(std::span<DraftAsk> asks) override;
  bool uses_hidden() const override { return true; }

 private:
  std::unique_ptr<CpuBackend> owned_;  // set by the Model constructor
  const ModelBackend& model_;
  NgramDrafter ngram_;
  HeadCosts* observed_;
};

}  // namespace ds
