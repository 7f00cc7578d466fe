// CudaModel's forward: host-side gathers (embedding, PLE rows) and per-window descriptors uploaded once per
// call, then the layers' launches on one stream (CPU math: src/model/model.cpp and layers/).
#include "backend/cuda/model/cuda_model.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "backend/cpu/matmul.h"
#include "backend/cuda/attention_decode.h"
#include "backend/cuda/deltanet_decode.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/model/cuda_model_parts.h"
#include "backend/cuda/model/generic_mixers.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/model/indexer_kernels.h"
#include "backend/cuda/model/mtp_kernels.h"
#include "backend/cuda/model/ple_kernels.h"
#include "core/error.h"
#include "model/layers/ple.h"

namespace ds::cuda {

namespace {

// Calls of up to this many rows (decode rounds, draft windows with their re-run rows, head calls: the calls
// replayed as graphs) share a scratch of this size; wider ones (prompts) take a second one.
constexpr int kNarrowRows = 32;

// A segment keeping its rows must find room for them in the state's ring without overwriting the rows held
// before them (the head reads those next): CudaModel::reserve_kept_rows made it.
void check_kept_room(const CudaSegment& sg) {
  const KeptHiddenRows& k = sg.state->kept;
  const int64_t written = sg.state->position + sg.quiet_rows,
                end = sg.state->position + static_cast<int64_t>(sg.tokens.size());
  const int64_t from = k.end < written || k.first > written ? written : k.first;
  if (k.capacity == 0 || end - from > k.capacity)
    fail(
        "CudaModel::forward: the state's kept hidden rows hold {} rows, not positions {}..{} "
        "(reserve_kept_rows)",
        k.capacity, from, end);
}

}  // namespace

CudaModel::~CudaModel() {
  for (auto& e : op_events_) cudaEventDestroy(e.second);
}

void CudaModel::op(const char* name) {
  if (!opt_.time_ops) return;
  cudaEvent_t ev;
  check(cudaEventCreate(&ev), "cudaEventCreate");
  // Inside a graph capture the record becomes a node of the graph, so replays time the ops back to back.
  check(capturing_ ? cudaEventRecordWithFlags(ev, stream_.get(), cudaEventRecordExternal)
                   : cudaEventRecord(ev, stream_.get()),
        "cudaEventRecord");
  op_events_.push_back({name, ev});
}

std::vector<float> CudaModel::forward(std::span<const CudaSegment> segments) {
  if (prompt_needs_passes(segments)) return forward_passes(segments, nullptr);
  const int64_t rows = run(segments);
  std::vector<float> out(static_cast<size_t>(rows * cfg_.vocab_size));
  check(cudaMemcpyAsync(out.data(), scratch_->logits, out.size() * sizeof(float), cudaMemcpyDeviceToHost,
                        stream_.get()),
        "CudaModel::forward: logits");
  stream_.synchronize();
  return out;
}

std::vector<int32_t> CudaModel::forward_greedy(std::span<const CudaSegment> segments) {
  if (prompt_needs_passes(segments)) {
    std::vector<int32_t> tokens;
    forward_passes(segments, &tokens);
    return tokens;
  }
  const int64_t rows = run(segments);
  greedy_ids(static_cast<int>(rows));
  std::vector<int32_t> out(static_cast<size_t>(rows));
  check(cudaMemcpyAsync(out.data(), scratch_->argmax, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                        stream_.get()),
        "CudaModel::forward_greedy: tokens");
  stream_.synchronize();
  host_times_.wait_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - launched_at_).count();
  return out;
}

void CudaModel::greedy_ids(int rows) {
  Scratch& s = *scratch_;
  argmax_rows(s.logits, rows, cfg_.vocab_size, s.argmax, stream_.get(),
              opt_.split_argmax ? s.argmax_v : nullptr, opt_.split_argmax ? s.argmax_i : nullptr);
}

