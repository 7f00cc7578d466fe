// MLX affine quantization through Checkpoint: bit streams at every width and group, overrides, named errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "checkpoint_fixture.h"
#include "expect_error.h"
#include "formats/checkpoint.h"

namespace ds {
namespace {

using test::AffineModule;
using test::error_of;
using test::RawTensor;
using test::StoredLayout;
using test::TempDir;
using ::testing::HasSubstr;

nlohmann::json quant_config(int bits, int group) {
  nlohmann::json q = {{"bits", bits}, {"group_size", group}};
  return {{"model_type", "qwen4_exp_text"}, {"quantization", q}, {"quantization_config", q}};
}

// Checks every value of `m` against the module's scale * code + bias, bit for bit.
void expect_values(const MatrixWeight& m, const AffineModule& a, int64_t first_row = 0) {
  ASSERT_EQ(m.encoding, MatrixEncoding::Affine);
  EXPECT_EQ(m.bits, a.bits);
  EXPECT_EQ(m.group, a.group);
  EXPECT_EQ(m.cols, a.cols);
  std::vector<float> row(static_cast<size_t>(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    dequantize_row_reference(m, r, row.data());
    for (int64_t c = 0; c < m.cols; ++c)
      ASSERT_EQ(row[c], a.value(first_row + r, c)) << m.name << " " << r << "," << c;
  }
}

class EveryWidthAndGroup : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(EveryWidthAndGroup, DequantizesScaleTimesCodePlusBiasExactly) {
  const auto [bits, group] = GetParam();
  TempDir dir;
  AffineModule a(bits, group, 3, 2 * group);
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, quant_config(bits, group),
                         a.tensors("layers.0.mlp.gate"));
  Checkpoint ck(dir.path());
  MatrixWeight m = ck.matrix("layers.0.mlp.gate");
  EXPECT_EQ(m.rows, 3);
  EXPECT_EQ(m.scale_dtype, DType::BF16);
  expect_values(m, a);
  expect_values(m.row_slice(1, 2), a, 1);
  std::vector<float> all = ck.floats("layers.0.mlp.gate");
  ASSERT_EQ(all.size(), static_cast<size_t>(3 * a.cols));
  for (int64_t i = 0; i < 3 * a.cols; ++i) ASSERT_EQ(all[i], a.value(i / a.cols, i % a.cols));
  EXPECT_EQ(ck.quantization_summary(),
            fmt::format("mlx affine {0}-bit g{1}: modules 1 at {0}-bit g{1}", bits, group));
}

std::string width_group_name(const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
  return fmt::format("bits{}_group{}", std::get<0>(info.param), std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Affine, EveryWidthAndGroup,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 6, 8),
                                            ::testing::Values(32, 64, 128)),
                         width_group_name);

TEST(Affine, ScalesMayBeF16OrF32) {
  for (const char* dt : {"F16", "F32"}) {
    TempDir dir;
    AffineModule a(5, 32, 2, 64, 1, dt);
    test::write_checkpoint(dir.path(), StoredLayout::MLXText, quant_config(5, 32),
                           a.tensors("layers.0.mlp.gate"));
    Checkpoint ck(dir.path());
    MatrixWeight m = ck.matrix("layers.0.mlp.gate");
    EXPECT_EQ(m.scale_dtype, std::string(dt) == "F16" ? DType::F16 : DType::F32);
    expect_values(m, a);
  }
}

TEST(Affine, PerModuleOverridesByStoredPathOrLogicalName) {
  TempDir dir;
  nlohmann::json config = quant_config(4, 64);
  config["quantization"]["language_model.model.layers.0.mlp.gate"] = {{"bits", 8}, {"group_size", 32}};
  config["quantization"]["layers.0.mlp.shared_expert_gate"] = {{"bits", 2}, {"group_size", 128}};
  config["quantization"]["language_model.model.layers.0.self_attn.o_proj"] = false;
  AffineModule plain(4, 64, 2, 128), gate(8, 32, 4, 64), shared(2, 128, 1, 128);
  std::vector<RawTensor> tensors = plain.tensors("layers.0.self_attn.q_proj");
  for (auto& t : gate.tensors("layers.0.mlp.gate")) tensors.push_back(t);
  for (auto& t : shared.tensors("layers.0.mlp.shared_expert_gate")) tensors.push_back(t);
  tensors.push_back(test::bf16_tensor("layers.0.self_attn.o_proj.weight", {2, 2}, {1, 2, 3, 4}));
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, config, tensors);

  Checkpoint ck(dir.path());
  expect_values(ck.matrix("layers.0.self_attn.q_proj"), plain);
  expect_values(ck.matrix("layers.0.mlp.gate"), gate);
  expect_values(ck.matrix("layers.0.mlp.shared_expert_gate"), shared);
  EXPECT_EQ(ck.matrix("layers.0.self_attn.o_proj").encoding, MatrixEncoding::BF16);
  EXPECT_EQ(ck.floats("layers.0.self_attn.o_proj"), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(ck.quantization_summary(),
            "mlx affine 4-bit g64: modules 1 at 2-bit g128, 1 at 4-bit g64, 1 at 8-bit g32; unquantized "
            "weights bf16");
}

TEST(Affine, FalseOverrideOnAModuleWithScalesIsAnError) {
  TempDir dir;
  nlohmann::json config = quant_config(4, 64);
  config["quantization"]["layers.0.mlp.gate"] = false;
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, config,
                         AffineModule(4, 64, 2, 64).tensors("layers.0.mlp.gate"));
  Checkpoint ck(dir.path());
  std::string msg = error_of([&] { ck.matrix("layers.0.mlp.gate"); });
  EXPECT_THAT(msg, HasSubstr("language_model.model.layers.0.mlp.gate"));
  EXPECT_THAT(msg, HasSubstr("unquantized"));
}

