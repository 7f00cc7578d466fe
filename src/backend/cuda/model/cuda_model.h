#pragma once
// The whole model's decode path on the GPU (docs/cuda-model.md, "Whole model"): windows of tokens of many
// streams per call, one launch sequence per layer op, logits for each segment's last row (or every row).
// Weights are uploaded from a bound ModelWeights in their checkpoint encodings, or made at random on the GPU
// from a config; the embedding and PLE tables stay in host memory and their rows are gathered per call.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.h"
#include "backend/cuda/model/device_matrix.h"
#include "backend/cuda/model/graph_cache.h"
#include "backend/cuda/stream.h"
#include "model/model.h"
#include "model/model_config.h"
#include "model/mtp.h"
#include "model/weights.h"

namespace ds::cuda {

struct AttentionShape;
struct AttentionRows;
struct AttentionSelection;
struct DeltaNetShape;
struct DeltaRuleChunks;

// The weight products of decode calls (docs/cuda-products.md, "Decode products on the tensor cores"): the FMA
// kernels (wx_products.h) or the tensor-core ones (tc_decode.h) for every matrix with at least
// tensor_min_rows outputs that they take (a choice by the matrix alone, so a row's bits never depend on the
// call's rows either way). The defaults come from DS_CUDA_DECODE_PRODUCTS: fma (or unset), tensor,
// tensor-all (tensor_min_rows 0: every matrix they take, for the checks) or tensor:ROWS[:COLS]. Below
// tensor_min_cols columns (default 0; tensor:1024:512 leaves hc up, 320 columns, on the FMA products) a
// matrix keeps the FMA products, and with them the one-row hc tail fusion. tensor-tall (tensor_tall_only)
// takes only matrices with at least as many outputs as columns (docs/receipts/cuda-decode-streams.md,
// "Several streams").
enum class DecodeProducts { Fma, Tensor };
DecodeProducts decode_products_default();
int64_t tensor_min_rows_default();
int64_t tensor_min_cols_default();
bool tensor_tall_only_default();
struct CudaModelOptions;
// Sets opt's decode-product fields from a name in DS_CUDA_DECODE_PRODUCTS's grammar (fma, tensor,
// tensor-tall,
// ...); a name outside it fails naming `what` (the option or variable it came from).
void set_decode_products(CudaModelOptions& opt, const std::string& name, const char* what);

struct CudaModelOptions {
  int64_t max_context = 4096;   // positions a stream's device caches hold
  bool generic_mixers = false;  // use the any-shape DeltaNet/attention kernels even where the fast ones fit
  bool time_ops = false;  // CUDA events between op kinds (op_times), inside the graph when graphs are on
  bool graphs = true;     // replay a decode round of an already seen shape as one CUDA graph
  // Graphs kept per call kind (rounds, head calls), by call shape (graph_cache.h); 1: the earlier form, one
  // graph captured again at every change of shape and dropped by a direct call (kept to measure against).
  int parked_graphs = 32;
  // A shape's graph captured at its first call (every call with graphs on replays one: the checks), or at its
  // second (the engine's CudaBackend: a one-off shape launches directly, cheaper than a capture).
  bool graph_at_first_call = true;
  // Routed experts as expert windows (each expert read once a step; bit-identical to the per-pair products):
  // off by default, as the per-pair products measured faster at 1-64 streams
  // (docs/receipts/cuda-decode-streams.md).
  bool expert_windows = false;
  // In a graph, each kernel launches while the one before it runs (programmatic dependent launch, Hopper);
  // changes no bits (docs/cuda-model.md "Programmatic launch").
  bool programmatic_launch = true;
  // Matrices over the same activations uploaded as one matrix where they share an encoding, one product
  // (hc down|inject, router|shared gate|up|shared gate); off: one product each, same layout, same bits.
  bool joint_products = true;
  // A decode call's hyper-connection mix in two launches per mix at every row count (hc_kernels.h: the norm
  // folded into the down|inject product split by stream, the partials summed by the tail); off: the separate
  // ops. Other down|inject sums (checked within the float64 bounds); docs/receipts/cuda-decode-batch1.md,
  // "hcchain". Under the tensor family where it takes hc up but not down|inject (`tensor`), the tail runs up
  // on the tensor cores (hc_tensor_tail, tc_decode_wx's bits; DS_CUDA_HC_TENSOR=0: the separate ops there).
  bool fused_hc = true;
  // Outputs a warp of the split mix's hc_head computes (1 or 2; 0: hc_head_outputs_for_rows, 1 at one row):
  // how many blocks share the down|inject product; the same bits either way
  // (docs/receipts/cuda-decode-batch1.md, "hcfast").
  int hc_head_outputs = 0;
  // A decode call's MoE glue folded into the FMA expert products, each bit-identical to the separate ops
  // (checked): SwiGLU into the gate|up products' epilogue (on: 1-1.2% faster at 1-64 streams); the routing
  // into the router product at one row (its last warp) and the combine into the down products (the block
  // storing a tile's last slot sums it), both off: measured no faster and 4-9% slower on the H200
  // (docs/receipts/cuda-decode-batch1.md, "fewnodes").
  bool fused_route = false;
  bool fused_swiglu = true;
  bool fused_combine = false;
  int prompt_pass_rows = 2048;  // a prompt call runs in passes of at most this many rows (a multiple of 64)
  // Prompt passes run DeltaNet's chunked (C = 64) rule (deltanet_chunked.h) instead of the per-token
  // recurrence: off by default, as it measured 1.5x slower on the H200 (docs/receipts/cuda-prompt.md).
  bool prompt_chunked_deltanet = false;
  // Prompt passes run DeltaNet's conv and per-token rule as deltanet_prompt.h's kernels (token ranges, a
  // cp.async ring of 16-token stages): the same bits as the decode kernels, 1 barrier a token instead of 4
  // and no global round trip a token (docs/receipts/cuda-prompt.md, prompt9). Off: the decode kernels.
  bool prompt_staged_deltanet = true;
  // Decode calls run DeltaNet's whole step (conv, rule, gated norm) in one launch, a thread-block cluster a
  // key head (deltanet_decode's fused_conv: the same bits as the two launches); DS_CUDA_DN_ONE_LAUNCH=1|0
  // overrides it at every capture (deltanet_one_launch()).
  bool deltanet_one_launch = false;
  // Decode calls' FMA expert down (the paired grouped kernel) reads its first pair and issues its weights
  // before its programmatic wait (affine_wx_grouped's pairs_ready: the routing wrote the pairs two launches
  // back); the same bits. DS_CUDA_DOWN_PAIRS_EARLY=1|0 overrides it at every capture. On since session 14
  // (fma one stream 4.929/4.900 -> 4.884/4.833 ms a round, docs/receipts/cuda-decode-merged.md "session 14").
  bool down_pairs_early = true;
  // Decode calls' hc_head, deltanet conv and rule + norm kernels issue their loads together right after
  // their programmatic waits (hc_head's and deltanet_decode's loads_first: the same bits; sass13,
  // docs/receipts/cuda-decode-batch1.md). DS_CUDA_LOADS_FIRST=1|0 overrides it at every capture. On since
  // session 14 (fma one stream 204.3 -> 214.6 tok/s, tensor 181.2 -> 186.0: cuda-decode-merged.md "session 14").
  bool loads_first = true;
  // Prompt rows past the indexer's budget attend by attention_prompt_selected (a block per row and kv head);
  // off: the any-shape kernel, one warp per (row, head).
  bool prompt_selected_tiles = true;
  // Greedy ids by the split argmax (a block per 2048-entry slice of a row, then a warp per row over the
  // slices): the same ids as the one-block-a-row kernel (off), which is latency bound on a 248k vocabulary.
  bool split_argmax = true;
  DecodeProducts decode_products = decode_products_default();
  int64_t tensor_min_rows = tensor_min_rows_default();
  int64_t tensor_min_cols = tensor_min_cols_default();
  bool tensor_tall_only = tensor_tall_only_default();
};

// Encodings for random weights: MLX affine bits/group for the experts and for every other matrix (bits 0:
// dense bf16); the host tables use the dense encoding.
struct DummySpec {
  int expert_bits = 4, expert_group = 32;
  int other_bits = 4, other_group = 32;
  uint64_t seed = 1;
  uint64_t ple_host_limit_bytes = uint64_t{80}
                                  << 30;  // larger PLE tables are cut to this many bytes (stated)
  bool mtp_head = true;  // a random MTP head (qwen4_exp form) when the config declares one layer
};

// A stream's hidden rows for the MTP head kept on the device (CudaSegment::keep_hidden,
// CudaMtpSegment::from_kept): the main model's H row of position p at ring + (p % capacity) * width for p in
// [first, end), and the output row of the stream's last head call that kept one (keep_last_out).
struct KeptHiddenRows {
  DeviceBuffer ring;
  int64_t capacity = 0, first = 0, end = 0;
  DeviceBuffer last_out;  // one row, once kept
  float* row(int64_t position, int64_t width) const {
    return ring.as<float>() + (position % capacity) * width;
  }
  size_t bytes() const { return ring.bytes() + last_out.bytes(); }
};

// One stream's device state (DeltaNet conv/recurrent states, K/V and indexer caches, PLE conv history) and
// the host part (position, PLE n-gram context).
struct CudaStreamState {
  int64_t position = 0;
  std::vector<int32_t> ple_context;
  DeviceBuffer device;       // the MTP head's K/V (and indexer) cache too, after the main layers'
  int64_t mtp_position = 0;  // positions the MTP head has consumed (docs/mtp.md)
  KeptHiddenRows kept;       // hidden rows for the head, kept on the device (CudaModel::reserve_kept_rows)
  // Rolls the head's cache back to its first `positions` entries (draft rollback): the entries past them
  // are rewritten before any row reads them, indexer blocks included.
  void truncate_mtp(int64_t positions);
};

struct CudaSegment {
  CudaStreamState* state = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;
  // A prompt pass (as ForwardSegment::prompt on the CPU): tensor-core products, experts grouped into tiles
  // (docs/cuda-model.md, "Prompt path"). A call's segments are all prompt or all decode.
  bool prompt = false;
  // DEVICE memory for tokens.size() * mtp_hidden_width() floats: receives every row's H for the MTP head
  // (the streams before the final mixer), or null. It stays on the device; copy it to the host only if
  // needed.
  float* hidden = nullptr;
  // With all_logits, the first `quiet_rows` rows return no logits (rows re-run ahead of a window: their
  // logits were read when they first ran).
  int64_t quiet_rows = 0;
  // Instead of `hidden`: every row's H but the quiet rows' (kept when they first ran, the same bits) into the
  // state's kept rows at its position (room made by CudaModel::reserve_kept_rows first).
  bool keep_hidden = false;
};

// Rows for the MTP draft head, as ds::MtpSegment (docs/mtp.md) with the hidden rows in DEVICE memory: row i
// reads hidden row i and next_tokens[i] at position + i.
struct CudaMtpSegment {
  CudaStreamState* state = nullptr;
  const float* hidden = nullptr;         // device, rows * mtp_hidden_width(): CudaSegment::hidden rows or a
                                         // previous call's hidden_out
  std::span<const int32_t> next_tokens;  // the token after each row's position; rows = next_tokens.size()
  int64_t position = 0;                  // must equal state->mtp_position
  float* hidden_out = nullptr;           // device, optional: each row's output hidden for chained drafts
  MtpLogits logits = MtpLogits::All;     // rows whose logits mtp_forward returns
  bool from_kept = false;                // hidden null: the rows are the state's kept rows at position..
  bool keep_last_out = false;  // the last row's output hidden into state->kept.last_out (may be the input)
};

class CudaModel {
 public:
  // `weights` (host, bound from a checkpoint) must outlive the model: the host tables are read from it.
  // `mtp`: the MTP head's bound weights (Model::mtp_weights()), or null for no head.
  CudaModel(const ModelConfig& cfg, const ModelWeights& weights, const CudaModelOptions& opt,
            const MtpWeights* mtp = nullptr);
  // Random weights on the GPU for `cfg` (qwen4_exp or qwen3_5_moe).
  CudaModel(const ModelConfig& cfg, const DummySpec& spec, const CudaModelOptions& opt);
  ~CudaModel();

