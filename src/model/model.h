#pragma once
// A loaded model: config, bound weights and the forward pass over a batch of stream segments.
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "formats/checkpoint.h"
#include "model/layers/batch.h"
#include "model/layers/rope.h"
#include "model/model_config.h"
#include "model/stream_state.h"
#include "model/weights.h"
#include "model/window_record.h"

namespace ds {

struct ForwardSegment {
  StreamState* state = nullptr;
  std::span<const int32_t> tokens;
  bool prompt = false;      // prompt pass (chunked DeltaNet); else the decode path (per-token recurrence)
  bool all_logits = false;  // logits for every row, else for the last row only
  WindowRecord* record = nullptr;  // decode path only: keep the per-row recurrent states (draft rollback)
};

class Model {
 public:
  explicit Model(const std::filesystem::path& dir);
  // A model over an already built checkpoint (dummy weights), bound by the same path as a directory.
  explicit Model(std::unique_ptr<Checkpoint> checkpoint);
  const ModelConfig& config() const { return cfg_; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  const ModelWeights& weights() const { return w_; }
  StreamState new_state() const { return StreamState::fresh(cfg_); }

  // Runs every segment's tokens through the model in one pass, advancing each stream's state. Returns logits
  // rows [rows, vocab] in segment order: all rows of segments with all_logits, else each segment's last row.
  std::vector<float> forward(std::span<const ForwardSegment> segments) const;

 private:
  void layer_qwen4exp(int l, const Batch& b, float* H) const;
  void layer_prenorm(int l, const Batch& b, float* h) const;
  void mixer(int l, const float* x, const Batch& b, float* y) const;

  std::unique_ptr<Checkpoint> ckpt_;
  ModelConfig cfg_;
  ModelWeights w_;
  std::unique_ptr<Rope> rope_;
};

}  // namespace ds
