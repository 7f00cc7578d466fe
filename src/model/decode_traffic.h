#pragma once
// How many bytes one decode round must read from memory: the bandwidth bound a decode is measured against.
#include <cstdint>

#include "model/model.h"

namespace ds {

struct DecodeTraffic {
  uint64_t dense_bytes = 0;   // weights every round reads whole: all but routed experts and lookup tables
  uint64_t expert_bytes = 0;  // one routed expert of every MoE layer (gate + up + down), summed over layers
  uint64_t lookup_row_bytes = 0;  // rows one token gathers: its embedding row and PLE table rows
  int64_t experts = 0, experts_per_tok = 0;

  // Bytes read by a round of one decode row for each of `streams` streams whose states hold `state_bytes`
  // together: dense weights, min(E, streams * k) experts per MoE layer, lookup rows, and the states.
  uint64_t per_round(int64_t streams, uint64_t state_bytes) const;
};

// Sizes taken from the bound weights in their stored encoding (affine scales and biases included).
DecodeTraffic decode_traffic(const Model& model);

// Bytes of a matrix in its stored encoding.
uint64_t matrix_bytes(const MatrixWeight& w);

}  // namespace ds
