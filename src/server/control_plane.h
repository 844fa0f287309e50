// ControlPlane: the server's truth. Jobs, queues, priority classes, nodes, allocations,
// events and audit records live in memory and in the Store; every mutation is durable
// before it is acknowledged or visible.
//
// Concurrency: one mutex guards the in-memory state. Submissions assign ids under the lock,
// enqueue their write, release the lock while the group commit runs, then publish the job;
// every other mutation (cancel, scheduling, agent reports) holds the lock across its commit
// so that nothing undurable is ever handed to an agent (allocation ids are never reused,
// even across a kill -9). Thread-safe.
//
// Job lifecycle (docs/lifecycle.md):
//   Pending -> Scheduled (gang bound, dispatched) -> Running (a task reported running)
//   -> Succeeded | Failed ; any live state -> Terminating -> Cancelled | Failed | Succeeded
//   | Pending again (preempted / restarted: attempt + 1, "Requeued").
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/rng.h"
#include "engine/engine.h"
#include "server/auth.h"
#include "server/backend.h"
#include "spec/spec.h"
#include "store/store.h"

namespace tessera::server {

enum class JobState {
  kPending,
  kScheduled,
  kRunning,
  kTerminating,
  kSucceeded,
  kFailed,
  kCancelled
};
const char* JobStateName(JobState s);
std::optional<JobState> ParseJobState(const std::string& s);
bool IsTerminal(JobState s);

enum class AllocState { kAssigned, kRunning, kStopping, kLost, kSucceeded, kFailed, kKilled };
const char* AllocStateName(AllocState s);

struct Allocation {
  std::string id;
  std::string job;
  int32_t task = 0;
  int32_t attempt = 1;
  TaskAllocation placement;
  AllocState state = AllocState::kAssigned;
  int64_t grace_period_seconds = 30;
  int64_t created_at = 0, finished_at = 0;
  int32_t exit_code = 0;
  std::string message;
  std::vector<std::string> command;
  std::string script;  // sbatch: the batch script, which the agent executes as a file
  std::map<std::string, std::string> env;
  std::string working_dir;
  std::string stdout_file, stderr_file;  // sbatch -o / -e, expanded (empty: none)
  // The cgroup caps the agent sets: the template's limits where given, else the request.
  int64_t cpu_limit_milli = 0, memory_limit_bytes = 0;
  // The identity the template asks for (securityContext); empty: the agent decides.
  RunAs run_as;
  // The identity its agent reports the task runs as (unknown: none reported yet).
  RanAs ran_as;

  // Still occupies its devices (until an agent confirms the process is gone).
  bool HoldsDevices() const {
    return state == AllocState::kAssigned || state == AllocState::kRunning ||
           state == AllocState::kStopping || state == AllocState::kLost;
  }
  // Still part of its job's current attempt (lost ones are written off).
  bool Live() const {
    return state == AllocState::kAssigned || state == AllocState::kRunning ||
           state == AllocState::kStopping;
  }
};

struct Event {
  int64_t seq = 0;
  int64_t time = 0;
  std::string type;    // Normal | Warning
  std::string reason;  // Submitted, Scheduled, FailedScheduling, Preempted, ...
  std::string object;  // job/<id>, node/<name>, queue/<name>
  std::string message;
};

// Restarts after failures in a row (a run that lasted restart_backoff_reset_seconds starts the
// count over), and no placement before `until`.
struct CrashLoop {
  int32_t failures_in_a_row = 0;
  int64_t until = 0;
};

struct JobRecord {
  spec::JobSpec spec;
  JobState state = JobState::kPending;
  JobState after_termination = JobState::kPending;  // where a Terminating job goes
  int32_t attempt = 1;
  int32_t task_restarts = 0;       // single tasks restarted (RestartTask); they count as retries
  int32_t evicted_restarts = 0;    // restarts (of the job or a task) after an eviction: not
                                   // retries
  std::string idempotency_key;     // of the submission that created it ("" = none)
  std::string idempotency_digest;  // SHA-256 of that submission's body: a reuse must match
  std::string user;
  int64_t seq = 0;
  int64_t created_at = 0, started_at = -1, finished_at = -1;  // started_at: first attempt
  int64_t queued_at = 0;  // when it last became pending: created_at, or its latest requeue
  // The current attempt: bound at run_started_at (-1 while pending). GPU time held by the
  // earlier attempts, for least-attained-service ordering (the engine's `las`).
  int64_t run_started_at = -1;
  // When the current attempt first ran (a task reported running; -1 before): what per-attempt
  // time limits count from, as Slurm's --time (a job queued in a Slurm pool is not charged).
  int64_t attempt_started_at = -1;
  int64_t attained_gpu_milli_seconds = 0;
  // Crash-loop back-off of the job (RestartJob), and of each task restarted alone
  // (RestartTask) in the current attempt: a crash-looping replica neither holds back a healthy
  // one's restart nor resets its count. Evictions are the scheduler's doing and add none.
  CrashLoop backoff;
  std::map<int32_t, CrashLoop> task_backoff;
  // Lost with a node that stopped answering: not placed again before `fenced_until`, when
  // that node's agent has surely stopped the tasks itself (its lease, then their grace
  // period), so that no task runs twice at once (agent-protocol.md).
  int64_t fenced_until = 0;
  std::string fenced_node;
  // Held (sbatch --hold, `suspend: true`, `tessera hold`): who held it; a held job is
  // pending and never placed until `tessera release` ("" = not held).
  std::string held_by;
  std::string message;
  std::vector<std::string> allocations;  // every allocation of every attempt, in order
  // Not persisted: the engine's latest verdict while pending, and whether it found that the
  // job can never fit the cluster as it is (Outcome::kInfeasible), not merely waits.
  PendingReason pending;
  bool infeasible = false;
  // The message of its FailedScheduling event since it was last bound or requeued, which an
  // unchanged verdict does not write again; on load, from its latest such event.
  std::string last_failed_scheduling;
  int64_t last_failed_scheduling_at = 0;  // when it was written
  std::vector<int64_t> events;

