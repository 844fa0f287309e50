// SlurmServerBackend: the server's Backend (src/server/backend.h) over a SlurmPool.
//
// The server launches tasks one by one (one allocation id per task, with its lock held);
// Slurm must get a job's whole gang as ONE sbatch. So Launch() only records the task and
// returns; a worker thread gathers a job attempt's tasks (until JobInfo::tasks have
// arrived, or `gather` has passed since the last one), dispatches them as one Slurm job
// tagged with the first task's allocation id, polls Slurm, and reports every task's state
// through the sink. A task launched once its attempt's gang has gone to Slurm (a Deployment
// scaled up, a replica replaced alone) starts a new gang: its own sbatch. Nothing here
// blocks the caller of Launch/Stop. Thread-safe.
//
// Stop() of a task: one that never reached Slurm is over at once; a Slurm job is scancelled
// once every task of it is stopped (Slurm runs its tasks as one job: stopping some of them,
// a Deployment scaled down or an elastic job evicted in part, leaves them running there, and
// their stop waits for the rest or for the job's end). A gang whose sbatch answer was lost
// (it may or may not exist in Slurm) is cancelled in Slurm by its tag, and its tasks are
// over only once Slurm has answered that.
//
// A gang Slurm keeps PENDING for longer than `pending_timeout` (the nodes Tessera chose were
// taken by jobs Tessera does not know, or Slurm will not start it there) is scancelled, and
// once Slurm confirms the cancel its tasks are reported killed (an eviction, Slurm state
// "PENDING"), so that the server places the job again: not for a job held in Slurm
// (JobHeld*: someone chose that), nor for one whose onEviction is FailJob (sbatch
// --no-requeue), which waits in Slurm's queue as long as it takes.
//
// What the server must provide (it has no such calls yet): `lookup` (a job's task count
// and what to run: the original sbatch script, or a command) and `sink` (a task's state,
// e.g. ControlPlane::ReportTask). Slurm nodes reach the server through SlurmPool::Discover.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/backend.h"
#include "server/backend.h"
#include "spec/spec.h"

namespace tessera::slurm {

class SlurmPool;

// What the adapter needs to know about a job to run it on Slurm.
struct JobInfo {
  int32_t tasks = 0;                 // the gang: how many Launch calls to wait for
  std::string script;                // the original #SBATCH script, if the job came as one
  std::vector<std::string> command;  // otherwise: run once per task
  std::string working_dir;
  std::map<std::string, std::string> env;
  std::optional<int64_t> time_limit_seconds;
  int32_t processes_per_task = 1;
  bool exclusive = false;  // Job::exclusive: sbatch --exclusive
  // The script's own -o / -e, given to sbatch as --output / --error, with %x expanded to the
  // job's name (Slurm's job is tessera-<job>) and, for an array element, %A and %a (it runs
  // as a Slurm job of its own, for which Slurm would write its own id and 4294967294).
  // "" where the script names no such stream (or -e is -o's).
  std::string stdout_file, stderr_file;
  // The job's onEviction restarts it (not FailJob): it may be placed again when Slurm keeps
  // it pending too long (ServerAdapterOptions::pending_timeout).
  bool restart_on_eviction = true;
};

// What to run for a server job (src/spec): an sbatch job runs its original script once,
// as Slurm's batch step, with SLURM_NTASKS / SLURM_NNODES processes per Tessera task and
// its --time as the limit; any other job runs its first task group's command once per
// task (jobs whose groups run different commands are not supported on Slurm yet). An array
// element's SLURM_ARRAY_* come in its environment (--export): Slurm passes them unchanged
// to a job that is not an array. `job`: the server's job name.
JobInfo JobInfoFromSpec(const spec::JobSpec& spec, const std::string& job);

struct TaskReport {
  std::string allocation;  // the server's per-task allocation id
  std::string job;
  int32_t task = 0;
  AllocationPhase phase = AllocationPhase::kPending;
  int32_t exit_code = 0;
  std::string message;
  std::string external_id;  // "slurm:42"
  std::string state;        // Slurm's word for what decided `phase` ("NODE_FAIL", "CANCELLED")
  // Ended by Tessera's own scancel for a stop it asked for (of every task of the Slurm job, or
  // of this one when only some were stopped): an expected stop, whatever Slurm calls it, not a
  // cancel from outside Tessera.
  bool stopped_by_tessera = false;
};

struct ServerAdapterOptions {
  std::chrono::milliseconds gather{200};  // wait this long for the rest of a gang
  std::chrono::milliseconds poll{1000};   // squeue this often while jobs are live
  std::chrono::milliseconds retry{2000};  // after a retryable dispatch/cancel failure
  // Start with Slurm untouched (no dispatch, cancel or poll) until Resume(): a restarted
  // server records launches while it reconciles, then lets the adapter go.
  bool start_paused = false;
  // Where Slurm writes each job attempt's stdout/stderr (JobOutputFiles in sbatch.h), for
  // the server to serve; "" = Slurm's default.
  std::string logs_dir;
  // A gang pending in Slurm this long after its sbatch is cancelled there and handed back to
  // be placed again (see above); 0 = never.
  std::chrono::milliseconds pending_timeout{std::chrono::minutes(5)};
  // Past this many such cancels in a row, a job is left in Slurm's queue: whatever keeps it
  // there is not the nodes Tessera chose.
  int max_pending_replacements = 3;
};

// Whether Slurm's pending reason is about the nodes the job was given or the jobs ahead of it
// there (Resources, Priority, ReqNodeNotAvail, a partition down...), which placing it again
// may avoid; not a limit of its account, QOS or partition (AssocGrpGRES, QOSMaxGRESPerUser,
// PartitionTimeLimit...), which holds wherever it goes.
bool PlacingAgainMayHelp(const std::string& slurm_reason);

class SlurmServerBackend : public server::Backend {
 public:
  using Lookup = std::function<std::optional<JobInfo>(const std::string& job)>;
  using Sink = std::function<void(const TaskReport&)>;