TEST(Affine, QuantizedEmbeddingAndHead) {
  TempDir dir;
  AffineModule embed(4, 32, 5, 64), head(6, 64, 5, 64);
  nlohmann::json config = quant_config(4, 32);
  config["quantization"]["language_model.lm_head"] = {{"bits", 6}, {"group_size", 64}};
  std::vector<RawTensor> tensors = embed.tensors("embed_tokens");
  for (auto& t : head.tensors("lm_head")) tensors.push_back(t);
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, config, tensors);
  Checkpoint ck(dir.path());
  expect_values(ck.matrix("embed_tokens"), embed);
  expect_values(ck.matrix("lm_head"), head);
  EXPECT_EQ(ck.floats("embed_tokens").size(), 5u * 64u);
  EXPECT_EQ(ck.floats("embed_tokens")[64 + 3], embed.value(1, 3));
}

TEST(Affine, StackedExpertsGiveEachExpertsRows) {
  TempDir dir;
  AffineModule gate(4, 32, 2, 64, 3), down(8, 64, 64, 128, 3);
  nlohmann::json config = quant_config(4, 32);
  config["quantization"]["language_model.model.layers.2.mlp.switch_mlp.down_proj"] = {{"bits", 8},
                                                                                      {"group_size", 64}};
  std::vector<RawTensor> tensors = gate.tensors("layers.2.mlp.switch_mlp.gate_proj");
  for (auto& t : down.tensors("layers.2.mlp.switch_mlp.down_proj")) tensors.push_back(t);
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, config, tensors);
  Checkpoint ck(dir.path());
  for (int e = 0; e < 3; ++e) {
    MatrixWeight g = ck.expert_matrix(2, e, "gate_proj");
    EXPECT_EQ(g.rows, 2);
    expect_values(g, gate, e * 2);
    MatrixWeight d = ck.expert_matrix(2, e, "down_proj");
    EXPECT_EQ(d.rows, 64);
    expect_values(d, down, e * 64);
  }
  EXPECT_EQ(ck.floats("layers.2.mlp.switch_mlp.gate_proj").size(), 3u * 2u * 64u);
}

TEST(Affine, InconsistentShapesNameTheTensorAndNumbers) {
  TempDir dir;
  AffineModule a(4, 64, 2, 128);
  std::vector<RawTensor> tensors = a.tensors("layers.0.mlp.gate");
  tensors[0].shape = {2, 8};  // 8 words hold 64 four-bit codes, but 2 groups of 64 need 128
  tensors[0].bytes.resize(2 * 8 * 4);
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, quant_config(4, 64), tensors);
  Checkpoint ck(dir.path());
  std::string msg = error_of([&] { ck.matrix("layers.0.mlp.gate"); });
  EXPECT_THAT(msg, HasSubstr("language_model.model.layers.0.mlp.gate.weight"));
  EXPECT_THAT(msg, HasSubstr("8 uint32 words"));
  EXPECT_THAT(msg, HasSubstr("128 4-bit codes"));
  EXPECT_THAT(error_of([&] { ck.floats("layers.0.mlp.gate"); }), HasSubstr("8 uint32 words"));
}

TEST(Affine, ScalesThatDisagreeWithTheWeightAreNamed) {
  TempDir dir;
  AffineModule a(4, 64, 2, 128);
  std::vector<RawTensor> tensors = a.tensors("layers.0.mlp.gate");
  tensors[2] = test::bf16_tensor("layers.0.mlp.gate.biases", {1, 2}, {0, 0});
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, quant_config(4, 64), tensors);
  Checkpoint ck(dir.path());
  std::string msg = error_of([&] { ck.matrix("layers.0.mlp.gate"); });
  EXPECT_THAT(msg, HasSubstr("language_model.model.layers.0.mlp.gate.biases"));
  EXPECT_THAT(msg, HasSubstr("[1, 2]"));
}

TEST(Affine, UnsupportedOrMissingSettingsAreNamed) {
  const std::string tensor = "language_model.model.layers.0.mlp.gate.weight";
  struct Case {
    nlohmann::json config;
    std::string says;
  };
  nlohmann::json mxfp4 = quant_config(4, 32);
  mxfp4["quantization"]["mode"] = "mxfp4";
  const std::vector<Case> cases = {{quant_config(7, 64), "7-bit"},
                                   {quant_config(4, 16), "group size 16"},
                                   {{{"model_type", "x"}}, "no quantization section"},
                                   {mxfp4, "mxfp4"}};
  for (const auto& c : cases) {
    TempDir dir;
    test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, c.config,
                           AffineModule(4, 64, 2, 64).tensors("layers.0.mlp.gate"));
    Checkpoint ck(dir.path());
    std::string msg = error_of([&] { ck.matrix("layers.0.mlp.gate"); });
    EXPECT_THAT(msg, HasSubstr(tensor)) << c.says;
    EXPECT_THAT(msg, HasSubstr(c.says));
    EXPECT_THAT(msg, HasSubstr("config.json"));
  }
}

TEST(Affine, ScalesWithoutBiasesAreNotAffine) {
  TempDir dir;
  std::vector<RawTensor> tensors = AffineModule(4, 64, 2, 64).tensors("layers.0.mlp.gate");
  tensors.pop_back();
  test::write_checkpoint(dir.path(), StoredLayout::MLXVlm, quant_config(4, 64), tensors);
  Checkpoint ck(dir.path());
  EXPECT_THAT(error_of([&] { ck.matrix("layers.0.mlp.gate"); }),
              HasSubstr("'language_model.model.layers.0.mlp.gate.biases'"));
}

}  // namespace
}  // namespace ds
