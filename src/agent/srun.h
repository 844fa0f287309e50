// `srun` inside an sbatch script on Tessera's own nodes (`tessera srun`, which the agent puts
// first on an sbatch task's PATH as `srun`).
//
// Tessera runs a batch script once on each node of its allocation (one Tessera task per
// node), not once on the first node as slurmd does; so `srun CMD` in the script starts that
// node's share of the step's tasks, with the ranks Slurm's block distribution gives them:
// `-N 2 --ntasks-per-node=2` and `srun python train.py` run ranks 0-1 on the first node and
// 2-3 on the second, each with SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS (and RANK,
// LOCAL_RANK, WORLD_SIZE) of its own. srun waits for them and exits with the highest exit
// status, as Slurm's does.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::agent {

struct SrunStep {
  int32_t ntasks = 0;       // the step's tasks on all its nodes
  int32_t nodes = 0;        // the step's nodes
  int32_t first_rank = 0;   // this node's first SLURM_PROCID
  int32_t local_tasks = 0;  // started on this node (0: it takes no part in the step)
  bool kill_on_bad_exit = false;
  bool label = false;  // -l: "RANK: " before each line of the tasks' output
  std::vector<std::string> command;
};

// The step `srun ARGS` asks for, on the node whose batch environment is `env` (SLURM_NNODES,
// SLURM_NODEID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE, as the server sets them). Refuses, with
// srun's own words where it has them, what does not fit the allocation and the options this
// srun does not implement.
StatusOr<SrunStep> PlanSrunStep(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env);

// Runs the step's local tasks, each with its rank's environment, and waits for all; with
// kill_on_bad_exit the others are killed once one fails. Returns srun's exit status: the
// highest of the tasks' (128 + signal for a task killed by one).
int RunSrunStep(const SrunStep& step);

// `tessera srun ARGS`: PlanSrunStep over this process's environment, then RunSrunStep; errors
// on stderr as "srun: error: ..." with exit status 1.
int SrunMain(const std::vector<std::string>& args);

}  // namespace tessera::agent
