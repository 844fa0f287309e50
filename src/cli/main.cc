#include <cstdio>

#include "cli/command.h"

namespace tessera::cli {
namespace {
int g_exit_code = 0;
}
void SetExitCode(int code) { g_exit_code = code; }
int ExitCode() { return g_exit_code; }
}  // namespace tessera::cli

int main(int argc, char** argv) {
  CLI::App app{"tessera: one scheduler for AI compute (GPU pools, queues, gangs, preemption)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  tessera::cli::AddServerCommands(app);
  tessera::cli::AddAgentCommands(app);
  tessera::cli::AddClientCommands(app);
  tessera::cli::AddDemoCommands(app);
  tessera::cli::AddSimCommands(app);
  tessera::cli::AddBenchCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 prints usage and its own message; --help and --version exit 0, every other
    // parse error (unknown flag, missing argument, bad value) is a usage error: exit 2
    // (docs/cli.md), not CLI11's own codes.
    return app.exit(e) == 0 ? 0 : 2;
  }
  return tessera::cli::ExitCode();
}
