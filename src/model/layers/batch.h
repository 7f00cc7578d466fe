#pragma once
// A forward call's rows: consecutive runs of rows ("segments"), each from one stream at consecutive
// positions.
#include <cstdint>
#include <vector>

#include "model/stream_state.h"
#include "model/window_record.h"

namespace ds {

struct SegmentRows {
  StreamState* state = nullptr;
  const int32_t* tokens = nullptr;
  int64_t row0 = 0;     // first row of this segment in the call's activations
  int64_t count = 0;    // rows
  int64_t pos0 = 0;     // absolute position of the first row
  bool prompt = false;  // prompt pass: chunked DeltaNet on 64-aligned chunks; else per-token recurrence
  WindowRecord* record = nullptr;  // decode windows: per-row recurrent states for rollback
};

struct Batch {
  std::vector<SegmentRows> segments;
  int64_t rows = 0;
};

// DeltaNet prompt chunks are aligned to absolute multiples of this many positions.
inline constexpr int64_t kDeltaNetChunk = 64;

}  // namespace ds
