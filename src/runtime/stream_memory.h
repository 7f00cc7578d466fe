#pragma once
// What one stream may hold, for admission against --memory-limit-gib: its state at full length and, when it
// drafts, the verify window's per-row records, the MTP head's cache and pending rows, and the window's
// logits.
#include <cstdint>

#include "model/model.h"
#include "runtime/cpu_backend.h"

namespace ds {

// A stream whose MTP head has been idle this many rows (the depth policy chose no head drafts) stops
// following: its pending H rows would otherwise grow with the reply.
constexpr int64_t kMaxIdleHeadRows = 64;

struct StreamMemory {
  int64_t fresh = 0;           // a new state (DeltaNet states, conv histories, PLE convs)
  int64_t per_token = 0;       // main attention layers: K/V, indexer keys, pooled block keys
  int64_t head_per_token = 0;  // the MTP head's K/V (and indexer keys) when the head follows streams
  int64_t drafting = 0;        // per drafting stream: window record, pending H rows, extra logits rows

  // Bytes a stream of `tokens` (prompt + max_tokens) reserves; `drafts`: it drafts; a stream that does not
  // draft may still have the head follow its prompt (`prompt_tokens`) for the prompt cache.
  int64_t reserve(int64_t tokens, int64_t prompt_tokens, bool drafts) const;
};

// `max_drafts`: the verify window's rows are max_drafts + 1; `head_follows`: the engine runs the model's MTP
// head (0 bytes for head terms otherwise); `idle_head_rows`: pending H rows a stream may hold while the
// policy keeps the head idle (they are cleared past that).
StreamMemory stream_memory(const ModelBackend& model, int max_drafts, bool head_follows,
                           int64_t idle_head_rows);
inline StreamMemory stream_memory(const Model& model, int max_drafts, bool head_follows,
                                  int64_t idle_head_rows) {
  return stream_memory(CpuBackend(model), max_drafts, head_follows, idle_head_rows);
}

// Floats of a WindowRecord over `rows` rows (the per-row DeltaNet states and conv windows, PLE conv windows).
int64_t window_record_floats(const ModelConfig& cfg, int64_t rows);

}  // namespace ds