  SlurmServerBackend(std::shared_ptr<PoolBackend> pool, Lookup lookup, Sink sink,
                     ServerAdapterOptions options = {});
  ~SlurmServerBackend() override;  // stops the worker; Slurm jobs keep running

  std::string Kind() const override { return "slurm"; }
  void Launch(const server::Dispatch& d) override;
  void Stop(const std::string& allocation, int64_t grace_period_seconds) override;

  // A gang that a previous server instance dispatched (found by SlurmPool::Reconcile): its
  // tasks, as the server knows them, and the allocation id its Slurm job is tagged with.
  // From now on it is polled, reported and stopped like a gang dispatched here; its states
  // are reported again from the start (the sink must take repeats).
  void Adopt(const std::vector<server::Dispatch>& tasks, const std::string& slurm_allocation);
  // Lets a paused adapter (options.start_paused) call Slurm.
  void Resume();
  // Whether the adapter holds `allocation` (launched or adopted, not yet final).
  bool Tracks(const std::string& allocation);

  // Runs one round of the worker's work now (tests drive the adapter with it instead of
  // the thread, which they do not start: options.poll == 0).
  void Step(std::chrono::steady_clock::time_point now);

 private:
  // The tasks of one sbatch (or of one still being gathered).
  struct Gang {
    std::string job;
    int32_t attempt = 1;
    std::map<int32_t, server::Dispatch> tasks;  // by task index
    std::chrono::steady_clock::time_point last_launch;
    std::chrono::steady_clock::time_point not_before;  // retry back-off
    // Gathering Launch()es: no sbatch for it has been tried yet (then its tasks are fixed).
    bool open = true;
    // The tag of an sbatch tried for it whose answer was lost: Slurm may run it.
    std::string uncertain;
    std::string slurm_allocation;  // set once dispatched: the tag's allocation id
    std::chrono::steady_clock::time_point dispatched_at;
    std::set<std::string> stopped;                     // task allocations Stop() was called for
    std::chrono::steady_clock::time_point first_stop;  // when the first of them was
    // Some of its tasks stopped, not all: Slurm cannot end part of a job, so the job is
    // cancelled and its other tasks are handed back to be placed again (requeue_why says so).
    bool partly_stopped = false;
    // Its job's onEviction places it again (JobInfo::restart_on_eviction, at dispatch; false
    // for a gang adopted after a restart): only then is a partial stop such a cancel.
    bool restart_on_eviction = false;
    bool AllStopped() const { return !tasks.empty() && stopped.size() >= tasks.size(); }
    // Set when it stayed pending past options_.pending_timeout: why it is cancelled in Slurm
    // and handed back (its tasks' message once Slurm confirms the cancel).
    std::string requeue_why;
    // Past the timeout, but left in Slurm's queue: why (added to its tasks' message).
    std::string stays_pending;
    bool cancelled = false;  // the scancel (AllStopped or requeue_why) went through
    // Per task allocation: what was reported last (a pending job's reason may change).
    std::map<std::string, std::pair<AllocationPhase, std::string>> reported;
  };
  void Loop();

  std::shared_ptr<PoolBackend> pool_;
  Lookup lookup_;
  Sink sink_;
  ServerAdapterOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  // Tasks of `key`'s job attempt, in any gang, not stopped.
  int32_t LiveTasksLocked(const std::string& job, int32_t attempt) const;
  // A new gang's key: "<job>#<attempt>#<sequence>".
  std::string NewGangLocked(const std::string& job, int32_t attempt);

  std::map<std::string, Gang> gangs_;           // by NewGangLocked's key
  std::map<std::string, std::string> gang_of_;  // task allocation -> gang key
  int64_t next_gang_ = 0;
  std::map<std::string, int> replaced_;  // job -> cancels for pending, in a row
  bool stopping_ = false;
  bool paused_ = false;
  std::thread worker_;
};

}  // namespace tessera::slurm
