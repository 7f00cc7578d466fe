// Dummy weights bind through the real path and run; the same seed gives the same logits; `deltaserve bench`
// runs end to end on a tiny config and prints parseable JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>

#include "core/error.h"
#include "model/decode_traffic.h"
#include "model/dummy_weights.h"
#include "model_test_support.h"

namespace ds {
namespace {

const std::vector<int32_t> kTokens = {3, 17, 2, 40, 5, 11, 9};

std::vector<float> logits_for(const nlohmann::json& config, uint64_t seed) {
  Model m(dummy_checkpoint(config, seed));
  StreamState st = m.new_state();
  return test::run(m, st, kTokens, true);
}

class DummyWeights : public ::testing::TestWithParam<std::string> {};

TEST_P(DummyWeights, BuildRunAndRepeatPerSeed) {
  const nlohmann::json config = test::read_json(test::fixture(GetParam()) / "config.json");
  const std::vector<float> a = logits_for(config, 7);
  const std::vector<float> b = logits_for(config, 7);
  const std::vector<float> c = logits_for(config, 8);
  ASSERT_FALSE(a.empty());
  for (float v : a) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(test::same_bits(a, b)) << "same seed, different logits";
  EXPECT_FALSE(test::same_bits(a, c)) << "different seeds, same logits";
}

TEST_P(DummyWeights, PlanMatchesBoundWeightsAndDecodeTraffic) {
  const nlohmann::json config = test::read_json(test::fixture(GetParam()) / "config.json");
  const DummyWeightsPlan plan = plan_dummy_weights(config);
  Model m(dummy_checkpoint(config, 1));
  uint64_t stored = 0;
  for (const auto& name : m.checkpoint().store().names()) stored += m.checkpoint().store().get(name).nbytes;
  EXPECT_EQ(plan.total_bytes, stored);
  const DecodeTraffic t = decode_traffic(m);
  EXPECT_GT(t.dense_bytes, 0u);
  EXPECT_GT(t.expert_bytes, 0u);
  // Once every expert is touched, more streams add only lookup rows and state.
  const int64_t all = (t.experts + t.experts_per_tok - 1) / t.experts_per_tok;
  EXPECT_EQ(t.per_round(all + 1, 0) - t.per_round(all, 0), t.lookup_row_bytes);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DummyWeights,
                         ::testing::Values("qwen4exp_base", "qwen4exp_hc2_sigmoid", "qwen4exp_multimodal",
                                           "qwen4exp_mlx_8bit_g128", "qwen4exp_mlx_2bit_g32",
                                           "qwen4exp_mlx_mixed", "qwen3next", "qwen35moe"));

TEST(DummyWeights, QuantizationBlockGivesAffineWeights) {
  nlohmann::json config = test::read_json(test::fixture("qwen4exp_base") / "config.json");
  config["quantization"] = {{"bits", 4}, {"group_size", 32}};
  Model m(dummy_checkpoint(config, 3));
  EXPECT_EQ(m.weights().layers[0].moe.experts[0].gate.encoding, MatrixEncoding::Affine);
  EXPECT_EQ(m.weights().layers[0].moe.experts[0].gate.bits, 4);
  StreamState st = m.new_state();
  for (float v : test::run(m, st, kTokens, true)) ASSERT_TRUE(std::isfinite(v));
}

TEST(DummyWeights, RefusesWeightsLargerThanMemory) {
  nlohmann::json config = test::read_json(test::fixture("qwen4exp_base") / "config.json");
  config["ngram_vocab_size_base"] = int64_t{1} << 40;  // PLE tables of petabytes
  try {
    dummy_checkpoint(config, 0);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("PLE"), std::string::npos) << e.what();
  }
}

TEST(BenchCommand, TinyConfigPrintsJson) {
  const std::string cmd = std::string(DELTASERVE_BINARY) + " bench --load-format dummy --config " +
                          (test::fixture("qwen4exp_base") / "config.json").string() +
                          " --prompt-lengths 8,16 --streams 1,3 --decode-tokens 4 --repeats 1"
                          " --bandwidth-mib 8 --threads 2 --json 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  ASSERT_TRUE(pipe);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  ASSERT_EQ(pclose(pipe.release()), 0) << out;
  const nlohmann::json r = nlohmann::json::parse(out);
  EXPECT_GT(r["bandwidth_gbs"].get<double>(), 0);
  // The bound is the faster of the probes before and after decoding.
  ASSERT_EQ(r["bandwidth_probes_gbs"].size(), 2u);
  EXPECT_EQ(r["bandwidth_gbs"].get<double>(),
            std::max(r["bandwidth_probes_gbs"][0].get<double>(), r["bandwidth_probes_gbs"][1].get<double>()));
  ASSERT_EQ(r["prompt"].size(), 2u);
  EXPECT_EQ(r["prompt"][1]["tokens"], 16);
  ASSERT_EQ(r["decode"].size(), 2u);
  EXPECT_EQ(r["decode"][1]["streams"], 3);
  EXPECT_GT(r["decode"][1]["tokens_per_s"].get<double>(), 0);
  EXPECT_GT(r["decode"][1]["bytes_per_round"].get<uint64_t>(),
            r["decode"][0]["bytes_per_round"].get<uint64_t>());
  EXPECT_GT(r["decode"][0]["fraction_of_bound"].get<double>(), 0);
}

// Stdout+stderr and exit status of `deltaserve bench ARGS`.
std::pair<std::string, int> run_cli(const std::string& args) {
  // Under a timeout: a command that should have been refused (serve) must not hang the test.
  const std::string cmd = "timeout 60 " + std::string(DELTASERVE_BINARY) + " " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  return {out, pclose(pipe.release())};
}

std::pair<std::string, int> run_bench(const std::string& args) {
  return run_cli("bench " + args);
}

// --backend: an unknown one is named; cuda in a CPU-only build says how to get it (and loads nothing).
TEST(BenchCommand, BackendChoicesAreNamed) {
  const std::string config = (test::fixture("qwen4exp_base") / "config.json").string();
  auto [unknown, rc1] = run_bench("--backend tpu --load-format dummy --config " + config);
  EXPECT_NE(rc1, 0);
  EXPECT_NE(unknown.find("--backend 'tpu' is not one of cpu, cuda"), std::string::npos) << unknown;
#if !defined(DELTASERVE_HAS_CUDA)
  auto [cuda, rc2] = run_bench("--backend cuda --load-format dummy --config " + config);
  EXPECT_NE(rc2, 0);
  EXPECT_NE(cuda.find("-DDELTASERVE_CUDA=ON"), std::string::npos) << cuda;
#endif
}

// run and serve take the same --backend choices, checked before anything is loaded.
TEST(BackendOption, RunAndServeNameTheChoices) {
  const std::string dir = test::fixture("qwen4exp_base").string();
  for (const std::string& cmd : {"run " + dir + " -p hi", "serve " + dir + " --port 0"}) {
    auto [unknown, rc1] = run_cli(cmd + " --backend tpu");
    EXPECT_NE(rc1, 0) << cmd;
    EXPECT_NE(unknown.find("--backend 'tpu' is not one of cpu, cuda"), std::string::npos) << unknown;
#if !defined(DELTASERVE_HAS_CUDA)
    auto [cuda, rc2] = run_cli(cmd + " --backend cuda");
    EXPECT_NE(rc2, 0) << cmd;
    EXPECT_NE(cuda.find("-DDELTASERVE_CUDA=ON"), std::string::npos) << cuda;
#endif
  }
  // --cuda-drafts (drafts on CUDA, off there by default) is accepted, and changes nothing on the CPU.
  const std::string tiny = std::string(DELTASERVE_SOURCE_DIR) + "/models/flashnext-tiny";
  auto [with_flag, rc3] = run_cli("run " + tiny + " -p hi --max-tokens 2 --cuda-drafts");
  EXPECT_EQ(rc3, 0) << with_flag;
}

// A negative --context is refused naming the option, by run and serve alike, before anything loads (it was
// taken silently as the default: run decoded, serve served).
TEST(ContextOption, NegativeIsRefusedNamingTheOption) {
  // A model with a tokenizer, so that without the check both commands would get as far as decoding.
  const std::string dir = std::string(DELTASERVE_SOURCE_DIR) + "/models/flashnext-tiny";
  // serve under a timeout: without the check it would serve until killed.
  for (const std::string& cmd : {"run " + dir + " -p hi --max-tokens 2", "serve " + dir + " --port 0"})
    for (const char* context : {" --context=-5", " --context -5"}) {
      auto [out, rc] = run_cli(cmd + context);
      EXPECT_NE(rc, 0) << cmd << context;
      EXPECT_NE(out.find("--context must be a positive number of positions"), std::string::npos)
          << cmd << context << ": " << out;
    }
}

}  // namespace
}  // namespace ds
