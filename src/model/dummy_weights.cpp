#include "model/dummy_weights.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "core/host_memory.h"
#include "core/thread_pool.h"
#include "formats/affine_quantization.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

namespace {

using nlohmann::json;

uint64_t splitmix(uint64_t v) {
  v += 0x9E3779B97F4A7C15ull;
  v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
  v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
  return v ^ (v >> 31);
}

uint64_t name_hash(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

enum class Fill { Uniform, Bits };

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  Fill fill = Fill::Uniform;
  float lo = 0, hi = 0;
  bool ple = false;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  uint64_t nbytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }
};

// Every tensor bind_weights asks for, named as an HF (or, quantized, mlx-lm) checkpoint stores it.
class Planner {
 public:
  Planner(const json& config, const ModelConfig& c) : c_(c), quant_(config, "config") {}
  std::vector<Spec> specs;

  // A weight [lead..., rows, cols]: affine codes + scales + biases when quantizable, else bf16; values in
  // about +-a.
  void matrix(const std::string& module, std::vector<int64_t> lead, int64_t rows, int64_t cols, float a,
              bool ple = false) {
    lead.push_back(rows);
    std::vector<int64_t> shape = lead;
    // HF keeps lm_head outside `model.`; the config's per-module overrides apply as to a real checkpoint.
    const std::string stored = module == "lm_head" ? module : "model." + module;
    std::optional<AffineParams> q;
    if (quant_.present()) q = quant_.lookup(stored, module, stored + ".weight");
    if (q && cols % q->group == 0 && (cols * q->bits) % 32 == 0) {
      shape.push_back(cols * q->bits / 32);
      specs.push_back({stored + ".weight", DType::U32, shape, Fill::Bits, 0, 0, ple});
      std::vector<int64_t> sshape = lead;
      sshape.push_back(cols / q->group);
      // value = scale * code + bias spans about [-a, a] over the codes 0 .. 2^bits - 1.
      const float s = 2 * a / static_cast<float>((1 << q->bits) - 1);
      specs.push_back({stored + ".scales", DType::BF16, sshape, Fill::Uniform, 0.8f * s, 1.2f * s, ple});
      specs.push_back({stored + ".biases", DType::BF16, sshape, Fill::Uniform, -1.1f * a, -0.9f * a, ple});
      return;
    }
    shape.push_back(cols);
    specs.push_back({stored + ".weight", DType::BF16, shape, Fill::Uniform, -a, a, ple});
  }
  void linear(const std::string& module, int64_t rows, int64_t cols) {
    matrix(module, {}, rows, cols, 1.0f / std::sqrt(static_cast<float>(cols)));
  }
  void vec(const std::string& name, std::vector<int64_t> shape, float lo, float hi, DType dt = DType::BF16) {
    specs.push_back({"model." + name, dt, shape, Fill::Uniform, lo, hi});
  }
  // Centred norms are stored around 0 (applied as 1 + w), as HF checkpoints store them.
  void norm(const std::string& module, int64_t n) { vec(module + ".weight", {n}, -0.02f, 0.02f); }

