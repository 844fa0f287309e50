// Placeholder: the server commands are registered here when that component lands.
#include "cli/command.h"

namespace tessera::cli {
void AddServerCommands(CLI::App& app) {}
}  // namespace tessera::cli
