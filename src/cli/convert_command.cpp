// `deltaserve convert IN_DIR OUT_DIR`: HF bf16/f32 checkpoint -> MLX affine checkpoint, with a report.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "convert/converter.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace ds::cli {

namespace {

struct ConvertArgs {
  std::string in, out, report, rounding = "metal";
  int bits = 4, group = 64, min_rows = 16, threads = 0;
  double max_shard_gb = 5.0;
  bool force = false, quiet = false;
  std::vector<std::string> overrides;
};

}  // namespace

void register_convert_command(CLI::App& app) {
  auto a = std::make_shared<ConvertArgs>();
  auto* cmd = app.add_subcommand("convert", "quantize an HF checkpoint into an MLX affine checkpoint");
  cmd->add_option("IN_DIR", a->in, "HF checkpoint directory (bf16/f32 safetensors + config.json)")
      ->required();
  cmd->add_option("OUT_DIR", a->out, "output directory (must be empty unless --force)")->required();
  cmd->add_option("--bits", a->bits, "global code width: 2, 3, 4, 5, 6 or 8")->capture_default_str();
  cmd->add_option("--group-size", a->group, "global group size: 32, 64 or 128")->capture_default_str();
  cmd->add_option("--override", a->overrides,
                  "MODULE_GLOB=BITS:GROUP or MODULE_GLOB=none, repeatable; the last matching rule wins "
                  "(e.g. 'layers.*.mlp.gate=8:64', 'lm_head=6:64', '*.in_proj_a=none')");
  cmd->add_option("--min-rows", a->min_rows, "linear weights with fewer output rows stay unquantized")
      ->capture_default_str();
  cmd->add_option("--max-shard-gb", a->max_shard_gb, "largest shard size in GiB (2^30 bytes, as mlx-lm)")
      ->capture_default_str();
  cmd->add_option(
         "--rounding", a->rounding,
         "which mlx kernel to match: metal (mlx-lm on Apple GPUs) or cpu (mlx's CPU path); they differ "
         "only on ties and all-negative groups")
      ->check(CLI::IsMember({"metal", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--report", a->report, "also write the per-module report as JSON to this file");
  cmd->add_option("--threads", a->threads, "CPU threads (default: all cores)");
  cmd->add_flag("--force", a->force, "write into a non-empty output directory");
  cmd->add_flag("--quiet", a->quiet, "print only the totals line");
  cmd->callback([a] {
    if (a->threads > 0) ThreadPool::set_global_threads(a->threads);
    if (!(a->max_shard_gb > 0)) fail("--max-shard-gb {}: must be positive", a->max_shard_gb);
    ConvertOptions o;
    o.global = {a->bits, a->group};
    for (const std::string& s : a->overrides) o.overrides.push_back(parse_module_override(s));
    o.min_rows = a->min_rows;
    o.max_shard_bytes = static_cast<size_t>(a->max_shard_gb * double(size_t{1} << 30));
    o.force = a->force;
    o.rounding = a->rounding == "cpu" ? MlxRounding::Cpu : MlxRounding::Metal;
    const ConvertReport report = convert_checkpoint(a->in, a->out, o);
    std::string table = report_table(report);
    if (a->quiet) table = table.substr(table.rfind('\n', table.size() - 2) + 1);
    std::fputs(table.c_str(), stdout);
    if (!a->report.empty()) {
      std::ofstream f(a->report, std::ios::trunc);
      f << report_json(report).dump(2) << "\n";
      if (!f) fail("--report {}: cannot write", a->report);
    }
  });
}

}  // namespace ds::cli