  void mlp(const std::string& p, int64_t inter) {
    linear(p + ".gate_proj", inter, c_.hidden);
    linear(p + ".up_proj", inter, c_.hidden);
    linear(p + ".down_proj", c_.hidden, inter);
  }
  void hc(const std::string& p, bool inject) {
    const int64_t sd = c_.stream_width();
    norm(p + ".hc_norm", sd);
    linear(p + ".input_mix_weight_down", c_.hc_rank, sd);
    linear(p + ".input_mix_weight_up", sd, c_.hc_rank);
    if (inject) linear(p + ".block_inject_weight", c_.hc_count, sd);
  }
  void deltanet(const std::string& p) {
    const int64_t d = c_.hidden, kd = c_.linear_key_dim(), vd = c_.linear_value_dim(), nv = c_.lin_v_heads;
    if (c_.family == ModelFamily::Qwen3Next) {
      linear(p + ".in_proj_qkvz", 2 * kd + 2 * vd, d);
      linear(p + ".in_proj_ba", 2 * nv, d);
    } else {
      linear(p + ".in_proj_qkv", 2 * kd + vd, d);
      linear(p + ".in_proj_z", vd, d);
      linear(p + ".in_proj_b", nv, d);
      linear(p + ".in_proj_a", nv, d);
    }
    linear(p + ".out_proj", d, vd);
    const float k = 1.0f / std::sqrt(static_cast<float>(c_.conv_kernel));
    vec(p + ".conv1d.weight", {c_.linear_conv_dim(), 1, c_.conv_kernel}, -k, k);
    vec(p + ".A_log", {nv}, 0.0f, std::log(16.0f), DType::F32);  // decay rates A in [1, 16]
    vec(p + ".dt_bias", {nv}, -4.0f, -2.0f, DType::F32);         // softplus gives dt of about 0.02 .. 0.13
    vec(p + ".norm.weight", {c_.lin_v_dim}, 0.9f, 1.1f);         // gated norm, used as stored
  }
  void attention(const std::string& p) {
    const int64_t d = c_.hidden, hd = c_.head_dim;
    linear(p + ".q_proj", c_.n_heads * hd * 2, d);
    linear(p + ".k_proj", c_.n_kv_heads * hd, d);
    linear(p + ".v_proj", c_.n_kv_heads * hd, d);
    linear(p + ".o_proj", d, c_.n_heads * hd);
    norm(p + ".q_norm", hd);
    norm(p + ".k_norm", hd);
    if (c_.indexer_heads > 0) {
      linear(p + ".indexer.index_qk_proj", (c_.indexer_heads + 1) * c_.indexer_head_dim, d);
      norm(p + ".indexer.q_layernorm", c_.indexer_head_dim);
      norm(p + ".indexer.k_layernorm", c_.indexer_head_dim);
    }
  }
  void moe(int l) {
    const std::string p = fmt::format("layers.{}.mlp", l);
    if (c_.dense_mlp_layers[l]) return mlp(p, c_.dense_inter);
    const int64_t d = c_.hidden, e = c_.n_experts, i = c_.moe_inter;
    linear(p + ".gate", e, d);
    // Stacked experts [E, out, in], as mlx-lm stores them: one tensor per projection and layer.
    matrix(p + ".switch_mlp.gate_proj", {e}, i, d, 1.0f / std::sqrt(static_cast<float>(d)));
    matrix(p + ".switch_mlp.up_proj", {e}, i, d, 1.0f / std::sqrt(static_cast<float>(d)));
    matrix(p + ".switch_mlp.down_proj", {e}, d, i, 1.0f / std::sqrt(static_cast<float>(i)));
    if (c_.shared_inter > 0) {
      mlp(p + ".shared_expert", c_.shared_inter);
      linear(p + ".shared_expert_gate", 1, d);
    }
  }
  void ple(int l, int pi) {
    const std::string p = fmt::format("layers.{}.ple", l);
    std::vector<int64_t> mult, vocab, offset;
    derive_ple_constants(c_, pi, mult, vocab, offset);
    const int64_t rows = offset.back() + vocab.back(), e = c_.ple_embed_dim, sd = c_.stream_width();
    matrix(p + ".ple_embedding.ngram_embedding", {}, rows, e / c_.ple_heads(), 1.0f, true);
    linear(p + ".key_proj", sd, e);
    linear(p + ".value_proj", c_.hidden, e);
    norm(p + ".norm_key", sd);
    norm(p + ".norm_query", sd);
    norm(p + ".norm_conv", sd);
    const float k = 1.0f / std::sqrt(static_cast<float>(c_.ple_conv_kernel));
    vec(p + ".conv1d.weight", {sd, 1, c_.ple_conv_kernel}, -k, k);
  }
  void model() {
    matrix("embed_tokens", {}, c_.vocab_size, c_.hidden, 1.0f);
    for (int l = 0; l < c_.layers; ++l) {
      const std::string p = fmt::format("layers.{}", l);
      if (c_.layer_kinds[l] == LayerKind::LinearAttention)
        deltanet(p + ".linear_attn");
      else
        attention(p + ".self_attn");
      moe(l);
      if (c_.family == ModelFamily::Qwen4Exp) {
        hc(p + ".attn_hyper_connection", true);
        hc(p + ".mlp_hyper_connection", true);
        if (int pi = c_.ple_index(l); pi >= 0) ple(l, pi);
      } else {
        norm(p + ".input_layernorm", c_.hidden);
        norm(p + ".post_attention_layernorm", c_.hidden);
      }
    }
    if (c_.family == ModelFamily::Qwen4Exp)
      hc("hyper_connection_mixer", false);
    else
      norm("norm", c_.hidden);
    if (!c_.tie_embeddings) linear("lm_head", c_.vocab_size, c_.hidden);
  }

