// CommandRunner: how the Slurm backend runs sbatch, squeue, sinfo, scancel and scontrol.
//
// The backend never calls fork/exec itself; it goes through this small interface so that
// unit tests feed canned output (FakeCommandRunner in the tests) and the real cluster is
// reached through SubprocessRunner. SubprocessRunner is thread-safe (no shared state).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "common/process.h"  // QuoteArgv, for messages and logs
#include "common/status.h"

namespace tessera::slurm {

struct CommandResult {
  int exit_code = 0;  // the process's exit status; 128+N when killed by signal N
  std::string out;    // stdout
  std::string err;    // stderr
};

class CommandRunner {
 public:
  virtual ~CommandRunner() = default;
  // Runs argv[0] (looked up in PATH) with argv, writing `input` to its stdin. A process
  // that ran returns its result whatever its exit code; a Status error means it could not
  // run or ran past the timeout (kUnavailable: retrying may help).
  virtual StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                                      const std::string& input) = 0;
};

// Runs real processes: fork + execvp, stdin/stdout/stderr through pipes, killed (SIGKILL)
// after `timeout`. `env` entries are added to (or replace) the parent's environment.
class SubprocessRunner : public CommandRunner {
 public:
  explicit SubprocessRunner(std::map<std::string, std::string> env = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : env_(std::move(env)), timeout_(timeout) {}
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                              const std::string& input) override;

 private:
  std::map<std::string, std::string> env_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tessera::slurm
