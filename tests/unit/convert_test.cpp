// `deltaserve convert` (src/convert/): MLX affine quantization as mlx computes it, the converted fixtures
// load and stay close to their originals, the config round trip, determinism, sharding, and the named errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "convert/affine_quantize.h"
#include "convert/converter.h"
#include "convert_mlx_golden.h"
#include "expect_error.h"
#include "model_test_support.h"
#include "safetensors_writer.h"

namespace ds {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::TempDir;

// Worst |logit| difference between the converted and original checkpoints on the fixture prompts (max |logit|
// about 4 for qwen4exp_base, 7.4 for qwen3next). Measured (docs/convert.md): layout only (every module kept)
// 0.008, from storing centred norms as bf16(1 + w) as MLX does; 8-bit g32 0.114 (qwen3next 0.26); the mixed
// 2..8-bit set 0.66. The bounds leave about 2x headroom; top-1 must agree wherever the original's margin
// exceeds twice the bound.
constexpr double kLogitBoundLayout = 0.02;
constexpr double kLogitBound8Bit = 0.25;
constexpr double kLogitBound8BitQwen3Next = 0.6;
constexpr double kLogitBoundMixed = 1.5;
constexpr int64_t kVocab = 320;

ConvertReport convert(const fs::path& in, const fs::path& out, AffineParams global,
                      const std::vector<std::string>& overrides = {}, size_t shard = size_t{1} << 30) {
  ConvertOptions o;
  o.global = global;
  for (const auto& s : overrides) o.overrides.push_back(parse_module_override(s));
  o.max_shard_bytes = shard;
  return convert_checkpoint(in, out, o);
}

std::vector<float> logits_of(const fs::path& dir) {
  const auto ref = test::read_json(test::fixture("qwen4exp_base") / "reference.json");
  std::vector<int32_t> prompt = ref["prompt"].get<std::vector<int32_t>>();
  prompt.resize(std::min<size_t>(prompt.size(), 24));
  Model model(dir);
  StreamState st = model.new_state();
  return test::run(model, st, prompt, true);
}

// Worst |a - b| over all logits; also checks top-1 agreement wherever b's top-2 margin exceeds 2 * bound.
double worst_diff(const std::vector<float>& a, const std::vector<float>& b, double bound) {
  EXPECT_EQ(a.size(), b.size());
  double w = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) w = std::max(w, std::fabs(double(a[i]) - b[i]));
  for (size_t row = 0; row + 1 <= b.size() / kVocab && a.size() == b.size(); ++row) {
    std::vector<float> r(b.begin() + row * kVocab, b.begin() + (row + 1) * kVocab);
    const auto top = std::max_element(r.begin(), r.end()) - r.begin();
    std::vector<float> sorted = r;
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted[0] - sorted[1] <= 2 * bound) continue;
    EXPECT_EQ(std::max_element(a.begin() + row * kVocab, a.begin() + (row + 1) * kVocab) -
                  (a.begin() + row * kVocab),
              top)
        << "position " << row;
  }
  return w;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// |dequantized - original| <= half the step the codes were rounded with (plus what rounding that step to bf16
