#include "cli/commands.h"

namespace ds::cli {

void register_model_commands(CLI::App& app) {}

}  // namespace ds::cli
