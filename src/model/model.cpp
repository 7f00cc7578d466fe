#include "model/model.h"

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_kernels.h"
#include "core/error.h"
#include "model/layers/attention.h"
#include "model/layers/deltanet.h"
#include "model/layers/hyper_connection.h"
#include "model/layers/moe.h"
#include "model/layers/ple.h"
#include "model/layers/row_math.h"

namespace ds {

namespace {

// Each segment that asked for it gets its rows of `rows` (width floats a row).
void copy_hidden_rows(std::span<const ForwardSegment> segments, const Batch& batch, const float* rows,
                      int64_t width) {
  for (size_t i = 0; i < segments.size(); ++i)
    if (segments[i].hidden) {
      const SegmentRows& seg = batch.segments[i];
      std::copy(rows + seg.row0 * width, rows + (seg.row0 + seg.count) * width, segments[i].hidden);
    }
}

void add_mlp(MlpWeights& m, std::vector<MatrixWeight*>& out) {
  out.insert(out.end(), {&m.gate, &m.up, &m.down});
}

void add_hc(HyperConnectionWeights& h, std::vector<MatrixWeight*>& out) {
  out.insert(out.end(), {&h.down, &h.up, &h.inject});
}

void add_layer(LayerWeights& lw, std::vector<MatrixWeight*>& out) {
  DeltaNetWeights& d = lw.deltanet;
  out.insert(out.end(), {&d.qkv, &d.z, &d.b, &d.a, &d.qkvz, &d.ba, &d.out});
  AttentionWeights& a = lw.attention;
  out.insert(out.end(), {&a.q, &a.k, &a.v, &a.o, &a.indexer.qk});
  MoeWeights& moe = lw.moe;
  out.insert(out.end(), {&moe.router, &moe.shared_gate});
  for (MlpWeights& e : moe.experts) add_mlp(e, out);
  add_mlp(moe.shared, out);
  add_mlp(moe.dense_mlp, out);
  add_hc(lw.hc_attn, out);
  add_hc(lw.hc_mlp, out);
  out.insert(out.end(), {&lw.ple.key, &lw.ple.value});  // the n-gram table is gathered, not multiplied
}

// Every matrix a weight product reads (unbound ones included: tiling skips them). Not the embedding or the
// PLE table, which are gathered row by row from the checkpoint layout.
[[maybe_unused]] std::vector<MatrixWeight*> product_matrices(ModelWeights& w, MtpWeights& mtp) {
  std::vector<MatrixWeight*> out = {&w.lm_head};
  for (LayerWeights& lw : w.layers) add_layer(lw, out);
  add_hc(w.final_mixer, out);
  if (mtp.present) {
    out.insert(out.end(), {&mtp.fc_embedding, &mtp.fc_hidden, &mtp.fc});
    add_layer(mtp.layer, out);
    add_hc(mtp.mixer, out);
  }
  return out;
}

}  // namespace

Model::Model(const std::filesystem::path& dir, bool cpu_weight_tiles)
    : Model(std::make_unique<Checkpoint>(dir), cpu_weight_tiles) {}

Model::Model(std::unique_ptr<Checkpoint> checkpoint, bool cpu_weight_tiles)
    : ckpt_(std::move(checkpoint)),
      cfg_(ModelConfig::from_json(ckpt_->config())),
      w_(bind_weights(*ckpt_, cfg_)),
      rope_(std::make_unique<Rope>(cfg_.rotary_dim, cfg_.rope_theta)),
      mtp_(bind_mtp(*ckpt_, cfg_)) {
  cfg_.mtp_layers = mtp_.present ? 1 : 0;
#if DS_CPU_AVX2
  // Only the AVX2 kernels read tiles; the portable path keeps the checkpoint layout.
  if (cpu_weight_tiles) tiles_ = cpu::WeightTiles(product_matrices(w_, mtp_));
#else
  (void)cpu_weight_tiles;
#endif
}

void Model::mixer(const LayerWeights& lw, int slot, const float* x, const Batch& b, float* y) const {
  if (lw.kind == LayerKind::LinearAttention)
    deltanet_forward(cfg_, lw.deltanet, slot, x, b, y);
  else
    attention_forward(cfg_, lw.attention, *rope_, slot, x, b, y);
}

// qwen4_exp: PLE (on listed layers), then hyper-connection around the mixer, then around the MoE.
void Model::layer_qwen4exp(const LayerWeights& lw, int slot, const Batch& b, float* H) const {
  const int64_t n = b.rows, D = cfg_.hidden;
  if (lw.has_ple) ple_forward(cfg_, lw.ple, slot, b, H);
  std::vector<float> x(n * D), y(n * D), iota(n * cfg_.hc_count);
  hc_mix(cfg_, lw.hc_attn, H, n, x.data(), iota.data());
  mixer(lw, slot, x.data(), b, y.data());
  hc_inject(cfg_, iota.data(), y.data(), n, H);
  hc_mix(cfg_, lw.hc_mlp, H, n, x.data(), iota.data());
  moe_forward(cfg_, lw.moe, x.data(), n, y.data());
  hc_inject(cfg_, iota.data(), y.data(), n, H);
}

// qwen3_next / qwen3_5_moe: pre-norm residual blocks.
void Model::layer_prenorm(const LayerWeights& lw, int slot, const Batch& b, float* h) const {
  const int64_t n = b.rows, D = cfg_.hidden;
  std::vector<float> x(n * D), y(n * D);
  for (int64_t r = 0; r < n; ++r)
    rowmath::rms_norm(h + r * D, lw.input_norm.data(), D, cfg_.rms_eps, x.data() + r * D);
  mixer(lw, slot, x.data(), b, y.data());
  for (int64_t i = 0; i < n * D; ++i) h[i] += y[i];
  for (int64_t r = 0; r < n; ++r)
    rowmath::rms_norm(h + r * D, lw.post_attention_norm.data(), D, cfg_.rms_eps, x.data() + r * D);
  moe_forward(cfg_, lw.moe, x.data(), n, y.data());
  for (int64_t i = 0; i < n * D; ++i) h[i] += y[i];
}

std::vector<float> Model::forward(std::span<const ForwardSegment> segments) const {
  Batch batch;
  std::vector<int32_t> tokens;
  for (const auto& s : segments) {
    if (s.tokens.empty()) fail("forward: a segment has no tokens");
    if (s.record && s.prompt) fail("forward: a window record needs the decode path, not a prompt segment");
    if (s.keep_hidden)
      fail("forward: keep_hidden asks for rows kept by the backend; the CPU model writes `hidden`");
    for (int32_t t : s.tokens)
      if (t < 0 || t >= cfg_.vocab_size) fail("token id {} is out of range [0, {})", t, cfg_.vocab_size);
    batch.segments.push_back({s.state, s.tokens.data(), batch.rows, static_cast<int64_t>(s.tokens.size()),
                              s.state->position, s.prompt, s.record});
    if (s.record)
      s.record->begin(*s.state, s.tokens.data(), static_cast<int64_t>(s.tokens.size()), cfg_.layers);
    batch.rows += static_cast<int64_t>(s.tokens.size());
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
  }
  const int64_t n = batch.rows, D = cfg_.hidden, S = cfg_.hc_count;
  std::vector<float> e(n * D);
  gather_rows(w_.embed, tokens.data(), n, e.data());

  std::vector<float> x(n * D);
  if (cfg_.family == ModelFamily::Qwen4Exp) {
    // The hidden state is S copies of the embedding.
    std::vector<float> H(n * S * D);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s < S; ++s)
        std::copy(e.begin() + r * D, e.begin() + (r + 1) * D, H.begin() + (r * S + s) * D);
    for (int l = 0; l < cfg_.layers; ++l) layer_qwen4exp(w_.layers[l], l, batch, H.data());
    copy_hidden_rows(segments, batch, H.data(), S * D);  // the MTP head reads H before the final mixer
    hc_mix(cfg_, w_.final_mixer, H.data(), n, x.data(), nullptr);
  } else {
    for (int l = 0; l < cfg_.layers; ++l) layer_prenorm(w_.layers[l], l, batch, e.data());
    for (int64_t r = 0; r < n; ++r)
      rowmath::rms_norm(e.data() + r * D, w_.final_norm.data(), D, cfg_.rms_eps, x.data() + r * D);
    copy_hidden_rows(segments, batch, x.data(), D);  // qwen3_next's head reads the post-norm hidden
  }

  for (size_t i = 0; i < segments.size(); ++i) {
    auto& seg = batch.segments[i];
    if (!cfg_.ple_layer_ids.empty()) ple_advance_context(seg.state->ple_context, seg.tokens, seg.count);
    seg.state->position += seg.count;
  }

  // lm_head on the rows that want logits.
  std::vector<int64_t> want;
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = batch.segments[i];
    if (segments[i].all_logits)
      for (int64_t t = 0; t < seg.count; ++t) want.push_back(seg.row0 + t);
    else
      want.push_back(seg.row0 + seg.count - 1);
  }
  std::vector<float> xs(want.size() * D);
  for (size_t j = 0; j < want.size(); ++j)
    std::copy(x.begin() + want[j] * D, x.begin() + (want[j] + 1) * D, xs.begin() + j * D);
  std::vector<float> logits(want.size() * cfg_.vocab_size);
  matmul(w_.lm_head, xs.data(), static_cast<int64_t>(want.size()), D, logits.data(), cfg_.vocab_size);
  return logits;
}

}  // namespace ds