  const std::string& id() const { return spec.job.id; }
};

struct NodeRecord {
  Node node;
  int64_t epoch = 0;
  std::string boot_id;
  std::string instance_id;  // the agent's work dir id: another one is a second agent
  bool cordoned = false;    // by an admin (cordon/drain): no new tasks; kept across registers
  std::string logs_url;
  // The bearer token the agent's logs endpoint requires ("" = none), from its registration
  // and heartbeats. A secret: never stored (a restarted server learns it from the next
  // heartbeat) nor shown.
  std::string logs_token;
  std::string agent_version;
  int64_t lease_seconds = -1;  // the agent's self-fencing lease; -1: its default, 0: none
  // When the node last answered; after a server restart, the restart (a full grace period
  // before NotReady, and a conservative fence) until it first answers again.
  int64_t last_heartbeat = 0;
  bool heard_since_start = false;  // last_heartbeat is a real heartbeat (what views show)
};

// How denials (403) are audited (ControlPlane::AuditDenied, docs/api.md).
inline constexpr size_t kMaxAuditObject = 256;  // characters of a denied path kept
inline constexpr int64_t kDenialWindowSeconds = 60;
inline constexpr size_t kMaxDenialsPerWindow = 32;  // a principal's records per window

struct AuditRecord {
  int64_t seq = 0;
  int64_t time = 0;
  std::string principal;
  std::string action;
  std::string object;
  std::string result;
  // Denials repeated within a short window (AuditDenied) are one record: how many, and the
  // time of the last.
  int64_t count = 1;
  int64_t last_time = 0;
};

// One job's lifecycle as observability needs it (finished jobs too, while the server keeps them).
struct JobSummary {
  std::string id, queue;
  JobState state = JobState::kPending;
  int64_t created_at = 0;
  int64_t queued_at = 0;        // when it last became pending (a requeue included)
  int64_t run_started_at = -1;  // the current attempt's start; -1 while pending
  // Why it waits when the engine does not see it (BackOff, NodeLost); "": the engine's reason.
  std::string pending_reason;
  // A service's replicas (a Deployment's): how many it asks (0 once scaled to zero), how
  // many run (0 for other jobs and for services finished or being stopped for good).
  bool service = false;  // an unfinished service, not being stopped for good
  int32_t service_replicas = 0, service_running = 0;
};

// An attempt of a job bound by a cycle (Pending -> Scheduled): it waited in its queue from
// queued_at (its submission, or its requeue) to bound_at. One per attempt bound, however soon
// it ends (observability: the queue-wait histogram).
struct JobBound {
  std::string queue;
  int64_t queued_at = 0, bound_at = 0;
};

struct ControlPlaneOptions {
  std::function<int64_t()> clock;  // seconds; default: wall clock
  uint64_t seed = 1;               // scheduling randomness (common/rng.h), per cycle
  int64_t heartbeat_seconds = 2;
  // Then NotReady, its work restarted elsewhere: 30 s, past agents' default lease (10
  // heartbeats), after which they have stopped their tasks themselves.
  int32_t missed_heartbeats = 15;
  int64_t cycle_period_ms = 1000;      // scheduling cycles at least this often
  int64_t cycle_min_interval_ms = 50;  // and at most this often when events trigger them
  bool run_scheduler = true;           // false: cycles only through RunCycle() (tests)
  // A job restarted after a failure waits restart_backoff_seconds, doubling with each failure
  // in a row up to restart_backoff_max_seconds (Kubernetes' CrashLoopBackOff: 10 s to 5 min);
  // a run of restart_backoff_reset_seconds starts the count over. 0 = restart at once.
  int64_t restart_backoff_seconds = 10;
  int64_t restart_backoff_max_seconds = 300;
  int64_t restart_backoff_reset_seconds = 600;
  // Event retention (docs/lifecycle.md): a job keeps its newest max_events_per_job events;
  // in all at most max_events are kept, none older than event_ttl_seconds. The oldest go
  // first, deleted from the store too. 0 = no bound.
  size_t max_events_per_job = 200;
  size_t max_events = 500000;
  int64_t event_ttl_seconds = 14 * 24 * 3600;
  // Finished jobs (Succeeded, Failed, Cancelled) are deleted with their allocations and
  // events this long after they finished (a job's ttlSecondsAfterFinished overrides it), so
  // that a long-running server's memory, store and cycles do not grow with its history.
  // 0 = kept for ever.
  int64_t finished_job_ttl_seconds = 7 * 24 * 3600;
  // Called after each cycle's plan is applied with what the engine saw and decided, every
  // job's lifecycle state as the engine saw it, the attempts the plan bound, and the engine's
  // wall time in seconds (observability: src/server/observability_routes.h). No lock is held.
  std::function<void(const Snapshot&, const Plan&, const std::vector<JobSummary>&,
                     const std::vector<JobBound>&, int64_t now, double seconds)>
      on_cycle;
  // Called when a store commit fails and a request was refused for it (a full disk: 503 to
  // a submission), with the store's error and whether the server is now read-only
  // (frozen()); for metrics (observability). It must not call back into the control plane.
  std::function<void(const Status&, bool read_only)> on_store_error;
  // Tasks evicted by the server itself (the engine's evictions are in on_cycle's plan):
  // Drained, NodeLost, NodeRestarted, Evicted (stopped by their agent).
  std::function<void(const std::string& reason, int64_t tasks)> on_evictions;
  // Called once as the control plane closes, after its last cycle and before its store
  // closes: the last writes of what on_cycle keeps (the cost counters).
  std::function<void()> on_stop;
};

struct ListOptions {
  std::string queue, state, user;
  std::string start_after;
  size_t limit = 500;
};

// How long a task runs on after its agent last heard from the server: the agent's lease
// (`lease_seconds` < 0: the default, 10 heartbeats), a heartbeat more for the answer's way
// back, then the task's grace period. 0 for an agent that keeps no lease (lease_seconds 0):
// its tasks never stop by themselves.
int64_t RunsOnUnattended(int64_t heartbeat_seconds, int64_t lease_seconds, int64_t grace_seconds);

class ControlPlane {
 public:
  // Loads every record from the store; starts the scheduling loop unless disabled.
  static StatusOr<std::unique_ptr<ControlPlane>> Open(std::unique_ptr<store::Store> store,
                                                      std::unique_ptr<Engine> engine,
                                                      ControlPlaneOptions options);
  ~ControlPlane();

