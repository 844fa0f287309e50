// Placeholder: the agent commands are registered here when that component lands.
#include "cli/command.h"

namespace tessera::cli {
void AddAgentCommands(CLI::App& app) {}
}  // namespace tessera::cli
