#pragma once
// What the engine asks of each logits row of a forward call when the backend can draw on its own device
// (ModelBackend::forward_rows): drop it, return it to the host, or draw it exactly as KeyedSampler would.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/packed_draws.h"
#include "runtime/sampling_params.h"
#include "runtime/token_counts.h"

namespace ds {

enum class RowUse : uint8_t {
  Skip,  // nobody reads the row (a prompt piece that does not end the prompt, a warm pass)
  Host,  // the row's logits come back (logprobs, or a draw the device does not take)
  Draw,  // a token drawn from the row
};

struct RowDraw {
  RowUse use = RowUse::Host;
  // For Draw: KeyedSampler::sample's inputs. The history is `history` plus `drafted` counted as generated
  // (a verify row is drawn after the window's earlier drafts, as plain decoding would have drawn them).
  const SamplingParams* params = nullptr;
  int64_t position = 0;
  const TokenCounts* history = nullptr;
  std::span<const int32_t> drafted;
  std::span<const uint64_t> mask;  // structured-output mask, empty: every token
};

// A row with this use and no draw inputs (Skip, or Host).
inline RowDraw row_with(RowUse use) {
  RowDraw d;
  d.use = use;
  return d;
}

// Per row of DrawnRows::tokens besides a drawn token (>= 0) and kNothingDrawable (packed_draws.h).
inline constexpr int32_t kRowOnHost = -2;  // the row's logits are in DrawnRows::logits
inline constexpr int32_t kRowSkipped = -3;

struct DrawnRows {
  std::vector<int32_t> tokens;  // one per row
  std::vector<float> logits;    // the kRowOnHost rows, in row order, vocab floats each
};

// The message KeyedSampler fails with when no token can be drawn, for a device's kNothingDrawable.
inline constexpr const char* kNothingDrawableMessage =
    "no token can be drawn: every allowed logit is -inf or not finite";

// Packs the Draw rows of `rows` for a device sampler. A row the device would not draw exactly as the host
// (params out of range, a history id outside the vocabulary, a short mask, a vocabulary over
// kMaxSampledVocab) becomes Host in `rows`, so the host draw reports the same error.
PackedDraws pack_draws(std::span<RowDraw> rows, int64_t vocab);

// The host side of forward_rows: logits of every row -> DrawnRows, Draw rows drawn by KeyedSampler (a draw
// that throws leaves its row on the host, where the engine's draw throws the same error).
DrawnRows draw_rows_on_host(std::span<const float> logits, int64_t vocab, std::span<const RowDraw> rows);

}  // namespace ds