  TokenRegistry& tokens() { return tokens_; }
  store::Store& store() { return *store_; }
  // Persists a token entry (API-created or bootstrap) and registers it.
  Status AddToken(const Principal& by, TokenEntry e);
  // Every token's name, role, queues and origin; never a hash (admin).
  StatusOr<Json> ListTokens(const Principal& p) const;

  // ---- user API; every call checks the principal ----
  // `idempotency_key` (the Idempotency-Key header; "" = none) names the submission: a retry
  // with the same key returns the jobs it created (and sets *replayed) instead of creating
  // them again or failing because their names exist.
  StatusOr<std::vector<Json>> Submit(const Principal& p, const std::string& body,
                                     const std::string& idempotency_key = "",
                                     bool* replayed = nullptr);
  StatusOr<Json> GetJob(const Principal& p, const std::string& id, bool describe);
  StatusOr<Json> ListJobs(const Principal& p, const ListOptions& o);
  // `id` names a job, or a job array (sbatch --array; no job has the array's own name): then
  // every unfinished element is cancelled, at once, and the answer is {name, items: [job]}.
  StatusOr<Json> Cancel(const Principal& p, const std::string& id);
  // Hold a pending job (it stays pending, never placed) or release a held one, as Slurm's
  // `scontrol hold` / `release`. FailedPrecondition for a job that is not pending, or (to
  // release) not held.
  StatusOr<Json> Hold(const Principal& p, const std::string& id, bool hold);
  // Sets the replicas of a Deployment (`kubectl scale`), durably, with a `Scaled` event.
  // More: the new replicas (the next task indexes) are placed as any task of the job still
  // to place (queue limits and shares apply). Fewer: the highest-numbered replicas are
  // stopped, as a StatefulSet scales down, through their pool's backend as cancel stops
  // them; their devices are free once their node confirms them gone. 0 keeps the job
  // (pending reason ScaledToZero) with nothing to run. The same count changes nothing.
  // InvalidArgument for a job that is not a Deployment or a count outside 0..kMaxTasksPerJob;
  // FailedPrecondition for one finished or being stopped for good.
  StatusOr<Json> Scale(const Principal& p, const std::string& id, int64_t replicas);
  // A finished job is removed with its allocations and events (its name is free again); an
  // unfinished one is cancelled (as Cancel).
  StatusOr<Json> DeleteJob(const Principal& p, const std::string& id);
  // Whether the store took the last write: "" when it did (or none was refused), else why
  // and when it refused (readiness: GET /readyz).
  struct StoreHealth {
    std::string error;  // the last refusal's error, while no commit has succeeded since
    int64_t failed_at = 0;
    int64_t seconds_ago = 0;  // since failed_at, when asked
    int64_t failures = 0;     // in all, since the start
    bool read_only = false;   // frozen(): a write other than a submission's failed
  };
  StoreHealth store_health() const;
  // Read-only ("frozen") since a store write other than a submission's failed: memory may
  // then hold a change the store does not, so nothing more is decided or written until a
  // restart reloads what is durable. Reads are answered; agents are told to hold (keep
  // their tasks running as they are, start and stop nothing); every other change is refused
  // (503), and no cycle runs. (A full disk must not end the cluster's work: a dead server's
  // agents would stop every task when their lease lapses.)
  bool frozen() const { return frozen_.load(); }
  static constexpr char kReadOnly[] = "the server is read-only since a store write failed";
  // Events after seq `after`, oldest first: of one job (`job`), or of one object
  // ("node/gpu-node-1", "job/x": kubectl events --for), or all; of one type (Normal, Warning)
  // when `type` is given.
  StatusOr<Json> ListEvents(const Principal& p, const std::string& job, int64_t after, size_t limit,
                            const std::string& object = "", const std::string& type = "");
  Json ListQueues(const Principal& p);
  Json ListPriorityClasses();
  Json ListNodes(const Principal& p, bool with_allocations = false);
  // Admin node operations, as kubectl's. cordon: no new tasks (running ones stay);
  // uncordon; drain: cordon, and every job with a task there is evicted (onEviction, so it
  // restarts elsewhere); DeleteNode: a NotReady node is forgotten and what its tasks held is
  // released (its queue's usage, its devices), for a node that is not coming back.
  StatusOr<Json> CordonNode(const Principal& p, const std::string& name, bool cordon);
  StatusOr<Json> DrainNode(const Principal& p, const std::string& name);
  StatusOr<Json> DeleteNode(const Principal& p, const std::string& name);
  Json ListPools();
  StatusOr<Json> ListAudit(const Principal& p, int64_t after, size_t limit);
  // A request refused for the caller's role or queues (403), audited by the API layer:
  // result "denied: <why>". The object is cut to kMaxAuditObject characters (with a marker),
  // and the repeats of one principal's denial of one action on one object within
  // kDenialWindowSeconds count in one record ("count"), written at most once a second; a
  // principal denied on more than kMaxDenialsPerWindow objects in a window has the others
  // counted under the object "(other objects)". A tenant cannot grow the log at line rate.
  void AuditDenied(const Principal& p, const std::string& action, const std::string& object,
                   const std::string& why);
  // Queue / PriorityClass documents (admin): create or replace.
  StatusOr<std::vector<Json>> Apply(const Principal& p, const std::string& body,
                                    bool bootstrap = false);
  // Deletes a "queue", "priorityclass" or "token" (admin), durably and audited. Refused
  // (FailedPrecondition, naming why) while something still needs it: a queue with child
  // queues or unfinished jobs; a priority class an unfinished job resolves to (priorities
  // are resolved every cycle); a job still holding devices counts as unfinished, and so do
  // submissions being stored. Refused too for what would come back at the next start: a
  // queue or class of the --bootstrap folder, a token from --auth-config; and for the last
  // admin token.
  Status Delete(const Principal& p, const std::string& kind, const std::string& name);
  // What `logs -f` follows: the task's allocation (`allocation`, or its latest when ""),
  // where its `stream` is (the agent's logs URL, or a file the server reads when the pool's
  // Backend::LogFile names one, e.g. Slurm), and whether it has ended (its process is gone,
  // so its log is complete). placed=false while the task waits for a placement.
  struct LogsSource {
    std::string url, allocation;
    std::string token;  // bearer token for `url` ("" = none)
    // The node's agent has not heartbeated since this server started, so its logs token
    // (never stored) may not be known yet: an agent's 401 then means "not yet".
    bool agent_unheard = false;
    std::string file;  // set instead of url: read the output there
    bool placed = false, ended = false;
  };
  StatusOr<LogsSource> LogsSourceOf(const Principal& p, const std::string& id, int32_t task,
                                    const std::string& allocation,
                                    const std::string& stream = "stdout");

