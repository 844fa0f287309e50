// Executor: runs each task of a node as a process and reports what became of it.
//
// Every task gets its own process group, led by a small monitor process that the agent
// forks: the monitor forks the task, waits for it and writes its exit status to a file, so
// that an agent restarted after a crash can still learn how a task it did not start ended
// (Recover() adopts the process groups recorded in the work dir). Stop() sends SIGTERM to the
// group, and SIGKILL once the grace period has passed (Poll() escalates). stdout and stderr
// go to files under <work_dir>/tasks/<allocation>/. Where a cgroup v2 hierarchy with the cpu
// and memory controllers is writable, each task also gets its own cgroup with cpu.max and
// memory.max; elsewhere limits are skipped and cgroup_status() says why.
//
// Thread-safe: every method takes an internal mutex.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "agent/cgroup.h"
#include "agent/identity.h"
#include "common/file_chunk.h"
#include "common/status.h"
#include "model/job.h"
#include "model/node.h"

namespace tessera::agent {

// One task as the server's desired state describes it (docs/agent-protocol.md).
struct TaskSpec {
  std::string allocation;  // unique, never reused: the fencing token
  std::string job;
  int32_t task = 0;
  int32_t attempt = 0;
  std::vector<std::string> command;  // argv; command[0] is looked up in PATH when it has no '/'
  // sbatch: a batch script, written to the task folder as `script` and executed there (its
  // #! line names the interpreter); `command` then holds its arguments.
  std::string script;
  std::string working_dir;  // empty: the task's own folder under the work dir
  // sbatch -o / -e: where stdout / stderr go (relative to working_dir; appended to). The
  // task folder's stdout / stderr are then links to them, so the logs read the same bytes.
  std::string stdout_file, stderr_file;
  std::map<std::string, std::string> env;
  std::vector<DeviceAssignment> devices;
  int64_t grace_period_seconds = 30;
  int64_t cpu_milli = 0;     // cgroup cpu.max when > 0
  int64_t memory_bytes = 0;  // cgroup memory.max when > 0
  // Who the task runs as (ResolveTaskIdentity): its securityContext, and the user name of
  // the principal that submitted its job (the account used with --run-as-submitter).
  RunAs run_as;
  std::string submitter;
  // A field of the allocation the agent could not read (its securityContext): the task
  // fails with this message rather than run otherwise than asked.
  std::string unreadable;
};

enum class TaskState { kRunning, kSucceeded, kFailed, kKilled };
const char* TaskStateName(TaskState s);  // "running", "succeeded", "failed", "killed"

struct TaskStatus {
  std::string allocation;
  std::string job;
  int32_t task = 0;
  TaskState state = TaskState::kRunning;
  int32_t exit_code = 0;   // 128+signal when killed by a signal
  int64_t pid = 0;         // the process group id (the monitor's pid)
  int64_t started_at = 0;  // wall-clock seconds
  int64_t finished_at = 0;
  std::string message;
  bool stopping = false;  // SIGTERM sent
  // Who the task runs as, once decided (uid -1: not yet, or it failed before): reported so
  // that `describe` shows the identity chosen, not only the one asked for.
  RanAs ran_as;
  std::vector<DeviceAssignment> devices;
};

// The device environment for a task: CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES list
// the assigned GPU indices, or MIG instance UUIDs for MIG assignments; "" / "void" for a
// task without GPUs. Fails when an assignment names a device or MIG instance the node lacks.
StatusOr<std::map<std::string, std::string>> DeviceEnvironment(
    const Node& node, const std::vector<DeviceAssignment>& devices);

struct ExecutorOptions {
  std::string work_dir;                 // tasks/<allocation>/{task.json,stdout,stderr,exit}
  Node node;                            // for device UUIDs
  std::function<int64_t()> wall_clock;  // seconds since the epoch
  // Parent of the per-task cgroups, e.g. /sys/fs/cgroup/tessera. "" = <cgroup2>/tessera;
  // "-" = never use cgroups.
  std::string cgroup_parent;
  // The cgroup2 mount; "" = from /proc/self/mountinfo (tests give a fake root: TaskCgroups).
  std::string cgroup_mount;
  std::function<void(const std::string&)>
      log;  // per-task notices (limits not applied); may be null
  // The agent's lease, kept by its task monitors too: the agent touches `lease_file` on every
  // answer from the server, and a task's monitor stops the task (SIGTERM, its grace period,
  // SIGKILL) once the file is older than `lease_seconds()`: so a task does not outlive a dead
  // agent that cannot stop it, while the server runs it elsewhere. Null or <= 0: no lease.
  std::string lease_file;
  std::function<int64_t()> lease_seconds;
  // Retention of finished tasks' folders (stdout, stderr, script, the files a task wrote in
  // its own folder), as the kubelet collects dead containers: the folder of a task that has
  // ended and that the agent has forgotten (the server no longer lists it) goes once the task
  // ended `task_retention_seconds` ago, and beyond the `max_finished_tasks` latest such
  // folders, oldest first (RemoveOldTaskFolders). 0: no limit of that kind.
  int64_t task_retention_seconds = 24 * 3600;
  int64_t max_finished_tasks = 1000;
  // The `tessera` binary: an sbatch task (SLURM_JOB_ID in its environment) finds it first on
  // its PATH as `srun` (agent/srun.h). "" = no srun.
  std::string srun_program;
  // Which Unix identity tasks may and must run as (docs/agent.md, "Task identity").
  IdentityPolicy identity;
};

class Executor {
 public:
  explicit Executor(ExecutorOptions options);
  ~Executor();  // leaves tasks running (an agent restart adopts them); call StopAll first to end
                // them

