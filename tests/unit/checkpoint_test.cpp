#include "formats/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpoint_fixture.h"
#include "expect_error.h"

namespace ds {
namespace {

using test::error_of;
using test::RawTensor;
using test::StoredLayout;
using test::TempDir;
using ::testing::HasSubstr;

std::vector<float> ramp(int64_t n, float start, float step) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(start + step * static_cast<float>(i));
  return v;
}

std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& f : v) f = bf16_to_f32(f32_to_bf16(f));
  return v;
}

std::vector<float> rows_of(const MatrixWeight& m) {
  std::vector<float> out(static_cast<size_t>(m.rows * m.cols));
  for (int64_t r = 0; r < m.rows; ++r) dequantize_row_reference(m, r, out.data() + r * m.cols);
  return out;
}

const std::vector<float> kQNorm = {0.1f, -0.2f, 0.05f, 0.0f};  // centred weights, around 0
const std::vector<float> kGated = {1.0f, 1.1f, 0.9f, 1.05f};   // linear_attn.norm, used as stored
const std::vector<float> kConv = ramp(6 * 4, -1.0f, 0.0625f);  // [C=6, K=4] flattened c*K + k

// The same small model in any layout; MLX layouts store centred norms as 1 + w and conv weights as [C, K, 1].
std::vector<RawTensor> small_model(StoredLayout layout) {
  const bool mlx = layout == StoredLayout::MLXVlm || layout == StoredLayout::MLXText;
  auto centred = [&](const std::string& name, const std::vector<float>& w) {
    std::vector<float> v = w;
    if (mlx)
      for (float& f : v) f += 1.0f;
    return test::f32_tensor(name, {static_cast<int64_t>(v.size())}, v);
  };
  return {
      test::bf16_tensor("embed_tokens.weight", {8, 4}, ramp(32, -3.0f, 0.25f)),
      test::bf16_tensor("layers.0.linear_attn.in_proj_qkv.weight", {6, 4}, ramp(24, 1.0f, -0.125f)),
      test::f32_tensor("layers.0.linear_attn.A_log", {3}, {0.5f, -0.25f, 1.5f}),
      test::bf16_tensor("layers.0.linear_attn.dt_bias", {3}, {1.0f, 2.0f, 3.0f}),
      test::f32_tensor("layers.0.linear_attn.conv1d.weight",
                       mlx ? std::vector<int64_t>{6, 4, 1} : std::vector<int64_t>{6, 1, 4}, kConv),
      test::f32_tensor("layers.0.linear_attn.norm.weight", {4}, kGated),
      centred("layers.0.self_attn.q_norm.weight", kQNorm),
      centred("hyper_connection_mixer.hc_norm.weight", ramp(8, -0.1f, 0.025f)),
      centred("norm.weight", {0.0f, 0.5f, -0.5f, 0.25f}),
      test::bf16_tensor("lm_head.weight", {8, 4}, ramp(32, 2.0f, -0.125f)),
      {"layers.0.ple.layer_multipliers", "I64", {3}, test::bytes_of(std::vector<int64_t>{7, -9, 1LL << 40})},
      {"layers.0.ple.ngram_heads_offsets", "I32", {2}, test::bytes_of(std::vector<int32_t>{0, 131})}};
}

nlohmann::json config_for(StoredLayout layout) {
  nlohmann::json text = {{"model_type", "qwen4_exp_text"}, {"hidden_size", 4}};
  if (layout == StoredLayout::HFMultimodal) return {{"model_type", "qwen4_exp"}, {"text_config", text}};
  if (layout == StoredLayout::MLXText) text["quantization"] = {{"bits", 4}, {"group_size", 64}};
  return text;
}

struct LayoutCase {
  StoredLayout stored;
  CheckpointLayout detected;
  std::string embed_name;
};

std::string layout_case_name(const ::testing::TestParamInfo<LayoutCase>& info) {
  static const char* const names[] = {"HF", "HFMultimodal", "MLXVlm", "MLXText"};
  return names[static_cast<int>(info.param.stored)];
}

class EveryLayout : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(EveryLayout, ResolvesTheSameLogicalNames) {
  const LayoutCase& c = GetParam();
  TempDir dir;
  test::write_checkpoint(dir.path(), c.stored, config_for(c.stored), small_model(c.stored));
  Checkpoint ck(dir.path());
  EXPECT_EQ(ck.layout(), c.detected);
  EXPECT_EQ(ck.resolve("embed_tokens.weight"), c.embed_name);
  EXPECT_EQ(ck.resolve("lm_head.weight"), test::stored_name(c.stored, "lm_head.weight"));
  EXPECT_EQ(ck.resolve("layers.0.missing.weight"), std::nullopt);
  EXPECT_EQ(ck.text_config()["hidden_size"], 4);