  // ---- agent protocol (docs/agent-protocol.md) ----
  StatusOr<Json> RegisterAgent(const Principal& p, const Json& body);
  StatusOr<Json> Heartbeat(const Principal& p, const std::string& node, const Json& body);

  // ---- scheduling ----
  void Kick();        // ask for a cycle soon
  Status RunCycle();  // one cycle now (tests, and the loop)
  void CheckNodes();  // NotReady transitions (the loop calls it)
  // What time alone changes (the loop calls it): jobs past their time limit (sbatch -t,
  // activeDeadlineSeconds) fail; terminations held by a fence that has passed end.
  void CheckTimers();
  // Drops events beyond the retention bounds (ControlPlaneOptions), durably; the loop calls
  // it every cycle, Open() once with per_job (a restart may follow a change of the bounds).
  // Returns how many were dropped.
  size_t CompactEvents(bool per_job = false);
  // Deletes finished jobs past their time to live (finished_job_ttl_seconds), durably, with
  // their allocations, events and Idempotency-Key; the loop calls it every cycle. Returns
  // how many jobs were deleted.
  size_t CompactFinishedJobs();
  int64_t cycles() const;

  void RegisterBackend(const std::string& pool, std::shared_ptr<Backend> b);

  struct Counts {
    size_t jobs = 0, events = 0, allocations = 0, nodes = 0;
  };
  Counts counts() const;

