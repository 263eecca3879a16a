#include "cli/cli.h"

namespace atrium::cli {

void RegisterCommands(CLI::App& app, CliOptions& options) {}

int RunSelected(CLI::App& app, const CliOptions& options) { return 2; }

}  // namespace atrium::cli