  const ModelConfig& config() const { return cfg_; }
  CudaStreamState new_state() const;
  // Decode windows of every segment in one pass; logits [rows, vocab] on the host (each segment's last row,
  // or every row with all_logits).
  std::vector<float> forward(std::span<const CudaSegment> segments);
  // The same pass, returning the greedy (argmax) token of each logits row; the logits stay on the device.
  std::vector<int32_t> forward_greedy(std::span<const CudaSegment> segments);
  // The same pass with the logits [rows, vocab] left in device scratch (valid until the next call; the
  // device sampler draws from them): returns the scratch and sets *rows, or null when the call would run in
  // prompt passes (then use forward).
  float* forward_on_device(std::span<const CudaSegment> segments, int64_t* rows);

  // The MTP draft head (cuda_mtp.cpp; qwen4_exp form): whether one is loaded, the floats of a hidden row
  // (S*D), and the head over every segment's rows in one pass, advancing each stream's head cache: logits
  // [rows wanted, vocab] on the host in segment order (Model::mtp_forward's semantics), or each wanted row's
  // greedy token with the logits left on the device.
  bool has_mtp() const { return mtp_ != nullptr; }
  int64_t mtp_hidden_width() const { return cfg_.stream_width(); }
  std::vector<float> mtp_forward(std::span<const CudaMtpSegment> segments);
  std::vector<int32_t> mtp_forward_greedy(std::span<const CudaMtpSegment> segments);
  // Bytes of weights one head row with logits reads (its layer with top-k + shared experts, lm_head).
  size_t mtp_bytes_per_row() const;