 private:
  ControlPlane(std::unique_ptr<store::Store> store, std::unique_ptr<Engine> engine,
               ControlPlaneOptions options);
  Status Load();
  void Loop();
  int64_t Now() const { return options_.clock(); }

  // Helpers below run with mu_ held.
  Event& AddEvent(std::vector<store::Op>& ops, const std::string& type, const std::string& reason,
                  const std::string& object, const std::string& message);
  // Drops a job's oldest events beyond max_events_per_job, with the event counter.
  void TrimJobEvents(std::vector<store::Op>& ops, JobRecord& j);
  // How many events the job has beyond --max-events-per-job.
  size_t ExcessEvents(const JobRecord& j) const;
  // Drops the job's `n` oldest events, from memory and (ops) the store.
  void DropOldestEvents(std::vector<store::Op>& ops, JobRecord& j, size_t n);
  // The writes one store transaction may carry, at most `want` (Store::MaxWritesPerTxn).
  size_t WriteBudget(size_t want) const;
  // Deleting a job is one transaction of its record, allocations and events: on a store that
  // takes fewer writes per transaction (etcd's limit), its oldest events go first, in
  // transactions of their own (they record what happened; they are not state).
  Status ShedEventsToFit(JobRecord& j);
  store::Op EventSeqOp() const;
  void NoteStoreResult(const Status& s);  // for store_health(); mu_ held
  // While frozen (mu_ held): why, naming the store's error; and what agents are answered.
  std::string ReadOnlyWhy() const;
  Json HoldAnswer() const;
  void NoteEvictions(const std::string& reason, int64_t tasks);  // options_.on_evictions
  // Stopping: the allocation is told to stop (its pool's backend; grace period) and stored.
  void StopAllocation(std::vector<store::Op>& ops, Allocation& a);
  StoreHealth store_health_;
  std::atomic<bool> frozen_{false};
  // Backend calls (Launch, Stop) of the change being built: made by the next Commit once the
  // change is stored, dropped if the store refuses it.
  std::vector<std::function<void()>> after_commit_;
  // Deleting finished jobs: the store deletes (job, allocations, events), the counters that
  // keep their numbers from coming back, and, once committed, forgetting them in memory.
  void DeleteJobOps(const JobRecord& j, std::vector<store::Op>& ops) const;
  void FinishDeletes(std::vector<store::Op>& ops) const;
  void ForgetJob(const std::string& id);
  // Call once the change is sure to be committed (every check passed): the record is in
  // memory at once. Returns its seq.
  int64_t AddAudit(std::vector<store::Op>& ops, const Principal& p, const std::string& action,
                   const std::string& object, const std::string& result);
  store::Op AuditOp(const AuditRecord& a) const;
  store::Op JobOp(const JobRecord& j) const;
  store::Op AllocOp(const Allocation& a) const;
  store::Op NodeOp(const NodeRecord& n) const;
  bool Visible(const Principal& p, const JobRecord& j) const;
  // `limited`: ArrayTaskLimited(Now()) when the caller has it (a listing: once, not per job).
  Json JobView(const JobRecord& j, bool describe,
               const std::set<std::string>* limited = nullptr) const;
  Json AllocView(const Allocation& a) const;
  // Starts stopping a job's live allocations; the job becomes Terminating (or goes
  // straight to `next` when nothing is live).
  void Terminate(std::vector<store::Op>& ops, JobRecord& j, JobState next,
                 const std::string& reason, const std::string& message);
  // A Terminating job whose live allocations are all gone moves on; returns whether it did
  // (it stays while FenceHolds, unless it only goes back to Pending, where the fence holds it).
  bool MaybeFinishTermination(std::vector<store::Op>& ops, JobRecord& j);
  // A task of the job was written off with a node that stopped answering and may still run
  // there until that node's agent stops it (its lease, then the grace period: fenced_until).
  bool FenceHolds(const JobRecord& j) const;
  // A task lost with its node that its agent has surely stopped (the job's fence has passed)
  // while the node, NotReady, takes no work: it holds nothing the scheduler counts, so its
  // job's queue is not charged for it beside the job's next attempt. Once the node is ready
  // again its devices count until its agent reports the task gone.
  bool WrittenOff(const Allocation& a) const;
  // A replica its Deployment no longer has (scaled down: its task index is past the job's
  // replicas): being stopped for good, not a task lost or failed to restart.
  bool ScaledAway(const Allocation& a) const;
  // Its current attempt's tasks that run (reported running by their node).
  int32_t RunningTasks(const JobRecord& j) const;
  // The job's first allocation that still holds devices (a task not confirmed gone), if any:
  // a finished job is not deleted while there is one.
  const Allocation* StillHolding(const JobRecord& j) const;
  // GPU milli that placements of `job` count for its queue and its service: their devices',
  // or, for an exclusive job, every healthy GPU of each node they are on (the engine charges
  // an exclusive job whole nodes, as Slurm does).
  int64_t ChargedGpuMilli(const Job& job, const std::vector<const TaskAllocation*>& placed) const;
  // GPU milli-seconds the job's current attempt has held until `now` (see EndAttempt).
  int64_t AttemptService(const JobRecord& j, int64_t now) const;
  void EndAttempt(JobRecord& j);
  static constexpr int64_t kFailedSchedulingRefreshSeconds = 600;
  void NoteVerdict(std::vector<store::Op>& ops, JobRecord& j, const std::string& message);
  // Counts a failure that restarts the job or a task, and sets when it may be placed again;
  // returns the wait in seconds (0: at once). `ran_since`: when what failed started (-1: never
  // ran); a run of restart_backoff_reset_seconds starts the count over.
  int64_t BackOff(CrashLoop& c, int64_t ran_since);
  // Applies the job's restart policy after losing tasks (failure or eviction). `task` is the
  // failed task when one task failed (RestartTask restarts only it); -1 otherwise.
  // `exit_code`: the failed task's, for exit-code policies.
  void OnTaskLoss(std::vector<store::Op>& ops, JobRecord& j, bool eviction,
                  const std::string& reason, const std::string& message, int32_t task = -1,
                  std::optional<int32_t> exit_code = std::nullopt);
  void OnTaskSucceeded(std::vector<store::Op>& ops, JobRecord& j, int32_t task);
  Status Commit(std::vector<store::Op> ops);
  // `in_place`: tasks whose back-off is over, to restart on the devices they kept.
  // `refused` (may be null) gets, per pending job that some pool refuses on some of its
  // nodes (Backend::RefusingNodes), those nodes and why, in words.
  // `kept` (may be null) gets every task restarted alone that keeps the devices it ran on
  // while it backs off (in_place are those whose back-off is over).
  Snapshot BuildSnapshot(std::map<std::string, std::string>& placeholder_owner,
                         std::vector<Binding>* in_place = nullptr,
                         std::map<std::string, std::string>* refused = nullptr,
                         std::vector<Binding>* kept = nullptr) const;
  // The devices tasks restarting alone keep during their back-off, exactly as the
  // scheduler's snapshot keeps them (BuildSnapshot): in use beside the allocations that
  // hold devices, for whatever shows use (get queues, get nodes), as for /metrics.
  std::vector<Binding> KeptInBackoff() const;
  // The latest allocation of task `task` in the job's current attempt, or null.
  const Allocation* LatestAllocation(const JobRecord& j, int32_t task) const;
  // What the last cycle's snapshot kept for tasks backing off (BuildSnapshot's `kept`).
  std::vector<Binding> kept_in_backoff_;
  // `bound` (may be null) gets each attempt the plan bound.
  Status ApplyPlan(const Plan& plan, const std::map<std::string, std::string>& placeholder_owner,
                   std::vector<JobBound>* bound);
  // The variables the server gives task `task` placed at `a` (RANK, MASTER_ADDR, SLURM_*,
  // ...), without its template's own env (spec::TaskEnvironment adds that under them).
  std::map<std::string, std::string> TaskEnv(
      const JobRecord& j, int32_t task, const TaskAllocation& a,
      const std::map<std::string, TaskAllocation>& others) const;
  int32_t PriorityOf(const JobRecord& j) const;
  // Where a job never yet placed stands with the jobs it depends on (--dependency): the
  // dependency it waits for (nullptr: none, it may be scheduled), the jobs it names (none: the
  // one job was deleted), and whether it can never be satisfied. A job placed once waits for none:
  // its dependencies held then, and a requeue does not wait again.
  struct DependencyWait {
    const spec::Dependency* on = nullptr;
    std::vector<const JobRecord*> jobs;  // what it names (DependedOn)
    bool never = false;
  };
  DependencyWait WaitingOn(const JobRecord& j) const;
  // The jobs a dependency names: one (none: deleted), or every job of an array.
  std::vector<const JobRecord*> DependedOn(const spec::Dependency& d) const;
  // "waits for prep to succeed (afterok); prep is Running", "job prep ended Failed: afterok
  // can never be satisfied": a pending reason's words.
  std::string DependencyWords(const DependencyWait& w) const;
  // When a pending job could first be scheduled: its submission or requeue, or later, when
  // the last of its dependencies was satisfied (what queue-wait figures count from, as
  // Slurm's eligible time).
  int64_t EligibleSince(const JobRecord& j) const;
  // Why a pending job is held back from the engine at `now`: "Held", "Dependency",
  // "DependencyNeverSatisfied", "BackOff", "NodeLost", or "" (the engine sees it).
  const char* HeldBack(const JobRecord& j, int64_t now) const;
  // ... or "JobArrayTaskLimit" for one of `throttled` (ArrayTaskLimited(now)), which the
  // engine does not see either.
  const char* HeldBack(const JobRecord& j, int64_t now,
                       const std::set<std::string>& throttled) const;
  // The jobs (name, seq) that unfinished jobs never yet placed depend on, each with those
  // dependents: a job waited for is not deleted.
  using Dependents = std::map<std::pair<std::string, int64_t>, std::vector<std::string>>;
  Dependents WaitedOn() const;
  // Indexes a job just loaded or stored: arrays_, array_names_, with_dependencies_.
  void IndexJob(const JobRecord& j);
  // A job or array named by sbatch's number, as scancel and scontrol take it: the array whose
  // SLURM_ARRAY_JOB_ID it is, else the job whose slurmJobId it is; `id` itself when a job or
  // array has that name, or none has that number.
  // (`whole_array`: an array's id names the array, for cancel/hold/release; else the job whose
  // number it also is, the array's first.)
  std::string ByJobId(const std::string& id, bool whole_array = false) const;
  const JobRecord* JobBySeq(int64_t seq) const;  // the job of that sbatch number (nullptr: none)
  // The elements of the job array named `name` that `p` may see (none: no such array).
  std::vector<JobRecord*> VisibleArray(const Principal& p, const std::string& name);
  // The job `id` (already through ByJobId) if `p` may see it, else NotFound naming `given`:
  // a job in a queue the caller cannot see reads exactly as a missing one.
  StatusOr<JobRecord*> VisibleJob(const Principal& p, const std::string& id,
                                  const std::string& given);
  // Pending elements held back by their array's throttle (--array=...%N) at `now`: past the
  // elements that run (Scheduled, Running, Terminating) and, in index order, the pending ones
  // nothing else holds back, up to N. Of `array` only, or of every array (0).
  std::set<std::string> ArrayTaskLimited(int64_t now, int64_t array = 0) const;
  // Cancels (with `ops`) a job that is not finished.
  void CancelOps(std::vector<store::Op>& ops, const Principal& p, JobRecord& j);
  std::string DefaultPriorityClass() const;
  // The priority classes jobs of `queue` may use (its own list, else its nearest
  // ancestor's); nullptr: any.
  const std::vector<std::string>* AllowedPriorityClasses(const std::string& queue) const;
  // Job names are one namespace for all queues: of a job or array named `name` that `p` may
  // not see, a clash says only that the name is taken (not its state, nor that it is an array).
  bool TakenUnseen(const Principal& p, const std::string& name) const;
  static std::string TakenUnseenMessage(const std::string& name);

  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Engine> engine_;
  ControlPlaneOptions options_;
  TokenRegistry tokens_;

