// Sbatch: one Tessera allocation (a job's bindings on Slurm nodes) as one sbatch call that
// makes Slurm run exactly what the engine decided.
//
// Per chosen node the bindings give a shape: tasks (bindings x processes_per_task), CPUs (the sum
// of the tasks' milli-CPU, rounded up to whole CPUs, spread evenly over the tasks:
// --cpus-per-task), memory
// (--mem, MiB, rounded up) and GPUs by GRES type (--gres=gpu:TYPE:N). Nodes of equal shape
// form one component: -p PART -N n -w LIST --ntasks-per-node=k --ntasks=n*k. One
// component is a plain batch job; several become one heterogeneous job (components
// joined by ":"), which Slurm starts all together.
// Every submission also carries --parsable, -J tessera-<job>, --comment
// tessera:<job>:<allocation> (the reconciliation tag), --no-requeue (restarts are
// Tessera's decision), and --time / --chdir / -o / -e / --export when the request has them.
//
// The batch script: the user's own (with its #SBATCH lines) or, for a command, a generated
// one that runs it once per task through srun. In a user script the #SBATCH lines that
// decide placement or identity (nodes, tasks, CPUs, memory, GPUs, partition, nodelist,
// time, job name, comment, array, ...) are turned into comments: Tessera already read them
// into the job, and some would conflict with the command line instead of yielding to it
// ("--gpus=4" in the script plus "--gres=gpu:a100:2" is an error). Everything else (output
// files, mail, the script body) is passed unchanged. Stateless; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/slurm/discovery.h"
#include "backends/slurm/slurm_json.h"

