// Placeholder: the sim commands are registered here when that component lands.
#include "cli/command.h"

namespace tessera::cli {
void AddSimCommands(CLI::App& app) {}
}  // namespace tessera::cli
