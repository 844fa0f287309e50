// Placeholder: the bench commands are registered here when that component lands.
#include "cli/command.h"

namespace tessera::cli {
void AddBenchCommands(CLI::App& app) {}
}  // namespace tessera::cli