// moves code q by: under q bf16 ulps of the scale, 2^-7 relative each), except where mlx's edge snapping left
// w past the group's last code: there the error is that distance, which is at most about one step.
void expect_within_half_step(const MatrixWeight& q, const MatrixWeight& ref, const std::string& what) {
  ASSERT_EQ(q.encoding, MatrixEncoding::Affine) << what;
  ASSERT_EQ(q.rows, ref.rows) << what;
  ASSERT_EQ(q.cols, ref.cols) << what;
  std::vector<float> a(q.cols), b(q.cols);
  const auto* scales = static_cast<const uint16_t*>(q.scales);
  const auto* biases = static_cast<const uint16_t*>(q.biases);
  const double n = (1 << q.bits) - 1;
  for (int64_t r = 0; r < q.rows; ++r) {
    dequantize_row_reference(q, r, a.data());
    dequantize_row_reference(ref, r, b.data());
    for (int64_t c = 0; c < q.cols; ++c) {
      const int64_t g = r * (q.cols / q.group) + c / q.group;
      const double s = bf16_to_f32(scales[g]), bias = bf16_to_f32(biases[g]);
      const double code = std::round((double(a[c]) - bias) / s);
      const double lo = std::min(bias, bias + n * s), hi = std::max(bias, bias + n * s);
      const double outside = std::max({0.0, lo - b[c], b[c] - hi});
      ASSERT_LE(outside, std::fabs(s) * (1.01 + n / 256)) << what << " row " << r << " col " << c;
      const double tol = std::max(std::fabs(s) * (0.5 + code / 128.0) * (1 + 1.0 / 128), outside) + 1e-7;
      ASSERT_LE(std::fabs(double(a[c]) - b[c]), tol) << what << " row " << r << " col " << c;
    }
  }
}

AffineParams settings_of(const MatrixWeight& m) {
  return m.encoding == MatrixEncoding::Affine ? AffineParams{m.bits, m.group} : AffineParams{0, 0};
}

// --- the quantizer itself ---------------------------------------------------------------------------------

TEST(AffineQuantize, ExactGroupsGiveExactCodes) {
  // Low edge dominates: scale 0.5, bias -1, codes 0..3; high edge dominates: negative scale, bias at the top.
  std::vector<float> w;
  for (int i = 0; i < 8; ++i) w.insert(w.end(), {-1.0f, -0.5f, 0.0f, 0.5f});
  for (int i = 0; i < 8; ++i) w.insert(w.end(), {-0.5f, 0.0f, 0.5f, 1.0f});
  w.insert(w.end(), 32, 0.0f);
  const AffineQuantized q = affine_quantize(w.data(), 1, 96, {2, 32});
  ASSERT_EQ(q.words.size(), 6u);
  EXPECT_EQ(q.words[0], 0xE4E4E4E4u);  // codes 0,1,2,3 little-endian, 2 bits each
  EXPECT_EQ(q.words[2], 0x1B1B1B1Bu);  // codes 3,2,1,0
  EXPECT_EQ(q.words[4], 0u);
  EXPECT_EQ(bf16_to_f32(q.scales[0]), 0.5f);
  EXPECT_EQ(bf16_to_f32(q.biases[0]), -1.0f);
  EXPECT_EQ(bf16_to_f32(q.scales[1]), -0.5f);
  EXPECT_EQ(bf16_to_f32(q.biases[1]), 1.0f);
  EXPECT_EQ(bf16_to_f32(q.biases[2]), 0.0f);
  std::vector<float> back(96);
  dequantize_row_reference(q.view("w"), 0, back.data());
  EXPECT_EQ(back, w);
  const QuantizationError e = quantization_error(q, w.data());
  EXPECT_EQ(e.max_abs, 0.0);
  EXPECT_EQ(e.rel_rms, 0.0);
}

// The matrix convert_mlx_golden.h was made from (the same LCG as its generator in docs/convert.md).
std::vector<float> golden_input() {
  std::vector<float> w(3 * 128);
  uint64_t state = 12345;
  for (auto& x : w) {
    state = (state * 1103515245 + 12345) % (uint64_t{1} << 31);
    x = static_cast<float>(static_cast<int64_t>((state >> 8) % 401) - 200) / 512.0f;
  }
  for (int c = 0; c < 32; ++c) w[128 + c] = -std::fabs(w[128 + c]) - 1.0f / 512;  // an all-negative group
  w[2 * 128 + 5] = 1.5f;                                                          // an outlier
  return w;
}

