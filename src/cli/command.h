// Subcommands of the one `tessera` binary. Each component adds its commands to the app
// in its own *_cmd.cc file; main.cc only parses and dispatches.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Each Add* registers one or more subcommands whose callbacks set the process exit code
// through SetExitCode (CLI11 callbacks cannot return one).
void AddBenchCommands(CLI::App& app);
void AddSimCommands(CLI::App& app);
void AddServerCommands(CLI::App& app);
void AddAgentCommands(CLI::App& app);
void AddClientCommands(CLI::App& app);  // submit, get, describe, cancel, events, logs
void AddDemoCommands(CLI::App& app);    // the seed walkthrough on the embedded default

void SetExitCode(int code);
int ExitCode();

}  // namespace tessera::cli
