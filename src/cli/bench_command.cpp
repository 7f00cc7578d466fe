// `deltaserve bench`: prompt and decode throughput of the engine alone, against the DRAM bandwidth bound.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_cuda.h"
#include "cli/bench_drafts.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/host_memory.h"
#include "core/thread_pool.h"
#include "model/decode_traffic.h"
#include "model/dummy_weights.h"
#include "model/model.h"

namespace ds::cli {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model, load_format = "auto", config, backend = "cpu";
  uint64_t seed = 0;
  std::vector<int> prompt_lengths{128, 512}, streams{1, 4, 16};
  int decode_tokens = 32, warmup_rounds = 2, decode_prompt = 16, repeats = 3, threads = 0;
  int bandwidth_mib = 1024;
  int draft_tokens = 64;  // reply length of the drafts off/on line; 0 skips it
  bool json = false, no_drafts = false, no_weight_tiles = false;
  bool cuda_prompt_passes = true;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "unknown" : fmt::format("{} {} {}", a, b, c);
}

// Deterministic token ids in [0, vocab) that do not depend on the model's outputs.
std::vector<int32_t> tokens_for(uint64_t seed, int64_t n, int64_t vocab) {
  std::vector<int32_t> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& t : out) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    t = static_cast<int32_t>(x % static_cast<uint64_t>(vocab));
  }
  return out;
}

std::unique_ptr<Model> load(const BenchOptions& o) {
  if (o.load_format == "dummy") {
    if (o.config.empty()) fail("--load-format dummy needs --config FILE (a config.json)");
    if (!o.model.empty()) fail("--model and --load-format dummy exclude each other; give one");
    std::ifstream in(o.config);
    if (!in) fail("{}: cannot open", o.config);
    json config;
    try {
      config = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", o.config, e.what());
    }
    return std::make_unique<Model>(dummy_checkpoint(config, o.seed), !o.no_weight_tiles);
  }
  if (o.load_format != "auto") fail("--load-format '{}' is not one of auto, dummy", o.load_format);
  if (o.model.empty()) fail("bench needs --model DIR or --load-format dummy --config FILE");
  if (!o.config.empty()) fail("--config is for --load-format dummy; a checkpoint has its own config.json");
  return std::make_unique<Model>(o.model, !o.no_weight_tiles);
}

uint64_t weight_bytes(const Checkpoint& ck) {
  uint64_t n = 0;
  for (const auto& name : ck.store().names()) n += ck.store().get(name).nbytes;
  return n;
}

json bench_prompt(const Model& m, const BenchOptions& o, int length) {
  std::vector<int32_t> toks = tokens_for(o.seed + length, length, m.config().vocab_size);
  std::vector<double> times;
  for (int r = 0; r < o.repeats; ++r) {
    std::fprintf(stderr, "prompt %d tokens: run %d/%d\n", length, r + 1, o.repeats);
    StreamState st = m.new_state();
    ForwardSegment seg{&st, toks, true, false};
    auto t0 = Clock::now();
    m.forward({&seg, 1});
    times.push_back(seconds_since(t0));
  }
  const double med = median(times), best = *std::min_element(times.begin(), times.end());
  return {{"tokens", length},
          {"runs", o.repeats},
          {"median_s", med},
          {"best_s", best},
          {"tokens_per_s", length / med},
          {"best_tokens_per_s", length / best}};
}

json bench_decode(const Model& m, const BenchOptions& o, int streams, const DecodeTraffic& traffic,
                  double bandwidth_gbs) {
  const ModelConfig& cfg = m.config();
  std::vector<StreamState> states(streams, m.new_state());
  std::vector<std::vector<int32_t>> prompts;
  std::vector<ForwardSegment> segs;
  for (int s = 0; s < streams; ++s)
    prompts.push_back(tokens_for(o.seed * 1000 + s, o.decode_prompt, cfg.vocab_size));
  for (int s = 0; s < streams; ++s) segs.push_back({&states[s], prompts[s], true, false});
  std::fprintf(stderr, "decode %d streams: prompts of %d tokens\n", streams, o.decode_prompt);
  std::vector<float> logits = m.forward(segs);
  std::vector<int32_t> next(streams);
  std::vector<double> times;
  uint64_t state_bytes = 0;
  for (int round = 0; round < o.warmup_rounds + o.decode_tokens; ++round) {
    // Feed each stream its greedy next token, so routing follows the model as in a real decode.
    for (int s = 0; s < streams; ++s) {
      const float* row = logits.data() + static_cast<int64_t>(s) * cfg.vocab_size;
      next[s] = static_cast<int32_t>(std::max_element(row, row + cfg.vocab_size) - row);
      segs[s] = {&states[s], {&next[s], 1}, false, false};
    }
    if (round == o.warmup_rounds) {
      state_bytes = 0;
      for (const auto& st : states) state_bytes += st.bytes();
    }
    auto t0 = Clock::now();
    logits = m.forward(segs);
    if (round >= o.warmup_rounds) times.push_back(seconds_since(t0));
    if ((round + 1) % 8 == 0)
      std::fprintf(stderr, "decode %d streams: round %d/%d\n", streams, round + 1,
                   o.warmup_rounds + o.decode_tokens);
  }
  const double med = median(times), best = *std::min_element(times.begin(), times.end());
  const uint64_t bytes = traffic.per_round(streams, state_bytes);
  const double bound_rounds = bandwidth_gbs * 1e9 / static_cast<double>(bytes);
  return {{"streams", streams},
          {"rounds", o.decode_tokens},
          {"median_round_s", med},
          {"best_round_s", best},
          {"tokens_per_s", streams / med},
          {"bytes_per_round", bytes},
          {"state_bytes", state_bytes},
          {"bound_tokens_per_s", streams * bound_rounds},
          {"fraction_of_bound", (1 / med) / bound_rounds}};
}