namespace tessera::slurm {

// The Unix user that runs sbatch (the server's own), as a partition's AllowGroups sees it.
struct Submitter {
  std::string user;
  std::vector<std::string> groups;  // names: its primary group and the others (getgrouplist)
  bool privileged = false;          // root: Slurm lets it use any partition whatever AllowGroups
};
// The process's own user (geteuid), resolved as slurmctld does (getpwuid, getgrouplist).
Submitter CurrentSubmitter();

// Who a Slurm job is, as a partition's AllowAccounts/DenyAccounts, AllowQos/DenyQos and
// AllowGroups see it. An empty account or QOS is Slurm's default for the user (its
// association's, known only to slurmdbd): not checked here.
struct SlurmIdentity {
  std::string account;
  std::string qos;
  Submitter submitter;
};

// Why partition `p` refuses `who` ("AllowAccounts=ml,vision does not list account cv"); ""
// when it admits it.
std::string PartitionRefuses(const SlurmPartition& p, const SlurmIdentity& who);

struct SbatchOptions {
  std::vector<std::string> extra_args;  // e.g. {"--account=ml", "--qos=high"}, before placement
  // The partitions the pool serves (DiscoveryOptions::partitions), the only ones it picks
  // on its own; empty = every partition.
  std::vector<std::string> partitions;
  // Who runs sbatch; nullopt = the process's own user (CurrentSubmitter()).
  std::optional<Submitter> submitter;
};

// The job's account and QOS as Slurm will read them: extra_args' (-A/--account, -q/--qos),
// which sbatch's command line gives, over the script's leading #SBATCH lines.
SlurmIdentity JobIdentity(const std::string& script, const SbatchOptions& options);

// For each node of `inventory` in a served partition (`served`, empty = all) where
// partitions could take new work (UP, not hidden) but every one of them refuses `who`:
// why, in words ("partition acct refuses account cv: AllowAccounts=ml,vision"). Nodes
// with no such partition at all are not listed (discovery marks them unschedulable).
std::map<std::string, std::string> RefusingNodes(
    const SlurmIdentity& who, const std::map<std::string, SlurmNode>& inventory,
    const std::map<std::string, SlurmPartition>& partitions,
    const std::vector<std::string>& served);

// Whether a failed dispatch is a partition refusing the job's account, QOS or group
// (ChoosePartition's, or sbatch's own words): another partition or node may take it.
bool IsAccessRefusal(const Status& s);

struct SbatchCommand {
  std::vector<std::string> argv;  // "sbatch", "--parsable", ...
  std::string script;             // given on stdin
  // What Slurm will hold per node while it runs (for Discovery's foreign-usage sums).
  std::map<std::string, NodeUsage> usage;
  int32_t components = 1;  // > 1: heterogeneous job
};

// `inventory`: the pool's nodes by name (from sinfo), for their partitions and GPU types;
// `partitions`: the cluster's partitions by name (from scontrol), for ChoosePartition.
StatusOr<SbatchCommand> BuildSbatch(const DispatchRequest& request,
                                    const std::map<std::string, SlurmNode>& inventory,
                                    const std::map<std::string, SlurmPartition>& partitions,
                                    const SbatchOptions& options = {});

// What the request's Slurm job holds per node (SbatchCommand::usage), whatever partition it
// was or would be submitted to.
StatusOr<std::map<std::string, NodeUsage>> SlurmUsage(
    const DispatchRequest& request, const std::map<std::string, SlurmNode>& inventory);

// The partition for a job on `nodes` (docs/slurm.md, "Partition"). A partition is usable
// when it holds every one of the nodes, is UP (never DOWN, DRAIN or INACTIVE), its MaxTime
// allows the job's time limit (when the job has one), its MaxNodes the node count, and it
// admits the job (PartitionRefuses: account, QOS, submitter's groups).
//   1. The request's own partition, if usable; if not, an error saying why.
//   2. Else the cluster's default partition (Default=YES), if served and usable.
//   3. Else, of the served, usable, not hidden partitions: the highest PriorityTier (the
//      admin's preference); then, for a job with a time limit, the smallest MaxTime that
//      allows it (the partition meant for jobs that long), for one without, the largest
//      (Slurm caps such a job at the partition's limit); then the name.
// None: FailedPrecondition naming every partition of those nodes and why it was passed over.
StatusOr<std::string> ChoosePartition(const DispatchRequest& request,
                                      const std::vector<std::string>& nodes,
                                      const std::map<std::string, SlurmNode>& inventory,
                                      const std::map<std::string, SlurmPartition>& partitions,
                                      const std::vector<std::string>& served,
                                      const SlurmIdentity& who = {});

// The script with Tessera-decided #SBATCH directives turned into "# [tessera] #SBATCH ..."
// comments. Only the leading comment block counts, as in Slurm.
std::string NeutralizePlacementDirectives(const std::string& script);

// Where a job attempt's output goes when Tessera names it: under `dir`, a directory the
// server reads (on a real cluster, a filesystem shared by the Slurm nodes and the server),
// <dir>/<job>.<attempt>.out for stdout and .err for stderr. A stream that the script names
// itself (#SBATCH -o/--output, -e/--error in its leading block) stays the script's: its path
// here is "", and a script's -o without -e takes stderr too, as in Slurm. Both "" when
// `dir` is "" (Slurm's default then: slurm-<id>.out in the working directory).
struct OutputFiles {
  std::string stdout_path, stderr_path;
};
OutputFiles JobOutputFiles(const std::string& dir, const std::string& job, int32_t attempt,
                           const std::string& script);

// The tag: -J tessera-<job>, --comment tessera:<job>:<allocation>.
std::string SlurmJobName(const std::string& job);
std::string SlurmComment(const std::string& job, const std::string& allocation);
struct Tag {
  std::string job;
  std::string allocation;
  friend bool operator==(const Tag&, const Tag&) = default;
};
// From a Slurm job's comment ("tessera:<job>:<allocation>"); nullopt for others' jobs.
std::optional<Tag> ParseTag(const std::string& comment);

// Seconds as Slurm's D-HH:MM:SS (Slurm rounds up to whole minutes).
std::string SlurmDuration(int64_t seconds);

}  // namespace tessera::slurm