TEST(AffineQuantize, CpuRoundingMatchesMlxBitForBit) {
  const std::vector<float> w = golden_input();
  for (const auto& g : test::mlx_golden()) {
    const AffineQuantized q = affine_quantize(w.data(), 3, 128, {g.bits, g.group}, MlxRounding::Cpu);
    EXPECT_EQ(q.words, g.words) << g.bits << "-bit g" << g.group;
    EXPECT_EQ(q.scales, g.scales) << g.bits << "-bit g" << g.group;
    EXPECT_EQ(q.biases, g.biases) << g.bits << "-bit g" << g.group;
  }
}

TEST(AffineQuantize, MetalRoundingStartsTheMaximumAtZero) {
  const std::vector<float> w = golden_input();
  const AffineQuantized metal = affine_quantize(w.data(), 3, 128, {8, 32}, MlxRounding::Metal);
  const AffineQuantized cpu = affine_quantize(w.data(), 3, 128, {8, 32}, MlxRounding::Cpu);
  // Row 1, group 0 is all negative: Metal's range runs from its minimum up to 0, the CPU's to its maximum.
  const float lo = *std::min_element(w.begin() + 128, w.begin() + 160);
  const float s = bf16_to_f32(metal.scales[4]), b = bf16_to_f32(metal.biases[4]);
  EXPECT_EQ(b, lo);
  EXPECT_LE(std::fabs(b + 255 * s), std::fabs(s));
  EXPECT_NE(metal.scales[4], cpu.scales[4]);
  // Groups with both signs and no ties come out the same.
  EXPECT_EQ(metal.scales[0], cpu.scales[0]);
  EXPECT_EQ(metal.biases[0], cpu.biases[0]);
}

TEST(AffineQuantize, EveryWidthDequantizesWithinHalfAStep) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  const int64_t rows = 5, cols = 256;
  std::vector<float> w(rows * cols);
  for (auto& x : w) x = bf16_to_f32(f32_to_bf16(dist(rng)));
  w[3] = 0.4f;  // an outlier widens one group
  MatrixWeight ref;
  ref.rows = rows;
  ref.cols = cols;
  ref.data = w.data();
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      const AffineQuantized q = affine_quantize(w.data(), rows, cols, {bits, group});
      expect_within_half_step(q.view("w"), ref, fmt::format("{}-bit g{}", bits, group));
      const QuantizationError e = quantization_error(q, w.data());
      EXPECT_GT(e.rel_rms, 0.0);
      EXPECT_LT(e.rel_rms, 1.0 / (1 << bits) * 2) << bits << " " << group;
    }
  }
}

// --- whole checkpoints
// --------------------------------------------------------------------------------------