  MatrixWeight embed = ck.matrix("embed_tokens");
  EXPECT_EQ(embed.encoding, MatrixEncoding::BF16);
  EXPECT_EQ(embed.rows, 8);
  EXPECT_EQ(embed.cols, 4);
  EXPECT_EQ(embed.name, c.embed_name);
  EXPECT_EQ(rows_of(embed), bf16_rounded(ramp(32, -3.0f, 0.25f)));
  EXPECT_EQ(rows_of(ck.matrix("lm_head")), bf16_rounded(ramp(32, 2.0f, -0.125f)));
  EXPECT_EQ(ck.floats("layers.0.linear_attn.in_proj_qkv"), bf16_rounded(ramp(24, 1.0f, -0.125f)));
  EXPECT_EQ(ck.floats("layers.0.linear_attn.in_proj_qkv.weight"), bf16_rounded(ramp(24, 1.0f, -0.125f)));
  EXPECT_EQ(ck.floats("layers.0.linear_attn.A_log"), (std::vector<float>{0.5f, -0.25f, 1.5f}));
  EXPECT_EQ(ck.floats("layers.0.linear_attn.dt_bias"), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(ck.floats("layers.0.linear_attn.conv1d"), kConv);  // [C,1,K] and [C,K,1] flatten alike
  EXPECT_EQ(ck.floats("layers.0.linear_attn.norm"), kGated);   // gated norm: as stored in every layout
  EXPECT_EQ(ck.ints("layers.0.ple.layer_multipliers"), (std::vector<int64_t>{7, -9, 1LL << 40}));
  EXPECT_EQ(ck.ints("layers.0.ple.ngram_heads_offsets"), (std::vector<int64_t>{0, 131}));

  const bool mlx = c.detected == CheckpointLayout::MLX;
  EXPECT_EQ(ck.norms_stored_shifted(), mlx);
  std::vector<float> want;
  for (float w : kQNorm) want.push_back(w + 1.0f);
  EXPECT_EQ(ck.centred_norm("layers.0.self_attn.q_norm"), want);
  EXPECT_EQ(ck.centred_norm("norm"), (std::vector<float>{1.0f, 1.5f, 0.5f, 1.25f}));

  EXPECT_TRUE(ck.has("lm_head"));
  EXPECT_TRUE(ck.has("layers.0.linear_attn.A_log"));
  EXPECT_FALSE(ck.has("layers.1.linear_attn.A_log"));
  EXPECT_EQ(ck.quantization_summary(), "bf16 (also 1 f32 tensors)");  // the conv weight is f32
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, EveryLayout,
    ::testing::Values(LayoutCase{StoredLayout::HF, CheckpointLayout::HF, "model.embed_tokens.weight"},
                      LayoutCase{StoredLayout::HFMultimodal, CheckpointLayout::HFMultimodal,
                                 "model.language_model.embed_tokens.weight"},
                      LayoutCase{StoredLayout::MLXVlm, CheckpointLayout::MLX,
                                 "language_model.model.embed_tokens.weight"},
                      LayoutCase{StoredLayout::MLXText, CheckpointLayout::MLX, "model.embed_tokens.weight"}),
    layout_case_name);

TEST(Checkpoint, NormDetectionIgnoresTheGatedLinearAttnNorm) {
  // Many gated-norm values near 1 would pull the mean past 0.5 if they were counted.
  TempDir dir;
  test::write_checkpoint(
      dir.path(), StoredLayout::HF, config_for(StoredLayout::HF),
      {test::f32_tensor("layers.0.linear_attn.norm.weight", {64}, std::vector<float>(64, 1.0f)),
       test::f32_tensor("layers.1.linear_attn.norm.weight", {64}, std::vector<float>(64, 1.0f)),
       test::f32_tensor("layers.0.input_layernorm.weight", {4}, {0.01f, 0.0f, 0.02f, -0.01f}),
       test::f32_tensor("norm.weight", {4}, {0.0f, 0.1f, 0.0f, 0.0f})});
  Checkpoint ck(dir.path());
  EXPECT_FALSE(ck.norms_stored_shifted());
  EXPECT_EQ(ck.centred_norm("norm"), (std::vector<float>{1.0f, 1.1f, 1.0f, 1.0f}));
}

TEST(Checkpoint, NormDetectionSeesShiftedNormsInAnyLayout) {
  TempDir dir;
  test::write_checkpoint(
      dir.path(), StoredLayout::HF, config_for(StoredLayout::HF),
      {test::f32_tensor("layers.0.linear_attn.norm.weight", {4}, std::vector<float>(4, 1.0f)),
       test::f32_tensor("layers.0.post_attention_layernorm.weight", {4}, {0.9f, 1.0f, 1.2f, 1.1f}),
       test::f32_tensor("layers.0.ple.norm_key.weight", {4}, {1.0f, 1.0f, 0.8f, 1.0f})});
  Checkpoint ck(dir.path());
  EXPECT_TRUE(ck.norms_stored_shifted());
  EXPECT_EQ(ck.centred_norm("layers.0.ple.norm_key"), (std::vector<float>{1.0f, 1.0f, 0.8f, 1.0f}));
}

TEST(Checkpoint, TiedEmbeddingsServeAsTheHead) {
  TempDir dir;
  nlohmann::json config = {{"tie_word_embeddings", true}};
  test::write_checkpoint(dir.path(), StoredLayout::HF, config,
                         {test::bf16_tensor("embed_tokens.weight", {2, 2}, {1, 2, 3, 4})});
  Checkpoint ck(dir.path());
  EXPECT_EQ(ck.matrix("lm_head").name, "model.embed_tokens.weight");
}

// Expert e's projection p, row r, column c: distinct and exact in bf16.
float expert_value(int e, int p, int r, int c) {
  return 8.0f * e + 2.0f * p + 0.5f * r + 0.125f * c;
}

constexpr int kE = 3, kI = 2, kH = 4;

std::vector<float> expert_block(int e, int p, int rows, int cols) {
  std::vector<float> v;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) v.push_back(expert_value(e, p, r, c));
  return v;
}

