// SlurmPoolHookup: a real Slurm cluster as one pool of a running `tessera server`.
//
// What it wires together (docs/slurm.md, "Wiring into the server"):
//   - Nodes: SlurmPool::Discover() every `sync`; each Slurm node is registered with the
//     control plane through the agent protocol's in-process calls (RegisterAgent /
//     Heartbeat, with a stable boot id per node so a restart kills nothing), in pool
//     `pool`, GRES GPUs as devices, partitions as labels. Drained / down nodes are
//     registered unschedulable (Slurm keeps their jobs; Slurm decides their fate); nodes
//     gone from sinfo stop heartbeating and become NotReady. Heartbeats run on their own
//     thread every `heartbeat`, so a slow or absent slurmctld never makes nodes NotReady.
//   - Slurm unreachable: while discovery fails (slurmctld down, its clients failing), what the
//     server knows of the pool is stale. Its nodes stay Ready (their jobs are Slurm's, which
//     NotReady would write off and start again elsewhere) but take no new work, labelled
//     `pool.down=slurm: slurmctld unreachable` (and `slurm.error`, the failing call's words)
//     until discovery answers again.
//   - Dispatch: the control plane's Backend for `pool` is a SlurmServerBackend (one sbatch
//     per job attempt); task states and exit codes come back as heartbeat task reports, so
//     the control plane's own lifecycle (Running, Succeeded/Failed with exit code, events,
//     restart policies) applies unchanged. Stop -> scancel.
//   - Logs: Slurm writes each job attempt's output under `logs_dir`; the Backend names
//     those files (Backend::LogFile) and the server's logs endpoint reads them.
//   - No loss, no duplicates: before every sbatch the allocation is journaled durably in the
//     server's store (key "slurm/<pool>/<allocation>", then the Slurm job id once known). At
//     start, before any sbatch, the live allocations on the pool's nodes are reconciled by tag
//     (SlurmPool::Reconcile): found -> adopted; journaled but gone from Slurm -> lost (the task
//     fails and the job's restart policy decides); never journaled -> dispatched now; tagged
//     Slurm jobs the server no longer wants -> cancelled.
// Thread-safe. Never holds its own lock while calling the control plane, and the control
// plane calls it (Backend::Launch/Stop) only to record.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/slurm/command_runner.h"
#include "backends/slurm/server_adapter.h"
#include "common/status.h"

namespace tessera::server {
class ControlPlane;
}

namespace tessera::slurm {

struct HookupOptions {
  std::string pool = "slurm";  // the Tessera pool name of the Slurm nodes
  // Environment of the Slurm clients (sinfo, sbatch, ...), e.g. {"SLURM_CONF": PATH}.
  std::map<std::string, std::string> env;
  std::vector<std::string> partitions;            // serve only these; empty = all
  std::map<std::string, std::string> gpu_models;  // GRES type -> model ("a100" -> "A100-80GB")
  std::vector<std::string> sbatch_args;           // extra sbatch options ("--account=ml")
  std::chrono::milliseconds sync{5000};           // sinfo this often
  std::chrono::milliseconds heartbeat{1000};      // report nodes and tasks this often
  std::chrono::milliseconds poll{1000};           // squeue this often while jobs are live
  // A job Slurm keeps pending this long is cancelled there and placed again (0 = never):
  // ServerAdapterOptions::pending_timeout.
  std::chrono::milliseconds pending_timeout{std::chrono::minutes(5)};
  std::shared_ptr<CommandRunner> runner;  // default: SubprocessRunner(env)
  // Where Slurm writes each job attempt's stdout/stderr (<dir>/<job>.<attempt>.out/.err) and
  // the server reads them for `tessera logs`: on a real cluster a filesystem shared by the
  // Slurm nodes and the server. Created at start; "" = Slurm's default, and no logs.
  std::string logs_dir;
};

class SlurmPoolHookup {
 public:
  // Registers the pool's Backend with the control plane and starts the threads. The first
  // discovery runs here: a Slurm that cannot be used at all (clients missing, bad config)
  // is an error; an unreachable controller only delays discovery and reconciliation.
  static StatusOr<std::unique_ptr<SlurmPoolHookup>> Start(server::ControlPlane& cp,
                                                          HookupOptions options);
  ~SlurmPoolHookup();  // stops the threads; Slurm jobs keep running

  // Waits until the restart reconciliation has run (tests, startup logs).
  bool WaitReconciled(std::chrono::milliseconds timeout);

  struct Counts {
    int64_t adopted = 0, lost = 0, redispatched = 0, cancelled = 0;  // at reconciliation
    int64_t nodes = 0;                                               // from the last sinfo
  };
  Counts counts();

 private:
  class Backend;
  class JournalingPool;
  struct TaskState {
    std::string node, job;
    std::optional<AllocationPhase> phase;  // nullopt: nothing heard from Slurm yet
    int32_t exit_code = 0;
    std::string message;
    std::string slurm_state;  // Slurm's word for the end ("CANCELLED", "NODE_FAIL", ...)
    std::string external_id;  // "slurm:42"
    bool stop_requested = false;
    bool stopped_by_tessera = false;  // its Slurm job ended by Tessera's own scancel
  };
  struct NodeState {
    std::string json;  // NodeToJson of what was last registered
    int64_t epoch = -1;
  };

  SlurmPoolHookup(server::ControlPlane& cp, HookupOptions options);
  void SyncLoop();
  void ReportLoop();
  Status Reconcile();
  Status SyncNodes();
  // Registers `name` as `json` (NodeToJson) and remembers it.
  Status RegisterNode(const std::string& name, const std::string& json);
  void MarkUnreachable(const Status& why);
  void HeartbeatAll();
  void OnReport(const TaskReport& r);
  void OnLaunch(const server::Dispatch& d);
  void OnStop(const std::string& allocation);

  server::ControlPlane& cp_;
  HookupOptions options_;
  std::shared_ptr<SlurmPool> pool_;
  std::shared_ptr<JournalingPool> journal_;
  std::shared_ptr<SlurmServerBackend> adapter_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false, reconciled_ = false, report_now_ = false;
  bool unreachable_ = false;                // the last discovery failed (MarkUnreachable)
  std::map<std::string, NodeState> nodes_;  // by node name: the ones we heartbeat
  std::map<std::string, TaskState> tasks_;  // by allocation
  std::set<std::string> stopped_;           // Stop() seen for these allocations
  Counts counts_;
  std::thread sync_, report_;
};

}  // namespace tessera::slurm
