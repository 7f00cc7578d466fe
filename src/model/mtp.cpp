#include "model/mtp.h"

#include "backend/cpu/matmul.h"
#include "core/error.h"
#include "model/layers/hyper_connection.h"
#include "model/layers/row_math.h"
#include "model/model.h"

namespace ds {

bool checkpoint_has_mtp_tensors(const Checkpoint& ck) {
  for (const auto& name : ck.store().names())
    if (name.rfind("mtp.", 0) == 0 || name.find(".mtp.") != std::string::npos) return true;
  return false;
}

MtpWeights bind_mtp(const Checkpoint& ck, const ModelConfig& c) {
  MtpWeights m;
  if (c.mtp_declared != 1 || c.family == ModelFamily::Qwen35Moe || !checkpoint_has_mtp_tensors(ck)) return m;
  const int64_t D = c.hidden;
  m.norm_embedding = bind_centred_norm(ck, "mtp.pre_fc_norm_embedding", D);
  if (c.family == ModelFamily::Qwen4Exp) {
    m.norm_hidden = bind_centred_norm(ck, "mtp.pre_fc_norm_hidden", c.stream_width());
    m.fc_embedding = bind_matrix(ck, "mtp.fc_embedding", D, D);
    m.fc_hidden = bind_matrix(ck, "mtp.fc_hidden", D, D);
    m.mixer = bind_hyper_connection(ck, c, "mtp.hyper_connection_mixer", false);
  } else {
    m.norm_hidden = bind_centred_norm(ck, "mtp.pre_fc_norm_hidden", D);
    m.fc = bind_matrix(ck, "mtp.fc", D, 2 * D);
    m.norm = bind_centred_norm(ck, "mtp.norm", D);
  }
  m.layer = bind_layer(ck, c, "mtp.layers.0", LayerKind::Attention, false);
  m.present = true;
  return m;
}

int64_t Model::mtp_hidden_width() const {
  return cfg_.family == ModelFamily::Qwen4Exp ? cfg_.stream_width() : cfg_.hidden;
}

std::vector<float> Model::mtp_forward(std::span<const MtpSegment> segments) const {
  if (!mtp_.present) fail("mtp_forward: this checkpoint has no MTP head");
  const int64_t D = cfg_.hidden, W = mtp_hidden_width(), slot = cfg_.layers;
  Batch batch;
  std::vector<int32_t> tokens;
  std::vector<float> hidden;
  for (const auto& s : segments) {
    const auto rows = static_cast<int64_t>(s.next_tokens.size());
    if (!s.state) fail("mtp_forward: a segment has no stream state");
    if (rows == 0) fail("mtp_forward: a segment has no rows");
    if (s.input != MtpInput::Given || s.keep_output)
      fail(
          "mtp_forward: kept hidden rows (MtpInput, keep_output) are a backend's; the CPU model takes "
          "floats");
    if (static_cast<int64_t>(s.hidden.size()) != rows * W)
      fail("mtp_forward: hidden holds {} floats but {} rows need {} ({} a row)", s.hidden.size(), rows,
           rows * W, W);
    if (static_cast<int64_t>(s.state->attention.size()) <= slot)
      fail("mtp_forward: the stream state has no MTP cache (made by a model without a head?)");
    if (s.position != s.state->mtp_position)
      fail("mtp_forward: segment starts at position {} but the head's cache holds {} positions", s.position,
           s.state->mtp_position);
    for (int32_t t : s.next_tokens)
      if (t < 0 || t >= cfg_.vocab_size)
        fail("mtp_forward: token id {} is out of range [0, {})", t, cfg_.vocab_size);
    batch.segments.push_back({s.state, s.next_tokens.data(), batch.rows, rows, s.position, false});
    batch.rows += rows;
    tokens.insert(tokens.end(), s.next_tokens.begin(), s.next_tokens.end());
    hidden.insert(hidden.end(), s.hidden.begin(), s.hidden.end());
  }
  const int64_t n = batch.rows;
  std::vector<float> e(n * D);
  gather_rows(w_.embed, tokens.data(), n, e.data());
  for (int64_t r = 0; r < n; ++r)
    rowmath::rms_norm(e.data() + r * D, mtp_.norm_embedding.data(), D, cfg_.rms_eps, e.data() + r * D);
  std::vector<float> hn(n * W);
  for (int64_t r = 0; r < n; ++r)
    rowmath::rms_norm(hidden.data() + r * W, mtp_.norm_hidden.data(), W, cfg_.rms_eps, hn.data() + r * W);

  // Only the rows that want logits go through the final mixer / norm and lm_head (the vocabulary projection
  // is most of a row's cost, and prompt rows only fill the head's cache).
  std::vector<int64_t> want;
  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentRows& seg = batch.segments[i];
    if (segments[i].logits == MtpLogits::All)
      for (int64_t t = 0; t < seg.count; ++t) want.push_back(seg.row0 + t);
    else if (segments[i].logits == MtpLogits::Last)
      want.push_back(seg.row0 + seg.count - 1);
  }
  const auto m = static_cast<int64_t>(want.size());
  std::vector<float> out(n * W), x(m * D);
  if (cfg_.family == ModelFamily::Qwen4Exp) {
    // X_s = fc_embedding(e) + fc_hidden(n_s): fc_hidden runs over the n*S stream rows of the joint-normed H.
    const int64_t S = cfg_.hc_count;
    std::vector<float> E(n * D);
    matmul(mtp_.fc_embedding, e.data(), n, D, E.data(), D);
    matmul(mtp_.fc_hidden, hn.data(), n * S, D, out.data(), D);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t i = 0; i < D; ++i) out[(r * S + s) * D + i] += E[r * D + i];
    layer_qwen4exp(mtp_.layer, static_cast<int>(slot), batch, out.data());
    std::vector<float> picked(m * W);
    for (int64_t j = 0; j < m; ++j)
      std::copy(out.begin() + want[j] * W, out.begin() + (want[j] + 1) * W, picked.begin() + j * W);
    if (m > 0) hc_mix(cfg_, mtp_.mixer, picked.data(), m, x.data(), nullptr);
  } else {
    std::vector<float> cat(n * 2 * D), h(n * D);
    for (int64_t r = 0; r < n; ++r) {
      std::copy(e.begin() + r * D, e.begin() + (r + 1) * D, cat.begin() + r * 2 * D);
      std::copy(hn.begin() + r * D, hn.begin() + (r + 1) * D, cat.begin() + r * 2 * D + D);
    }
    matmul(mtp_.fc, cat.data(), n, 2 * D, h.data(), D);
    layer_prenorm(mtp_.layer, static_cast<int>(slot), batch, h.data());
    // A chained draft feeds back the post-norm output, so every row is normed.
    for (int64_t r = 0; r < n; ++r)
      rowmath::rms_norm(h.data() + r * D, mtp_.norm.data(), D, cfg_.rms_eps, out.data() + r * D);
    for (int64_t j = 0; j < m; ++j)
      std::copy(out.begin() + want[j] * D, out.begin() + (want[j] + 1) * D, x.begin() + j * D);
  }

  for (size_t i = 0; i < segments.size(); ++i) {
    const SegmentRows& seg = batch.segments[i];
    if (segments[i].hidden_out)
      std::copy(out.begin() + seg.row0 * W, out.begin() + (seg.row0 + seg.count) * W, segments[i].hidden_out);
    seg.state->mtp_position += seg.count;
  }
  std::vector<float> logits(m * cfg_.vocab_size);
  if (m > 0) matmul(w_.lm_head, x.data(), m, D, logits.data(), cfg_.vocab_size);
  return logits;
}

}  // namespace ds
