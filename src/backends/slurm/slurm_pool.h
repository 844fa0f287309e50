// SlurmPool: a real Slurm cluster as a Tessera pool (PoolBackend over SlurmCli).
//
// Discover() reads sinfo (and the partitions, scontrol show partition); Dispatch() turns an
// allocation into one sbatch (sbatch.h) and remembers the Slurm job id; Poll() reads squeue and
// folds each tagged Slurm job into an AllocationStatus (job_state.h); Cancel() is scancel;
// Reconcile() finds Tessera's jobs by their comment tag (tessera:<job>:<allocation>) after a
// Tessera restart.
//
// No loss, no duplicates:
//   - Dispatch is idempotent per allocation id: a second call returns the first job id.
//   - An sbatch whose answer was lost (controller unreachable, timeout) may or may not
//     have created a job; the allocation is marked uncertain and the next Dispatch for it
//     looks in squeue for the tag before it submits again.
//   - A slurmctld restart keeps its jobs (StateSaveLocation); while it is down every call
//     fails with kUnavailable and nothing in Tessera's view changes.
//   - Reconcile adopts desired allocations it finds, cancels tagged jobs that are not
//     desired, and keeps only the oldest of two live jobs with the same allocation.
//   - A job that vanishes from squeue (MinJobAge) before we saw it finish is kLost.
// Thread-safe: one mutex; calls to Slurm are serialised.
#pragma once

#include <memory>
#include <mutex>
#include <set>

#include "backends/backend.h"
#include "backends/slurm/discovery.h"
#include "backends/slurm/sbatch.h"
#include "backends/slurm/slurm_cli.h"

namespace tessera::slurm {

struct SlurmPoolOptions {
  DiscoveryOptions discovery;
  SbatchOptions sbatch;
};

class SlurmPool : public PoolBackend {
 public:
  SlurmPool(std::shared_ptr<CommandRunner> runner, SlurmPoolOptions options);

  const std::string& pool() const override { return options_.discovery.pool; }
  StatusOr<std::vector<Node>> Discover() override;
  StatusOr<ReconcileReport> Reconcile(const std::vector<DesiredAllocation>& desired) override;
  StatusOr<std::string> Dispatch(const DispatchRequest& request) override;
  StatusOr<std::vector<AllocationStatus>> Poll() override;
  Status Cancel(const std::string& allocation) override;

  // How many allocations it tracks (tests, metrics).
  size_t tracked() const;

  // The nodes that would refuse a job with this batch script ("" for a command), with why
  // (RefusingNodes in sbatch.h: every served partition there refuses its account, QOS or
  // the user that runs sbatch), as of the last discovery. Never waits for a Slurm call in
  // progress: the server asks it for every pending job in every cycle, so the script of
  // job `job_id` (whose script never changes) is read once: its account and QOS are
  // remembered for the next kRememberedJobs jobs asked about.
  std::map<std::string, std::string> RefusingNodes(const std::string& job_id,
                                                   const std::string& script) const;
  // How many jobs' accounts and QOS RefusingNodes holds at most before it forgets them all.
  static constexpr size_t kRememberedJobs = size_t{1} << 16;
  size_t remembered_jobs() const;  // tests

 private:
  struct Record {
    std::string job;
    int64_t slurm_id = 0;  // the job id sbatch printed (a heterogeneous job's leader)
    std::map<std::string, NodeUsage> usage;
    AllocationStatus last;
  };
  // Tagged Slurm jobs by allocation, then by submission (job id or het leader id).
  using Submissions = std::map<std::string, std::map<int64_t, std::vector<SlurmJob>>>;
  static Submissions GroupTagged(const std::vector<SlurmJob>& jobs);
  Status RefreshInventoryLocked();
  // RefusingNodes for a job of this account and QOS; access_mu_ held.
  std::map<std::string, std::string> RefusingLocked(
      const std::pair<std::string, std::string>& account_qos) const;
  std::map<std::string, NodeUsage> UsageOfLocked(const DispatchRequest& request);
  // A job Slurm ended NODE_FAIL: names its nodes that sinfo now shows down or gone.
  void NameFailedNodesLocked(AllocationStatus& st);

  std::shared_ptr<CommandRunner> runner_;
  SlurmCli cli_;
  SlurmPoolOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, SlurmNode> inventory_;        // by name, from the last sinfo
  std::map<std::string, SlurmPartition> partitions_;  // by name, from the last scontrol
  std::map<std::string, Record> records_;             // by allocation
  std::set<std::string> uncertain_;                   // allocations whose sbatch answer was lost
  std::set<std::string> ended_untracked_;             // finished, not ours to track, reported once
  // Copies of inventory_ and partitions_ for RefusingNodes, which must not wait on mu_ (held
  // during Slurm calls), and its answers by account and QOS since they were taken.
  mutable std::mutex access_mu_;
  std::map<std::string, SlurmNode> access_inventory_;
  std::map<std::string, SlurmPartition> access_partitions_;
  bool access_restricted_ = false;  // some partition has an Allow* or Deny* list
  mutable std::map<std::pair<std::string, std::string>, std::map<std::string, std::string>>
      refusing_;
  // Each job's (account, QOS) as its script names them, by job id.
  mutable std::map<std::string, std::pair<std::string, std::string>> identities_;
};

}  // namespace tessera::slurm
