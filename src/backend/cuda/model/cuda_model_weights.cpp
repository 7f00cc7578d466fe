// CudaModel construction: weights uploaded from a bound ModelWeights or made at random on the GPU, the host
// tables, the per-stream state layout, and the size accounting.
#include <cmath>
#include <thread>

#include "backend/cuda/model/cuda_model_parts.h"
#include "backend/cuda/model/glue_kernels.h"
#include "core/error.h"
#include "fmt/format.h"

namespace ds::cuda {

namespace {

// A host table of random MLX affine (or bf16) rows, filled by all cores; values depend on the seed only.
MatrixWeight random_host_matrix(int64_t rows, int64_t cols, int bits, int group, uint64_t seed,
                                std::vector<std::unique_ptr<uint8_t[]>>& owned, const std::string& name) {
  MatrixWeight w;
  w.rows = rows;
  w.cols = cols;
  w.name = name;
  const size_t data_bytes =
      bits == 0 ? static_cast<size_t>(rows * cols * 2) : static_cast<size_t>(rows * cols * bits / 8);
  const size_t groups = bits == 0 ? 0 : static_cast<size_t>(rows * (cols / group));
  owned.push_back(std::make_unique<uint8_t[]>(data_bytes + 4 * groups));
  uint8_t* p = owned.back().get();
  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  const size_t total_words = (data_bytes + 4 * groups) / 8;
  for (unsigned t = 0; t < n_threads; ++t)
    threads.emplace_back([=] {
      uint64_t* q = reinterpret_cast<uint64_t*>(p);
      for (size_t i = total_words * t / n_threads; i < total_words * (t + 1) / n_threads; ++i) {
        uint64_t z = seed * 0x9e3779b97f4a7c15ull + i;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        q[i] = z ^ (z >> 31);
      }
    });
  for (auto& t : threads) t.join();
  if (bits == 0) {
    w.encoding = MatrixEncoding::BF16;
    // Random bits are not sane bf16 values: small values from the high byte pattern instead.
    auto* v = reinterpret_cast<uint16_t*>(p);
    for (size_t i = 0; i < static_cast<size_t>(rows * cols); ++i)
      v[i] = static_cast<uint16_t>(0x3c00 | (v[i] & 0x80ff));
  } else {
    w.encoding = MatrixEncoding::Affine;
    w.bits = bits;
    w.group = group;
    w.scale_dtype = DType::BF16;
    auto* scales = reinterpret_cast<uint16_t*>(p + data_bytes);
    auto* biases = scales + groups;
    const float levels = static_cast<float>((1 << bits) - 1), s = 0.02f / levels;
    for (size_t g = 0; g < groups; ++g) {
      scales[g] = f32_to_bf16(s);
      biases[g] = f32_to_bf16(-0.5f * levels * s);
    }
    w.scales = scales;
    w.biases = biases;
  }
  w.data = p;
  return w;
}

}  // namespace

CudaModel::CudaModel(const ModelConfig& cfg, const ModelWeights& weights, const CudaModelOptions& opt,
                     const MtpWeights* mtp)
    : cfg_(cfg), opt_(opt) {
  build(&weights, nullptr, mtp);
}

CudaModel::CudaModel(const ModelConfig& cfg, const DummySpec& spec, const CudaModelOptions& opt)
    : cfg_(cfg), opt_(opt) {
  build(nullptr, &spec, nullptr);
}

void CudaModel::build(const ModelWeights* w, const DummySpec* spec, const MtpWeights* mtp) {
  const ModelConfig& c = cfg_;
  if (c.family == ModelFamily::Qwen3Next)
    fail("CudaModel: qwen3_next is not supported on CUDA (its fused qkvz/ba projections are not ported)");
  if (c.max_positions > 0 && opt_.max_context > c.max_positions) opt_.max_context = c.max_positions;
  set_parked_graphs(opt_.parked_graphs, opt_.graph_at_first_call);
  const cudaStream_t st = stream_.get();
  uint64_t seed = spec ? spec->seed * 1000003 : 0;
  auto SHAPE = [&](const MatrixWeight* h, int64_t rows, int64_t cols) {
    if (h == nullptr || !h->valid())
      fail("CudaModel: a {}x{} matrix is missing from the bound weights", rows, cols);
    if (h->rows != rows || h->cols != cols)
      fail("CudaModel: '{}' is {}x{}, the config wants {}x{}", h->name, h->rows, h->cols, rows, cols);
  };
  auto M = [&](const MatrixWeight* h, int64_t rows, int64_t cols) {
    DeviceMatrix m;
    if (w) {
      SHAPE(h, rows, cols);
      m = upload_matrix({h});
    } else {
      m = random_matrix(rows, cols, 1, spec->other_bits, spec->other_group, ++seed, st);
    }
    weight_bytes_ += m.storage.bytes();
    return m;
  };
  auto V = [&](const std::vector<float>* h, int64_t n, float lo, float hi) {
    if (w) {
      if (static_cast<int64_t>(h->size()) != n)
        fail("CudaModel: a weight vector has {} values, want {}", h->size(), n);
      return upload_floats(*h);
    }
    return random_floats(n, ++seed, lo, hi, st);
  };
  const int64_t D = c.hidden, S = c.hc_count, SD = c.stream_width(), R = c.hc_rank;
  // Matrices over the same x as one joint product (JointMatrix), parts named with their shapes.
  auto J = [&](const std::vector<std::pair<const MatrixWeight*, int64_t>>& parts, int64_t cols) {
    JointMatrix j;
    if (w) {
      std::vector<const MatrixWeight*> ps;
      for (const auto& [h, rows] : parts) SHAPE(h, rows, cols), ps.push_back(h);
      j = upload_joint(ps, opt_.joint_products);
    } else {
      std::vector<int64_t> rows;
      for (const auto& p : parts) rows.push_back(p.second);
      j = random_joint(rows, cols, opt_.joint_products, spec->other_bits, spec->other_group, seed + 1, st);
      seed += 8 * parts.size();
    }
    weight_bytes_ += j.bytes();
    return j;
  };
  auto HC = [&](const HyperConnectionWeights* h, DeviceHc& d, bool inject) {
    d.norm = V(h ? &h->norm : nullptr, SD, 0.9f, 1.1f);
    if (inject)
      d.down_inject = J({{h ? &h->down : nullptr, R}, {h ? &h->inject : nullptr, S}}, SD);
    else
      d.down_inject = J({{h ? &h->down : nullptr, R}}, SD);
    d.up = M(h ? &h->up : nullptr, SD, R);
  };
  // gate|up joined into one [2 inter, D] matrix (one product); kept apart when their encodings differ.
  auto GATE_UP = [&](const MatrixWeight* g, const MatrixWeight* u, int64_t inter, DeviceMatrix& gu,
                     DeviceMatrix& up_alone) {
    if (w) {
      SHAPE(g, inter, D), SHAPE(u, inter, D);
      if (!upload_joined({g}, {u}, gu)) gu = upload_matrix({g}), up_alone = upload_matrix({u});
    } else {
      gu = random_matrix(2 * inter, D, 1, spec->other_bits, spec->other_group, ++seed, st);
    }
    weight_bytes_ += gu.storage.bytes() + up_alone.storage.bytes();
  };
  auto MLP = [&](const MlpWeights* h, int64_t inter, DeviceMatrix& gu, DeviceMatrix& u, DeviceMatrix& dn) {
    GATE_UP(h ? &h->gate : nullptr, h ? &h->up : nullptr, inter, gu, u);
    dn = M(h ? &h->down : nullptr, D, inter);
  };
  host_ = std::make_unique<HostTables>();
  layers_.resize(c.layers);
  experts_windowed_ = c.n_experts <= 1024;  // moe_expert_windows' limit
  // The MTP head's layer is one more attention layer (no PLE) uploaded by the same code, after the main ones.
  const bool head = c.family == ModelFamily::Qwen4Exp &&
                    (w ? mtp != nullptr && mtp->present : spec->mtp_head && c.mtp_declared == 1);
  if (head) mtp_ = std::make_unique<Mtp>();
  for (int l = 0; l < c.layers + (head ? 1 : 0); ++l) {
    const bool is_head = l == c.layers;
    Layer& L = is_head ? mtp_->layer : layers_[l];
    const LayerWeights* lw = w ? (is_head ? &mtp->layer : &w->layers[l]) : nullptr;
    L.kind = is_head ? LayerKind::Attention : c.layer_kinds[l];
    if (L.kind == LayerKind::LinearAttention) {
      const DeltaNetWeights* d = lw ? &lw->deltanet : nullptr;
      const int64_t cd = c.linear_conv_dim(), vd = c.linear_value_dim(), nv = c.lin_v_heads;
      L.qkvzba = J({{d ? &d->qkv : nullptr, cd},
                    {d ? &d->z : nullptr, vd},
                    {d ? &d->b : nullptr, nv},
                    {d ? &d->a : nullptr, nv}},
                   D);
      L.out = M(d ? &d->out : nullptr, D, vd);
      L.conv = V(d ? &d->conv : nullptr, cd * c.conv_kernel, -0.5f, 0.5f);
      L.a_log = V(d ? &d->a_log : nullptr, nv, -1.0f, 0.5f);
      L.dt_bias = V(d ? &d->dt_bias : nullptr, nv, -1.0f, 1.0f);
      L.dn_norm = V(d ? &d->norm : nullptr, c.lin_v_dim, 0.9f, 1.1f);
    } else {
      const AttentionWeights* a = lw ? &lw->attention : nullptr;
      const int64_t hd = c.head_dim;
      L.has_indexer = a ? a->has_indexer : c.indexer_heads > 0;
      const int64_t ihd = c.indexer_head_dim;
      std::vector<std::pair<const MatrixWeight*, int64_t>> parts = {{a ? &a->q : nullptr, c.n_heads * hd * 2},
                                                                    {a ? &a->k : nullptr, c.n_kv_heads * hd},
                                                                    {a ? &a->v : nullptr, c.n_kv_heads * hd}};
      if (L.has_indexer) parts.push_back({a ? &a->indexer.qk : nullptr, (c.indexer_heads + 1) * ihd});
      L.qkv_idx = J(parts, D);
      L.o = M(a ? &a->o : nullptr, D, c.n_heads * hd);
      L.q_norm = V(a ? &a->q_norm : nullptr, hd, 0.9f, 1.1f);
      L.k_norm = V(a ? &a->k_norm : nullptr, hd, 0.9f, 1.1f);
      if (L.has_indexer) {
        L.iq_norm = V(a ? &a->indexer.q_norm : nullptr, ihd, 0.9f, 1.1f);
        L.ik_norm = V(a ? &a->indexer.k_norm : nullptr, ihd, 0.9f, 1.1f);
      }
    }
    const MoeWeights* mo = lw ? &lw->moe : nullptr;
    L.dense = mo ? mo->dense : (!is_head && !c.dense_mlp_layers.empty() && c.dense_mlp_layers[l]);
    if (L.dense) {
      MLP(mo ? &mo->dense_mlp : nullptr, c.dense_inter, L.sh_gate_up, L.sh_up_alone, L.sh_down);
    } else {
      const int64_t E = c.n_experts, SI = c.shared_inter;
      L.has_shared = mo ? mo->has_shared : SI > 0;
      // The shared expert as expert E of the stacks (its gate|up and down ride in the routed experts'
      // launches) where it has their shape and a fast affine encoding, so its products keep their bits.
      const auto like = [](const MatrixWeight& a, const MatrixWeight& b) {
        return a.rows == b.rows && same_encoding(a, b) && fast_affine(a);
      };
      L.shared_stacked =
          opt_.joint_products && L.has_shared && SI == c.moe_inter &&
          (w ? !mo->experts.empty() && like(mo->shared.gate, mo->experts[0].gate) &&
                   like(mo->shared.up, mo->experts[0].up) && like(mo->shared.down, mo->experts[0].down)
             : spec->expert_bits != 0);
      const int64_t stack = E + (L.shared_stacked ? 1 : 0);
      if (w) {
        std::vector<const MatrixWeight*> g, u, dn;
        for (const auto& e : mo->experts) g.push_back(&e.gate), u.push_back(&e.up), dn.push_back(&e.down);
        if (L.shared_stacked)
          g.push_back(&mo->shared.gate), u.push_back(&mo->shared.up), dn.push_back(&mo->shared.down);
        if (!upload_joined(g, u, L.gate_up)) L.gate_up = upload_matrix(g), L.up_alone = upload_matrix(u);
        L.down = upload_matrix(dn);
      } else {
        L.gate_up =
            random_matrix(2 * c.moe_inter, D, stack, spec->expert_bits, spec->expert_group, ++seed, st);
        L.down = random_matrix(D, c.moe_inter, stack, spec->expert_bits, spec->expert_group, ++seed, st);
      }
      weight_bytes_ += L.gate_up.storage.bytes() + L.up_alone.storage.bytes() + L.down.storage.bytes();
      const auto affine = [](const DeviceMatrix& m) { return m.kind == DeviceMatrix::Kind::Affine; };
      experts_windowed_ = experts_windowed_ && affine(L.gate_up) && affine(L.down) &&
                          (!L.up_alone.valid() || affine(L.up_alone));
      if (L.shared_stacked) {
        L.router_shared = J({{mo ? &mo->router : nullptr, E}, {mo ? &mo->shared_gate : nullptr, 1}}, D);
      } else if (L.has_shared) {
        L.router_shared = J({{mo ? &mo->router : nullptr, E},
                             {mo ? &mo->shared.gate : nullptr, SI},
                             {mo ? &mo->shared.up : nullptr, SI},
                             {mo ? &mo->shared_gate : nullptr, 1}},
                            D);
        L.sh_down = M(mo ? &mo->shared.down : nullptr, D, SI);
      } else {
        L.router_shared = J({{mo ? &mo->router : nullptr, E}}, D);
      }
    }
    if (c.family == ModelFamily::Qwen4Exp) {
      HC(lw ? &lw->hc_attn : nullptr, L.hc_attn, true);
      HC(lw ? &lw->hc_mlp : nullptr, L.hc_mlp, true);
      L.ple_index = is_head ? -1 : c.ple_index(l);
      L.has_ple = L.ple_index >= 0;
      if (L.has_ple) {
        const PleWeights* p = lw ? &lw->ple : nullptr;
        const int64_t E = c.ple_embed_dim;
        L.ple_key = M(p ? &p->key : nullptr, SD, E);
        L.ple_value = M(p ? &p->value : nullptr, D, E);
        L.ple_norm_key = V(p ? &p->norm_key : nullptr, SD, 0.9f, 1.1f);
        L.ple_norm_query = V(p ? &p->norm_query : nullptr, SD, 0.9f, 1.1f);
        L.ple_norm_conv = V(p ? &p->norm_conv : nullptr, SD, 0.9f, 1.1f);
        L.ple_conv = V(p ? &p->conv : nullptr, SD * c.ple_conv_kernel, -0.5f, 0.5f);
        if (p) {
          host_->ple.push_back(p);
        } else {
          PleWeights t;
          derive_ple_constants(c, L.ple_index, t.multipliers, t.head_vocab, t.head_offset);
          const int64_t heads = c.ple_heads();
          t.head_width = E / heads;
          const int64_t rows = t.head_offset.back() + t.head_vocab.back();
          // The other matrices' encoding, with the group halved until it divides a row (bf16 below 32).
          int bits = spec->other_bits, group = spec->other_group;
          while (bits != 0 && t.head_width % group != 0) group /= 2;
          if (group < 32) bits = 0;
          const double row_bytes =
              bits == 0 ? 2.0 * t.head_width : t.head_width * bits / 8.0 + 4.0 * t.head_width / group;
          const int64_t fit =
              static_cast<int64_t>(static_cast<double>(spec->ple_host_limit_bytes) / row_bytes);
          host_->ple_rows_kept = std::min(rows, fit);
          t.table_shards.push_back(random_host_matrix(host_->ple_rows_kept, t.head_width, bits, group, ++seed,
                                                      host_->owned, fmt::format("ple.{}", l)));
          t.shard_first_row.push_back(0);
          host_->own_ple.push_back(std::move(t));
          encoding_ += fmt::format(
              "PLE table (layer {}): {} rows x {} at {} ({:.1f} GB for the config's rows)"
              "; held in host memory: {} rows, {:.1f} GB{}\n",
              l, rows, t.head_width,
              bits == 0 ? std::string("bf16") : fmt::format("MLX affine {}-bit g{}", bits, group),
              rows * row_bytes / 1e9, host_->ple_rows_kept, host_->ple_rows_kept * row_bytes / 1e9,
              host_->ple_rows_kept < rows ? " (cut: the hashed row is taken modulo this)" : "");
        }
      }
    } else {
      L.input_norm = V(lw ? &lw->input_norm : nullptr, D, 0.9f, 1.1f);
      L.post_norm = V(lw ? &lw->post_attention_norm : nullptr, D, 0.9f, 1.1f);
    }
  }
  for (auto& t : host_->own_ple) host_->ple.push_back(&t);
  if (head) {
    mtp_->norm_embedding = V(mtp ? &mtp->norm_embedding : nullptr, D, 0.9f, 1.1f);
    mtp_->norm_hidden = V(mtp ? &mtp->norm_hidden : nullptr, SD, 0.9f, 1.1f);
    mtp_->fc_embedding = M(mtp ? &mtp->fc_embedding : nullptr, D, D);
    mtp_->fc_hidden = M(mtp ? &mtp->fc_hidden : nullptr, D, D);
    HC(mtp ? &mtp->mixer : nullptr, mtp_->mixer, false);
  }
  final_mixer_ = std::make_unique<DeviceHc>();
  if (c.family == ModelFamily::Qwen4Exp)
    HC(w ? &w->final_mixer : nullptr, *final_mixer_, false);
  else
    final_norm_ = V(w ? &w->final_norm : nullptr, D, 0.9f, 1.1f);
  lm_head_ = M(w ? &w->lm_head : nullptr, c.vocab_size, D);
  if (w)
    host_->embed = w->embed;
  else
    host_->embed = random_host_matrix(c.vocab_size, D, spec->other_bits, spec->other_group, ++seed,
                                      host_->owned, "embed_tokens");
  std::vector<float> inv_freq;
  for (int64_t i = 0; i < c.rotary_dim / 2; ++i)
    inv_freq.push_back(1.0f / std::pow(static_cast<float>(c.rope_theta),
                                       static_cast<float>(2 * i) / static_cast<float>(c.rotary_dim)));
  inv_freq_ = upload_floats(inv_freq);
  if (spec)
    encoding_ += fmt::format(
        "experts MLX affine {}-bit g{}; other matrices {}; vectors f32; embed/PLE host\n", spec->expert_bits,
        spec->expert_group,
        spec->other_bits == 0 ? std::string("bf16")
                              : fmt::format("MLX affine {}-bit g{}", spec->other_bits, spec->other_group));
  // st, and the legacy stream: the uploads' cudaMemcpy ran there, st (non-blocking) never waits for it, and
  // from pageable memory they may return before their DMA lands. Not the whole device: another model's
  // stream may be capturing a graph.
  check(cudaStreamSynchronize(st), "CudaModel: weights");
  check(cudaStreamSynchronize(nullptr), "CudaModel: weights (uploads)");

  // Per-stream state layout (floats), as StreamState keeps it on the CPU.
  const int64_t cap = opt_.max_context;
  auto take = [&](int64_t n) {
    const int64_t at = state_floats_;
    state_floats_ += (n + 63) / 64 * 64;
    return at;
  };
  for (int l = 0; l < c.layers + (mtp_ ? 1 : 0); ++l) {  // slot c.layers: the MTP head's cache
    const Layer& L = l < c.layers ? layers_[l] : mtp_->layer;
    int64_t conv = -1, rec = -1, keys = -1, values = -1, ikeys = -1, iblocks = -1, ple = -1;
    if (L.kind == LayerKind::LinearAttention) {
      conv = take((c.conv_kernel - 1) * c.linear_conv_dim());
      rec = take(c.lin_v_heads * c.lin_k_dim * c.lin_v_dim);
    } else {
      keys = take(cap * c.n_kv_heads * c.head_dim);
      values = take(cap * c.n_kv_heads * c.head_dim);
      if (L.has_indexer) {
        ikeys = take(cap * c.indexer_head_dim);
        iblocks = take(cap / c.indexer_ratio * c.indexer_head_dim);
      }
    }
    if (L.has_ple) ple = take((c.ple_conv_kernel - 1) * c.ngram_size * SD);
    conv_off_.push_back(conv), rec_off_.push_back(rec), keys_off_.push_back(keys),
        values_off_.push_back(values);
    ikeys_off_.push_back(ikeys), iblocks_off_.push_back(iblocks), ple_off_.push_back(ple);
  }
}

CudaStreamState CudaModel::new_state() const {
  CudaStreamState s;
  s.device = DeviceBuffer(static_cast<size_t>(state_floats_) * sizeof(float));
  // On the model's (non-blocking) stream, so the zeros land before any forward that takes the state; never
  // inside another thread's capture (an engine's admission runs beside another engine's forward).
  const std::lock_guard lock(capture_mutex_);
  check(cudaMemsetAsync(s.device.data(), 0, s.device.bytes(), stream_.get()), "CudaModel::new_state");
  if (!cfg_.ple_layer_ids.empty()) s.ple_context.assign(cfg_.ngram_size - 1, cfg_.eos());
  return s;
}

static size_t hc_bytes(const DeviceHc& h) {
  return h.down_inject.bytes() + h.up.storage.bytes();
}

size_t CudaModel::layer_bytes_per_token(const Layer& L) const {
  size_t n = hc_bytes(L.hc_attn) + hc_bytes(L.hc_mlp);
  for (const DeviceMatrix* m :
       {&L.out, &L.o, &L.sh_gate_up, &L.sh_up_alone, &L.sh_down, &L.ple_key, &L.ple_value})
    n += m->storage.bytes();
  n += L.router_shared.bytes() + L.qkvzba.bytes() + L.qkv_idx.bytes();
  // The shared expert, when stacked, is one more expert read per token.
  for (const DeviceMatrix* m : {&L.gate_up, &L.up_alone, &L.down})
    if (m->valid())
      n += m->expert_bytes() * static_cast<size_t>(cfg_.experts_per_tok + (L.shared_stacked ? 1 : 0));
  return n;
}

size_t CudaModel::bytes_per_token() const {
  size_t n = lm_head_.storage.bytes();
  if (final_mixer_) n += hc_bytes(*final_mixer_);
  for (const Layer& L : layers_) n += layer_bytes_per_token(L);
  return n;
}

std::string CudaModel::describe() const {
  return fmt::format(
      "{} layers, hidden {}, vocab {}; device weights {:.2f} GB; weights read per token at batch 1 "
      "{:.3f} GB; max context {}\n{}{}",
      cfg_.layers, cfg_.hidden, cfg_.vocab_size, weight_bytes_ / 1e9, bytes_per_token() / 1e9,
      opt_.max_context, encoding_,
      mtp_ ? fmt::format("MTP head: weights read per head row with logits {:.3f} GB\n",
                         mtp_bytes_per_row() / 1e9)
           : std::string());
}

}  // namespace ds::cuda
