// The MTP draft head against the float64 reference (tests/fixtures/*_mtp, made by
// tools/mtp/make_mtp_fixtures.py): main-model H rows, teacher-forced head logits, a chained 3-deep draft; row
// invariance, cache rollback, and named errors for missing or mis-shaped head tensors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "expect_error.h"
#include "model_test_support.h"

namespace ds {
namespace {

using ::testing::HasSubstr;

constexpr double kLogitBound = 1e-4;      // as model_golden_test: f32 activations land near 1e-5
constexpr double kMarginFloor = 1e-3;     // top-1 must agree wherever the reference margin exceeds this
constexpr double kHiddenRelBound = 1e-4;  // H rows, relative to the largest |H|

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// The prompt through the main model (prompt path), returning its H rows.
std::vector<float> main_hidden(const Model& m, StreamState& st, const std::vector<int32_t>& prompt) {
  std::vector<float> H(prompt.size() * m.mtp_hidden_width());
  ForwardSegment seg{&st, prompt, true, false, H.data()};
  m.forward({&seg, 1});
  return H;
}

// The head's next tokens for a prompt: t_{i+1} for every row, the last row reading `next`.
std::vector<int32_t> next_tokens(const std::vector<int32_t>& prompt, int32_t next) {
  std::vector<int32_t> v(prompt.begin() + 1, prompt.end());
  v.push_back(next);
  return v;
}

std::vector<float> head(const Model& m, StreamState& st, const std::vector<float>& H,
                        const std::vector<int32_t>& next, int64_t position, float* out = nullptr) {
  MtpSegment seg{&st, H, next, position, out};
  return m.mtp_forward({&seg, 1});
}

double worst_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
  return worst;
}

class MtpGolden : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = test::fixture(GetParam());
    ref_ = test::read_json(dir_ / "mtp.json");
    prompt_ = ref_["prompt"].get<std::vector<int32_t>>();
    next_ = next_tokens(prompt_, ref_["next_token"].get<int32_t>());
  }
  std::filesystem::path dir_;
  nlohmann::json ref_;
  std::vector<int32_t> prompt_, next_;
};

TEST_P(MtpGolden, HeadIsLoaded) {
  Model m(dir_);
  EXPECT_TRUE(m.has_mtp());
  EXPECT_EQ(m.mtp_hidden_width(), ref_["hidden_width"].get<int64_t>());
  EXPECT_THAT(m.config().describe(), HasSubstr("mtp: draft head present"));
}

TEST_P(MtpGolden, MainHiddenRowsMatchReference) {
  Model m(dir_);
  StreamState st = m.new_state();
  std::vector<float> got = main_hidden(m, st, prompt_);
  std::vector<float> want = test::read_f32(dir_ / "hidden.f32");
  ASSERT_EQ(got.size(), want.size());
  double scale = 1.0;
  for (float v : want) scale = std::max(scale, double(std::fabs(v)));
  EXPECT_LE(worst_error(got, want), kHiddenRelBound * scale);
}

TEST_P(MtpGolden, TeacherForcedHeadLogitsWithinBound) {
  Model m(dir_);
  StreamState st = m.new_state();
  std::vector<float> H = main_hidden(m, st, prompt_);
  std::vector<float> got = head(m, st, H, next_, 0);
  std::vector<float> want = test::read_f32(dir_ / "mtp_logits.f32");
  ASSERT_EQ(got.size(), want.size());
  const int64_t V = m.config().vocab_size;
  auto margins = ref_["teacher_forced_margins"].get<std::vector<double>>();
  for (size_t t = 0; t < prompt_.size(); ++t)
    if (margins[t] > kMarginFloor) {
      EXPECT_EQ(argmax(&got[t * V], V), argmax(&want[t * V], V)) << "row " << t;
    }
  double worst = worst_error(got, want);
  EXPECT_LE(worst, kLogitBound);
  EXPECT_EQ(st.mtp_position, static_cast<int64_t>(prompt_.size()));
  std::printf("[ fixture ] %s: worst |head logit error| %.3g over %zu rows\n", GetParam().c_str(), worst,
              prompt_.size());
}

// Draft 1 from the teacher-forced last row, then rows at the next positions reading the previous row's
// output.
std::vector<float> chain(const Model& m, StreamState& st, std::vector<float> H, std::vector<int32_t> next,
                         int64_t depth, std::vector<int32_t>& drafts) {
  const int64_t V = m.config().vocab_size, W = m.mtp_hidden_width();
  std::vector<float> out(next.size() * W);
  std::vector<float> logits = head(m, st, H, next, st.mtp_position, out.data());
  std::vector<float> rows(logits.end() - V, logits.end());
  std::vector<float> h(out.end() - W, out.end());
  drafts.assign(1, argmax(rows.data(), V));
  while (static_cast<int64_t>(drafts.size()) < depth) {
    std::vector<float> o(W);
    std::vector<float> l = head(m, st, h, {drafts.back()}, st.mtp_position, o.data());
    rows.insert(rows.end(), l.begin(), l.end());
    drafts.push_back(argmax(l.data(), V));
    h = o;
  }
  return rows;
}

