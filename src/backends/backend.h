// PoolBackend: what the server's dispatcher needs from a pool that someone else runs
// (Slurm today; Kubernetes and cloud later). Defined here because the server's own
// dispatcher interface did not exist yet; an adapter maps one onto the other.
//
// The unit of work is one *allocation*: one attempt of one job, with all of its tasks
// placed by the engine on this pool's nodes (Plan bindings). Allocation ids are never
// reused (as in docs/agent-protocol.md), which is what makes every call idempotent and
// lets a restarted server find what it started: the backend tags the external object
// with the job and allocation ids and reconciles by that tag.
//
// Contract, in the order a server uses it:
//   1. Discover() at start and every few seconds: the pool's nodes as model::Node
//      (pool name, labels, CPUs, memory, GPU devices, ready/unschedulable).
//   2. Reconcile(desired) once after a (re)start, before any Dispatch: adopt what is
//      still there, cancel what is not desired (or duplicated), report what is missing.
//   3. Dispatch(request) for each new allocation. Calling it again for the same
//      allocation returns the existing external id and submits nothing.
//   4. Poll() every few seconds: the status of every allocation this backend knows.
//   5. Cancel(allocation) on eviction or user cancel; idempotent.
// Implementations are thread-safe unless they say otherwise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/node.h"
#include "model/snapshot.h"

namespace tessera {

// Backend-neutral lifecycle of one allocation.
enum class AllocationPhase {
  kPending,    // accepted by the pool, not started (queued, configuring)
  kRunning,    // started (includes completing)
  kSucceeded,  // every task exited 0
  kFailed,     // a task failed, timed out, ran out of memory, or its node failed
  kKilled,     // cancelled or preempted (by us or by the pool's admin)
  kLost,       // the pool no longer knows it and we never saw it finish
};
const char* AllocationPhaseName(AllocationPhase p);
inline bool IsTerminal(AllocationPhase p) {
  return p != AllocationPhase::kPending && p != AllocationPhase::kRunning;
}

struct DispatchRequest {
  std::string job;                // Tessera job id
  std::string allocation;         // unique per attempt; never reused
  std::vector<Binding> bindings;  // every task of the job, all on this pool's nodes
  // What runs: a batch script (may carry #SBATCH lines; run as is) or, when empty, a
  // command run once per task.
  std::string script;
  std::vector<std::string> command;
  std::string working_dir;                 // "" = the pool's default
  std::map<std::string, std::string> env;  // added to the job's environment
  std::optional<int64_t> time_limit_seconds;
  std::string stdout_path;  // "" = the pool's default
  std::string stderr_path;  // "" = with stdout
  // Both files are Tessera's, one pair per job attempt, which every Slurm job of the attempt
  // appends to (a replica added by scaling up must not empty what the first is writing);
  // false for a script's own -o/-e, which keep sbatch's default.
  bool append_output = false;
  std::string partition;  // Slurm: "" = the first partition all chosen nodes share
  // Processes per task: an sbatch job is one Tessera task per node holding all of that
  // node's Slurm tasks (spec::ParseSbatchScript), which Slurm must see as N tasks again.
  int32_t processes_per_task = 1;
  // The job's nodes are its own (Job::exclusive): Slurm is told --exclusive.
  bool exclusive = false;
};

struct AllocationStatus {
  std::string job;
  std::string allocation;
  std::string external_id;  // "slurm:42"
  AllocationPhase phase = AllocationPhase::kPending;
  int32_t exit_code = 0;  // of the job script/command; 128+N when killed by signal N
  int32_t signal = 0;     // N when killed by a signal, else 0
  std::string reason;     // the pool's own word: "Resources", "TIMEOUT", "NodeFail", ...
  std::string state;      // the pool's own state of what decided `phase`: "NODE_FAIL", ...
  std::string message;    // one line for users
  std::vector<std::string> nodes;
  int64_t started_at = 0;   // epoch seconds, 0 = not started
  int64_t finished_at = 0;  // epoch seconds, 0 = not finished
};

// What the server believes should exist on the pool after a restart.
struct DesiredAllocation {
  std::string job;
  std::string allocation;
  std::string
      external_id;  // "" if the server never learned it (crashed before or while submitting)
  // Its bindings, so that the backend knows what the allocation holds on each node.
  std::vector<Binding> bindings;
};

struct ReconcileReport {
  std::vector<AllocationStatus> adopted;  // desired and found; their current status
  // Desired but not found. With external_id empty the submit never happened: dispatch it.
  // With external_id set it was submitted and has since vanished: lost.
  std::vector<DesiredAllocation> missing;
  std::vector<std::string> cancelled_stale;       // external ids cancelled: not desired
  std::vector<std::string> cancelled_duplicates;  // external ids cancelled: a second copy
};

class PoolBackend {
 public:
  virtual ~PoolBackend() = default;
  virtual const std::string& pool() const = 0;
  virtual StatusOr<std::vector<Node>> Discover() = 0;
  virtual StatusOr<ReconcileReport> Reconcile(const std::vector<DesiredAllocation>& desired) = 0;
  // Returns the external id ("slurm:42").
  virtual StatusOr<std::string> Dispatch(const DispatchRequest& request) = 0;
  virtual StatusOr<std::vector<AllocationStatus>> Poll() = 0;
  virtual Status Cancel(const std::string& allocation) = 0;
};

}  // namespace tessera