TEST(Convert, Qwen4Exp8BitLoadsAndStaysClose) {
  TempDir out;
  const fs::path in = test::fixture("qwen4exp_base");
  const ConvertReport report = convert(in, out.path(), {8, 32});
  Checkpoint q(out.path()), base(in);
  EXPECT_EQ(q.layout(), CheckpointLayout::MLX);
  EXPECT_TRUE(q.norms_stored_shifted());
  EXPECT_TRUE(q.store().has("model.layers.0.mlp.switch_mlp.gate_proj.scales"));
  EXPECT_TRUE(q.store().has("lm_head.scales"));
  EXPECT_TRUE(q.store().has("model.embed_tokens.scales"));
  EXPECT_EQ(q.store().get("model.layers.0.linear_attn.conv1d.weight").shape,
            (std::vector<int64_t>{128, 4, 1}));
  // Small gates and the PLE table stay as stored.
  EXPECT_FALSE(q.store().has("model.layers.0.mlp.shared_expert_gate.scales"));
  EXPECT_FALSE(q.store().has("model.layers.0.linear_attn.in_proj_a.scales"));
  EXPECT_FALSE(q.store().has("model.layers.0.ple.ple_embedding.ngram_embedding.shard_0.scales"));
  EXPECT_EQ(q.floats("layers.0.linear_attn.A_log"), base.floats("layers.0.linear_attn.A_log"));
  EXPECT_EQ(q.floats("layers.0.linear_attn.conv1d"), base.floats("layers.0.linear_attn.conv1d"));
  const auto a = q.centred_norm("layers.0.attn_hyper_connection.hc_norm");
  const auto b = base.centred_norm("layers.0.attn_hyper_connection.hc_norm");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], std::fabs(b[i]) / 256) << i;  // bf16(1 + w)

  for (const auto& m : report.modules) {
    if (!m.quant) continue;
    EXPECT_EQ(*m.quant, (AffineParams{8, 32})) << m.module;
    EXPECT_LT(m.rel_rms, 0.01) << m.module;
    EXPECT_GT(m.bytes_before, m.bytes_after) << m.module;
  }
  for (const char* m :
       {"layers.0.linear_attn.in_proj_qkv", "layers.2.self_attn.q_proj", "lm_head", "embed_tokens",
        "layers.0.ple.key_proj", "hyper_connection_mixer.input_mix_weight_down"})
    expect_within_half_step(q.matrix(m), base.matrix(m), m);
  for (int e : {0, 7})
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      expect_within_half_step(q.expert_matrix(3, e, proj), base.expert_matrix(3, e, proj), proj);

  const double worst = worst_diff(logits_of(out.path()), logits_of(in), kLogitBound8Bit);
  std::printf("[ convert ] qwen4exp_base 8-bit g32: worst |logit diff| %.3g\n", worst);
  EXPECT_LE(worst, kLogitBound8Bit);
}

TEST(Convert, MixedOverridesFollowTheLastMatchingRule) {
  TempDir out;
  const fs::path in = test::fixture("qwen4exp_base");
  convert(in, out.path(), {4, 64},
          {"layers.*.mlp.switch_mlp.*=2:32", "layers.*.mlp.switch_mlp.down_proj=3:32", "lm_head=6:128",
           "embed_tokens=none", "*.in_proj_a=8:32", "layers.0.linear_attn.out_proj=5:64",
           "model.layers.2.self_attn.o_proj=none"});
  Checkpoint q(out.path()), base(in);
  EXPECT_EQ(settings_of(q.expert_matrix(0, 1, "gate_proj")), (AffineParams{2, 32}));
  EXPECT_EQ(settings_of(q.expert_matrix(0, 1, "down_proj")), (AffineParams{3, 32}));
  EXPECT_EQ(settings_of(q.matrix("lm_head")), (AffineParams{6, 128}));
  EXPECT_EQ(q.matrix("embed_tokens").encoding, MatrixEncoding::BF16);
  EXPECT_EQ(settings_of(q.matrix("layers.3.linear_attn.in_proj_a")), (AffineParams{8, 32}));
  EXPECT_EQ(settings_of(q.matrix("layers.0.linear_attn.out_proj")), (AffineParams{5, 64}));
  EXPECT_EQ(settings_of(q.matrix("layers.1.linear_attn.out_proj")), (AffineParams{4, 64}));
  EXPECT_EQ(q.matrix("layers.2.self_attn.q_proj").encoding, MatrixEncoding::Affine);
  EXPECT_EQ(q.matrix("layers.2.self_attn.o_proj").encoding, MatrixEncoding::BF16);
  EXPECT_EQ(q.matrix("layers.0.mlp.shared_expert_gate").encoding, MatrixEncoding::BF16);
  for (const char* m : {"lm_head", "layers.3.linear_attn.in_proj_a", "layers.0.linear_attn.out_proj"})
    expect_within_half_step(q.matrix(m), base.matrix(m), m);
  expect_within_half_step(q.expert_matrix(2, 5, "down_proj"), base.expert_matrix(2, 5, "down_proj"), "down");

  const auto cfg = test::read_json(out / "config.json")["quantization"];
  EXPECT_EQ(cfg["bits"], 4);
  EXPECT_EQ(cfg["group_size"], 64);
  EXPECT_EQ(cfg["mode"], "affine");
  EXPECT_EQ(cfg["model.embed_tokens"], false);
  EXPECT_EQ(cfg["lm_head"], (nlohmann::json{{"bits", 6}, {"group_size", 128}}));
  EXPECT_EQ(cfg["model.layers.0.mlp.switch_mlp.up_proj"], (nlohmann::json{{"bits", 2}, {"group_size", 32}}));
  EXPECT_EQ(cfg["model.layers.0.mlp.shared_expert_gate"], false);
  EXPECT_FALSE(cfg.contains("model.layers.1.linear_attn.out_proj"));  // the global settings
  EXPECT_EQ(test::read_json(out / "config.json")["quantization_config"], cfg);

  const double worst = worst_diff(logits_of(out.path()), logits_of(in), kLogitBoundMixed);
  std::printf("[ convert ] qwen4exp_base mixed 2/3/4/5/6/8-bit: worst |logit diff| %.3g\n", worst);
  EXPECT_LE(worst, kLogitBoundMixed);
}

