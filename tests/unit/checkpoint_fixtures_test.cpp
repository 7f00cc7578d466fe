// The reference fixtures in tests/fixtures/ (written by tools/fixtures/) load in every layout, and the MLX
// ones decode to the HF base checkpoint they were converted from.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>

#include "core/error.h"
#include "formats/checkpoint.h"

namespace ds {
namespace {

const std::filesystem::path kFixtures = std::filesystem::path(DELTASERVE_SOURCE_DIR) / "tests" / "fixtures";

bool ends_with(const std::string& s, const std::string& p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// Dequantized rows may differ from the bf16 original by half a step, plus the bf16 rounding of scale and
// bias.
void expect_close_to_quantized(const MatrixWeight& q, const MatrixWeight& ref, const std::string& what) {
  ASSERT_EQ(q.rows, ref.rows) << what;
  ASSERT_EQ(q.cols, ref.cols) << what;
  std::vector<float> a(q.cols), b(q.cols);
  for (int64_t r = 0; r < q.rows; ++r) {
    dequantize_row_reference(q, r, a.data());
    dequantize_row_reference(ref, r, b.data());
    for (int64_t c = 0; c < q.cols; ++c) {
      float tol = 1e-6f;
      if (q.encoding == MatrixEncoding::Affine) {
        ASSERT_EQ(q.scale_dtype, DType::BF16) << what;
        float scale =
            bf16_to_f32(static_cast<const uint16_t*>(q.scales)[r * (q.cols / q.group) + c / q.group]);
        tol += scale * (0.5f + static_cast<float>((1 << q.bits) - 1) / 256.0f);
      }
      ASSERT_LE(std::fabs(a[c] - b[c]), tol) << what << " row " << r << " col " << c;
    }
  }
}

TEST(Fixtures, HfLayoutsLoad) {
  for (const char* name : {"qwen4exp_base", "qwen4exp_hc2_sigmoid", "qwen3next", "qwen35moe"}) {
    Checkpoint ck(kFixtures / name);
    EXPECT_EQ(ck.layout(), CheckpointLayout::HF) << name;
    EXPECT_FALSE(ck.norms_stored_shifted()) << name;
    EXPECT_EQ(ck.quantization_summary(), "bf16") << name;
    EXPECT_EQ(ck.matrix("embed_tokens").rows, ck.text_config()["vocab_size"].get<int64_t>()) << name;
    EXPECT_EQ(ck.expert_matrix(0, 0, "gate_proj").cols, ck.text_config()["hidden_size"].get<int64_t>())
        << name;
  }
}

TEST(Fixtures, MultimodalShardedLoads) {
  Checkpoint ck(kFixtures / "qwen4exp_multimodal");
  EXPECT_EQ(ck.layout(), CheckpointLayout::HFMultimodal);
  EXPECT_FALSE(ck.norms_stored_shifted());
  const auto& text = ck.text_config();
  EXPECT_EQ(ck.matrix("embed_tokens").cols, text["hidden_size"].get<int64_t>());
  EXPECT_EQ(ck.matrix("lm_head").rows, text["vocab_size"].get<int64_t>());
  std::set<std::filesystem::path> files;
  for (const auto& n : ck.store().names()) files.insert(ck.store().get(n).file);
  EXPECT_EQ(files.size(), 5u);
}

class MlxFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(MlxFixture, DecodesToTheHfBase) {
  Checkpoint base(kFixtures / "qwen4exp_base");
  Checkpoint mlx(kFixtures / GetParam());
  EXPECT_EQ(mlx.layout(), CheckpointLayout::MLX);
  EXPECT_TRUE(mlx.norms_stored_shifted());
  const std::regex expert(R"(layers\.(\d+)\.mlp\.experts\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight)");
  int quantized = 0;
  for (const auto& stored : base.store().names()) {
    const std::string logical = stored.rfind("model.", 0) == 0 ? stored.substr(6) : stored;
    const std::string module =
        ends_with(logical, ".weight") ? logical.substr(0, logical.size() - 7) : logical;
    const TensorInfo& t = base.store().get(stored);
    std::smatch m;
    if (std::regex_match(logical, m, expert)) {
      const int layer = std::stoi(m[1]), e = std::stoi(m[2]);
      expect_close_to_quantized(mlx.expert_matrix(layer, e, m[3]), base.expert_matrix(layer, e, m[3]),
                                logical);
    } else if (t.dtype == DType::I64) {
      EXPECT_EQ(mlx.ints(logical), base.ints(logical)) << logical;
    } else if (is_centred_norm_module(module)) {
      std::vector<float> a = mlx.centred_norm(module), b = base.centred_norm(module);
      ASSERT_EQ(a.size(), b.size()) << logical;
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1.0f / 128) << logical << " " << i;
    } else if (t.shape.size() == 2 && mlx.matrix(module).encoding == MatrixEncoding::Affine) {
      ++quantized;
      expect_close_to_quantized(mlx.matrix(module), base.matrix(module), logical);
    } else {
      EXPECT_EQ(mlx.floats(logical), base.floats(logical)) << logical;  // conv [C,K,1] vs [C,1,K] included
    }
  }
  EXPECT_GT(quantized, 10);
}

INSTANTIATE_TEST_SUITE_P(Mlx, MlxFixture,
                         ::testing::Values("qwen4exp_mlx_mixed", "qwen4exp_mlx_8bit_g128",
                                           "qwen4exp_mlx_2bit_g32"));

}  // namespace
}  // namespace ds
