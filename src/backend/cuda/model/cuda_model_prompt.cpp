// The prompt path of CudaModel (docs/cuda-model.md, "Prompt path"): in a prompt pass every product runs on
// the tensor cores (tc_products.h), DeltaNet's rule in chunks of 64 positions (deltanet_chunked.h), the
// routed experts grouped into tiles of one expert's rows, the attention of rows past the indexer's budget
// only over their chosen blocks (attention_prompt.h), and a long prompt call runs in passes cut at multiples
// of 64 positions. Each choice depends on a matrix's shape or a row's position alone, so a row's bits do not
// depend on the other rows, streams or passes cut on the 64-grid.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "backend/cuda/attention_decode.h"
#include "backend/cuda/deltanet_chunked.h"
#include "backend/cuda/model/attention_prompt.h"
#include "backend/cuda/model/cuda_model_parts.h"
#include "backend/cuda/model/generic_mixers.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/model/prompt_kernels.h"
#include "backend/cuda/moe_routing.h"
#include "backend/cuda/tc_decode.h"
#include "backend/cuda/tc_products.h"
#include "core/error.h"

namespace ds::cuda {

namespace {

constexpr int64_t kPassAlign = 64;  // passes are cut at multiples of this many positions

// The tiled products' view of a device matrix; false where they do not take it (f32, odd shapes).
bool tiled_view(const DeviceMatrix& m, TiledWeight& t) {
  t = TiledWeight{};
  t.rows = m.rows;
  t.cols = m.cols;
  t.n_experts = m.n_experts;
  if (m.kind == DeviceMatrix::Kind::Affine)
    t.affine = m.affine;
  else if (m.kind == DeviceMatrix::Kind::Bf16)
    t.dense = static_cast<const uint16_t*>(m.dense);
  else
    return false;
  return tiled_supported(t);
}

// Expert `e` of a stacked tiled view as a one-matrix view (the stacks store the experts one after another).
TiledWeight expert_slice(const TiledWeight& t, int64_t e) {
  TiledWeight one = t;
  one.n_experts = 1;
  if (t.dense) {
    one.dense = t.dense + e * t.rows * t.cols;
  } else {
    one.affine.n_experts = 1;
    one.affine.codes += e * t.rows * (t.cols / 32 * t.affine.bits);
    one.affine.scales += e * t.rows * (t.cols / t.affine.group);
    one.affine.biases += e * t.rows * (t.cols / t.affine.group);
  }
  return one;
}

void grow(DeviceBuffer& b, size_t bytes) {
  if (b.bytes() < bytes) b = DeviceBuffer(bytes);
}

// DS_CUDA_DECODE_PRODUCTS: fma (or unset), tensor, tensor-all (min rows 0) or tensor:N[:C] (min rows N, min
// cols C; both tensor and tensor-all take every column count); tensor-tall and tensor-tall-all: as tensor and
// tensor-all, but only matrices with at least as many outputs as columns.
struct DecodeProductsEnv {
  DecodeProducts mode;
  int64_t min_rows, min_cols;
  bool tall_only = false;
};
DecodeProductsEnv parse_decode_products(const std::string& v, const char* what) {
  if (v.empty() || v == "fma") return {DecodeProducts::Fma, kDecodeMinRows, 0};
  if (v == "tensor") return {DecodeProducts::Tensor, kDecodeMinRows, 0};
  if (v == "tensor-all") return {DecodeProducts::Tensor, 0, 0};
  if (v == "tensor-tall") return {DecodeProducts::Tensor, kDecodeMinRows, 0, true};
  if (v == "tensor-tall-all") return {DecodeProducts::Tensor, 0, 0, true};
  const size_t colon = v.find(':', 7);
  auto number = [&](size_t from, size_t to) {  // at most 9 digits: std::stoll never overflows
    return to > from && to - from <= 9 && v.find_first_not_of("0123456789", from) >= to;
  };
  if (v.rfind("tensor:", 0) == 0 && number(7, colon == std::string::npos ? v.size() : colon) &&
      (colon == std::string::npos || number(colon + 1, v.size())))
    return {DecodeProducts::Tensor, std::stoll(v.substr(7, colon - 7)),
            colon == std::string::npos ? 0 : std::stoll(v.substr(colon + 1))};
  // The CLI resolves its `auto` before it gets here, but a user of the option should still read it listed.
  const bool cli = std::string_view(what).rfind("--", 0) == 0;
  fail("{} must be {}fma, tensor, tensor-all, tensor-tall, tensor-tall-all or tensor:ROWS[:COLS] (got '{}')",
       what, cli ? "auto, " : "", v);
}

DecodeProductsEnv decode_products_env() {
  const char* env = std::getenv("DS_CUDA_DECODE_PRODUCTS");
  return parse_decode_products(env != nullptr ? env : "", "DS_CUDA_DECODE_PRODUCTS");
}

}  // namespace

DecodeProducts decode_products_default() {
  return decode_products_env().mode;
}

int64_t tensor_min_rows_default() {
  return decode_products_env().min_rows;
}

int64_t tensor_min_cols_default() {
  return decode_products_env().min_cols;
}

bool tensor_tall_only_default() {
  return decode_products_env().tall_only;
}

void set_decode_products(CudaModelOptions& opt, const std::string& name, const char* what) {
  const DecodeProductsEnv p = parse_decode_products(name, what);
  opt.decode_products = p.mode;
  opt.tensor_min_rows = p.min_rows;
  opt.tensor_min_cols = p.min_cols;
  opt.tensor_tall_only = p.tall_only;
}

TcScratchBytes tc_scratch_bytes(const ModelConfig& c, int n) {
  const int64_t K = std::max<int64_t>(c.experts_per_tok, 1) + 1;  // + the stacked shared expert's slot
  const int64_t inter = std::max({c.moe_inter, c.dense_inter, int64_t{1}});
  const int64_t widest = std::max({c.stream_width(), c.hidden, c.linear_value_dim(), c.n_heads * c.head_dim,
                                   c.hc_rank, c.shared_inter, inter, c.ple_embed_dim});
  const int E = static_cast<int>(std::max<int64_t>(c.n_experts, 1));
  return {static_cast<int64_t>(
              std::max(tc_decode_scratch_bytes(widest, n), tc_decode_scratch_bytes(inter, n * K))),
          int64_t{max_expert_tiles(n, static_cast<int>(K), E + 1, 1)} *  // decode tiles: 1 or 8 slots
              int64_t{sizeof(ExpertWindow)},
          // E + 1: decode groups the stacked shared expert as expert E, and the three-launch grouping (past
          // 1024 experts or 4096 pairs) keeps three ints an expert here
          static_cast<int64_t>(expert_tiles_scratch_bytes(E + 1))};
}

namespace {

// Whether a decode call runs matrix t on the tensor cores: by the options and the matrix alone.
bool decode_tensor(const CudaModelOptions& opt, const TiledWeight& t) {
  return opt.decode_products == DecodeProducts::Tensor && t.rows >= opt.tensor_min_rows &&
         t.cols >= opt.tensor_min_cols && (!opt.tensor_tall_only || t.cols <= t.rows) &&
         tc_decode_supported(t);
}

}  // namespace

bool CudaModel::decode_tensor_takes(const DeviceMatrix& m) const {
  TiledWeight t;
  return !prompt_pass_ && m.n_experts == 1 && tiled_view(m, t) && decode_tensor(opt_, t);
}

void CudaModel::wx(const DeviceMatrix& m, const float* x, int64_t ldx, int n, float* y, int64_t ldy,
                   cudaStream_t st) {
  TiledWeight t;
  if (m.n_experts == 1 && tiled_view(m, t) && ldx % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    if (prompt_pass_) return tiled_wx(t, x, ldx, n, y, ldy, st);
    if (decode_tensor(opt_, t))
      return tc_decode_wx(t, x, ldx, n, y, ldy, scratch_->tc_split, scratch_->tc_split_bytes, st);
  }
  ds::cuda::wx(m, x, ldx, n, y, ldy, st);
}

void CudaModel::wx(const JointMatrix& m, const float* x, int64_t ldx, int n, float* y, cudaStream_t st) {
  if (m.joined.valid()) return wx(m.joined, x, ldx, n, y, m.width, st);
  for (size_t i = 0; i < m.parts.size(); ++i) wx(m.parts[i], x, ldx, n, y + m.offset[i], m.width, st);
}

bool CudaModel::prompt_experts_tiled(const Layer& L) const {
  TiledWeight t;
  return tiled_view(L.gate_up, t) && tiled_view(L.down, t) &&
         (!L.up_alone.valid() || tiled_view(L.up_alone, t));
}

bool CudaModel::decode_tensor_experts(const Layer& L) const {
  TiledWeight t;
  auto takes = [&](const DeviceMatrix& m) { return tiled_view(m, t) && decode_tensor(opt_, t); };
  return !prompt_pass_ && takes(L.gate_up) && takes(L.down) && (!L.up_alone.valid() || takes(L.up_alone));
}

bool CudaModel::experts_route_themselves(const Layer& L, int n) const {
  TiledWeight t;
  return !prompt_pass_ && n == 1 && (tc_decode_expert_routed() & kTcRoutedRoute) != 0 &&
         cfg_.n_experts <= 512 && !L.up_alone.valid() && tiled_view(L.gate_up, t) &&
         tc_decode_grouping_takes(t, static_cast<int>(cfg_.experts_per_tok), L.shared_stacked);
}

const int32_t* CudaModel::prompt_experts(const Layer& L, int n, const float* x, float* y, bool route) {
  Scratch& s = *scratch_;
  const cudaStream_t st = stream_.get();
  const int K = static_cast<int>(cfg_.experts_per_tok), E = static_cast<int>(cfg_.n_experts),
            I = static_cast<int>(cfg_.moe_inter);
  const int64_t D = cfg_.hidden;
  // Prompt tiles of 16, 32 or 64 rows by the mean rows an expert; decode tiles of one slot at one row (the
  // small-window kernel's one-row path, no split launch), else of up to 8; the tiling changes no bits (each
  // slot == its expert on its row alone).
  const int tile_rows = prompt_pass_ ? prompt_expert_tile_rows(n, K, E) : n == 1 ? 1 : kDecodeExpertTileRows;
  // Decode: the stacked shared expert rides in the tiles as expert E (slots routed + r, where moe() and the
  // combine expect it), so its products are no launches of their own; a prompt pass runs it over every row.
  const int tiled_shared = L.shared_stacked && !prompt_pass_ ? 1 : 0;
  const int max_tiles = max_expert_tiles(n, K + tiled_shared, E + tiled_shared, tile_rows);
  ExpertWindow* tiles = s.tc_tiles;  // decode: the call's scratch (a captured graph allocates nothing)
  void* group = s.tc_group;
  if (prompt_pass_) {
    if (!prompt_scratch_) prompt_scratch_ = std::make_unique<PromptScratch>();
    PromptScratch& ps = *prompt_scratch_;
    grow(ps.tiles, static_cast<size_t>(max_tiles) * sizeof(ExpertWindow));
    grow(ps.group, expert_tiles_scratch_bytes(E));
    tiles = ps.tiles.as<ExpertWindow>(), group = ps.group.data();
  }
  // The routed products over the tiles and the stacked shared expert's over every row, prompt or decode kind.
  auto experts = [&](const TiledWeight& w, const int32_t* row_ids, const float* xs, int64_t ldx, int n_x,
                     float* y, int64_t ldy) {
    if (prompt_pass_)
      tiled_wx_experts(w, tiles, max_tiles, row_ids, xs, ldx, n_x, y, ldy, st, tile_rows);
    else
      tc_decode_experts(w, tiles, max_tiles, tile_rows, row_ids, xs, ldx, n_x, y, ldy, s.tc_split,
                        s.tc_split_bytes, st);
  };
  auto one = [&](const TiledWeight& w, const float* xs, int64_t ldx, float* y, int64_t ldy) {
    if (prompt_pass_)
      tiled_wx(w, xs, ldx, n, y, ldy, st);
    else
      tc_decode_wx(w, xs, ldx, n, y, ldy, s.tc_split, s.tc_split_bytes, st);
  };
  op("moe expert gate|up");
  TiledWeight t;
  tiled_view(L.gate_up, t);
  // Otherwise (prompt passes) the shared expert stacked as expert E (joint products) over every row, in the
  // slots after the routed ones.
  const int routed = n * K, all = routed + (L.shared_stacked ? n : 0);
  const bool shared_alone = L.shared_stacked && !tiled_shared;
  // Decode tiles of one slot on the one-row kernel: gate|up with the SwiGLU in its epilogue (the bits of the
  // product then silu_mul_halves; tc_decode_experts_swiglu), one launch instead of two; at one row also the
  // grouping (tc_decode_experts_swiglu_routed: the tiles, row_ids and slot_of of moe_expert_tiles).
  const bool fold = !prompt_pass_ && !shared_alone && !L.up_alone.valid();
  TcRoute r;  // route: the routing into s.ids and s.weights by the same launch (kTcRoutedRoute)
  r.logits = s.rjoint, r.E = E, r.renormalise = cfg_.norm_topk_prob, r.weights = s.weights;
  const bool one_row_routed = fold && n == 1 &&
                              tc_decode_experts_swiglu_routed(
                                  t, s.ids, K, tiled_shared ? E : -1, tiles, max_tiles, s.row_ids, s.slot_of,
                                  x, s.h, I, s.tc_split, s.tc_split_bytes, st, route ? &r : nullptr);
  if (route && !one_row_routed)  // not expected (experts_route_themselves holds the same rules)
    moe_route(s.rjoint, n, E, K, cfg_.norm_topk_prob, s.ids, s.weights, st, L.router_shared.width);
  bool folded = one_row_routed;
  if (!folded) {
    moe_expert_tiles(s.ids, n, K, E + tiled_shared, tiles, max_tiles, s.row_ids, s.slot_of, group, st,
                     tile_rows, tiled_shared ? E : -1);
    folded = fold && tc_decode_experts_swiglu(t, tiles, max_tiles, tile_rows, s.row_ids, x, D, n, s.h, I,
                                              s.tc_split, s.tc_split_bytes, st);
  }
  if (!folded) {
    experts(t, s.row_ids, x, D, n, s.gu, 2 * I);
    if (shared_alone) one(expert_slice(t, E), x, D, s.gu + int64_t{routed} * 2 * I, 2 * I);
    if (L.up_alone.valid()) {
      tiled_view(L.up_alone, t);
      experts(t, s.row_ids, x, D, n, s.gu + I, 2 * I);
      if (shared_alone) one(expert_slice(t, E), x, D, s.gu + int64_t{routed} * 2 * I + I, 2 * I);
    }
    silu_mul_halves(s.gu, all, I, s.h, st);
  }
  op("moe expert down");
  tiled_view(L.down, t);
  // After the routed gate|up (so s.ids was written two launches before): the down finds its tiles from the
  // routing too, with the combine into y where the shared expert is in the tiles (tc_decode_expert_routed).
  if (one_row_routed) {
    TcCombine c;
    c.weights = s.weights, c.slot_of = s.slot_of, c.shared_gate = s.rjoint + E, c.out = y;
    c.counters = s.counters + 1, c.n_counters = (D + 3) / 4;  // the fused combine's counters (cuda_model.cpp)
    const int done =
        tc_decode_experts_routed(t, s.ids, K, tiled_shared ? E : -1, s.h, I, s.slots, D,
                                 tiled_shared ? &c : nullptr, s.tc_split, s.tc_split_bytes, st, !route);
    if (done == 2) return nullptr;
    if (done == 1) return s.slot_of;
  }
  experts(t, nullptr, s.h, I, tiled_shared ? all : routed, s.slots, D);
  if (shared_alone) one(expert_slice(t, E), s.h + int64_t{routed} * I, I, s.slots + int64_t{routed} * D, D);
  return s.slot_of;
}

void CudaModel::prompt_attention(const Layer& L, const AttentionShape& shape, const void* wins,
                                 const AttentionRows& rows, int n, const AttentionSelection& sel) {
  const AttentionWeights w{L.q_norm.as<float>(), L.k_norm.as<float>(), inv_freq_.as<float>()};
  Scratch& s = *scratch_;
  if (!prompt_scratch_) prompt_scratch_ = std::make_unique<PromptScratch>();
  PromptScratch& ps = *prompt_scratch_;
  const cudaStream_t st = stream_.get();
  const int nw = s.n_windows;
  grow(ps.split, 2 * static_cast<size_t>(nw) * sizeof(AttentionWindow));
  auto* prefix = ps.split.as<AttentionWindow>();
  AttentionWindow* suffix = prefix + nw;
  // Rows before this position see every key (select_mode -1: complete blocks <= budget / ratio): the fast
  // kernel; the rows from it attend over their chosen blocks only (the any-shape kernel), so no row pays
  // for the full attention it would then discard.
  const int64_t top = cfg_.indexer_budget / cfg_.indexer_ratio;
  const int threshold = static_cast<int>(std::min<int64_t>((top + 1) * cfg_.indexer_ratio - 1, INT32_MAX));
  split_windows(static_cast<const AttentionWindow*>(wins), nw, threshold, prefix, suffix, st);
  attention_decode(shape, w, prefix, nw, s.max_count, rows, n, s.attn_ws, s.attn_ws_bytes, st);
  if (opt_.prompt_selected_tiles && shape.nh / shape.nkv <= 16) {
    attention_norm_rope_append(shape, w, suffix, nw, s.max_count, rows, n, st);
    attention_prompt_selected(shape, suffix, nw, s.max_count, rows, n, sel, st);
  } else {
    attention_decode_generic(shape, w, suffix, nw, s.max_count, rows, n, sel, false, st);
  }
}

DeltaRuleChunks CudaModel::prompt_deltanet_chunks(const DeltaNetShape& shape, int n) {
  if (!prompt_scratch_) prompt_scratch_ = std::make_unique<PromptScratch>();
  PromptScratch& ps = *prompt_scratch_;
  grow(ps.chunks, deltanet_chunked_scratch_bytes(shape, n));
  return DeltaRuleChunks{scratch_->max_count, ps.chunks.as<float>(), ps.chunks.bytes()};
}

bool CudaModel::prompt_needs_passes(std::span<const CudaSegment> segments) const {
  if (segments.empty() || !segments[0].prompt) return false;
  int64_t rows = 0;
  for (const CudaSegment& sg : segments) rows += static_cast<int64_t>(sg.tokens.size());
  return rows > opt_.prompt_pass_rows;
}

std::vector<float> CudaModel::forward_passes(std::span<const CudaSegment> segments,
                                             std::vector<int32_t>* greedy) {
  const int64_t P = opt_.prompt_pass_rows;
  if (P < kPassAlign || P % kPassAlign != 0)
    fail("CudaModelOptions::prompt_pass_rows must be a positive multiple of {} (got {})", kPassAlign, P);
  struct Piece {
    size_t seg, begin, count;
  };
  std::vector<std::vector<Piece>> passes(1);
  int64_t room = P;
  for (size_t i = 0; i < segments.size(); ++i) {
    const CudaSegment& sg = segments[i];
    if (!sg.prompt) fail("CudaModel::forward: a call's segments must be all prompt or all decode");
    if (sg.state == nullptr || sg.tokens.empty())
      fail("CudaModel::forward: a segment has no state or tokens");
    const size_t total = sg.tokens.size();
    int64_t pos = sg.state->position;
    for (size_t done = 0; done < total;) {
      int64_t take = std::min<int64_t>(static_cast<int64_t>(total - done), room);
      if (take < static_cast<int64_t>(total - done))
        take = (pos + take) / kPassAlign * kPassAlign - pos;  // cut at a multiple of 64 positions
      if (take <= 0 || room == 0) {
        passes.emplace_back();
        room = P;
        continue;
      }
      passes.back().push_back({i, done, static_cast<size_t>(take)});
      done += static_cast<size_t>(take), pos += take, room -= take;
    }
  }
  std::vector<float> logits;
  const size_t V = static_cast<size_t>(cfg_.vocab_size);
  for (const std::vector<Piece>& pass : passes) {
    if (pass.empty()) continue;
    std::vector<CudaSegment> segs;
    for (const Piece& p : pass) {
      const CudaSegment& sg = segments[p.seg];
      float* hidden = sg.hidden != nullptr ? sg.hidden + p.begin * cfg_.stream_width() : nullptr;
      segs.push_back({sg.state, sg.tokens.subspan(p.begin, p.count), sg.all_logits, true, hidden});
      segs.back().keep_hidden = sg.keep_hidden;  // each piece's rows at their positions
    }
    std::vector<float> pass_logits;
    std::vector<int32_t> pass_tokens;
    if (greedy != nullptr)
      pass_tokens = forward_greedy(segs);
    else
      pass_logits = forward(segs);
    // A piece gives one row (its last), or all of its rows with all_logits; the last row of a piece that
    // does not end its segment is not one the caller asked for.
    size_t row = 0;
    for (const Piece& p : pass) {
      const CudaSegment& sg = segments[p.seg];
      const size_t rows = sg.all_logits ? p.count : 1;
      const bool keep = sg.all_logits || p.begin + p.count == sg.tokens.size();
      if (keep) {
        if (greedy != nullptr)
          greedy->insert(greedy->end(), pass_tokens.begin() + row, pass_tokens.begin() + row + rows);
        else
          logits.insert(logits.end(), pass_logits.begin() + row * V, pass_logits.begin() + (row + rows) * V);
      }
      row += rows;
    }
  }
  return logits;
}

}  // namespace ds::cuda