  // State copies for the engine (cuda_model_state.cpp), enqueued on the model's stream. `to` holds a state
  // of this model (new_state(), or a buffer of state_bytes()).
  size_t state_bytes() const { return static_cast<size_t>(state_floats_) * sizeof(float); }
  void copy_state(const CudaStreamState& from, CudaStreamState& to) const;
  // The recurrent parts alone (DeltaNet conv and recurrent states, PLE conv histories) in a compact buffer:
  // with the host position and PLE context, all a rollback restores, since K/V and indexer caches are only
  // written at positions past it (a re-run overwrites them with the same bits).
  size_t recurrent_bytes() const;
  void save_recurrent(const CudaStreamState& from, DeviceBuffer& to) const;  // `to` resized if needed
  void restore_recurrent(const DeviceBuffer& from, CudaStreamState& to) const;
  // Makes the state's kept rows hold positions [first, end) (the rows of [first, state.position) it holds
  // are kept; the ring grown, or shrunk after a prompt, to a multiple of 64 rows; a new ring is zeroed).
  void reserve_kept_rows(CudaStreamState& state, int64_t first, int64_t end) const;

  size_t device_weight_bytes() const { return weight_bytes_; }
  // Bytes of weights one token reads at batch 1 (every non-expert matrix, top-k + shared experts, lm_head).
  size_t bytes_per_token() const;
  std::string describe() const;  // the encodings and sizes, for receipts
  // Milliseconds per op kind summed over calls since the last reset (with time_ops).
  const std::map<std::string, double>& op_times() const { return op_ms_; }
  void reset_op_times() { op_ms_.clear(); }
  // Host time of the decode calls since the reset (for the bench): preparing a call's inputs (run, up to its
  // launch), the launch (a graph replay or the direct launches), and for forward_greedy the wait from the
  // launch's return to the ids on the host (the argmax launches, the copy, the GPU still running). ms in all.
  struct HostTimes {
    double prep_ms = 0, launch_ms = 0, wait_ms = 0;
    int64_t calls = 0;
  };
  const HostTimes& host_times() const { return host_times_; }
  void reset_host_times() { host_times_ = {}; }
  void set_time_ops(bool on) { opt_.time_ops = on; }
  void set_prompt_chunked_deltanet(bool on) { opt_.prompt_chunked_deltanet = on; }
  void set_prompt_staged_deltanet(bool on) { opt_.prompt_staged_deltanet = on; }
  void set_prompt_selected_tiles(bool on) { opt_.prompt_selected_tiles = on; }
  void set_split_argmax(bool on) { opt_.split_argmax = on; }
  void set_graphs(bool on) { opt_.graphs = on; }
  void set_parked_graphs(int n, bool at_first_call);  // drops every parked graph
  void set_expert_windows(bool on) { opt_.expert_windows = on; }
  void set_programmatic_launch(bool on) { opt_.programmatic_launch = on; }
  void set_fused_hc(bool on) { opt_.fused_hc = on; }
  void set_hc_head_outputs(int outputs) { opt_.hc_head_outputs = outputs; }
  // hc_head's outputs a warp at n rows as a decode call takes them (the option, else the rule for the mix the
  // first layer takes: hc_head_outputs_for_rows).
  int hc_head_outputs_taken(int n) const;
  void set_fused_moe(bool route, bool swiglu, bool combine) {
    opt_.fused_route = route, opt_.fused_swiglu = swiglu, opt_.fused_combine = combine;
  }
  // For benches: the round's and the MTP head's graphs are keyed by it, so a change re-captures them.
  void set_decode_products(DecodeProducts p, bool tall_only = false) {
    opt_.decode_products = p, opt_.tensor_tall_only = tall_only;
  }
  const CudaModelOptions& options() const { return opt_; }
  // Nodes (launches, copies, timing events) of the last captured round's graph.
  size_t graph_nodes() const { return graph_nodes_; }
  // That graph's nodes by kind (kernel function names; "(copy)", "(event)"): receipts.
  const std::map<std::string, int>& graph_node_kinds() const { return graph_node_kinds_; }
  // Kernel-to-kernel edges of that graph made programmatic (0 without programmatic_launch).
  size_t graph_programmatic_edges() const { return graph_programmatic_edges_; }
  // Calls since construction by how they ran (receipts, DS_CUDA_PHASES): graph captures and the host
  // milliseconds they took, graph replays, direct launches.
  struct LaunchCounts {
    int64_t captures = 0, replays = 0, direct = 0;
    double capture_ms = 0;
  };
  const LaunchCounts& launch_counts() const { return launches_; }
  cudaStream_t stream() const { return stream_.get(); }

