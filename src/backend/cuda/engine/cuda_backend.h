#pragma once
// The engine's CUDA backend (docs/cuda-engine.md, "Engine"): runtime/model_backend.h over CudaModel. States
// live on the device (StreamState::backend holds a CudaStreamState; a StreamState copy is a device-to-device
// copy, which is what the prompt cache stores). Draft rollback restores the recurrent parts saved before the
// window and re-runs the kept rows at the next forward, batched (windows == one-token steps bit for bit on
// CUDA, ../shared/design/exactness.md allows it): the kept rows ride ahead of the stream's next decode window
// as rows without logits (one call, its shape's graph), or, for a prompt piece, in a pass of their own. Draft
// windows replay graphs parked by shape as plain rounds do (CudaModel, graph_cache.h). Draws: forward_rows
// leaves the logits on the device and the DeviceSampler draws each row as the KeyedSampler would (same
// tokens); only rows the engine reads on the host (logprobs) come back. set_device_draws(false): every row to
// the host, the KeyedSampler draws. The MTP head: CudaModel::mtp_forward, its hidden rows kept on the device
// in each stream's state (keeps_hidden_rows: the engine counts them, StreamState::mtp_kept_rows) and its last
// output row there for the next chained draft; the head's cache lives in the device state, its length
// follows StreamState::mtp_position (StreamState::truncate_mtp moves only that; the device side follows at
// the next head call). Prompts run as decode windows (same bits as steps), or with `prompt_path` as CudaModel
// prompt passes (CudaSegment::prompt; a mixed round is then two calls; the CLI's default since the contract
// passed with them on the H200).
#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/sampling/device_sampler.h"
#include "runtime/model_backend.h"

namespace ds::cuda {

class CudaBackend final : public ModelBackend {
 public:
  // `model`'s host tables (a checkpoint's bound weights) must outlive the backend.
  explicit CudaBackend(std::unique_ptr<CudaModel> model, bool prompt_path = false);
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  const ModelConfig& config() const override { return model_->config(); }
  int64_t max_context() const override;  // the device caches' positions (CudaModelOptions::max_context)
  int64_t weights_bytes() const override { return static_cast<int64_t>(model_->device_weight_bytes()); }
  StreamState new_state() const override;
  std::vector<float> forward(std::span<const ForwardSegment> segments) const override;
  bool draws_rows() const override { return device_draws_; }
  DrawnRows forward_rows(std::span<const ForwardSegment> segments,
                         std::span<const RowDraw> rows) const override;
  void rewind(const WindowRecord& record, int64_t keep, StreamState& state) const override;
  bool rewind_reruns() const override { return true; }  // restore + re-run of the kept rows
  // The kept rows ride in the next window (rows, not a pass) unless DS_CUDA_DRAFTS_LEGACY=1.
  bool reruns_join_next_window() const override { return merge_reruns_; }
  // With prompt passes, a prompt piece is one pass (prompt_pass_rows, 2048) and cache marks are that far
  // apart: a pass of 64 rows runs the products at a fraction of their rate (docs/receipts/cuda-prompt.md).
  // The first lost-context CUDA error of the process (cuda_error.h), e.g. an illegal address: from then on
  // every call fails, so the server's /health answers 503.
  std::string failure() const override;
  int64_t prompt_rows_per_round() const override;
  int64_t cache_mark_interval() const override;
  bool has_mtp() const override { return model_->has_mtp(); }
  int64_t mtp_hidden_width() const override { return model_->has_mtp() ? model_->mtp_hidden_width() : 0; }
  std::vector<float> mtp_forward(std::span<const MtpSegment> segments) const override;
  // The head's hidden rows stay on the device, in each stream's CudaStreamState::kept (unless
  // DS_CUDA_HOST_HIDDEN=1: they cross to the host and back, the earlier form).
  bool keeps_hidden_rows() const override { return keep_hidden_ && model_->has_mtp(); }

  CudaModel& model() const { return *model_; }
  // Device draws on (the default) or off; set it before an engine takes the backend.
  void set_device_draws(bool on) { device_draws_ = on; }
  // Top-k / top-p rows drawn on the device too (the default: faster than the row's copy and the host's draw,
  // docs/receipts/cuda-engine.md "GPU sampler filters"); off, they come to the host's KeyedSampler.
  void set_device_filters(bool on) { device_filters_ = on; }
  bool device_filters() const { return device_filters_; }
  int64_t device_draws() const { return draws_; }  // rows drawn on the device so far
  // Re-runs (rollbacks) done so far and their rows, for receipts.
  int64_t replays() const { return replays_; }
  int64_t replay_rows() const { return replay_rows_; }
  // Host milliseconds by phase of a drafted reply (rounds plain / with windows, re-run passes, head calls by
  // kind), printed to stderr when the backend ends if DS_CUDA_PHASES=1 (docs/receipts/speculative.md).
  struct Phase {
    int64_t calls = 0, rows = 0;
    double ms = 0;
  };
  const std::map<std::string, Phase>& phases() const { return phases_; }
  std::string phase_table() const;

 private:
  struct Call {
    std::vector<CudaSegment> runs;
    std::vector<size_t> hidden_at;  // each segment's offset in hidden_dev, SIZE_MAX: none
    size_t hidden_floats = 0;
    float* hidden_dev = nullptr;
    bool steps_only = true;                    // every decode segment one row (a CUDA graph round)
    bool prompt = false, decode = false;       // the call holds prompt passes / decode windows
    std::vector<std::vector<int32_t>> joined;  // per segment: re-run rows then the window (else empty)
    std::vector<size_t> quiet;                 // per segment: the re-run rows ahead of its window
    size_t rows = 0, reruns = 0;               // decode rows in the call, re-run rows among them
  };
  Call prepare(std::span<const ForwardSegment> segments) const;
  void finish(std::span<const ForwardSegment> segments, const Call& c, bool synced) const;
  // Re-runs, in one pass of their own, the kept rows of the states whose segment does not take them along.
  void flush_replays(std::span<const ForwardSegment> segments) const;
  bool joins_replay(const ForwardSegment& sg) const { return merge_reruns_ && !(prompt_path_ && sg.prompt); }
  void add_phase(const char* name, int64_t rows, std::chrono::steady_clock::time_point start) const;
  const char* round_phase(const Call& c) const;
  std::vector<float> forward_split(std::span<const CudaSegment> runs, bool steps_only) const;
  // Device scratch of at least `floats` floats for hidden rows (grown, never shrunk).
  float* hidden_scratch(DeviceBuffer& buffer, size_t floats) const;

  std::unique_ptr<CudaModel> model_;
  bool prompt_path_;  // prompt segments as CudaModel prompt passes, else as decode windows
  bool graphs_;       // the model's option: decode rounds replay CUDA graphs; other calls launch directly
  // DS_CUDA_DRAFTS_LEGACY=1 turns both off (with one graph a kind): the earlier draft path, to measure
  // against.
  bool window_graphs_ = true;  // verify windows replay parked graphs too (else launched directly)
  bool merge_reruns_ = true;   // kept rows ride in the next window (else a pass of their own)
  bool time_phases_ = false;   // DS_CUDA_PHASES=1
  bool keep_hidden_ = true;    // hidden rows for the head kept on the device (else via the host)
  mutable std::map<std::string, Phase> phases_;
  mutable int64_t replays_ = 0, replay_rows_ = 0;
  mutable DeviceBuffer hidden_rows_, hidden_out_;  // hidden rows crossing between host and device
  bool device_draws_ = true, device_filters_ = true;
  mutable DeviceSampler sampler_;
  mutable int64_t draws_ = 0;
};

}  // namespace ds::cuda