 private:
  const ModelConfig& c_;
  AffineQuantization quant_;
};

std::vector<Spec> plan(const json& config) {
  const ModelConfig c = ModelConfig::from_json(config);
  Planner p(config, c);
  p.model();
  return std::move(p.specs);
}

// Fills `n` elements in chunks seeded by (tensor seed, chunk), so threads do not change the values.
void fill(const Spec& s, uint64_t seed, uint8_t* out, ThreadPool& pool) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t n = s.numel(), chunks = (n + kChunk - 1) / kChunk;
  const uint64_t tseed = splitmix(seed ^ name_hash(s.name));
  pool.parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t ch = b; ch < e; ++ch) {
      uint64_t state = splitmix(tseed + static_cast<uint64_t>(ch));
      const int64_t lo = ch * kChunk, hi = std::min(n, lo + kChunk);
      uint64_t r = 0;
      for (int64_t i = lo; i < hi; ++i) {
        if (s.fill == Fill::Bits) {
          uint32_t v = static_cast<uint32_t>(splitmix(state++));
          std::memcpy(out + i * 4, &v, 4);
          continue;
        }
        if ((i - lo) % 4 == 0) r = splitmix(state++);
        const float u = static_cast<float>((r >> (16 * ((i - lo) % 4))) & 0xffff) / 65535.0f;
        const float v = s.lo + (s.hi - s.lo) * u;
        if (s.dtype == DType::F32) {
          std::memcpy(out + i * 4, &v, 4);
        } else {
          const uint16_t h = f32_to_bf16(v);
          std::memcpy(out + i * 2, &h, 2);
        }
      }
    }
  });
}

}  // namespace

DummyWeightsPlan plan_dummy_weights(const json& config) {
  DummyWeightsPlan out;
  for (const Spec& s : plan(config)) {
    out.total_bytes += s.nbytes();
    if (s.ple) out.ple_bytes += s.nbytes();
    ++out.tensors;
  }
  return out;
}

std::unique_ptr<Checkpoint> dummy_checkpoint(const json& config, uint64_t seed) {
  const std::vector<Spec> specs = plan(config);
  uint64_t total = 0, ple = 0;
  for (const Spec& s : specs) {
    total += s.nbytes();
    if (s.ple) ple += s.nbytes();
  }
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  if (ple > (1ull << 30))
    std::fprintf(stderr, "warning: dummy PLE n-gram tables take %.1f GiB of the %.1f GiB of weights\n",
                 ple / kGiB, total / kGiB);
  const uint64_t avail = available_memory_bytes();
  const uint64_t usable = avail - avail / 10;
  if (avail > 0 && total > usable)
    fail(
        "dummy weights need {:.1f} GiB ({:.1f} GiB of them PLE n-gram tables) but only {:.1f} GiB of memory "
        "is available; {}",
        total / kGiB, ple / kGiB, avail / kGiB,
        total - ple <= usable ? "PLE tables in host mmap are not supported yet, so use fewer or smaller PLE "
                                "layers (ple_layer_ids, ngram_vocab_size_base)"
                              : "use a smaller config (fewer layers or experts, or a quantization block)");
  std::vector<MemoryTensor> tensors;
  tensors.reserve(specs.size());
  for (const Spec& s : specs) {
    MemoryTensor t{s.name, s.dtype, s.shape, std::make_unique_for_overwrite<uint8_t[]>(s.nbytes()),
                   s.nbytes()};
    advise_huge_pages(t.bytes.get(), s.nbytes());
    fill(s, seed, t.bytes.get(), ThreadPool::global());
    tensors.push_back(std::move(t));
  }
  auto store =
      std::make_unique<TensorStore>(fmt::format("<dummy weights, seed {}>", seed), std::move(tensors));
  return std::make_unique<Checkpoint>(config, std::move(store));
}

}  // namespace ds
