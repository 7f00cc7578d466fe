// The MTP head's cost at the real Flash Next shape with random weights made on the GPU: what the depth
// policy's HeadCosts measure (src/runtime/draft_policy.h: a catch-up call by head rows, a chained call by
// streams) and a whole draft of depth 1-4 on one stream, by the wall clock as the engine sees them (host
// work, uploads, the greedy tokens' download), plus the bytes one head row reads.
#include <algorithm>
#include <chrono>

#include "backend/cuda/model/cuda_model.h"
#include "core/error.h"
#include "fmt/format.h"
#include "model_checks.h"

namespace ds::cuda::modelcheck {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kRooflineBytesPerSecond = 4.3e12;

// Mean wall milliseconds of `reps` calls of f after 2 untimed ones.
template <class F>
double mean_ms(int reps, F&& f) {
  f(), f();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) f();
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
}

}  // namespace

void run_mtp_bench(const std::string& config_path, int bits, int group, int reps) {
  ModelConfig cfg = read_config(config_path);
  if (cfg.mtp_declared != 1)
    fail("{}: the config declares no MTP layer (mtp_num_hidden_layers 1)", config_path);
  const DummySpec spec = uniform_spec(bits, group);
  CudaModelOptions opt;
  opt.max_context = 512;
  CudaModel m(cfg, spec, opt);
  if (!m.has_mtp()) fail("the random model has no MTP head");
  const int64_t W = m.mtp_hidden_width(), V = cfg.vocab_size;
  const double head_bytes = static_cast<double>(m.mtp_bytes_per_row());
  std::printf("\n== MTP head, real shape, MLX affine %d-bit g%d ==\n%s", bits, group, m.describe().c_str());

  // Main-model rounds at batch 1, without and with the H rows handed to the head (kept on the device).
  const int max_streams = 32, rows_max = 16;
  DeviceBuffer H(static_cast<size_t>(rows_max * W) * sizeof(float));
  std::vector<int32_t> prompt;
  for (int i = 0; i < rows_max; ++i) prompt.push_back(static_cast<int32_t>((1000 + 7919 * i) % V));
  {
    CudaStreamState st = m.new_state();
    CudaSegment seg{&st, prompt, false};
    seg.hidden = H.as<float>();
    m.forward_greedy(std::span<const CudaSegment>(&seg, 1));
    int32_t tok = prompt.back();
    for (int with_hidden : {0, 1}) {
      const double ms = mean_ms(reps, [&] {
        if (st.position + 1 > opt.max_context) {
          st = m.new_state();
        }
        CudaSegment one{&st, std::span<const int32_t>(&tok, 1), false};
        if (with_hidden) one.hidden = H.as<float>() + (rows_max - 1) * W;
        tok = m.forward_greedy(std::span<const CudaSegment>(&one, 1))[0];
      });
      std::printf("main model, batch 1 round %s: %.3f ms\n",
                  with_hidden ? "handing its H row to the head" : "without H rows", ms);
    }
  }

  std::vector<CudaStreamState> states;
  for (int i = 0; i < max_streams; ++i) states.push_back(m.new_state());
  DeviceBuffer out(static_cast<size_t>(max_streams * rows_max * W) * sizeof(float));
  auto out_row = [&](int64_t r) { return out.as<float>() + r * W; };
  // GB read: the weights of one head row a call (a lower bound for calls of several rows, whose routed
  // experts differ).
  std::printf("%-44s %10s %12s %12s\n", "head call (wall clock, greedy tokens)", "ms", "GB read",
              "vs 4.3TB/s");
  auto line = [&](const std::string& what, double ms, double bytes) {
    std::printf("%-44s %10.3f %12.3f %11.1f%%\n", what.c_str(), ms, bytes / 1e9,
                100 * bytes / (ms * 1e-3) / kRooflineBytesPerSecond);
    std::fflush(stdout);
  };
  // HeadCosts.catch_up: one stream's pending rows, the last row's logits (draft 1).
  for (int rows : {1, 2, 4, 8, 16}) {
    CudaStreamState& st = states[0];
    const std::span<const int32_t> next(prompt.data(), static_cast<size_t>(rows));
    const double ms = mean_ms(reps, [&] {
      const CudaMtpSegment seg{&st, H.as<float>(), next, 0, out_row(0), MtpLogits::Last};
      m.mtp_forward_greedy(std::span<const CudaMtpSegment>(&seg, 1));
      st.truncate_mtp(0);
    });
    line(fmt::format("catch-up, 1 stream, {} row{}", rows, rows > 1 ? "s" : ""), ms, head_bytes);
  }
  // HeadCosts.chain: one row per chaining stream, every row's logits.
  for (int streams : {1, 8, 32}) {
    std::vector<CudaMtpSegment> segs;
    for (int i = 0; i < streams; ++i)
      segs.push_back({&states[i], H.as<float>() + i % rows_max * W,
                      std::span<const int32_t>(&prompt[i % rows_max], 1), 0, out_row(i), MtpLogits::All});
    const double ms = mean_ms(reps, [&] {
      m.mtp_forward_greedy(segs);
      for (int i = 0; i < streams; ++i) states[i].truncate_mtp(0);
    });
    line(fmt::format("chain, {} stream{}, 1 row each", streams, streams > 1 ? "s" : ""), ms, head_bytes);
  }
  // One stream drafting `depth` deep: its pending row (draft 1), then depth-1 chained rows, rolled back.
  for (int graphs : {1, 0}) {
    m.set_graphs(graphs == 1);
    for (int depth = 1; depth <= 4; ++depth) {
      CudaStreamState& st = states[0];
      const double ms = mean_ms(reps, [&] {
        const CudaMtpSegment first{&st, H.as<float>(), std::span<const int32_t>(prompt.data(), 1),
                                   0,   out_row(0),    MtpLogits::Last};
        std::vector<int32_t> d = m.mtp_forward_greedy(std::span<const CudaMtpSegment>(&first, 1));
        for (int k = 1; k < depth; ++k) {
          const CudaMtpSegment seg{&st, out_row(k - 1), d, st.mtp_position, out_row(k), MtpLogits::All};
          d = m.mtp_forward_greedy(std::span<const CudaMtpSegment>(&seg, 1));
        }
        st.truncate_mtp(0);
      });
      line(fmt::format("draft {} deep, 1 stream{}", depth, graphs ? "" : " (without CUDA graphs)"), ms,
           depth * head_bytes);
    }
  }
  m.set_graphs(true);

  // Where a 1-row head call's GPU time goes (CUDA events as nodes of the replayed graph), against its wall
  // time.
  {
    CudaStreamState& st = states[0];
    auto call = [&] {
      const CudaMtpSegment seg{&st, H.as<float>(), std::span<const int32_t>(prompt.data(), 1),
                               0,   out_row(0),    MtpLogits::Last};
      m.mtp_forward_greedy(std::span<const CudaMtpSegment>(&seg, 1));
      st.truncate_mtp(0);
    };
    m.set_time_ops(true);
    call();
    m.reset_op_times();
    const int timed = 8;
    for (int i = 0; i < timed; ++i) call();
    m.set_time_ops(false);
    std::vector<std::pair<std::string, double>> ops;
    double total = 0;
    for (const auto& [k, v] : m.op_times()) ops.push_back({k, 1e3 * v / timed}), total += 1e3 * v / timed;
    std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::printf("  per-op GPU time of a 1-row head call (graph replay, mean of %d):\n", timed);
    for (const auto& [k, us] : ops)
      std::printf("    %-24s %9.1f us %5.1f%%\n", k.c_str(), us, 100 * us / total);
    std::printf("    %-24s %9.1f us (the rest of the wall time: host staging, launch, sync, download)\n",
                "total", total);
  }
}

}  // namespace ds::cuda::modelcheck