void print_table(const json& r) {
  std::printf(
      "model: %s, %.3f GiB of weights (%s), %s\n", r["model"]["architecture"].get<std::string>().c_str(),
      r["model"]["weight_bytes"].get<double>() / (1u << 30),
      r["model"]["quantization"].get<std::string>().c_str(), r["model"]["source"].get<std::string>().c_str());
  std::printf("CPU tiled weight copies: %.3f GiB%s\n", r["cpu_tile_bytes"].get<double>() / (1u << 30),
              r["cpu_tile_bytes"].get<double>() > 0 ? "" : " (row-major kernels)");
  std::printf("threads: %d; load average before %s, after %s\n", r["threads"].get<int>(),
              r["load_average_before"].get<std::string>().c_str(),
              r["load_average_after"].get<std::string>().c_str());
  std::printf(
      "DRAM read bandwidth: %.2f GB/s (%d MiB buffer, best of 5 passes; probes before/after decoding %.2f / "
      "%.2f, the faster is the bound)\n",
      r["bandwidth_gbs"].get<double>(), r["bandwidth_buffer_mib"].get<int>(),
      r["bandwidth_probes_gbs"][0].get<double>(), r["bandwidth_probes_gbs"][1].get<double>());
  std::printf("\n%-14s %10s %12s %12s\n", "prompt tokens", "median s", "tok/s", "best tok/s");
  for (const auto& p : r["prompt"])
    std::printf("%-14d %10.3f %12.1f %12.1f\n", p["tokens"].get<int>(), p["median_s"].get<double>(),
                p["tokens_per_s"].get<double>(), p["best_tokens_per_s"].get<double>());
  std::printf("\n%-8s %14s %12s %12s %12s %10s\n", "streams", "MB per round", "median ms", "tok/s",
              "bound tok/s", "% of bound");
  for (const auto& d : r["decode"])
    std::printf("%-8d %14.1f %12.2f %12.1f %12.1f %9.1f%%\n", d["streams"].get<int>(),
                d["bytes_per_round"].get<double>() / 1e6, d["median_round_s"].get<double>() * 1e3,
                d["tokens_per_s"].get<double>(), d["bound_tokens_per_s"].get<double>(),
                100 * d["fraction_of_bound"].get<double>());
}