  mutable std::mutex mu_;
  std::map<std::string, JobRecord> jobs_;
  std::map<int64_t, std::vector<std::string>> arrays_;    // array job id -> elements, by index
  std::map<std::string, std::set<int64_t>> array_names_;  // an array's name -> its job ids
  std::set<std::string> with_dependencies_;  // jobs submitted with dependencies (WaitedOn)
  std::set<std::string> reserved_ids_;       // submissions in flight (not yet durable)
  // ScopedKey(caller, Idempotency-Key) -> the jobs it created
  std::map<std::string, std::vector<std::string>> idempotency_;
  std::set<std::string> reserved_keys_;  // scoped keys of submissions in flight
  // (queue, priority class) of each job of the submissions in flight: Delete counts them.
  std::multiset<std::pair<std::string, std::string>> inflight_;
  // "queue/<name>", "priorityclass/<name>" applied from the --bootstrap folder, which is
  // applied at every start: Delete refuses them (they would come back).
  std::set<std::string> declared_;
  std::map<std::string, Queue> queues_;
  std::map<std::string, PriorityClass> priority_classes_;
  std::map<std::string, NodeRecord> nodes_;
  std::map<std::string, Allocation> allocations_;
  // Allocation ids by node, of every allocation kept: a heartbeat, a registration or a
  // node's check reads its own node's, not every allocation of the retention period.
  std::map<std::string, std::set<std::string>> allocations_by_node_;
  void KeepAllocation(Allocation a);
  void ForgetAllocation(const std::string& id);
  // The allocations placed on `node`, in id order.
  std::vector<Allocation*> AllocationsOn(const std::string& node);
  std::map<int64_t, Event> events_;
  std::map<int64_t, AuditRecord> audit_;
  // Open denial records (AuditDenied), by principal, action and object.
  struct OpenDenial {
    int64_t seq = 0;
    int64_t until = 0;          // the window ends
    int64_t written_at = 0;     // the count was last stored then...
    int64_t written_count = 0;  // ...as this
  };
  std::map<std::tuple<std::string, std::string, std::string>, OpenDenial> open_denials_;
  // Numbers a submission took under the lock and publishes once stored, without it: the
  // listings stop below the lowest, so that a client paging with `after` never moves past
  // an event it has not seen, nor reads an audit record the store then refuses.
  std::set<int64_t> events_in_flight_, audit_in_flight_;
  // INT64_MAX, or the lowest of `in_flight`.
  static int64_t PublishedBelow(const std::set<int64_t>& in_flight) {
    return in_flight.empty() ? INT64_MAX : *in_flight.begin();
  }
  std::map<std::string, std::shared_ptr<Backend>> backends_;
  std::shared_ptr<Backend> default_backend_;
  // The last cycle's BuildSnapshot `refused`: added to those jobs' pending reasons.
  std::map<std::string, std::string> refused_;
  int64_t next_job_seq_ = 1, next_event_seq_ = 1, next_alloc_ = 1, next_audit_seq_ = 1;

  // The scheduling loop.
  std::mutex loop_mu_;
  std::condition_variable loop_cv_;
  bool kicked_ = false, stopping_ = false;
  int64_t cycles_ = 0;
  std::thread loop_;
};

// Status -> HTTP status code (400, 401, 403, 404, 409, 413, 503, 500).
int HttpStatusFor(const Status& s);
Json ErrorJson(const Status& s);

}  // namespace tessera::server
