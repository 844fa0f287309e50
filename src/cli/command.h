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

// For a seed option (uint64_t): CLI11 would take "-1" as 2^64-1.
inline const CLI::Validator kSeed(
    [](std::string& v) {
      return v.find_first_not_of("0123456789") == std::string::npos && !v.empty()
                 ? std::string()
                 : "expected a seed, an integer >= 0, got \"" + v + "\"";
    },
    "SEED");

}  // namespace tessera::cli
