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
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent/cgroup.h"
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
  // The `tessera` binary: an sbatch task (SLURM_JOB_ID in its environment) finds it first on
  // its PATH as `srun` (agent/srun.h). "" = no srun.
  std::string srun_program;
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
  int64_t MaxGraceSeconds() const;             // over running tasks
  void Forget(const std::string& allocation);  // drops an ended task from memory (logs stay)

  // Log files; "" when the allocation id is malformed.
  std::string LogPath(const std::string& allocation, const std::string& stream) const;
  // What TaskCgroups::Open said: "enabled: <parent>", "unavailable: <why>; ...", or
  // "disabled by configuration". The agent logs it at start.
  const std::string& cgroup_status() const { return cgroups_.status(); }

 private:
  struct Proc;
  void Record(Proc& p) const;
  void Finish(Proc& p, int wait_status, bool have_status);
  std::string TaskDir(const std::string& allocation) const;
  void Log(const std::string& msg) const;

  ExecutorOptions opt_;
  mutable std::mutex mu_;
  std::map<std::string, Proc*> procs_;  // owned; ordered by allocation id
  TaskCgroups cgroups_;
};

// Allocation ids become folder names: letters, digits, '-', '_', '.', not starting with '.'.
bool ValidAllocationId(const std::string& id);

}  // namespace tessera::agent