TEST_P(MtpGolden, ChainedDraftMatchesReference) {
  Model m(dir_);
  StreamState st = m.new_state();
  std::vector<float> H = main_hidden(m, st, prompt_);
  std::vector<int32_t> drafts;
  const int64_t depth = ref_["chain_depth"].get<int64_t>();
  std::vector<float> got = chain(m, st, H, next_, depth, drafts);
  std::vector<float> want = test::read_f32(dir_ / "mtp_chain.f32");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(worst_error(got, want), kLogitBound);
  auto margins = ref_["chain_margins"].get<std::vector<double>>();
  auto want_drafts = ref_["chain_drafts"].get<std::vector<int32_t>>();
  for (int64_t k = 0; k < depth; ++k) {
    if (margins[k] <= kMarginFloor) break;  // later depths read this draft
    EXPECT_EQ(drafts[k], want_drafts[k]) << "depth " << k + 1;
  }
}

TEST_P(MtpGolden, RowsAloneEqualRowsTogether) {
  Model m(dir_);
  StreamState base = m.new_state();
  std::vector<float> H = main_hidden(m, base, prompt_);
  const int64_t W = m.mtp_hidden_width(), V = m.config().vocab_size, T = static_cast<int64_t>(prompt_.size());

  StreamState together = base;
  std::vector<float> all = head(m, together, H, next_, 0);

  // Windows of 1, 3 and 7 rows, and two streams sharing every call.
  for (int64_t win : {1, 3, 7}) {
    StreamState a = base, b = base;
    std::vector<float> got_a, got_b;
    for (int64_t t0 = 0; t0 < T; t0 += win) {
      int64_t t1 = std::min(T, t0 + win);
      std::vector<float> h(H.begin() + t0 * W, H.begin() + t1 * W);
      std::vector<int32_t> nx(next_.begin() + t0, next_.begin() + t1);
      MtpSegment segs[2] = {{&a, h, nx, t0, nullptr}, {&b, h, nx, t0, nullptr}};
      std::vector<float> l = m.mtp_forward(segs);
      got_a.insert(got_a.end(), l.begin(), l.begin() + (t1 - t0) * V);
      got_b.insert(got_b.end(), l.begin() + (t1 - t0) * V, l.end());
    }
    EXPECT_TRUE(test::same_bits(got_a, all)) << "window " << win;
    EXPECT_TRUE(test::same_bits(got_b, all)) << "window " << win << ", second stream";
    EXPECT_TRUE(test::same_state(a, together)) << "window " << win;
  }
}

TEST_P(MtpGolden, TruncateRollsBackTheHeadCache) {
  Model m(dir_);
  StreamState st = m.new_state();
  std::vector<float> H = main_hidden(m, st, prompt_);
  const int64_t T = static_cast<int64_t>(prompt_.size());
  head(m, st, H, next_, 0);
  StreamState after_teacher = st;
  const size_t bytes = st.bytes();
  std::vector<int32_t> d1, d2;
  std::vector<float> first = chain(m, st, {H.end() - m.mtp_hidden_width(), H.end()}, {next_.back()}, 3, d1);
  (void)first;
  // The chain above re-ran row T-1 after the teacher pass; roll all of it back and redo it.
  st.truncate_mtp(T);
  EXPECT_TRUE(test::same_state(st, after_teacher));
  EXPECT_EQ(st.bytes(), bytes);
  st.truncate_mtp(T - 1);
  std::vector<float> again = chain(m, st, {H.end() - m.mtp_hidden_width(), H.end()}, {next_.back()}, 3, d2);
  StreamState fresh = m.new_state();
  main_hidden(m, fresh, prompt_);
  std::vector<int32_t> d3;
  std::vector<float> direct = chain(m, fresh, H, next_, 3, d3);
  EXPECT_TRUE(test::same_bits(again, direct));
  EXPECT_EQ(d2, d3);
  EXPECT_TRUE(test::same_state(st, fresh));
  EXPECT_GT(st.bytes(), m.new_state().bytes());
  EXPECT_THAT(test::error_of([&] { st.truncate_mtp(T + 10); }), HasSubstr("truncate_mtp"));
}

TEST_P(MtpGolden, BadCallsAreNamed) {
  Model m(dir_);
  StreamState st = m.new_state();
  std::vector<float> H = main_hidden(m, st, prompt_);
  std::vector<float> short_h(H.begin(), H.end() - 1);
  EXPECT_THAT(test::error_of([&] { head(m, st, short_h, next_, 0); }), HasSubstr("hidden holds"));
  EXPECT_THAT(test::error_of([&] { head(m, st, H, next_, 5); }), HasSubstr("position 5"));
  std::vector<int32_t> bad = next_;
  bad[0] = static_cast<int32_t>(m.config().vocab_size);
  EXPECT_THAT(test::error_of([&] { head(m, st, H, bad, 0); }), HasSubstr("out of range"));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpGolden, ::testing::Values("qwen4exp_mtp", "qwen3next_mtp"));

