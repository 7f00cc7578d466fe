// Admission's memory reserve counts what drafting adds per stream (runtime/stream_memory.*): the verify
// window's per-row records, the MTP head's cache and pending rows, the window's logits. A drafting stream run
// by hand never holds more than its reserve, and an engine refuses a drafting request that would pass the
// memory limit while the same request without drafts fits.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "engine_test_support.h"
#include "runtime/mtp_drafter.h"
#include "runtime/stream_memory.h"

namespace ds {
namespace {

int64_t record_floats(const WindowRecord& r) {
  int64_t n = static_cast<int64_t>(r.tokens.size() + r.ple_context.size());
  for (const auto& v : r.deltanet_conv) n += static_cast<int64_t>(v.size());
  for (const auto& v : r.deltanet_state) n += static_cast<int64_t>(v.size());
  for (const auto& v : r.ple_conv) n += static_cast<int64_t>(v.size());
  return n;
}

// The formula is the record a window of that many rows really fills (DeltaNet and PLE layers, both families).
TEST(DraftMemory, RecordFloatsAreAWindowsRecord) {
  for (const std::string name : {"qwen4exp_mtp", "qwen4exp_base", "qwen3next", "qwen35moe"}) {
    Model m(test::fixture(name));
    const int64_t V = m.config().vocab_size;
    for (int64_t rows : {2, 5, 9}) {
      StreamState st = m.new_state();
      test::run(m, st, test::random_prompt(40, V, 3), true, false);
      const std::vector<int32_t> window = test::random_prompt(static_cast<size_t>(rows), V, 4);
      WindowRecord record;
      ForwardSegment seg{&st, window, false, true, nullptr, &record};
      m.forward({&seg, 1});
      const int64_t actual = record_floats(record), counted = window_record_floats(m.config(), rows);
      EXPECT_LE(actual, counted) << name << " rows " << rows;
      // Only the small token lists may be rounded up.
      EXPECT_LE(counted - actual, rows + m.config().ngram_size) << name << " rows " << rows;
      EXPECT_GT(actual, 3 * rows) << name;  // the record is not empty
    }
  }
}

// The drafting path by hand at max_drafts 8, every window kept whole (the most state growth): prompt with
// the head following, then windows of 9 rows with records, the head catching up and chaining 8 deep. The
// bytes held at every step stay within the drafting reserve, which a plain reserve would not cover.
TEST(DraftMemory, ADraftingStreamStaysWithinItsReserve) {
  Model m(test::fixture("qwen4exp_mtp"));
  const int64_t V = m.config().vocab_size, W = m.mtp_hidden_width();
  const int max_drafts = 8, windows = 6;
  const int64_t rows = max_drafts + 1, prompt_len = 40, total = prompt_len + windows * rows;
  const StreamMemory mem = stream_memory(m, max_drafts, true, kMaxIdleHeadRows);
  const std::vector<int32_t> prompt = test::random_prompt(prompt_len, V, 7);
  std::vector<int32_t> reply;
  StreamState st = m.new_state();
  std::vector<float> hidden(prompt_len * W);
  ForwardSegment pseg{&st, prompt, true, false, hidden.data()};
  m.forward({&pseg, 1});
  st.mtp_pending = hidden;
  HeadRows follow{&st, prompt, {}, {}, {}};
  run_head_rows(m, {&follow, 1}, MtpLogits::None);
  ASSERT_EQ(st.mtp_position, prompt_len - 1);

  int64_t peak = 0, peak_record = 0;
  WindowRecord record;
  for (int w = 0; w < windows; ++w) {
    const std::vector<int32_t> window = test::random_prompt(static_cast<size_t>(rows), V, 100 + w);
    std::vector<float> h(rows * W);
    ForwardSegment seg{&st, window, false, true, h.data(), &record};
    const std::vector<float> logits = m.forward({&seg, 1});
    reply.insert(reply.end(), window.begin(), window.end());
    st.mtp_pending.insert(st.mtp_pending.end(), h.begin(), h.end());
    const int64_t extra_logits = static_cast<int64_t>(logits.size()) - V;
    peak_record = std::max(peak_record, record_floats(record));
    const int64_t transient = (record_floats(record) + extra_logits) * 4;
    peak = std::max(peak, static_cast<int64_t>(st.bytes()) + transient);
    // The head catches up the window's rows whose next token is known, then chains max_drafts deep.
    std::vector<int32_t> known = reply;
    known.push_back(3);  // the token the window's last row drew
    HeadRows item{&st, prompt, known, {}, {}};
    run_head_rows(m, {&item, 1}, MtpLogits::Last);
    std::vector<float> last = item.last_hidden;
    for (int d = 1; d < max_drafts; ++d) {
      std::vector<float> out(W);
      const int32_t t = 5;
      MtpSegment chain{&st, last, {&t, 1}, st.mtp_position, out.data(), MtpLogits::All};
      m.mtp_forward({&chain, 1});
      last = out;
      peak = std::max(peak, static_cast<int64_t>(st.bytes()) + transient);
    }
    st.truncate_mtp(st.position);
  }
  ASSERT_EQ(st.position, total);
  EXPECT_LE(peak, mem.reserve(total, prompt_len, true));
  EXPECT_GT(peak, mem.reserve(total, prompt_len, false));  // so drafting must be counted
  EXPECT_GE(mem.drafting, peak_record * 4);
  EXPECT_GT(mem.head_per_token, 0);
}

// A limit between the plain and the drafting reserve: the drafting request is refused with a reason naming
// drafts, the same request with "draft": false runs.
TEST(DraftMemory, AdmissionRefusesADraftingStreamPastTheLimit) {
  Model m(test::fixture("qwen4exp_mtp"));
  const int64_t V = m.config().vocab_size;
  auto r = test::make_request(test::random_prompt(30, V, 9), 200, false, 1);
  const int64_t tokens = static_cast<int64_t>(r.prompt.size()) + r.max_tokens;
  const StreamMemory mem = stream_memory(m, EngineOptions{}.max_drafts, true, kMaxIdleHeadRows);
  const int64_t plain = mem.reserve(tokens, 30, false), drafting = mem.reserve(tokens, 30, true);
  ASSERT_LT(plain, drafting);
  int64_t weights = 0;
  {
    EngineOptions probe;
    probe.drafts = false;
    weights = Engine(m, probe).stats().weights_bytes;
  }
  EngineOptions o;
  o.parallel = 1;
  o.prompt_cache_gib = 0;
  o.memory_limit_gib = static_cast<double>(weights + (plain + drafting) / 2) / (1024.0 * 1024.0 * 1024.0);
  Engine engine(m, o);
  try {
    test::run_on(engine, r);
    ADD_FAILURE() << "a drafting request past the limit was admitted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("drafts included"), std::string::npos) << e.what();
  }
  r.use_drafts = false;
  test::Reply got = test::run_on(engine, r);
  EXPECT_EQ(got.final.reason, FinishReason::Length);
  EXPECT_EQ(got.final.completion_tokens, 200);
}

}  // namespace
}  // namespace ds
