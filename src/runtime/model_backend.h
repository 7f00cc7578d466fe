#pragma once
// What the engine runs a model on (docs/runtime.md, "Backends"): the forward pass over stream segments, the
// MTP head, fresh states and draft rollback. A state's snapshot is a StreamState copy (a backend's device
// part travels in StreamState::backend). CpuBackend (cpu_backend.h) wraps Model; CudaBackend
// (src/backend/cuda/engine/) runs CudaModel. The engine calls these under forward_mutex(), one at a time.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/row_draws.h"

namespace ds {

class ModelBackend {
 public:
  virtual ~ModelBackend() = default;
  virtual const char* name() const = 0;  // "cpu", "cuda": for messages
  virtual const ModelConfig& config() const = 0;
  // Positions a stream may reach: the config's max_positions, or fewer where the backend's caches hold fewer.
  virtual int64_t max_context() const = 0;
  // Bytes the weights take where the backend keeps them (admission against memory_limit_gib, stats).
  virtual int64_t weights_bytes() const = 0;
  virtual StreamState new_state() const = 0;

  // Model::forward's contract: logits [rows, vocab] in segment order (all rows with all_logits, else the
  // last), each state advanced; a segment with a record can be rewound by rewind() after.
  virtual std::vector<float> forward(std::span<const ForwardSegment> segments) const = 0;
  // Whether forward_rows() draws on the backend's own device (the CUDA sampler); the engine then calls it
  // in place of forward(), so only the rows it reads come back.
  virtual bool draws_rows() const { return false; }
  // forward() with a use for each of its logits rows (in order): Host rows' logits come back, Draw rows as
  // the token KeyedSampler::sample would draw (the same bits) or kRowOnHost, Skip rows not at all. This
  // default runs forward() and draws on the host.
  virtual DrawnRows forward_rows(std::span<const ForwardSegment> segments,
                                 std::span<const RowDraw> rows) const {
    return draw_rows_on_host(forward(segments), config().vocab_size, rows);
  }
  // Rewinds `state`, advanced over a window that ran with `record`, to just after the window's first `keep`
  // rows: the bits `keep` one-row steps would have left (1 <= keep <= the window's rows).
  virtual void rewind(const WindowRecord& record, int64_t keep, StreamState& state) const = 0;
  // Whether rewind() leaves the kept rows to be re-run by the next forward (a pass more per missed draft,
  // which the depth policy counts); false when the record restores them outright (the CPU).
  virtual bool rewind_reruns() const { return false; }
  // With rewind_reruns: whether the kept rows run inside the stream's next window (rows more in that round,
  // which the depth policy prices as rows) rather than in a pass of their own.
  virtual bool reruns_join_next_window() const { return false; }
  // How the engine cuts prompts on this backend (EngineOptions overrides either): prompt rows per round, and
  // the spacing of prompt-cache marks (a multiple of the 64 grid; a piece ends at the next mark, so the
  // spacing bounds a piece). A backend whose prompt passes pay per call (the GPU's) takes longer pieces.
  virtual int64_t prompt_rows_per_round() const { return 256; }
  virtual int64_t cache_mark_interval() const { return 64; }
  // A failure after which every later call fails too (a GPU whose context is lost): its message; empty while
  // the backend works. Thread-safe (the server's /health asks it), so a supervisor can restart the process.
  virtual std::string failure() const { return {}; }

  // The MTP head (Model::mtp_forward's contract); has_mtp() false: the engine drafts by n-gram copies.
  virtual bool has_mtp() const = 0;
  virtual int64_t mtp_hidden_width() const = 0;
  virtual std::vector<float> mtp_forward(std::span<const MtpSegment> segments) const = 0;
  // Whether the head's hidden rows stay in the backend's own state between the round that makes them and the
  // head call that reads them (CUDA: on the device, no copy to the host and back): the engine then asks for
  // them with ForwardSegment::keep_hidden, counts them in StreamState::mtp_kept_rows and names them by
  // MtpInput; false (the CPU): they travel as host floats (StreamState::mtp_pending).
  virtual bool keeps_hidden_rows() const { return false; }
};

}  // namespace ds
