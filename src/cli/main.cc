#include <cstdio>
#include <cstdlib>
#include <string>

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
  // As kubectl: `tessera --server URL get jobs` as well as `tessera get jobs --server URL`.
  // Before the command they stand for $TESSERA_SERVER / $TESSERA_TOKEN / $TESSERA_CACERT,
  // which every client command reads when it is not given its own.
  app.add_option_function<std::string>(
         "--server", [](const std::string& v) { ::setenv("TESSERA_SERVER", v.c_str(), 1); },
         "API URL for the client commands (as their own --server)")
      ->trigger_on_parse();
  app.add_option_function<std::string>(
         "--token", [](const std::string& v) { ::setenv("TESSERA_TOKEN", v.c_str(), 1); },
         "bearer token for the client commands (as their own --token)")
      ->trigger_on_parse();
  app.add_option_function<std::string>(
         "--cacert", [](const std::string& v) { ::setenv("TESSERA_CACERT", v.c_str(), 1); },
         "CA file to check an https:// server with (as the client commands' own --cacert)")
      ->trigger_on_parse();
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
