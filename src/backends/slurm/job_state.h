// JobState: Slurm job states and exit codes in Tessera's backend-neutral lifecycle.
//
//   PENDING, CONFIGURING, REQUEUED*, RESIZING          -> kPending
//   RUNNING, COMPLETING, SUSPENDED, STAGE_OUT, SIGNALING -> kRunning
//   COMPLETED                                            -> kSucceeded (exit 0)
//   FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, BOOT_FAIL,
//   DEADLINE, SPECIAL_EXIT                               -> kFailed
//   CANCELLED, PREEMPTED, REVOKED                        -> kKilled
// squeue's exit_code is the raw wait status: 768 = exit 3; 15 = killed by SIGTERM. A
// heterogeneous job's components are folded into one status: pending until all start,
// failed if any failed, killed if any was killed. Stateless; thread-safe.
#pragma once

#include <vector>

#include "backends/backend.h"
#include "backends/slurm/slurm_json.h"

namespace tessera::slurm {

AllocationPhase PhaseOfSlurmState(const std::string& state);

struct ExitStatus {
  int32_t exit_code = 0;  // 128+N when killed by signal N
  int32_t signal = 0;
};
ExitStatus DecodeWaitStatus(int64_t raw);

// `components`: one Slurm job, or every component of one heterogeneous job (leader first
// or not; they are ordered by het_job_offset here). Not empty.
AllocationStatus StatusFromSlurm(const std::vector<SlurmJob>& components);

// "slurm:42"
std::string ExternalId(int64_t slurm_job_id);

}  // namespace tessera::slurm
