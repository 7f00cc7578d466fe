#pragma once
// The recurrent state after every row of a decode window, so that a verify window of k rows can keep its
// first j rows and drop the rest with the bits j one-row steps would have left (drafted == plain).
// Attention K/V and indexer keys/blocks need no record: they only truncate.
#include <cstdint>
#include <vector>

#include "model/model_config.h"
#include "model/stream_state.h"

namespace ds {

struct WindowRecord {
  int64_t pos0 = 0, count = 0;                     // the window's first absolute position and its rows
  std::vector<int32_t> tokens;                     // the window's tokens
  std::vector<int32_t> ple_context;                // the PLE n-gram context before the window
  std::vector<std::vector<float>> deltanet_conv;   // [layer]: history then window pre-conv rows [(K-1+k), cd]
  std::vector<std::vector<float>> deltanet_state;  // [layer]: the state after each row [k, nv*dk*dv]
  std::vector<std::vector<float>> ple_conv;        // [layer]: history then window normed gated rows

  // Clears the record for a window of `tokens` starting at `pos0` (buffers keep their capacity).
  void begin(const StreamState& state, const int32_t* tokens, int64_t count, int layers);
};

// Rewinds `state`, advanced over the recorded window, to just after the window's first `keep` rows
// (1 <= keep <= count): the same bits as `keep` one-row decode steps from the state before the window.
void rewind_window(const ModelConfig& cfg, const WindowRecord& record, int64_t keep, StreamState& state);

}  // namespace ds
