#pragma once
// A loaded model: config, bound weights and the forward pass over a batch of stream segments.
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/weight_tiles.h"
#include "formats/checkpoint.h"
#include "model/layers/batch.h"
#include "model/layers/rope.h"
#include "model/model_config.h"
#include "model/mtp.h"
#include "model/stream_state.h"
#include "model/weights.h"
#include "model/window_record.h"

namespace ds {

struct ForwardSegment {
  StreamState* state = nullptr;
  std::span<const int32_t> tokens;
  bool prompt = false;      // prompt pass (chunked DeltaNet); else the decode path (per-token recurrence)
  bool all_logits = false;  // logits for every row, else for the last row only
  // If set, receives every row's H for the MTP head (mtp_hidden_width() floats a row).
  float* hidden = nullptr;
  WindowRecord* record = nullptr;  // decode path only: keep the per-row recurrent states (draft rollback)
  // Instead of `hidden`, on a backend that keeps hidden rows (ModelBackend::keeps_hidden_rows): the backend
  // keeps every row's H in the stream's state, where its head reads them (MtpInput::KeptRows).
  bool keep_hidden = false;
};

// Which rows of an MTP segment get logits: following prompt rows needs none, a draft needs the last row.
enum class MtpLogits { All, Last, None };

// Where an MTP segment's hidden rows are: the floats in `hidden`, or (a backend that keeps hidden rows,
// ModelBackend::keeps_hidden_rows) the stream's kept main-model rows at position.. or the output row its
// last head call kept (MtpSegment::keep_output).
enum class MtpInput { Given, KeptRows, KeptOutput };

// Rows for the MTP draft head (docs/mtp.md): row i reads hidden row i and next_tokens[i] at position + i.
struct MtpSegment {
  StreamState* state = nullptr;
  std::span<const float> hidden;         // rows * mtp_hidden_width(): main-model H or a previous hidden_out
  std::span<const int32_t> next_tokens;  // the token after each row's position; rows = next_tokens.size()
  int64_t position = 0;                  // must equal state->mtp_position
  float* hidden_out = nullptr;           // if set, receives each row's output hidden for chained drafts
  MtpLogits logits = MtpLogits::All;     // rows whose logits mtp_forward returns
  MtpInput input = MtpInput::Given;      // not Given: `hidden` stays empty
  bool keep_output = false;              // keep the last row's output hidden in the stream (no hidden_out)
};

class Model {
 public:
  // cpu_weight_tiles: give every weight product's matrix a tiled copy for the CPU kernels (weight_tiles.h;
  // faster decode, the same bits, an anonymous copy of those matrices); off for a model another backend runs.
  explicit Model(const std::filesystem::path& dir, bool cpu_weight_tiles = true);
  // A model over an already built checkpoint (dummy weights), bound by the same path as a directory.
  explicit Model(std::unique_ptr<Checkpoint> checkpoint, bool cpu_weight_tiles = true);
  const ModelConfig& config() const { return cfg_; }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  const ModelWeights& weights() const { return w_; }
  // Bytes of the CPU's tiled weight copies (0 without them): memory on top of the checkpoint's.
  uint64_t cpu_tile_bytes() const { return tiles_.bytes(); }
  StreamState new_state() const { return StreamState::fresh(cfg_); }

  // Runs every segment's tokens through the model in one pass, advancing each stream's state. Returns logits
  // rows [rows, vocab] in segment order: all rows of segments with all_logits, else each segment's last row.
  std::vector<float> forward(std::span<const ForwardSegment> segments) const;

  // The MTP draft head (src/model/mtp.cpp): whether one is loaded, the floats per hidden row (S*D for
  // qwen4_exp, D otherwise), and logits [rows, vocab] for the rows each segment's `logits` asks for, in
  // segment order, advancing each stream's head cache. Row-invariant like forward.
  bool has_mtp() const { return mtp_.present; }
  const MtpWeights& mtp_weights() const { return mtp_; }  // for another backend's head (CudaModel)
  int64_t mtp_hidden_width() const;
  std::vector<float> mtp_forward(std::span<const MtpSegment> segments) const;

 private:
  // `slot` is the layer's cache index in StreamState (the layer index; layers + k for MTP layer k).
  void layer_qwen4exp(const LayerWeights& lw, int slot, const Batch& b, float* H) const;
  void layer_prenorm(const LayerWeights& lw, int slot, const Batch& b, float* h) const;
  void mixer(const LayerWeights& lw, int slot, const float* x, const Batch& b, float* y) const;

  std::unique_ptr<Checkpoint> ckpt_;
  ModelConfig cfg_;
  ModelWeights w_;
  std::unique_ptr<Rope> rope_;
  MtpWeights mtp_;
  cpu::WeightTiles tiles_;
};

}  // namespace ds