  // Adopts the tasks a previous agent process left in the work dir: live ones keep running,
  // ended ones report their recorded exit status (or failed, "lost", when none was recorded).
  Status Recover();
  // Starts a task. A task that cannot start (bad command, missing working dir, unknown
  // device) is recorded as failed with a message rather than returned as an error; an
  // error means the allocation id is already known.
  Status Start(const TaskSpec& spec);
  // SIGTERM now (when running), SIGKILL at now + grace. Idempotent.
  void Stop(const std::string& allocation, const std::string& reason);
  void StopAll(const std::string& reason);
  // Reaps ended tasks and escalates overdue stops. Call often (every 100 ms).
  void Poll();
  // Blocks (polling) until every task has ended or `timeout_ms` passed. For shutdown and tests.
  bool WaitAll(int64_t timeout_ms);
  std::vector<TaskStatus> Statuses() const;  // by allocation id
  bool Has(const std::string& allocation) const;
  int64_t MaxGraceSeconds() const;  // over running tasks
  // Drops an ended task from memory; its folder (logs) stays for the retention to remove.
  void Forget(const std::string& allocation);
  // Removes the folders of forgotten tasks that ended longer ago than the retention, then the
  // oldest ones beyond the most kept (ExecutorOptions); never a folder of a task it holds
  // (running, or ended and not yet forgotten) nor one of an allocation in `listed` (the
  // server's desired state). What it removed leaves a notice (RemovalNotice), kept across
  // agent restarts. Returns the allocations whose folders it removed, oldest first.
  std::vector<std::string> RemoveOldTaskFolders(const std::set<std::string>& listed);
  // Why `allocation`'s folder is gone: "logs of job J task T (allocation A) were removed after
  // 24h (...)"; "" when the retention did not remove it.
  std::string RemovalNotice(const std::string& allocation) const;

  // Log files; "" when the allocation id is malformed.
  std::string LogPath(const std::string& allocation, const std::string& stream) const;
  // A piece of a task's log (ReadFileChunk). An sbatch -o / -e file is read only while its
  // path still leads to the file the task was given: the task may own the folder it is in,
  // and the agent reading it may be root.
  StatusOr<FileChunk> ReadLog(const std::string& allocation, const std::string& stream,
                              int64_t offset, int64_t limit) const;
  // What TaskCgroups::Open said: "enabled: <parent>", "unavailable: <why>; ...", or
  // "disabled by configuration". The agent logs it at start.
  const std::string& cgroup_status() const { return cgroups_.status(); }

 private:
  struct Proc;
  // Writes the task's task.json, which a restarted agent adopts it by.
  Status Record(Proc& p) const;
  void Finish(Proc& p, int wait_status, bool have_status);
  std::string TaskDir(const std::string& allocation) const;
  void Log(const std::string& msg) const;

  ExecutorOptions opt_;
  mutable std::mutex mu_;
  std::map<std::string, Proc*> procs_;  // owned; ordered by allocation id
  TaskCgroups cgroups_;
  // Folders of forgotten tasks (task.done.json), which the retention removes.
  struct FinishedFolder {
    std::string job;
    int32_t task = 0;
    int64_t finished_at = 0;  // wall-clock seconds
  };
  std::map<std::string, FinishedFolder> finished_;
  // The notices of removed folders, by allocation, and in the order they were written to
  // NoticesFile() (the oldest are dropped beyond a bound).
  std::map<std::string, std::string> notices_;
  std::deque<std::string> notice_order_;
  std::string NoticesFile() const { return opt_.work_dir + "/removed-tasks"; }
  void LoadFinishedFolders(const std::vector<std::string>& allocations);
  void LoadNotices();
};

// Allocation ids become folder names: letters, digits, '-', '_', '.', not starting with '.'.
bool ValidAllocationId(const std::string& id);

}  // namespace tessera::agent