TEST(Mtp, CheckpointsWithoutHeadLoadAsBefore) {
  for (const char* name : {"qwen4exp_base", "qwen3next", "qwen35moe"}) {
    Model m(test::fixture(name));
    EXPECT_FALSE(m.has_mtp()) << name;
    EXPECT_THAT(m.config().describe(), HasSubstr("mtp: none")) << name;
    StreamState st = m.new_state();
    EXPECT_EQ(st.attention.size(), static_cast<size_t>(m.config().layers)) << name;
    std::vector<float> h(static_cast<size_t>(m.mtp_hidden_width()));
    std::vector<int32_t> t = {3};
    EXPECT_THAT(test::error_of([&] { head(m, st, h, t, 0); }), HasSubstr("no MTP head")) << name;
  }
}

// A fixture's checkpoint in memory with its tensors edited by `edit` (which may drop or replace entries).
std::unique_ptr<Checkpoint> edited(const std::string& fixture,
                                   const std::function<void(std::vector<MemoryTensor>&)>& edit,
                                   const std::function<void(nlohmann::json&)>& edit_config = nullptr) {
  auto dir = test::fixture(fixture);
  TensorStore store(dir);
  std::vector<MemoryTensor> tensors;
  for (const auto& name : store.names()) {
    const TensorInfo& t = store.get(name);
    MemoryTensor mt{name, t.dtype, t.shape, std::make_unique<uint8_t[]>(t.nbytes), t.nbytes};
    std::memcpy(mt.bytes.get(), t.data, t.nbytes);
    tensors.push_back(std::move(mt));
  }
  edit(tensors);
  nlohmann::json config = test::read_json(dir / "config.json");
  if (edit_config) edit_config(config);
  return std::make_unique<Checkpoint>(config, std::make_unique<TensorStore>(fixture, std::move(tensors)));
}

void drop(std::vector<MemoryTensor>& v, const std::string& name) {
  v.erase(std::remove_if(v.begin(), v.end(), [&](const MemoryTensor& t) { return t.name == name; }), v.end());
}

void reshape(std::vector<MemoryTensor>& v, const std::string& name, std::vector<int64_t> shape) {
  for (auto& t : v)
    if (t.name == name) t.shape = std::move(shape);
}

TEST(Mtp, MissingHeadTensorIsNamed) {
  for (const char* name :
       {"mtp.fc_hidden.weight", "mtp.layers.0.self_attn.indexer.index_qk_proj.weight",
        "mtp.layers.0.mlp.experts.3.up_proj.weight", "mtp.hyper_connection_mixer.hc_norm.weight"}) {
    auto ck = edited("qwen4exp_mtp", [&](auto& v) { drop(v, name); });
    std::string stem = std::string(name).substr(0, std::string(name).rfind(".weight"));
    EXPECT_THAT(test::error_of([&] { Model m(std::move(ck)); }), HasSubstr(stem)) << name;
  }
  auto ck = edited("qwen3next_mtp", [](auto& v) { drop(v, "mtp.norm.weight"); });
  EXPECT_THAT(test::error_of([&] { Model m(std::move(ck)); }), HasSubstr("mtp.norm"));
}

TEST(Mtp, MisshapedHeadTensorIsNamed) {
  // Same byte count, wrong shape: [2D, D/2] instead of [D, D] (qwen4exp_mtp has D = 64).
  auto ck = edited("qwen4exp_mtp", [](auto& v) { reshape(v, "mtp.fc_embedding.weight", {128, 32}); });
  EXPECT_THAT(test::error_of([&] { Model m(std::move(ck)); }), HasSubstr("mtp.fc_embedding"));
  auto ck2 = edited("qwen3next_mtp", [](auto& v) { reshape(v, "mtp.fc.weight", {128, 64}); });
  EXPECT_THAT(test::error_of([&] { Model m(std::move(ck2)); }), HasSubstr("mtp.fc"));
}

TEST(Mtp, DeclaredWithoutTensorsOrUnsupportedCountLoadsWithoutHead) {
  auto no_tensors = edited("qwen4exp_mtp", [](auto& v) {
    v.erase(std::remove_if(v.begin(), v.end(),
                           [](const MemoryTensor& t) { return t.name.rfind("mtp.", 0) == 0; }),
            v.end());
  });
  Model a(std::move(no_tensors));
  EXPECT_FALSE(a.has_mtp());
  EXPECT_THAT(a.config().describe(), HasSubstr("no mtp.* tensors"));
  auto two = edited(
      "qwen3next_mtp", [](auto&) {}, [](nlohmann::json& c) { c["num_nextn_predict_layers"] = 2; });
  Model b(std::move(two));
  EXPECT_FALSE(b.has_mtp());
  EXPECT_THAT(b.config().describe(), HasSubstr("only 1 is supported"));
}

}  // namespace
}  // namespace ds