void run_bench(const BenchOptions& o) {
  if (o.backend == "cuda") {
    run_cuda_bench({o.model, o.load_format, o.config, o.seed, o.streams, o.decode_tokens, o.warmup_rounds,
                    o.json, true, o.prompt_lengths, o.cuda_prompt_passes, !o.no_drafts});
    return;
  }
  if (o.backend != "cpu") fail("--backend '{}' is not one of cpu, cuda", o.backend);
  if (o.threads > 0) ThreadPool::set_global_threads(o.threads);
  for (int v : o.prompt_lengths)
    if (v <= 0) fail("--prompt-lengths: {} is not a positive length", v);
  for (int v : o.streams)
    if (v <= 0) fail("--streams: {} is not a positive stream count", v);
  if (o.decode_tokens <= 0) fail("--decode-tokens must be positive, got {}", o.decode_tokens);
  json r;
  r["load_average_before"] = load_average();
  std::fprintf(stderr, "loading %s\n",
               o.load_format == "dummy" ? ("dummy weights for " + o.config).c_str() : o.model.c_str());
  auto t0 = Clock::now();
  std::unique_ptr<Model> m = load(o);
  r["load_s"] = seconds_since(t0);
  const ModelConfig& cfg = m->config();
  r["model"] = {
      {"architecture", cfg.family_name()},
      {"source", o.load_format == "dummy" ? fmt::format("dummy {} seed {}", o.config, o.seed) : o.model},
      {"weight_bytes", weight_bytes(m->checkpoint())},
      {"quantization", m->checkpoint().quantization_summary()}};
  r["threads"] = ThreadPool::global().size();
  r["cpu_tile_bytes"] = m->cpu_tile_bytes();
  std::fprintf(stderr, "measuring DRAM read bandwidth over %d MiB\n", o.bandwidth_mib);
  const double bw = measure_read_bandwidth_gbs(static_cast<uint64_t>(o.bandwidth_mib) << 20, 5);
  r["bandwidth_gbs"] = bw;
  r["bandwidth_buffer_mib"] = o.bandwidth_mib;
  const DecodeTraffic traffic = decode_traffic(*m);
  r["traffic"] = {{"dense_bytes", traffic.dense_bytes},
                  {"expert_bytes", traffic.expert_bytes},
                  {"lookup_row_bytes", traffic.lookup_row_bytes}};
  r["prompt"] = json::array();
  for (int len : o.prompt_lengths) r["prompt"].push_back(bench_prompt(*m, o, len));
  r["decode"] = json::array();
  for (int s : o.streams) r["decode"].push_back(bench_decode(*m, o, s, traffic, bw));
  // The probe swings with the host's other tenants: probe again after decoding and judge every round against
  // the faster of the two (the stricter bound).
  std::fprintf(stderr, "measuring DRAM read bandwidth again\n");
  const double bw_after = measure_read_bandwidth_gbs(static_cast<uint64_t>(o.bandwidth_mib) << 20, 5);
  r["bandwidth_probes_gbs"] = {bw, bw_after};
  if (bw_after > bw) {
    r["bandwidth_gbs"] = bw_after;
    for (json& d : r["decode"]) {
      d["bound_tokens_per_s"] = d["bound_tokens_per_s"].get<double>() * bw_after / bw;
      d["fraction_of_bound"] = d["fraction_of_bound"].get<double>() * bw / bw_after;
    }
  }
  if (o.draft_tokens > 0 && !o.no_drafts) r["drafts"] = bench_drafts(*m, o.draft_tokens, o.seed);
  r["load_average_after"] = load_average();
  if (o.json) {
    std::printf("%s\n", r.dump(2).c_str());
  } else {
    print_table(r);
    if (r.contains("drafts")) print_drafts(r["drafts"]);
  }
}

}  // namespace

void register_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd =
      app.add_subcommand("bench", "prompt and decode throughput of the engine against the DRAM bound");
  cmd->add_option("--model,-m", o->model, "checkpoint directory (config.json + safetensors)");
  cmd->add_option("--load-format", o->load_format, "auto (a checkpoint directory) or dummy (random weights)");
  cmd->add_option("--config", o->config, "config.json for --load-format dummy");
  cmd->add_option("--backend", o->backend,
                  "cpu, or cuda (decode rounds on the GPU; a -DDELTASERVE_CUDA=ON build)");
  cmd->add_option("--seed", o->seed, "seed of the dummy weights and the token ids");
  cmd->add_flag("--cuda-prompt-passes", o->cuda_prompt_passes,
                "cuda: prompts through the engine as prompt passes (docs/cuda-model.md \"Prompt path\"; "
                "default; =false: as decode windows)");
  cmd->add_option("--prompt-lengths", o->prompt_lengths, "prompt lengths, one stream each")->delimiter(',');
  cmd->add_option("--streams", o->streams, "decode stream counts")->delimiter(',');
  cmd->add_option("--decode-tokens", o->decode_tokens, "timed decode rounds per stream count");
  cmd->add_option("--warmup-rounds", o->warmup_rounds, "untimed decode rounds first")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--decode-prompt", o->decode_prompt, "prompt tokens per stream before decoding")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--repeats", o->repeats, "runs per prompt length (median reported)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--bandwidth-mib", o->bandwidth_mib, "buffer for the bandwidth measurement")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  cmd->add_option("--draft-tokens", o->draft_tokens,
                  "reply tokens of the drafts off/on line (repetitive prompt, greedy); 0 skips it")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-drafts", o->no_drafts,
                "skip the drafts off/on line (everything else is the plain path)");
  cmd->add_flag(
      "--no-weight-tiles", o->no_weight_tiles,
      "keep the checkpoint's row-major layout (no tiled copies for the CPU kernels): the A/B of tiling");
  cmd->add_flag("--json", o->json, "print one JSON object instead of the table");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace ds::cli