enum class ExpertStorage { PerExpert, Switch, Fused, FusedWithWeightSuffix };

std::vector<RawTensor> expert_tensors(ExpertStorage s) {
  std::vector<RawTensor> out;
  const std::string mlp = "layers.1.mlp.";
  if (s == ExpertStorage::PerExpert) {
    for (int e = 0; e < kE; ++e) {
      const std::string base = mlp + "experts." + std::to_string(e) + ".";
      out.push_back(test::bf16_tensor(base + "gate_proj.weight", {kI, kH}, expert_block(e, 0, kI, kH)));
      out.push_back(test::bf16_tensor(base + "up_proj.weight", {kI, kH}, expert_block(e, 1, kI, kH)));
      out.push_back(test::bf16_tensor(base + "down_proj.weight", {kH, kI}, expert_block(e, 2, kH, kI)));
    }
    return out;
  }
  std::vector<float> gate, up, gate_up, down;
  for (int e = 0; e < kE; ++e) {
    auto g = expert_block(e, 0, kI, kH), u = expert_block(e, 1, kI, kH), d = expert_block(e, 2, kH, kI);
    gate.insert(gate.end(), g.begin(), g.end());
    up.insert(up.end(), u.begin(), u.end());
    gate_up.insert(gate_up.end(), g.begin(), g.end());
    gate_up.insert(gate_up.end(), u.begin(), u.end());
    down.insert(down.end(), d.begin(), d.end());
  }
  if (s == ExpertStorage::Switch)
    return {test::bf16_tensor(mlp + "switch_mlp.gate_proj.weight", {kE, kI, kH}, gate),
            test::bf16_tensor(mlp + "switch_mlp.up_proj.weight", {kE, kI, kH}, up),
            test::bf16_tensor(mlp + "switch_mlp.down_proj.weight", {kE, kH, kI}, down)};
  const std::string suffix = s == ExpertStorage::FusedWithWeightSuffix ? ".weight" : "";
  return {test::bf16_tensor(mlp + "experts.gate_up_proj" + suffix, {kE, 2 * kI, kH}, gate_up),
          test::bf16_tensor(mlp + "experts.down_proj" + suffix, {kE, kH, kI}, down)};
}

struct ExpertCase {
  ExpertStorage storage;
  StoredLayout layout;
};

std::string expert_case_name(const ::testing::TestParamInfo<ExpertCase>& info) {
  static const char* const names[] = {"PerExpert", "Switch", "Fused", "FusedWithWeightSuffix"};
  return std::string(names[static_cast<int>(info.param.storage)]) + "_" + std::to_string(info.index);
}

class EveryExpertStorage : public ::testing::TestWithParam<ExpertCase> {};

