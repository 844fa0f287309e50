// SlurmCli: Slurm's command-line clients as typed calls (sinfo, squeue, sbatch, scancel,
// scontrol), over an injectable CommandRunner.
//
// Failures are classified so callers know whether to retry: a controller that cannot be
// reached (slurmctld restarting) is kUnavailable; a submission Slurm refuses is
// kFailedPrecondition with Slurm's own words; output we cannot parse is kInternal.
// Thread-safe if the runner is.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "backends/slurm/command_runner.h"
#include "backends/slurm/slurm_json.h"

namespace tessera::slurm {

class SlurmCli {
 public:
  explicit SlurmCli(CommandRunner& runner) : runner_(runner) {}

  StatusOr<std::vector<SlurmNode>> Nodes();  // sinfo --json
  // squeue --json: every job Slurm still remembers, finished ones for MinJobAge (22.05
  // ignores squeue's filters with --json, so there is no cheaper per-job query).
  StatusOr<std::vector<SlurmJob>> Jobs();
  // scontrol -a -o show partition: every partition, hidden ones too.
  StatusOr<std::vector<SlurmPartition>> Partitions();
  // Runs argv (starting with "sbatch", including --parsable) with `script` on stdin and
  // returns the job id it printed ("12" or "12;cluster").
  StatusOr<int64_t> Submit(const std::vector<std::string>& argv, const std::string& script);
  // scancel; Slurm answers 0 even for ids it does not know, so does this.
  Status Cancel(const std::vector<int64_t>& ids);
  // scontrol -o show job ID; nullopt when Slurm does not know the id (any more).
  StatusOr<std::optional<SlurmJob>> ShowJob(int64_t id);

 private:
  StatusOr<CommandResult> RunChecked(const std::vector<std::string>& argv,
                                     const std::string& input);
  CommandRunner& runner_;
};

// Classifies a failed Slurm client call by its stderr (see SlurmCli).
Status SlurmError(const std::vector<std::string>& argv, const CommandResult& r);

}  // namespace tessera::slurm