TEST(Convert, Qwen3NextConvertsWithMlxLmNames) {
  TempDir out;
  const fs::path in = test::fixture("qwen3next");
  convert(in, out.path(), {8, 32}, {"layers.*.mlp.gate=8:64"});
  Checkpoint q(out.path()), base(in);
  EXPECT_EQ(q.layout(), CheckpointLayout::MLX);
  EXPECT_TRUE(q.store().has("model.layers.0.linear_attn.in_proj_qkvz.scales"));
  EXPECT_TRUE(q.store().has("model.layers.0.mlp.switch_mlp.down_proj.biases"));
  EXPECT_TRUE(q.store().has("model.norm.weight"));
  EXPECT_EQ(settings_of(q.matrix("layers.0.mlp.gate")), (AffineParams{8, 64}));
  expect_within_half_step(q.matrix("layers.3.self_attn.o_proj"), base.matrix("layers.3.self_attn.o_proj"),
                          "o");
  EXPECT_TRUE(q.norms_stored_shifted());
  const auto a = q.centred_norm("norm"), b = base.centred_norm("norm");
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], std::fabs(b[i]) / 256);
  Model qm(out.path()), bm(in);
  std::vector<int32_t> prompt = {5, 17, 99, 3, 250, 18, 42, 7, 301, 64, 12, 8};
  StreamState s1 = qm.new_state(), s2 = bm.new_state();
  const double worst =
      worst_diff(test::run(qm, s1, prompt, true), test::run(bm, s2, prompt, true), kLogitBound8BitQwen3Next);
  std::printf("[ convert ] qwen3next 8-bit g32: worst |logit diff| %.3g\n", worst);
  EXPECT_LE(worst, kLogitBound8BitQwen3Next);
}

TEST(Convert, LayoutOnlyConversionKeepsEveryWeight) {
  TempDir out;
  const fs::path in = test::fixture("qwen4exp_base");
  const ConvertReport report = convert(in, out.path(), {4, 64}, {"*=none"});
  for (const auto& m : report.modules) EXPECT_FALSE(m.quant) << m.module;
  Checkpoint q(out.path()), base(in);
  EXPECT_EQ(q.quantization_summary(), base.quantization_summary());
  for (const char* m : {"layers.0.linear_attn.in_proj_qkv", "lm_head", "layers.0.ple.key_proj"}) {
    const MatrixWeight a = q.matrix(m), b = base.matrix(m);
    ASSERT_EQ(a.rows * a.row_bytes(), b.rows * b.row_bytes()) << m;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.rows * a.row_bytes()), 0) << m;
  }
  const double worst = worst_diff(logits_of(out.path()), logits_of(in), kLogitBoundLayout);
  std::printf("[ convert ] qwen4exp_base layout only: worst |logit diff| %.3g\n", worst);
  EXPECT_LE(worst, kLogitBoundLayout);
}

