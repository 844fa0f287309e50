// Placeholder: the client commands are registered here when that component lands.
#include "cli/command.h"

namespace tessera::cli {
void AddClientCommands(CLI::App& app) {}
}  // namespace tessera::cli
