// Spec: user documents -> the server's job, queue and priority-class values.
//
// Accepted, each UNCHANGED as users write them (docs/api.md lists every field):
//   tessera.io/v1 Job | Queue | PriorityClass      Tessera's own shape (model/codec.h)
//   batch.volcano.sh/v1alpha1 Job                 gang jobs: minAvailable, queue, tasks, policies
//   scheduling.volcano.sh/v1beta1 Queue           weight, capability, guarantee, reclaimable
//   scheduling.k8s.io/v1 PriorityClass            value, preemptionPolicy, globalDefault
//   apps/v1 Deployment                            an inference service (replicas restart forever)
//   batch/v1 Job, v1 Pod                          batch work; nvidia.com/mig-* limits
//   #!/bin/bash + #SBATCH directives              --gres=gpu:N, -N, --ntasks, --time, -p, --qos
// A text may hold several YAML documents separated by `---`. Reading is strict: an unknown
// or invalid field is an InvalidArgument naming its path ("spec.tasks[0].template.spec.
// containers[0].resources.limits.cpu: must not be negative, got -1"). Stateless; thread-safe.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/codec.h"
#include "model/job.h"
#include "model/queue.h"
#include "model/run_as.h"

namespace tessera::spec {

// What happens when a task fails or a job loses tasks it did not choose to lose.
enum class FailureAction {
  kFailJob,     // the job ends Failed (Volcano AbortJob / TerminateJob, restartPolicy Never)
  kRestartJob,  // every task stops, the job requeues as a new attempt (Volcano RestartJob)
  // Only the failed task is placed and started again; the rest of the gang keeps running
  // (Volcano RestartTask / RestartPod). Applies to failures; an eviction restarts the job.
  kRestartTask,
};
const char* FailureActionName(FailureAction a);

struct RestartPolicy {
  FailureAction on_failure = FailureAction::kFailJob;      // a task exits non-zero
  FailureAction on_eviction = FailureAction::kRestartJob;  // preempted, or its node was lost
  int32_t max_retries = 0;                  // attempts after the first; -1 = unlimited (services)
  bool complete_on_task_completed = false;  // Volcano TaskCompleted -> CompleteJob
  // Volcano `policies[].exitCode`: the action for a task that exits with that code, in
  // place of on_failure.
  std::map<int32_t, FailureAction> on_exit_code;
  friend bool operator==(const RestartPolicy&, const RestartPolicy&) = default;
  FailureAction OnFailure(std::optional<int32_t> exit_code) const;
};

// How to run one task group's processes (the agent runs processes, not containers).
struct TaskTemplate {
  std::vector<std::string> command;  // argv; empty: nothing to run (the agent reports failure)
  // sbatch: the batch script. The agent writes it to the task's folder and executes it, so
  // its #! line names the interpreter, as Slurm does; `command` is then empty.
  std::string script;
  std::map<std::string, std::string> env;
  // Kubernetes containers: `$(VAR)` references in env values, command and args are expanded
  // when the task is placed (TaskEnvironment), the env values in the order they were
  // declared: `env_order`, the names of `env` (a name given twice: where it was first given).
  bool expand_references = false;
  std::vector<std::string> env_order;
  std::string working_dir;
  std::string image;  // informational: Kubernetes documents name one
  // sbatch -o / -e: files (relative to working_dir) the task's stdout and stderr go to, as
  // filename patterns (ExpandSlurmFilename); empty: the agent's own log files only.
  std::string stdout_file, stderr_file;
  // Kubernetes resources.limits for CPU and memory (0: none given): the agent's cgroup caps
  // the task there instead of at the request it was scheduled by, as the kubelet does.
  int64_t cpu_limit_milli = 0, memory_limit_bytes = 0;
  // Kubernetes securityContext: the pod's runAsUser/runAsGroup/runAsNonRoot with the first
  // container's over them, and the pod's supplementalGroups. Empty: the agent decides
  // (its own user, or the submitter's account with --run-as-submitter: docs/agent.md).
  RunAs run_as;
  friend bool operator==(const TaskTemplate&, const TaskTemplate&) = default;
};

// sbatch --dependency (or the annotation tessera.io/dependency): the job is not scheduled
// before another job has started, ended, succeeded or failed. Checked until the job is
// first placed; a requeued job does not wait again.
struct Dependency {
  enum class Condition { kAfter, kAfterAny, kAfterOk, kAfterNotOk };
  Condition condition = Condition::kAfterAny;
  std::string job;  // the job waited for: its name; as submitted, a name or an sbatch job id
  int64_t seq = 0;  // resolved by the server: that job's sequence number (0: not resolved)
  // A job array as a whole (`job` its name, `seq` its array job id), judged as Slurm judges
  // one: afterok when every job of it succeeded, afternotok when all ended and one failed.
  bool array = false;
  friend bool operator==(const Dependency&, const Dependency&) = default;
};
const char* DependencyConditionName(Dependency::Condition c);  // "afterok", ...
// sbatch --array: which element of a job array a job is. A submission of an array script
// becomes one ordinary job per index, named <name>_<index> (Slurm shows JOBID_INDEX), each
// with this set; what the server knows of the array after a restart is this, stored with
// every element.
struct ArrayElement {
  std::string name;    // the array's: -J, or the server's job-<first element's number>
  int64_t job_id = 0;  // SLURM_ARRAY_JOB_ID, %A: the first element's job number (slurmJobId)
  int32_t index = 0;   // SLURM_ARRAY_TASK_ID, %a
  // Over the whole array: SLURM_ARRAY_TASK_COUNT, _MIN, _MAX, _STEP (the indices' common
  // difference, 1 when they have none).
  int32_t count = 0, min = 0, max = 0, step = 1;
  int32_t throttle = 0;  // --array=...%N: at most N elements run at once; 0: no limit
  friend bool operator==(const ArrayElement&, const ArrayElement&) = default;
};

// Indices of an array go up to this (Slurm's default MaxArraySize 1001: indices 0..1000).
inline constexpr int32_t kMaxArrayIndex = 1000;

struct JobSpec {
  Job job;  // id = metadata.name ("" when the server must generate one); no running state
  std::vector<TaskTemplate> templates;  // one per job.groups entry
  RestartPolicy restart;
  // Volcano `tasks[].policies`: a task group's own policy for its tasks' failures and
  // evictions, one entry per group (nullopt: `restart`). Retries count per job
  // (restart.max_retries) either way.
  std::vector<std::optional<RestartPolicy>> group_restart;
  std::string source;    // "tessera.io/v1 Job", "batch.volcano.sh/v1alpha1 Job", "sbatch", ...
  bool service = false;  // long-running (Deployment): never "succeeds"
  // batch/v1 `completionMode: Indexed`: each task gets JOB_COMPLETION_INDEX (its index).
  bool indexed = false;
  // Seconds a finished job is kept (then deleted with its allocations and events);
  // nullopt: the server's --finished-job-ttl-seconds. `ttlSecondsAfterFinished`.
  std::optional<int64_t> ttl_seconds_after_finished;
  // A hard limit on run time (sbatch -t, activeDeadlineSeconds): past it the job's tasks are
  // stopped and it fails with DeadlineExceeded, without retries. Counted from when the
  // current attempt first ran (sbatch, pod templates), or from the job's first start across
  // its retries (`time_limit_whole_job`: batch/v1 and Tessera jobs).
  std::optional<int64_t> time_limit_seconds;
  bool time_limit_whole_job = false;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  // Submitted held (sbatch --hold, `suspend: true`): not scheduled until released. Not
  // stored: the server keeps who holds a job on its record, which hold/release change.
  bool held = false;
  std::vector<Dependency> dependencies;
  // sbatch --kill-on-invalid-dep=yes: cancelled once a dependency can never hold (else it
  // stays pending, reason DependencyNeverSatisfied, as Slurm's default).
  bool kill_on_invalid_dependency = false;
  // sbatch --array: the indices, ascending (not stored: the server makes one job per index,
  // ArrayElements), and, on such a submission and on each element, the array.
  std::vector<int32_t> array_indices;
  std::optional<ArrayElement> array;
  // Where the document gave what the server checks against its state, for its errors: a
  // field path, or a batch script's line and option ("line 3: -p"). Not stored. The
  // defaults are a Volcano Job's fields; every other shape sets the ones it names
  // differently, also where the value is a default the document did not give.
  struct Origins {
    std::string name = "metadata.name";
    std::string queue = "spec.queue";
    std::string priority_class = "spec.priorityClassName";
    std::string dependency = "metadata.annotations.tessera.io/dependency";
    std::string array;  // sbatch: "line 2: --array=0-3"
  } origin;

