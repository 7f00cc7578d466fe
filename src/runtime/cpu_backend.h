#pragma once
// The CPU backend: Model's own forward, head and states, unchanged (a thin wrapper, no copies per round).
#include "runtime/model_backend.h"

namespace ds {

class CpuBackend final : public ModelBackend {
 public:
  explicit CpuBackend(const Model& model) : model_(model) {}
  const char* name() const override { return "cpu"; }
  const ModelConfig& config() const override { return model_.config(); }
  int64_t max_context() const override { return model_.config().max_positions; }
  // Checkpoint files (mmapped) or in-memory dummy tensors, plus the CPU's tiled copies.
  int64_t weights_bytes() const override;
  StreamState new_state() const override { return model_.new_state(); }
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override {
    return model_.forward(segments);
  }
  void rewind(const WindowRecord& record, int64_t keep, StreamState& state) const override {
    rewind_window(model_.config(), record, keep, state);
  }
  bool has_mtp() const override { return model_.has_mtp(); }
  int64_t mtp_hidden_width() const override { return model_.mtp_hidden_width(); }
  std::vector<float> mtp_forward(std::span<const MtpSegment> segments) const override {
    return model_.mtp_forward(segments);
  }
  const Model& model() const { return model_; }

 private:
  const Model& model_;
};

}  // namespace ds