float* CudaModel::forward_on_device(std::span<const CudaSegment> segments, int64_t* rows) {
  if (prompt_needs_passes(segments)) return nullptr;
  *rows = run(segments);
  return scratch_->logits;
}

// The switches below are read at every call: a bench flips them between captures.
bool CudaModel::deltanet_one_launch() const {
  return env_on_off("DS_CUDA_DN_ONE_LAUNCH", opt_.deltanet_one_launch);
}

bool CudaModel::down_pairs_early() const {
  return env_on_off("DS_CUDA_DOWN_PAIRS_EARLY", opt_.down_pairs_early);
}

bool CudaModel::loads_first() const {
  return env_on_off("DS_CUDA_LOADS_FIRST", opt_.loads_first);
}

void CudaModel::mixer(const Layer& L, int layer, int n, const float* x, float* y) {
  Scratch& s = *scratch_;
  const ModelConfig& c = cfg_;
  const cudaStream_t st = stream_.get();
  const int D = static_cast<int>(c.hidden);
  if (L.kind == LayerKind::LinearAttention) {
    op("deltanet qkv|z|b|a");
    const int64_t cd = c.linear_conv_dim(), vd = c.linear_value_dim(), nv = c.lin_v_heads;
    wx(L.qkvzba, x, D, n, s.mixed, st);
    op("deltanet core");
    const DeltaNetShape shape{static_cast<int>(c.lin_k_heads),
                              static_cast<int>(nv),
                              static_cast<int>(c.lin_k_dim),
                              static_cast<int>(c.lin_v_dim),
                              static_cast<int>(c.conv_kernel),
                              c.output_gate_sigmoid,
                              c.rms_eps};
    const DeltaNetWeights w{L.conv.as<float>(), L.a_log.as<float>(), L.dt_bias.as<float>(),
                            L.dn_norm.as<float>()};
    const int64_t ld = L.qkvzba.width;
    const DeltaNetRows rows{s.mixed, s.mixed + cd, s.mixed + cd + vd, s.mixed + cd + vd + nv, s.gates, s.core,
                            ld};
    const auto* wins = static_cast<const DeltaNetWindow*>(s.win_mixer[layer]);
    const bool fast = !opt_.generic_mixers && shape.dk == 128 && shape.dv % 32 == 0 &&
                      shape.conv_kernel >= 2 && shape.conv_kernel <= 4;
    const bool chunked = fast && prompt_pass_ && opt_.prompt_chunked_deltanet;
    const DeltaRuleChunks chunks = chunked ? prompt_deltanet_chunks(shape, n) : DeltaRuleChunks{};
    // Prompt passes keep the rule and the gated norm apart (same bits): the fused kernel's one block per
    // value head walks a whole prompt window on as many SMs as heads, the rule alone on 4 blocks a head.
    if (fast)
      deltanet_decode(shape, w, wins, s.n_windows, rows, n, st, chunked ? &chunks : nullptr,
                      /*separate_norm=*/prompt_pass_, /*staged=*/prompt_pass_ && opt_.prompt_staged_deltanet,
                      /*fused_conv=*/!prompt_pass_ && deltanet_one_launch(),
                      /*loads_first=*/!prompt_pass_ && loads_first());
    else
      deltanet_decode_generic(shape, w, wins, s.n_windows, rows, n, st);
    op("deltanet out");
    wx(L.out, s.core, vd, n, y, D, st);
    return;
  }
  op("attention proj");
  // q|gate, k, v and the indexer's q heads|key: one joint row of JW floats.
  const int64_t hd = c.head_dim, qw = c.n_heads * hd * 2, kvw = c.n_kv_heads * hd, JW = L.qkv_idx.width;
  wx(L.qkv_idx, x, D, n, s.qg, st);
  const AttentionShape shape{static_cast<int>(c.n_heads), static_cast<int>(c.n_kv_heads),
                             static_cast<int>(hd), static_cast<int>(c.rotary_dim), c.rms_eps};
  const AttentionWeights w{L.q_norm.as<float>(), L.k_norm.as<float>(), inv_freq_.as<float>()};
  const AttentionRows rows{s.qg, s.qg + qw, s.qg + qw + kvw, s.attn, JW};
  const auto* wins = static_cast<const AttentionWindow*>(s.win_mixer[layer]);
  AttentionSelection sel;
  const bool fast = !opt_.generic_mixers && (hd == 128 || hd == 256);
  // The any-shape kernel reads every row's selection mode; the fast decode path only the selecting rows'.
  const bool select = s.any_selecting || !fast || prompt_pass_;
  if (L.has_indexer) {
    op("indexer");
    const int64_t ihd = c.indexer_head_dim;
    float* idx = s.qg + qw + 2 * kvw;
    const IndexerShape is{static_cast<int>(c.indexer_heads),
                          static_cast<int>(ihd),
                          static_cast<int>(c.rotary_dim),
                          static_cast<int>(c.indexer_ratio),
                          static_cast<int>(c.indexer_budget),
                          c.rms_eps,
                          JW};
    indexer_decode(is, L.iq_norm.as<float>(), L.ik_norm.as<float>(), inv_freq_.as<float>(),
                   static_cast<const IndexerWindow*>(s.win_indexer[layer]), s.n_windows, s.max_count, idx, n,
                   s.max_blocks, s.select_mode, s.scores, s.chosen, st, select);
    sel = AttentionSelection{s.select_mode, s.chosen, s.max_blocks, static_cast<int>(c.indexer_ratio)};
  }
  op("attention core");
  if (fast && prompt_pass_ && L.has_indexer) {
    prompt_attention(L, shape, wins, rows, n, sel);
  } else if (fast) {
    attention_decode(shape, w, wins, s.n_windows, s.max_count, rows, n, s.attn_ws, s.attn_ws_bytes, st);
    if (L.has_indexer && select)  // the rows past the budget, over their chosen blocks
      attention_decode_generic(shape, w, wins, s.n_windows, s.max_count, rows, n, sel, true, st);
  } else {
    attention_decode_generic(shape, w, wins, s.n_windows, s.max_count, rows, n, sel, false, st);
  }
  op("attention out");
  wx(L.o, s.attn, c.n_heads * hd, n, y, D, st);
}