  // The policy that applies to task `task`'s failures (its group's, else the job's).
  const RestartPolicy& RestartFor(int32_t task) const;
};

struct Document {
  enum class Kind { kJob, kQueue, kPriorityClass };
  Kind kind = Kind::kJob;
  JobSpec job;
  Queue queue;
  PriorityClass priority_class;
};

// Kubernetes' expansion of `$(VAR)` references in one string, as the kubelet expands a
// container's command, args and env values: a name `lookup` knows (not nullptr) is replaced
// by its value, an unknown one stays as written, `$$` becomes `$` (so `$$(VAR)` is the text
// `$(VAR)`), any other `$` stays. Values put in are not expanded again.
std::string ExpandKubeReferences(
    const std::string& in, const std::function<const std::string*(const std::string&)>& lookup);

// The environment a task of template `t` runs with: `server` (what the server sets: RANK,
// MASTER_ADDR, JOB_COMPLETION_INDEX, ...) over the template's env. With `expand_references`
// (a Kubernetes container), the template's env values are expanded in declaration order, each
// seeing the values declared before it and the server's (which, as Kubernetes' service
// variables, are defined for all), and then `*command` (its command and args, may be null)
// with the whole environment. Other templates' values and command are used as written.
std::map<std::string, std::string> TaskEnvironment(const TaskTemplate& t,
                                                   std::map<std::string, std::string> server,
                                                   std::vector<std::string>* command);

// Limits on hostile input, checked before any parser runs.
inline constexpr size_t kMaxNesting = 64;
// Tasks per job (replicas summed over its task groups), as Kubernetes bounds an Indexed Job's
// completions.
inline constexpr int64_t kMaxTasksPerJob = 100000;

// Rejects text that is not UTF-8 or nests deeper than kMaxNesting (by brackets, indentation
// or `- - -` sequences), before a recursive parser could be pushed off its stack.
Status CheckText(const std::string& text);

// sbatch's filename patterns (-o/-e): %j job id, %x job name, %N node name, %n node index,
// %t task id, %u user, %A array job id, %a array index, %% a percent sign; a number after %
// zero-pads (%4j). Check refuses any other %-letter, naming it. Outside an array, %A is the
// job id and %a 4294967294, as Slurm 22.05 writes them.
struct SlurmFilenameFields {
  int64_t job_id = 0;
  std::string job_name, node, user;
  int32_t node_index = 0, task = 0;
  std::optional<ArrayElement> array;
};
Status CheckSlurmFilename(const std::string& pattern, const std::string& path);
std::string ExpandSlurmFilename(const std::string& pattern, const SlurmFilenameFields& f);
// For a job run on a Slurm pool: %x expanded to the job's name (Slurm's job is named
// tessera-<job>), and for an array element %A and %a (it runs on Slurm as a job of its own,
// for which Slurm would write its own id and 4294967294); the rest kept for Slurm to expand.
std::string ExpandForSlurm(const std::string& pattern, const std::string& job_name,
                           const std::optional<ArrayElement>& array);

// The jobs of an array submission (`s.array_indices` not empty): one per index, named
// <name>_<index>, each with `array` set and SLURM_ARRAY_* in its environment. `name`: the
// array's (-J, or the server's generated one); `job_id`: the first element's job number.
// InvalidArgument (naming the -J line) when an element's name would be too long.
StatusOr<std::vector<JobSpec>> ArrayElements(const JobSpec& s, const std::string& name,
                                             int64_t job_id);

// Parses every document of a text (YAML/JSON, possibly `---`-separated, or an sbatch
// script). Document i's errors are prefixed "document[i]: " when there are several.
StatusOr<std::vector<Document>> ParseDocuments(const std::string& text);
StatusOr<Document> ParseDocument(const Json& doc);
StatusOr<JobSpec> ParseSbatchScript(const std::string& text);
// The words of one #SBATCH line (what follows "#SBATCH"), as sbatch splits them: blanks
// separate words except inside single or double quotes, which are removed
// (--output="logs/%x.out"); an unquoted word starting with # begins a comment.
// InvalidArgument, prefixed with `path`, for an unterminated quote.
StatusOr<std::vector<std::string>> SbatchLineWords(const std::string& text,
                                                   const std::string& path);

// Server storage shape of a JobSpec (canonical JSON; FromJson is strict).
Json JobSpecToJson(const JobSpec& spec);
StatusOr<JobSpec> JobSpecFromJson(const Json& v, const std::string& path);
Json RestartPolicyToJson(const RestartPolicy& r);

}  // namespace tessera::spec
