// `deltaserve logits | generate | info`: the stable commands tests and tools drive.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace ds::cli {

namespace {

std::vector<int32_t> parse_tokens(const std::string& text) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    std::string item = text.substr(i, j - i);
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      out.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      fail("--tokens: '{}' is not a non-negative token id", item);
    }
    i = j + 1;
  }
  if (out.empty()) fail("--tokens: no token ids given");
  return out;
}

int32_t argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;  // ties keep the lower id
  return static_cast<int32_t>(best);
}

struct Common {
  std::string model, tokens;
  int threads = 0;
};

void add_common(CLI::App* cmd, Common& c) {
  cmd->add_option("--model,-m", c.model, "checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("--threads", c.threads, "CPU threads (default: all cores)");
}

void apply_threads(const Common& c) {
  if (c.threads > 0) ThreadPool::set_global_threads(c.threads);
}

}  // namespace

void register_model_commands(CLI::App& app) {
  auto logits_opts = std::make_shared<Common>();
  auto out_path = std::make_shared<std::string>();
  auto recurrent = std::make_shared<bool>(false);
  auto* logits =
      app.add_subcommand("logits", "teacher-forced logits for every position, float32 [T, V], no header");
  add_common(logits, *logits_opts);
  logits->add_option("--tokens,-t", logits_opts->tokens, "comma-separated token ids")->required();
  logits->add_option("--out,-o", *out_path, "output file")->required();
  logits->add_flag("--decode-path", *recurrent,
                   "run the prompt through the decode path (per-token recurrence)");
  logits->callback([logits_opts, out_path, recurrent] {
    apply_threads(*logits_opts);
    Model model(logits_opts->model);
    std::vector<int32_t> toks = parse_tokens(logits_opts->tokens);
    StreamState st = model.new_state();
    ForwardSegment seg{&st, toks, !*recurrent, true};
    std::vector<float> out = model.forward({&seg, 1});
    std::ofstream f(*out_path, std::ios::binary);
    if (!f) fail("cannot open '{}' for writing", *out_path);
    f.write(reinterpret_cast<const char*>(out.data()),
            static_cast<std::streamsize>(out.size() * sizeof(float)));
    if (!f) fail("writing '{}' failed", *out_path);
  });

  auto gen_opts = std::make_shared<Common>();
  auto max_tokens = std::make_shared<int>(16);
  auto ignore_eos = std::make_shared<bool>(false);
  auto* gen = app.add_subcommand("generate", "greedy decode; prints {\"tokens\": [...]}");
  add_common(gen, *gen_opts);
  gen->add_option("--tokens,-t", gen_opts->tokens, "comma-separated prompt token ids")->required();
  gen->add_option("--max-tokens,-n", *max_tokens, "tokens to generate")->check(CLI::NonNegativeNumber);
  gen->add_flag("--ignore-eos", *ignore_eos, "keep generating after an end-of-sequence token");
  gen->callback([gen_opts, max_tokens, ignore_eos] {
    apply_threads(*gen_opts);
    Model model(gen_opts->model);
    const auto& cfg = model.config();
    std::vector<int32_t> toks = parse_tokens(gen_opts->tokens);
    StreamState st = model.new_state();
    std::vector<int32_t> out;
    if (*max_tokens > 0) {
      ForwardSegment seg{&st, toks, true, false};
      std::vector<float> logits = model.forward({&seg, 1});
      int32_t next = argmax(logits.data(), cfg.vocab_size);
      for (int i = 0;; ++i) {
        out.push_back(next);
        bool eos = std::find(cfg.eos_ids.begin(), cfg.eos_ids.end(), next) != cfg.eos_ids.end();
        if (i + 1 >= *max_tokens || (eos && !*ignore_eos)) break;
        ForwardSegment step{&st, {&out.back(), 1}, false, false};
        logits = model.forward({&step, 1});
        next = argmax(logits.data(), cfg.vocab_size);
      }
    }
    std::printf("{\"tokens\": [%s]}\n", fmt::format("{}", fmt::join(out, ", ")).c_str());
  });

  auto info_opts = std::make_shared<Common>();
  auto* info = app.add_subcommand("info", "architecture, sizes and quantization of a checkpoint");
  add_common(info, *info_opts);
  info->callback([info_opts] {
    Model model(info_opts->model);
    std::printf("%s", model.config().describe().c_str());
    std::printf("quantization: %s\n", model.checkpoint().quantization_summary().c_str());
    std::printf("state per stream at start: %zu bytes\n", model.new_state().bytes());
  });
}

}  // namespace ds::cli