void CudaModel::ensure_scratch(int n) {
  const ModelConfig& c = cfg_;
  // A wide call (a prompt, its head rows) never moves the narrow calls' buffers, so their parked graphs,
  // keyed by those buffers, stay valid (it used to grow the one scratch after calibration had captured them).
  const bool wide = n > kNarrowRows;
  if (wide != wide_scratch_) {
    std::swap(scratch_, other_scratch_);
    wide_scratch_ = wide;
  }
  if (scratch_ && scratch_->capacity >= n) return;
  if (!wide) n = kNarrowRows;
  const int64_t D = c.hidden, S = c.hc_count, SD = c.stream_width(), V = c.vocab_size;
  auto s = std::make_unique<Scratch>();
  s->capacity = n;
  // + 1: the shared expert's slot per row when it is stacked with the routed experts
  const int64_t K = std::max<int64_t>(c.experts_per_tok, 1) + 1, nv = c.lin_v_heads,
                vd = c.linear_value_dim();
  const int64_t maxb = c.indexer_ratio > 0 ? opt_.max_context / c.indexer_ratio : 0;
  const int64_t inter = std::max({c.moe_inter, c.dense_inter, int64_t{1}});
  const int64_t sinter = std::max({c.shared_inter, c.dense_inter, int64_t{1}});
  const AttentionShape ashape{static_cast<int>(c.n_heads), static_cast<int>(c.n_kv_heads),
                              static_cast<int>(c.head_dim), static_cast<int>(c.rotary_dim), c.rms_eps};
  const size_t attn_ws =
      c.head_dim == 128 || c.head_dim == 256 ? attention_decode_workspace_bytes(ashape, n) : 0;
  const TcScratchBytes tc = tc_scratch_bytes(c, n);  // the decode tensor products' (cuda_model_prompt.cpp)
  // The fused router's and combine's completion counters: the router's, then the down products' (row, output
  // tile) ones.
  const int64_t counter_bytes = (1 + n * ((c.hidden + 3) / 4)) * 4;
  std::vector<std::pair<void**, int64_t>> parts = {
      {(void**)&s->H, n * SD * 4},
      {(void**)&s->x, n * D * 4},
      {(void**)&s->y, n * D * 4},
      {(void**)&s->normed, n * SD * 4},
      {(void**)&s->low, n * std::max<int64_t>(c.hc_rank, 1) * 4},
      {(void**)&s->low_iota, n * S * (c.hc_rank + S) * 4},  // hc_head's per-stream partials too
      {(void**)&s->rjoint, n * (c.n_experts + 2 * c.shared_inter + 1) * 4},
      {(void**)&s->mix, n * SD * 4},
      {(void**)&s->iota, n * S * 4},
      {(void**)&s->iota_next, n * S * 4},
      {(void**)&s->mixed, n * (c.linear_conv_dim() + vd + 2 * nv) * 4},
      {(void**)&s->gates, n * 2 * nv * 4},
      {(void**)&s->core, n * vd * 4},
      {(void**)&s->qg, n *
                           (c.n_heads * c.head_dim * 2 + 2 * c.n_kv_heads * c.head_dim +
                            (c.indexer_heads + 1) * c.indexer_head_dim) *
                           4},
      {(void**)&s->attn, n * c.n_heads * c.head_dim * 4},
      {(void**)&s->select_mode, n * 4},
      {(void**)&s->scores, n * maxb * 4},
      {(void**)&s->chosen, n * maxb},
      {(void**)&s->ids, n * K * 4},
      {(void**)&s->weights, n * K * 4},
      {(void**)&s->up_pairs, n * K * int64_t{sizeof(ExpertRow)}},
      {(void**)&s->down_pairs, n * K * int64_t{sizeof(ExpertRow)}},
      {(void**)&s->windows, n * K * int64_t{sizeof(ExpertWindow)}},
      {(void**)&s->row_ids, n * K * 4},
      {(void**)&s->slot_of, n * K * 4},
      {(void**)&s->gu, n * K * 2 * inter * 4},
      {(void**)&s->h, n * K * inter * 4},
      {(void**)&s->slots, n * K * D * 4},
      {(void**)&s->sgu, n * 2 * sinter * 4},
      {(void**)&s->sh, n * sinter * 4},
      {(void**)&s->attn_ws, static_cast<int64_t>(attn_ws)},
      {(void**)&s->shared, n * D * 4},
      {(void**)&s->pkey, n * SD * 4},
      {(void**)&s->pval, n * D * 4},
      {(void**)&s->qn, n * SD * 4},
      {(void**)&s->gated, n * SD * 4},
      {(void**)&s->gn, n * SD * 4},
      {(void**)&s->xs, n * D * 4},
      {(void**)&s->logits, n * V * 4},
      {(void**)&s->want, n * 4},
      {(void**)&s->argmax, n * 4},
      {(void**)&s->argmax_v, n * argmax_slices(V) * 4},
      {(void**)&s->argmax_i, n * argmax_slices(V) * 4},
      {(void**)&s->tc_split, tc.split},
      {(void**)&s->tc_tiles, tc.tiles},
      {(void**)&s->tc_group, tc.group},
      {(void**)&s->counters, counter_bytes}};
  size_t total = 0;
  for (auto& p : parts) total += align256(static_cast<size_t>(p.second));
  s->arena = DeviceBuffer(total);
  size_t at = 0;
  for (auto& p : parts) {
    *p.first = s->arena.as<uint8_t>() + at;
    at += align256(static_cast<size_t>(p.second));
  }
  {  // on the model's stream, before every launch that counts; never inside another thread's capture
    const std::lock_guard lock(capture_mutex_);
    check(cudaMemsetAsync(s->counters, 0, static_cast<size_t>(counter_bytes), stream_.get()),
          "CudaModel: counters");
  }
  s->attn_ws_bytes = attn_ws;
  s->tc_split_bytes = static_cast<size_t>(tc.split);
  if (scratch_) forget_graphs(scratch_->arena.data());  // graphs keyed by the old arena's address
  scratch_ = std::move(s);
}

