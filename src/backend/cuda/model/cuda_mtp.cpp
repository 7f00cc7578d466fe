// CudaModel's MTP draft head (docs/mtp.md, docs/cuda-model.md "MTP head"; CPU math: Model::mtp_forward in
// src/model/mtp.cpp): the embedding rows gathered on the host, the hidden rows read from device pointers, the
// head's attention layer run by the main layers' functions on cache slot cfg_.layers, the final mixer and
// lm_head only for the rows that want logits. A call of an already seen shape replays its parked CUDA graph.
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cuda/attention_decode.h"
#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/model/cuda_model_parts.h"
#include "backend/cuda/model/glue_kernels.h"
#include "backend/cuda/model/indexer_kernels.h"
#include "backend/cuda/model/mtp_kernels.h"
#include "core/error.h"

namespace ds::cuda {

void CudaStreamState::truncate_mtp(int64_t positions) {
  if (positions < 0 || positions > mtp_position)
    fail("truncate_mtp: {} positions requested but the MTP head's cache holds {}", positions, mtp_position);
  mtp_position = positions;
}

size_t CudaModel::mtp_bytes_per_row() const {
  if (!mtp_) return 0;
  const Mtp& h = *mtp_;
  return h.fc_embedding.storage.bytes() + h.fc_hidden.storage.bytes() + layer_bytes_per_token(h.layer) +
         h.mixer.down_inject.bytes() + h.mixer.up.storage.bytes() + lm_head_.storage.bytes();
}

std::vector<float> CudaModel::mtp_forward(std::span<const CudaMtpSegment> segments) {
  const int64_t rows = mtp_run(segments);
  std::vector<float> out(static_cast<size_t>(rows * cfg_.vocab_size));
  if (rows > 0)
    check(cudaMemcpyAsync(out.data(), scratch_->logits, out.size() * sizeof(float), cudaMemcpyDeviceToHost,
                          stream_.get()),
          "CudaModel::mtp_forward: logits");
  stream_.synchronize();
  return out;
}

std::vector<int32_t> CudaModel::mtp_forward_greedy(std::span<const CudaMtpSegment> segments) {
  const int64_t rows = mtp_run(segments);
  std::vector<int32_t> out(static_cast<size_t>(rows));
  if (rows > 0) {
    greedy_ids(static_cast<int>(rows));
    check(cudaMemcpyAsync(out.data(), scratch_->argmax, out.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                          stream_.get()),
          "CudaModel::mtp_forward_greedy: tokens");
  }
  stream_.synchronize();
  return out;
}

int64_t CudaModel::mtp_run(std::span<const CudaMtpSegment> segments) {
  const ModelConfig& c = cfg_;
  if (!mtp_) fail("mtp_forward: this model has no MTP head");
  if (segments.empty()) fail("mtp_forward: no segments");
  if (segments.size() > 65535) fail("mtp_forward: at most 65535 segments a call");
  const int64_t D = c.hidden, S = c.hc_count, SD = c.stream_width(), V = c.vocab_size;
  const int slot = static_cast<int>(c.layers);
  int n = 0, max_count = 0;
  std::vector<int32_t> tokens, want;
  std::vector<const float*> hidden_in;
  std::vector<float*> hidden_out;
  bool any_out = false;
  for (const CudaMtpSegment& sg : segments) {
    const auto rows = static_cast<int64_t>(sg.next_tokens.size());
    if (sg.state == nullptr || sg.state->device.bytes() != static_cast<size_t>(state_floats_) * sizeof(float))
      fail("mtp_forward: a segment's state was not made by this model's new_state()");
    if (rows == 0) fail("mtp_forward: a segment has no rows");
    if ((sg.hidden == nullptr) != sg.from_kept)
      fail("mtp_forward: a segment needs hidden rows, from its pointer or (from_kept) the state's kept rows");
    const KeptHiddenRows& kept = sg.state->kept;
    if (sg.from_kept && (sg.position < kept.first || sg.position + rows > kept.end))
      fail("mtp_forward: the state's kept hidden rows hold positions {}..{}, not {}..{}", kept.first,
           kept.end, sg.position, sg.position + rows);
    if (sg.keep_last_out && sg.hidden_out != nullptr)
      fail("mtp_forward: a segment gives hidden_out and keep_last_out both");
    if (sg.keep_last_out && kept.last_out.bytes() != static_cast<size_t>(SD) * sizeof(float))
      fail("mtp_forward: keep_last_out needs the state's kept output row ({} floats)", SD);
    if (sg.position != sg.state->mtp_position)
      fail("mtp_forward: segment starts at position {} but the head's cache holds {} positions", sg.position,
           sg.state->mtp_position);
    if (sg.position + rows > opt_.max_context)
      fail("mtp_forward: a stream's head would reach position {} but the device caches hold {} (max_context)",
           sg.position + rows, opt_.max_context);
    for (int32_t t : sg.next_tokens)
      if (t < 0 || t >= c.vocab_size)
        fail("mtp_forward: token id {} is out of range [0, {})", t, c.vocab_size);
    for (int64_t t = 0; t < rows; ++t) {
      if (sg.logits == MtpLogits::All || (sg.logits == MtpLogits::Last && t == rows - 1))
        want.push_back(n + static_cast<int32_t>(t));
      hidden_in.push_back(sg.from_kept ? kept.row(sg.position + t, SD) : sg.hidden + t * SD);
      hidden_out.push_back(sg.hidden_out                       ? sg.hidden_out + t * SD
                           : sg.keep_last_out && t == rows - 1 ? kept.last_out.as<float>()
                                                               : nullptr);
    }
    any_out = any_out || sg.hidden_out != nullptr || sg.keep_last_out;
    tokens.insert(tokens.end(), sg.next_tokens.begin(), sg.next_tokens.end());
    n += static_cast<int>(rows);
    max_count = std::max(max_count, static_cast<int>(rows));
  }
  const int n_out = static_cast<int>(want.size());
  ensure_scratch(n);
  Scratch& s = *scratch_;
  Mtp& h = *mtp_;
  const Layer& L = h.layer;

  // Host side: embedding rows, the hidden rows' pointers, the head layer's windows, the logits rows.
  Staging stage;
  std::vector<float> rowbuf(static_cast<size_t>(n * D));
  gather_rows(host_->embed, tokens.data(), n, rowbuf.data());
  const size_t off_e = stage.put(rowbuf.data(), rowbuf.size() * 4);
  const size_t off_in = stage.put(hidden_in.data(), hidden_in.size() * sizeof(float*));
  const size_t off_out = stage.put(hidden_out.data(), hidden_out.size() * sizeof(float*));
  const size_t off_want = stage.put(want.data(), want.size() * 4);
  std::vector<AttentionWindow> at;
  std::vector<IndexerWindow> ix;
  int32_t row0 = 0;
  for (const CudaMtpSegment& sg : segments) {
    float* base = sg.state->device.as<float>();
    const auto count = static_cast<int32_t>(sg.next_tokens.size());
    const auto pos0 = static_cast<int32_t>(sg.position), cap = static_cast<int32_t>(opt_.max_context);
    at.push_back({row0, count, pos0, cap, base + keys_off_[slot], base + values_off_[slot]});
    if (L.has_indexer)
      ix.push_back({row0, count, pos0, cap, base + ikeys_off_[slot], base + iblocks_off_[slot]});
    row0 += count;
  }
  const size_t off_at = stage.put(at.data(), at.size() * sizeof(AttentionWindow));
  const size_t off_ix = ix.empty() ? SIZE_MAX : stage.put(ix.data(), ix.size() * sizeof(IndexerWindow));
  if (h.pinned_bytes < stage.bytes.size()) {
    if (h.pinned) forget_graphs(h.pinned);  // graphs keyed by the old staging buffer's address
    if (h.pinned) cudaFreeHost(h.pinned);
    h.pinned = nullptr;
    h.pinned_bytes = stage.bytes.size() * 2;
    check(cudaMallocHost(reinterpret_cast<void**>(&h.pinned), h.pinned_bytes),
          "cudaMallocHost (head staging)");
    h.staged = DeviceBuffer(h.pinned_bytes);
  }
  std::memcpy(h.pinned, stage.bytes.data(), stage.bytes.size());
  uint8_t* dev = h.staged.as<uint8_t>();
  s.win_mixer.assign(c.layers + 1, nullptr), s.win_indexer.assign(c.layers + 1, nullptr);
  s.win_mixer[slot] = dev + off_at;
  s.win_indexer[slot] = off_ix == SIZE_MAX ? nullptr : dev + off_ix;
  s.n_windows = static_cast<int>(segments.size());
  s.max_count = max_count;
  s.max_blocks = c.indexer_ratio > 0 ? static_cast<int>(opt_.max_context / c.indexer_ratio) : 0;
  s.any_selecting = true;  // the head's rows always run the selection launches
  const cudaStream_t st = stream_.get();

  // Depends only on the call's shape and on buffers that stay put (as run()'s rounds), so it is replayed.
  auto enqueue = [&] {
    op("head upload");
    check(cudaMemcpyAsync(dev, h.pinned, stage.bytes.size(), cudaMemcpyHostToDevice, st),
          "mtp_forward: upload");
    // X_s = fc_embedding(norm(e)) + fc_hidden(n_s), n = the joint norm of H over all S*D values.
    op("head input");
    rms_norm_rows(reinterpret_cast<const float*>(dev + off_e), D, h.norm_embedding.as<float>(), 1,
                  static_cast<int>(D), c.rms_eps, s.x, D, n, st);
    wx(h.fc_embedding, s.x, D, n, s.y, D, st);
    gather_rows_from(reinterpret_cast<const float* const*>(dev + off_in), n, SD, s.H, st);
    rms_norm_rows(s.H, SD, h.norm_hidden.as<float>(), 1, static_cast<int>(SD), c.rms_eps, s.normed, SD, n,
                  st);
    wx(h.fc_hidden, s.normed, D, n * static_cast<int>(S), s.H, D, st);
    add_to_streams(s.H, s.y, n, static_cast<int>(S), static_cast<int>(D), st);
    // One decoder layer exactly as a main attention layer without PLE.
    hc_mix(L.hc_attn, n, s.H, nullptr, nullptr, s.x, s.iota);
    mixer(L, slot, n, s.x, s.y);
    hc_mix(L.hc_mlp, n, s.H, s.y, s.iota, s.x, s.iota_next);
    moe(L, n, s.x, s.y);
    // The MLP block's output injected into H (the head mixer's norm computes it; its normed rows go unused):
    // every row's X, fed back by chained drafts.
    op("head inject, out rows");
    add_rms_norm_rows(s.H, SD, s.iota_next, s.y, h.mixer.norm.as<float>(), static_cast<int>(S),
                      static_cast<int>(D), c.rms_eps, s.normed, SD, n, st);
    if (any_out) scatter_rows(s.H, n, SD, reinterpret_cast<float* const*>(dev + off_out), st);
    if (n_out > 0) {
      copy_rows(s.H, SD, reinterpret_cast<const int32_t*>(dev + off_want), n_out, static_cast<int>(SD), s.gn,
                st);
      hc_mix(h.mixer, n_out, s.gn, nullptr, nullptr, s.x, nullptr);
      op("lm_head");
      wx(lm_head_, s.x, D, n_out, s.logits, V, st);
    }
  };
  // The head's graphs are parked apart from the rounds' (the two alternate every drafted round); with
  // time_ops its ops are timed into op_times like a round's (reset them between the two to read either).
  GraphKey key{n,
               static_cast<int64_t>(segments.size()),
               max_count,
               n_out,
               static_cast<int64_t>(stage.bytes.size()),
               reinterpret_cast<int64_t>(dev),
               reinterpret_cast<int64_t>(h.pinned),
               reinterpret_cast<int64_t>(s.arena.data()),
               any_out ? 1 : 0};
  append_option_key(key);
  launch(head_graphs_, key, opt_.graphs, enqueue, false);
  for (const CudaMtpSegment& sg : segments)
    sg.state->mtp_position += static_cast<int64_t>(sg.next_tokens.size());
  return n_out;
}

}  // namespace ds::cuda
