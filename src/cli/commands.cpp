#include "cli/commands.h"

namespace ds::cli {

void register_commands(CLI::App& app) {
  register_model_commands(app);
  register_run_command(app);
  register_bench_command(app);
  register_serve_command(app);
  register_convert_command(app);
}

}  // namespace ds::cli