 private:
  struct Layer;
  struct HostTables;
  struct Scratch;
  struct Mtp;
  void build(const ModelWeights* w, const DummySpec* spec, const MtpWeights* mtp);
  int64_t run(std::span<const CudaSegment> segments);         // returns logits rows, left in scratch
  void ensure_scratch(int n);                                 // device scratch for n rows
  int64_t mtp_run(std::span<const CudaMtpSegment> segments);  // returns logits rows, left in scratch
  size_t layer_bytes_per_token(const Layer& L) const;
  void mixer(const Layer& L, int layer, int n, const float* x, float* y);
  void moe(const Layer& L, int n, const float* x, float* y);
  void mlp_in(const DeviceMatrix& gate_up, const DeviceMatrix& up_alone, int64_t inter, int n, const float* x,
              float* gu, float* h);
  // pending: the previous block's output, injected into H (with the previous iota) by the mix.
  // iota_in: the previous mix's iota (for pending); iota_out: this mix's (null: none), a different buffer.
  // Whether a decode call's mix of hc takes hc_head + hc_tensor_tail (cuda_model_hc.cpp).
  bool hc_tensor_mix(const struct DeviceHc& hc) const;
  // opt_.deltanet_one_launch, or DS_CUDA_DN_ONE_LAUNCH when set (read at every call: a bench flips it).
  bool deltanet_one_launch() const;
  // opt_.down_pairs_early, or DS_CUDA_DOWN_PAIRS_EARLY when set (read at every call).
  bool down_pairs_early() const;
  // opt_.loads_first, or DS_CUDA_LOADS_FIRST when set (read at every call).
  bool loads_first() const;
  void hc_mix(const struct DeviceHc& hc, int n, float* H, const float* pending, const float* iota_in,
              float* x, float* iota_out);
  void greedy_ids(int rows);  // scratch argmax[r] = argmax of logits row r (split_argmax picks the kernels)
  void op(const char* name);  // starts timing `name` (ends the previous op)
  // Captures enqueue() (then the "end" timing op) on the model's stream as one instantiated graph, its
  // kernel-to-kernel edges programmatic with programmatic_launch (cuda_model_graph.cpp). Counts the graph's
  // nodes and the edges made programmatic into *nodes / *edges when given.
  cudaGraphExec_t capture_graph(const std::function<void()>& enqueue, size_t* nodes = nullptr,
                                size_t* edges = nullptr);
  // Runs a call's enqueue(): its shape's parked graph replayed, or captured and parked, or (graphs off, a
  // shape's first call) launched directly; then with time_ops its ops' times added to op_times.
  void launch(GraphCache& cache, const GraphKey& key, bool use_graph, const std::function<void()>& enqueue,
              bool round);
  // Appends to a call's graph key every option a captured call's launches depend on (the rounds' and the
  // head's keys both take them, so a setter can never replay a graph laid out under another setting).
  void append_option_key(GraphKey& key) const;
  // Drops the parked graphs whose keys carry `address`, once the stream is idle: called before a buffer the
  // graph keys name (a scratch arena, a staging buffer) is replaced, so a later buffer at a reused address
  // never replays a graph laid out for the old one.
  void forget_graphs(const void* address);
  std::vector<std::pair<int64_t, int64_t>> recurrent_ranges() const;  // (first float, floats), merged
  // Prompt path (cuda_model_prompt.cpp). Inside the forward's members an unqualified wx(...) names this
  // member: the decode products, or in a prompt pass the tiled tensor-core ones.
  struct PromptScratch;
  void wx(const DeviceMatrix& m, const float* x, int64_t ldx, int n, float* y, int64_t ldy, cudaStream_t st);
  // y[r*width + offset[i] + o] = part i of W times x[r] for every part: one product when joined.
  void wx(const JointMatrix& m, const float* x, int64_t ldx, int n, float* y, cudaStream_t st);
  bool prompt_experts_tiled(const Layer& L) const;
  // Routed experts in tiles of one expert's rows (returns slot_of): the prompt products in a prompt pass, the
  // decode tensor products in a decode call (decode_tensor_experts).
  // Returns slot_of for the combine, or nullptr where the down launch also combined into y (one row). route:
  // the routing was left to the gate|up launch (experts_route_themselves).
  const int32_t* prompt_experts(const Layer& L, int n, const float* x, float* y, bool route);
  bool experts_route_themselves(const Layer& L, int n) const;
  bool decode_tensor_experts(const Layer& L) const;
  // Whether a decode call runs this single matrix on the tensor products (by the options and the matrix).
  bool decode_tensor_takes(const DeviceMatrix& m) const;
  void prompt_attention(const Layer& L, const AttentionShape& shape, const void* wins,
                        const AttentionRows& rows, int n, const AttentionSelection& sel);
  // The chunked delta rule's arguments for a prompt pass of n rows (scratch grown to fit).
  DeltaRuleChunks prompt_deltanet_chunks(const DeltaNetShape& shape, int n);
  bool prompt_needs_passes(std::span<const CudaSegment> segments) const;
  // Runs a long prompt call in passes of at most prompt_pass_rows rows; logits, or the greedy tokens into
  // *greedy.
  std::vector<float> forward_passes(std::span<const CudaSegment> segments, std::vector<int32_t>* greedy);

