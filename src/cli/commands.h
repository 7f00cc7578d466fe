#pragma once
// Each subcommand registers itself on the app; the callbacks do the work inside CLI11's parse.
#include <CLI/CLI.hpp>

namespace ds::cli {

void register_commands(CLI::App& app);
void register_model_commands(CLI::App& app);   // logits, generate, info
void register_run_command(CLI::App& app);      // run
void register_bench_command(CLI::App& app);    // bench
void register_serve_command(CLI::App& app);    // serve
void register_convert_command(CLI::App& app);  // convert

}  // namespace ds::cli
