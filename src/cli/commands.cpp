#include "cli/commands.h"

namespace ds::cli {

void register_commands(CLI::App& app) {
  register_model_commands(app);
}

}  // namespace ds::cli