int64_t CudaModel::run(std::span<const CudaSegment> segments) {
  const ModelConfig& c = cfg_;
  const auto t_start = std::chrono::steady_clock::now();
  if (segments.empty()) fail("CudaModel::forward: no segments");
  prompt_pass_ = segments[0].prompt;
  struct EndPass {  // the flag holds for this call's launches only (mtp_forward runs the same members)
    bool& flag;
    ~EndPass() { flag = false; }
  } end_pass{prompt_pass_};
  for (const CudaSegment& sg : segments)
    if (sg.prompt != prompt_pass_)
      fail("CudaModel::forward: a call's segments must be all prompt or all decode");
  int n = 0, max_count = 0;
  bool any_hidden = false;
  std::vector<int32_t> tokens, want;
  for (const CudaSegment& sg : segments) {
    any_hidden = any_hidden || sg.hidden != nullptr || sg.keep_hidden;
    if (sg.keep_hidden) check_kept_room(sg);
    if (sg.state == nullptr || sg.state->device.bytes() != static_cast<size_t>(state_floats_) * sizeof(float))
      fail("CudaModel::forward: a segment's state was not made by this model's new_state()");
    if (sg.tokens.empty()) fail("CudaModel::forward: a segment has no tokens");
    for (int32_t t : sg.tokens)
      if (t < 0 || t >= c.vocab_size) fail("token id {} is out of range [0, {})", t, c.vocab_size);
    const int64_t count = static_cast<int64_t>(sg.tokens.size());
    if (sg.state->position + count > opt_.max_context)
      fail("CudaModel::forward: a stream would reach position {} but the device caches hold {} (max_context)",
           sg.state->position + count, opt_.max_context);
    for (int64_t t = 0; t < count; ++t)
      if ((sg.all_logits && t >= sg.quiet_rows) || t == count - 1)
        want.push_back(n + static_cast<int32_t>(t));
    tokens.insert(tokens.end(), sg.tokens.begin(), sg.tokens.end());
    n += static_cast<int>(count);
    max_count = std::max(max_count, static_cast<int>(count));
  }
  if (segments.size() > 65535) fail("CudaModel::forward: at most 65535 segments a call");
  if (any_hidden && c.family != ModelFamily::Qwen4Exp)
    fail("CudaModel::forward: hidden rows (for an MTP head) are only made for qwen4_exp");
  const int n_out = static_cast<int>(want.size());
  const int64_t D = c.hidden, S = c.hc_count, SD = c.stream_width(), V = c.vocab_size;

  ensure_scratch(n);
  Scratch& s = *scratch_;

  // Host side: embedding rows, PLE rows, the windows of every layer, the logits rows; one upload.
  Staging stage;
  std::vector<float> rowbuf(static_cast<size_t>(n * D));
  gather_rows(host_->embed, tokens.data(), n, rowbuf.data());
  const size_t off_e = stage.put(rowbuf.data(), rowbuf.size() * 4);
  std::vector<size_t> off_emb;
  for (const PleWeights* p : host_->ple) {
    const int64_t E = c.ple_embed_dim, nh = c.ple_heads(), hw = p->head_width;
    std::vector<float> emb(static_cast<size_t>(n * E));
    int64_t row0 = 0;
    for (const CudaSegment& sg : segments) {
      const int64_t count = static_cast<int64_t>(sg.tokens.size());
      std::vector<int64_t> ids = ple_rows(c, *p, sg.state->ple_context, sg.tokens.data(), count);
      for (int64_t t = 0; t < count; ++t)
        for (int64_t h = 0; h < nh; ++h) {
          int64_t row = ids[t * nh + h];
          if (host_->ple_rows_kept > 0) row %= host_->ple_rows_kept;
          size_t shard = p->shard_first_row.size() - 1;
          while (p->shard_first_row[shard] > row) --shard;
          const int32_t local = static_cast<int32_t>(row - p->shard_first_row[shard]);
          gather_rows(p->table_shards[shard], &local, 1, emb.data() + (row0 + t) * E + h * hw);
        }
      row0 += count;
    }
    off_emb.push_back(stage.put(emb.data(), emb.size() * 4));
  }
  const size_t off_want = stage.put(want.data(), want.size() * 4);
  // Each row's H destination (device pointers; null: not wanted) for the MTP head: the caller's rows, or the
  // state's kept rows at the row's position (quiet rows are kept already, with the same bits).
  std::vector<float*> hidden_rows;
  for (const CudaSegment& sg : segments)
    for (int64_t t = 0; t < static_cast<int64_t>(sg.tokens.size()); ++t)
      hidden_rows.push_back(sg.hidden ? sg.hidden + t * SD
                            : sg.keep_hidden && t >= sg.quiet_rows
                                ? sg.state->kept.row(sg.state->position + t, SD)
                                : nullptr);
  const size_t off_hidden =
      any_hidden ? stage.put(hidden_rows.data(), hidden_rows.size() * sizeof(float*)) : 0;
  const int nw = static_cast<int>(segments.size());
  std::vector<size_t> off_mixer(c.layers, SIZE_MAX), off_ix(c.layers, SIZE_MAX), off_ple(c.layers, SIZE_MAX);
  for (int l = 0; l < c.layers; ++l) {
    auto* base = static_cast<float*>(nullptr);
    std::vector<DeltaNetWindow> dn;
    std::vector<AttentionWindow> at;
    std::vector<IndexerWindow> ix;
    std::vector<PleWindow> pw;
    int32_t row0 = 0;
    for (const CudaSegment& sg : segments) {
      base = sg.state->device.as<float>();
      const auto count = static_cast<int32_t>(sg.tokens.size());
      const auto pos0 = static_cast<int32_t>(sg.state->position),
                 cap = static_cast<int32_t>(opt_.max_context);
      if (c.layer_kinds[l] == LayerKind::LinearAttention)
        dn.push_back({row0, count, base + conv_off_[l], base + rec_off_[l], pos0});
      else
        at.push_back({row0, count, pos0, cap, base + keys_off_[l], base + values_off_[l]});
      if (layers_[l].has_indexer)
        ix.push_back({row0, count, pos0, cap, base + ikeys_off_[l], base + iblocks_off_[l]});
      if (layers_[l].has_ple) pw.push_back({row0, count, base + ple_off_[l]});
      row0 += count;
    }
    if (!dn.empty()) off_mixer[l] = stage.put(dn.data(), dn.size() * sizeof(DeltaNetWindow));
    if (!at.empty()) off_mixer[l] = stage.put(at.data(), at.size() * sizeof(AttentionWindow));
    if (!ix.empty()) off_ix[l] = stage.put(ix.data(), ix.size() * sizeof(IndexerWindow));
    if (!pw.empty()) off_ple[l] = stage.put(pw.data(), pw.size() * sizeof(PleWindow));
  }
  if (s.pinned_bytes < stage.bytes.size()) {
    if (s.pinned) forget_graphs(s.pinned);  // graphs keyed by the old staging buffer's address
    if (s.pinned) cudaFreeHost(s.pinned);
    s.pinned = nullptr;
    s.pinned_bytes = stage.bytes.size() * 2;
    check(cudaMallocHost(reinterpret_cast<void**>(&s.pinned), s.pinned_bytes), "cudaMallocHost (staging)");
    s.staged_buf = DeviceBuffer(s.pinned_bytes);
  }
  std::memcpy(s.pinned, stage.bytes.data(), stage.bytes.size());
  uint8_t* dev = s.staged_buf.as<uint8_t>();
  const cudaStream_t st = stream_.get();
  auto at_off = [&](size_t off) { return off == SIZE_MAX ? nullptr : static_cast<const void*>(dev + off); };
  s.win_mixer.assign(c.layers, nullptr), s.win_indexer.assign(c.layers, nullptr),
      s.win_ple.assign(c.layers, nullptr);
  for (int l = 0; l < c.layers; ++l)
    s.win_mixer[l] = at_off(off_mixer[l]), s.win_indexer[l] = at_off(off_ix[l]),
    s.win_ple[l] = at_off(off_ple[l]);
  s.emb.clear();
  for (size_t off : off_emb) s.emb.push_back(reinterpret_cast<const float*>(dev + off));
  s.n_windows = nw;
  s.max_count = max_count;
  s.max_blocks = c.indexer_ratio > 0 ? static_cast<int>(opt_.max_context / c.indexer_ratio) : 0;
  // Whether a row may select blocks (a position past the indexer's budget): else the selection and the
  // selected rows' attention launches, which would change nothing, are left out of the round.
  s.any_selecting = prompt_pass_;
  if (c.indexer_ratio > 0) {
    const int64_t first = (c.indexer_budget / c.indexer_ratio + 1) * c.indexer_ratio - 1;
    for (const CudaSegment& sg : segments)
      s.any_selecting =
          s.any_selecting || sg.state->position + static_cast<int64_t>(sg.tokens.size()) - 1 >= first;
  }
  // Everything enqueued from here depends only on the call's shape (rows, windows, longest window, logits
  // rows) and on buffers that stay put, so a decode round of the same shape replays it as one CUDA graph.
  auto enqueue = [&] {
    op("upload");
    check(cudaMemcpyAsync(dev, s.pinned, stage.bytes.size(), cudaMemcpyHostToDevice, st),
          "CudaModel: upload");
    float* e = reinterpret_cast<float*>(dev + off_e);

    if (c.family == ModelFamily::Qwen4Exp) {
      hc_expand(e, n, static_cast<int>(S), static_cast<int>(D), s.H, st);
      // A block's output waits to be injected into H (with `iota`, its mix's) by the next op that reads H.
      // Each mix writes the other iota buffer: the fused tail reads the previous iota while writing its own.
      const float* pending = nullptr;
      float *iota = s.iota, *iota_next = s.iota_next;
      auto mix = [&](const DeviceHc& hc, const float* block_out, bool makes_iota) {
        hc_mix(hc, n, s.H, block_out, iota, s.x, makes_iota ? iota_next : nullptr);
        if (makes_iota) std::swap(iota, iota_next);
      };
      for (int l = 0; l < c.layers; ++l) {
        const Layer& L = layers_[l];
        if (L.has_ple) {
          op("ple");
          const int64_t E = c.ple_embed_dim;
          const float* emb = s.emb[L.ple_index];
          wx(L.ple_key, emb, E, n, s.pkey, SD, st);
          wx(L.ple_value, emb, E, n, s.pval, D, st);
          rms_norm_rows(s.pkey, SD, L.ple_norm_key.as<float>(), S, D, c.rms_eps, s.pkey, SD, n, st);
          if (pending != nullptr)
            add_rms_norm_rows(s.H, SD, iota, pending, L.ple_norm_query.as<float>(), S, D, c.rms_eps, s.qn, SD,
                              n, st);
          else
            rms_norm_rows(s.H, SD, L.ple_norm_query.as<float>(), S, D, c.rms_eps, s.qn, SD, n, st);
          pending = nullptr;
          ple_gate(s.pkey, s.qn, s.pval, n, S, D, s.gated, st);
          rms_norm_rows(s.gated, SD, L.ple_norm_conv.as<float>(), S, D, c.rms_eps, s.gn, SD, n, st);
          ple_conv(static_cast<const PleWindow*>(s.win_ple[l]), nw, s.gn, s.gated, L.ple_conv.as<float>(),
                   static_cast<int>(c.ple_conv_kernel), static_cast<int>(c.ngram_size), SD, s.H, st);
        }
        mix(L.hc_attn, pending, true);
        mixer(L, l, n, s.x, s.y);
        mix(L.hc_mlp, s.y, true);
        moe(L, n, s.x, s.y);
        pending = s.y;
      }
      mix(*final_mixer_, pending, false);
      // H is complete now (the mixer's norm injected the last block): the MTP head's input rows.
      if (any_hidden) scatter_rows(s.H, n, SD, reinterpret_cast<float* const*>(dev + off_hidden), st);
    } else {
      float* h = e;  // the residual stream, in place in the uploaded rows
      // Each residual add is fused into the norm that reads h next.
      for (int l = 0; l < c.layers; ++l) {
        const Layer& L = layers_[l];
        op("norm");
        if (l == 0)
          rms_norm_rows(h, D, L.input_norm.as<float>(), 1, D, c.rms_eps, s.normed, D, n, st);
        else
          add_rms_norm_rows(h, D, nullptr, s.y, L.input_norm.as<float>(), 1, D, c.rms_eps, s.normed, D, n,
                            st);
        mixer(L, l, n, s.normed, s.y);
        op("norm");
        add_rms_norm_rows(h, D, nullptr, s.y, L.post_norm.as<float>(), 1, D, c.rms_eps, s.normed, D, n, st);
        moe(L, n, s.normed, s.y);
      }
      if (c.layers > 0)
        add_rms_norm_rows(h, D, nullptr, s.y, final_norm_.as<float>(), 1, D, c.rms_eps, s.x, D, n, st);
      else
        rms_norm_rows(h, D, final_norm_.as<float>(), 1, D, c.rms_eps, s.x, D, n, st);
    }
    op("lm_head");
    copy_rows(s.x, D, reinterpret_cast<const int32_t*>(dev + off_want), n_out, static_cast<int>(D), s.xs, st);
    wx(lm_head_, s.xs, D, n_out, s.logits, V, st);
  };
  const bool use_graph = opt_.graphs && !prompt_pass_;  // prompt passes vary in shape: launched directly
  GraphKey key{n,
               nw,
               max_count,
               n_out,
               static_cast<int64_t>(stage.bytes.size()),
               reinterpret_cast<int64_t>(dev),
               reinterpret_cast<int64_t>(s.pinned),
               reinterpret_cast<int64_t>(s.arena.data()),
               s.any_selecting ? 1 : 0,
               any_hidden ? 1 : 0};
  append_option_key(key);
  const auto t_launch = std::chrono::steady_clock::now();
  launch(round_graphs_, key, use_graph, enqueue, true);
  launched_at_ = std::chrono::steady_clock::now();
  host_times_.prep_ms += std::chrono::duration<double, std::milli>(t_launch - t_start).count();
  host_times_.launch_ms += std::chrono::duration<double, std::milli>(launched_at_ - t_launch).count();
  ++host_times_.calls;
  for (const CudaSegment& sg : segments) {
    if (sg.keep_hidden) {
      // The kept rows now run from the older ones still held (if they reach this call's) to its last row.
      KeptHiddenRows& k = sg.state->kept;
      const int64_t written = sg.state->position + sg.quiet_rows;
      if (k.end < written || k.first > written) k.first = written;
      k.end = sg.state->position + static_cast<int64_t>(sg.tokens.size());
    }
    if (!c.ple_layer_ids.empty())
      ple_advance_context(sg.state->ple_context, sg.tokens.data(), static_cast<int64_t>(sg.tokens.size()));
    sg.state->position += static_cast<int64_t>(sg.tokens.size());
  }
  return n_out;
}

}  // namespace ds::cuda
