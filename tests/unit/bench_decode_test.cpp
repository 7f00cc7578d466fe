// bench_decode (the CUDA benches' decode through an engine), on the CPU backend: every stream's reply is the
// one a request of the same prompt and seed gets alone, and the counts are the tokens after each first.
#include "runtime/bench_decode.h"

#include <gtest/gtest.h>

#include "engine_test_support.h"

namespace ds {
namespace {

TEST(BenchDecode, RepliesAndCountsMatchRequestsRunAlone) {
  const Model m(test::fixture("qwen4exp_base"));
  const int64_t V = m.config().vocab_size;
  EngineOptions o;
  o.parallel = 3;
  o.prompt_cache_gib = 0;
  o.drafts = false;
  Engine engine(m, o);
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  const BenchDecode run = bench_decode(engine, V, 3, 4, sampled, 1000);
  ASSERT_EQ(run.replies.size(), 3u);
  EXPECT_EQ(run.decoded, 3 * 4);
  EXPECT_GT(run.decode_seconds, 0.0);
  for (int i = 0; i < 3; ++i) {
    GenerationRequest r;
    r.prompt = bench_prompt(i, V);
    r.max_tokens = 5;
    r.ignore_eos = true;
    r.sampling = sampled;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    EXPECT_EQ(run.replies[static_cast<size_t>(i)], test::run_alone(m, r).tokens) << "stream " << i;
  }
}

}  // namespace
}  // namespace ds
