// Row, seam, batch and thread invariance of the whole forward pass: the bits of a stream's logits and states
// never depend on how its rows were grouped into calls, on other streams in the call, or on the thread count.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model_test_support.h"

namespace ds {
namespace {

std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  t[n / 3] = 2;  // an EOS inside, for the PLE segment rule
  return t;
}

std::vector<float> concat(std::vector<float> a, const std::vector<float>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class Invariance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { model_ = std::make_unique<Model>(test::fixture(GetParam())); }
  std::unique_ptr<Model> model_;
};

TEST_P(Invariance, PromptSplitAt64MultiplesIsBitEqual) {
  const Model& m = *model_;
  auto toks = random_tokens(150, m.config().vocab_size, 1);
  StreamState one = m.new_state();
  std::vector<float> whole = test::run(m, one, toks, true);
  for (std::vector<size_t> cuts : {std::vector<size_t>{64}, {128}, {64, 128}}) {
    StreamState st = m.new_state();
    std::vector<float> pieces;
    size_t a = 0;
    cuts.push_back(toks.size());
    for (size_t b : cuts) {
      pieces = concat(pieces, test::run(m, st, test::slice(toks, a, b), true));
      a = b;
    }
    EXPECT_TRUE(test::same_bits(whole, pieces)) << "cuts at " << cuts[0];
    EXPECT_TRUE(test::same_state(one, st));
  }
}

TEST_P(Invariance, DecodeWindowsOfEverySizeAreBitEqual) {
  const Model& m = *model_;
  auto prompt = random_tokens(70, m.config().vocab_size, 2);
  auto tail = random_tokens(16, m.config().vocab_size, 3);
  StreamState base = m.new_state();
  test::run(m, base, prompt, true, false);
  // Reference: one row per call.
  StreamState single = base;
  std::vector<float> want;
  for (int32_t t : tail) want = concat(want, test::run(m, single, {t}, false));
  for (size_t w = 2; w <= 16; ++w) {
    StreamState st = base;
    std::vector<float> got;
    for (size_t a = 0; a < tail.size(); a += w)
      got = concat(got, test::run(m, st, test::slice(tail, a, std::min(tail.size(), a + w)), false));
    EXPECT_TRUE(test::same_bits(want, got)) << "window " << w;
    EXPECT_TRUE(test::same_state(single, st)) << "window " << w;
  }
}

TEST_P(Invariance, StreamsSharingACallMatchStreamsAlone) {
  const Model& m = *model_;
  const int64_t V = m.config().vocab_size;
  std::vector<std::vector<int32_t>> prompts = {random_tokens(65, V, 4), random_tokens(9, V, 5),
                                               random_tokens(130, V, 6)};
  // Alone: each prompt, then a 3-row decode window.
  std::vector<StreamState> alone(3, m.new_state());
  std::vector<std::vector<float>> want(3);
  std::vector<int32_t> window = {7, 8, 9};
  for (int i = 0; i < 3; ++i) {
    want[i] = test::run(m, alone[i], prompts[i], true);
    want[i] = concat(want[i], test::run(m, alone[i], window, false));
  }
  // Together: all prompts in one call, then a call mixing decode windows of every stream.
  std::vector<StreamState> st(3, m.new_state());
  std::vector<ForwardSegment> segs;
  for (int i = 0; i < 3; ++i) segs.push_back({&st[i], prompts[i], true, true});
  std::vector<float> got1 = m.forward(segs);
  segs.clear();
  for (int i = 0; i < 3; ++i) segs.push_back({&st[i], window, false, true});
  std::vector<float> got2 = m.forward(segs);
  size_t off1 = 0, off2 = 0;
  for (int i = 0; i < 3; ++i) {
    size_t n1 = prompts[i].size() * V, n2 = window.size() * V;
    std::vector<float> got(got1.begin() + off1, got1.begin() + off1 + n1);
    got.insert(got.end(), got2.begin() + off2, got2.begin() + off2 + n2);
    off1 += n1;
    off2 += n2;
    EXPECT_TRUE(test::same_bits(want[i], got)) << "stream " << i;
    EXPECT_TRUE(test::same_state(alone[i], st[i])) << "stream " << i;
  }
}

TEST_P(Invariance, ThreadCountDoesNotChangeBits) {
  auto toks = random_tokens(100, model_->config().vocab_size, 7);
  std::vector<std::vector<float>> out;
  for (int threads : {1, 2, 3}) {
    ThreadPool::set_global_threads(threads);
    StreamState st = model_->new_state();
    out.push_back(test::run(*model_, st, toks, true));
    out.back() = concat(out.back(), test::run(*model_, st, {5, 6, 7}, false));
  }
  ThreadPool::set_global_threads(2);
  EXPECT_TRUE(test::same_bits(out[0], out[1]));
  EXPECT_TRUE(test::same_bits(out[0], out[2]));
}

TEST_P(Invariance, RestoredSnapshotReplaysExactly) {
  const Model& m = *model_;
  auto toks = random_tokens(80, m.config().vocab_size, 8);
  StreamState st = m.new_state();
  test::run(m, st, test::slice(toks, 0, 64), true, false);
  StreamState snapshot = st;
  std::vector<float> a = test::run(m, st, test::slice(toks, 64, 80), true);
  st = snapshot;
  std::vector<float> b = test::run(m, st, test::slice(toks, 64, 80), true);
  EXPECT_TRUE(test::same_bits(a, b));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Invariance,
                         ::testing::Values("qwen4exp_base", "qwen4exp_mlx_mixed", "qwen3next", "qwen35moe"));

TEST(ModelErrors, TokenOutOfRangeIsANamedError) {
  Model m(test::fixture("qwen4exp_base"));
  StreamState st = m.new_state();
  try {
    test::run(m, st, {1, 99999}, true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("99999"), std::string::npos) << e.what();
  }
}

// A config that asks for a tensor the checkpoint lacks, or a shape it does not have, names that tensor.
TEST(ModelErrors, MissingOrMisshapedTensorIsNamed) {
  namespace fs = std::filesystem;
  fs::path src = test::fixture("qwen35moe");
  fs::path dir = fs::temp_directory_path() / "deltaserve_bad_config";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src)) fs::copy(e.path(), dir / e.path().filename());
  auto expect_error = [&](const std::string& key, nlohmann::json value, const std::string& needle) {
    auto cfg = test::read_json(src / "config.json");
    cfg[key] = value;
    std::ofstream(dir / "config.json") << cfg.dump();
    try {
      Model m(dir);
      FAIL() << "no error for " << key;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto cfg = test::read_json(src / "config.json");
  auto types = cfg["layer_types"];
  types.push_back("linear_attention");
  expect_error("layer_types", types, "num_hidden_layers");
  expect_error("hidden_size", 96, "embed_tokens");
  expect_error("vocab_size", "many", "vocab_size");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ds