TEST(Convert, ConfigKeysAndCompanionFilesRoundTrip) {
  TempDir out;
  const fs::path in = test::fixture("qwen4exp_multimodal");
  const ConvertReport report = convert(in, out.path(), {4, 32});
  const auto before = test::read_json(in / "config.json"), after = test::read_json(out / "config.json");
  for (const auto& [key, value] : before.items()) EXPECT_EQ(after[key], value) << key;
  for (const auto& [key, value] : after.items())
    EXPECT_TRUE(before.contains(key) || key == "quantization" || key == "quantization_config") << key;
  EXPECT_EQ(read_bytes(out / "generation_config.json"), read_bytes(in / "generation_config.json"));
  EXPECT_EQ(report.copied_files, (std::vector<std::string>{"generation_config.json"}));
  Checkpoint q(out.path());
  EXPECT_EQ(q.layout(), CheckpointLayout::MLX);
  EXPECT_TRUE(q.store().has("language_model.model.embed_tokens.scales"));
  EXPECT_TRUE(q.store().has("language_model.lm_head.scales"));
  EXPECT_TRUE(q.store().has("model.visual.blocks.0.attn.qkv.weight"));  // the vision tower as stored
  EXPECT_FALSE(q.store().has("model.visual.blocks.0.attn.qkv.scales"));
  EXPECT_EQ(q.matrix("embed_tokens").bits, 4);
}

TEST(Convert, DeterministicAndShardingDoesNotChangeTensors) {
  TempDir a, b, sharded;
  const fs::path in = test::fixture("qwen4exp_base");
  const std::vector<std::string> rules = {"lm_head=8:64"};
  convert(in, a.path(), {4, 32}, rules);
  convert(in, b.path(), {4, 32}, rules);
  for (const char* f : {"model.safetensors", "model.safetensors.index.json", "config.json"})
    EXPECT_EQ(read_bytes(a / f), read_bytes(b / f)) << f;
  const ConvertReport r = convert(in, sharded.path(), {4, 32}, rules, 200 * 1000);
  EXPECT_GT(r.shards.size(), 2u);
  EXPECT_EQ(r.shards.front(), fmt::format("model-00001-of-{:05d}.safetensors", r.shards.size()));
  EXPECT_FALSE(fs::exists(sharded / "model.safetensors"));
  const auto index = test::read_json(sharded / "model.safetensors.index.json");
  EXPECT_EQ(index["metadata"]["total_size"], r.bytes_after);
  Checkpoint one(a.path()), many(sharded.path());
  EXPECT_EQ(one.store().names(), many.store().names());
  for (const auto& name : one.store().names()) {
    const TensorInfo &x = one.store().get(name), &y = many.store().get(name);
    ASSERT_EQ(x.nbytes, y.nbytes) << name;
    EXPECT_EQ(std::memcmp(x.data, y.data, x.nbytes), 0) << name;
  }
}

TEST(Convert, MtpTensorsKeepTheirNamesAndQuantizeLikeOtherLinears) {
  TempDir in, out;
  const fs::path base = test::fixture("qwen4exp_base");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(base / f, in / f);
  std::vector<float> fc(128 * 256), norm(128);
  for (size_t i = 0; i < fc.size(); ++i) fc[i] = std::sin(0.37f * float(i)) * 0.05f;
  for (size_t i = 0; i < norm.size(); ++i) norm[i] = 0.01f * float(i % 7);
  test::write_safetensors(in / "mtp.safetensors", {test::bf16_tensor("mtp.fc.weight", {128, 256}, fc),
                                                   test::bf16_tensor("mtp.norm.weight", {128}, norm)});
  convert(in.path(), out.path(), {8, 64});
  Checkpoint q(out.path()), original(in.path());
  EXPECT_TRUE(q.store().has("mtp.fc.scales"));
  expect_within_half_step(q.matrix("mtp.fc"), original.matrix("mtp.fc"), "mtp.fc");
  const auto a = q.centred_norm("mtp.norm"), b = original.centred_norm("mtp.norm");
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], std::fabs(b[i]) / 256) << i;
}