  ModelConfig cfg_;
  CudaModelOptions opt_;
  Stream stream_;
  std::vector<Layer> layers_;
  std::unique_ptr<struct DeviceHc> final_mixer_;
  DeviceBuffer final_norm_, inv_freq_;
  DeviceMatrix lm_head_;
  std::unique_ptr<HostTables> host_;
  std::unique_ptr<Scratch> scratch_;
  std::unique_ptr<Scratch> other_scratch_;  // the other size class's (ensure_scratch: narrow / wide calls)
  bool wide_scratch_ = false;               // scratch_ is the wide calls'
  std::unique_ptr<PromptScratch> prompt_scratch_;
  bool prompt_pass_ = false;  // this call's segments are prompt passes
  std::unique_ptr<Mtp> mtp_;  // the MTP head (its layer's cache is state slot cfg_.layers)
  size_t weight_bytes_ = 0;
  std::string encoding_;
  // state layout (floats) per layer
  std::vector<int64_t> conv_off_, rec_off_, keys_off_, values_off_, ikeys_off_, iblocks_off_, ple_off_;
  int64_t state_floats_ = 0;
  std::map<std::string, double> op_ms_;
  HostTimes host_times_;
  std::chrono::steady_clock::time_point launched_at_;  // the last run's launch returned
  std::vector<std::pair<std::string, cudaEvent_t>> op_events_;
  GraphCache round_graphs_, head_graphs_;
  LaunchCounts launches_;
  bool capturing_ = false;
  // Held while a call is captured and by the state calls other threads make outside the engine's forward
  // mutex (new_state, state copies, rewind's restore): a capture takes whatever any thread enqueues on the
  // stream, so their copies would become nodes of a parked graph, replayed after those buffers are freed.
  mutable std::mutex capture_mutex_;
  bool experts_windowed_ =
      false;  // every layer's experts are MLX affine: the expert-window kernels take them
  size_t graph_nodes_ = 0;
  size_t graph_programmatic_edges_ = 0;
  std::map<std::string, int> graph_node_kinds_;
};

}  // namespace ds::cuda