TEST_P(EveryExpertStorage, GivesEachExpertsRows) {
  TempDir dir;
  test::write_checkpoint(dir.path(), GetParam().layout, config_for(GetParam().layout),
                         expert_tensors(GetParam().storage));
  Checkpoint ck(dir.path());
  for (int e = 0; e < kE; ++e) {
    MatrixWeight g = ck.expert_matrix(1, e, "gate_proj"), u = ck.expert_matrix(1, e, "up_proj"),
                 d = ck.expert_matrix(1, e, "down_proj");
    EXPECT_EQ(g.rows, kI);
    EXPECT_EQ(g.cols, kH);
    EXPECT_EQ(d.rows, kH);
    EXPECT_EQ(d.cols, kI);
    EXPECT_EQ(rows_of(g), expert_block(e, 0, kI, kH)) << e;
    EXPECT_EQ(rows_of(u), expert_block(e, 1, kI, kH)) << e;
    EXPECT_EQ(rows_of(d), expert_block(e, 2, kH, kI)) << e;
  }
  EXPECT_THAT(error_of([&] { ck.expert_matrix(1, 0, "fc1"); }), HasSubstr("fc1"));
  EXPECT_THAT(error_of([&] { ck.expert_matrix(2, 0, "gate_proj"); }), HasSubstr("layers.2.mlp"));
  if (GetParam().storage != ExpertStorage::PerExpert) {
    EXPECT_THAT(error_of([&] { ck.expert_matrix(1, kE, "down_proj"); }), HasSubstr("expert 3 out of range"));
  }
}

INSTANTIATE_TEST_SUITE_P(Storages, EveryExpertStorage,
                         ::testing::Values(ExpertCase{ExpertStorage::PerExpert, StoredLayout::HF},
                                           ExpertCase{ExpertStorage::Switch, StoredLayout::MLXVlm},
                                           ExpertCase{ExpertStorage::Switch, StoredLayout::MLXText},
                                           ExpertCase{ExpertStorage::Fused, StoredLayout::HF},
                                           ExpertCase{ExpertStorage::FusedWithWeightSuffix,
                                                      StoredLayout::HFMultimodal}),
                         expert_case_name);

TEST(Checkpoint, StackedTensorIsNotAPlainMatrix) {
  TempDir dir;
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, nlohmann::json::object(),
                         expert_tensors(ExpertStorage::Switch));
  Checkpoint ck(dir.path());
  std::string msg = error_of([&] { ck.matrix("layers.1.mlp.switch_mlp.up_proj"); });
  EXPECT_THAT(msg, HasSubstr("language_model.model.layers.1.mlp.switch_mlp.up_proj.weight"));
  EXPECT_THAT(msg, HasSubstr("expert_matrix"));
}

TEST(Checkpoint, MissingTensorsAndWrongTypesAreNamed) {
  TempDir dir;
  test::write_checkpoint(dir.path(), StoredLayout::HF, config_for(StoredLayout::HF),
                         small_model(StoredLayout::HF));
  Checkpoint ck(dir.path());
  EXPECT_THAT(error_of([&] { ck.matrix("layers.9.mlp.gate"); }), HasSubstr("'layers.9.mlp.gate.weight'"));
  EXPECT_THAT(error_of([&] { ck.floats("layers.9.linear_attn.A_log"); }),
              HasSubstr("'layers.9.linear_attn.A_log'"));
  EXPECT_THAT(error_of([&] { ck.ints("layers.0.linear_attn.A_log"); }),
              HasSubstr("'model.layers.0.linear_attn.A_log'"));
  EXPECT_THAT(error_of([&] { ck.floats("layers.0.ple.layer_multipliers"); }), HasSubstr("ints()"));
  EXPECT_THAT(error_of([&] { ck.matrix("layers.0.linear_attn.A_log"); }), HasSubstr("A_log"));
}

TEST(Checkpoint, ConfigErrorsNameTheFile) {
  TempDir dir;
  test::write_safetensors(dir / "model.safetensors", {test::f32_tensor("model.norm.weight", {1}, {0})});
  EXPECT_THAT(error_of([&] { Checkpoint ck(dir.path()); }), HasSubstr("config.json"));
  test::write_file(dir / "config.json", "{\"hidden_size\": 4,");
  std::string msg = error_of([&] { Checkpoint ck(dir.path()); });
  EXPECT_THAT(msg, HasSubstr((dir / "config.json").string()));
  EXPECT_THAT(msg, HasSubstr("JSON"));
}

}  // namespace
}  // namespace ds