// The command line: the table, the JSON report and the exit codes.
std::pair<int, std::string> run_cli(const std::string& args) {
  const std::string cmd = std::string(DELTASERVE_BINARY) + " convert " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  if (pipe == nullptr) return {-1, out};
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  return {pclose(pipe), out};
}

TEST(ConvertCommand, PrintsTheTableAndWritesTheReport) {
  TempDir out;
  const std::string in = test::fixture("qwen4exp_base").string();
  const auto [rc, text] = run_cli(in + " " + (out / "q").string() + " --bits 8 --group-size 32 --override " +
                                  "'lm_head=6:64' --report " + (out / "r.json").string());
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("lm_head"), std::string::npos) << text;
  EXPECT_NE(text.find("6-bit g64"), std::string::npos) << text;
  EXPECT_NE(text.find("linear weights quantized (global 8-bit g32)"), std::string::npos) << text;
  const auto report = test::read_json(out / "r.json");
  EXPECT_EQ(report["bits"], 8);
  EXPECT_EQ(report["modules"][0]["module"], "lm_head");
  EXPECT_EQ(report["modules"][0]["bits"], 6);
  EXPECT_GT(report["total_bytes_before"].get<size_t>(), report["total_bytes_after"].get<size_t>());
  const auto [rc2, err] = run_cli(in + " " + (out / "q").string());
  EXPECT_NE(rc2, 0);
  EXPECT_NE(err.find("error: " + (out / "q").string() + ": output directory is not empty"), std::string::npos)
      << err;
}

// --- named errors
// -------------------------------------------------------------------------------------------

TEST(ConvertErrors, NameWhatIsWrong) {
  const fs::path in = test::fixture("qwen4exp_base");
  TempDir out, empty;
  EXPECT_NE(error_of([&] {
              convert("/nonexistent/ckpt", out / "o", {4, 64});
            }).find("/nonexistent/ckpt: no such"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              convert(empty.path(), out / "o", {4, 64});
            }).find("config.json: missing"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              convert(in, out / "o", {7, 64});
            }).find("--bits 7 --group-size 64: not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] { convert(in, out / "o", {4, 48}); }).find("not supported"), std::string::npos);
  EXPECT_NE(error_of([&] {
              convert(in, out / "o", {4, 64}, {"layers.*.mlp.router=8:64"});
            }).find("--override 'layers.*.mlp.router=8:64': matches no quantizable module"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_module_override("lm_head=7:64"); }).find("7-bit group 64 is not supported"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_module_override("lm_head"); }).find("expected GLOB=BITS:GROUP"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_module_override("lm_head=8:x"); }).find("'x' is not an integer"),
            std::string::npos);
  const std::string width = error_of([&] {
    convert(in, out / "o", {4, 64}, {"*.input_mix_weight_up=8:32"});
  });
  EXPECT_NE(width.find("group size 32 does not divide the input width 16 of tensor "
                       "'model.hyper_connection_mixer.input_mix_weight_up.weight'"),
            std::string::npos)
      << width;
  test::write_file(out / "taken", "x");
  EXPECT_NE(error_of([&] {
              convert(in, out.path(), {4, 64});
            }).find("output directory is not empty (pass --force"),
            std::string::npos);
  ConvertOptions forced;
  forced.force = true;
  EXPECT_NO_THROW(convert_checkpoint(in, out.path(), forced));
  EXPECT_TRUE(fs::exists(out / "taken"));
  TempDir again;
  EXPECT_NE(error_of([&] {
              convert(out.path(), again / "o", {4, 64});
            }).find("already in an MLX layout"),
            std::string::npos);
}

}  // namespace
}  // namespace ds
