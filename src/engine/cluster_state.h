// ClusterState: the engine's indexed view of a cluster, kept by hosts across cycles.
//
// A host (the simulator; the server rebuilds one per cycle through Engine::Cycle(Snapshot))
// builds it once and feeds it deltas: nodes added or removed, jobs submitted or finished,
// plans applied. It keeps the indexes a cycle needs ready: per-node free capacity, nodes
// grouped into equivalence classes of identical (static signature, free state), queue usage,
// the pending jobs, and the counts of request shapes (the learnt typical workload).
//
// Engine::Cycle(state, now, rng) uses the state as scratch space through an undo log and
// leaves it as it found it. Thread-compatible: one cycle at a time per state.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/node_state.h"
#include "model/snapshot.h"

namespace tessera {

class ClusterState {
 public:
  ClusterState();
  ~ClusterState();
  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  // Builds the state from a snapshot. Jobs that cannot be admitted to the state (unknown
  // queue, running allocation that does not fit its node) are listed in `rejected` with the
  // reason, and left out; other errors (duplicate names) fail the whole call.
  static StatusOr<std::unique_ptr<ClusterState>> FromSnapshot(
      const Snapshot& snapshot, std::vector<std::pair<std::string, Status>>* rejected = nullptr);

  // The same, but the state refers to the snapshot's nodes and jobs instead of copying
  // them: the snapshot must outlive the state and not change (Engine::Cycle(snapshot), whose
  // state lives for one cycle). Such a state takes no node deltas (AddNode, RemoveNode).
  static StatusOr<std::unique_ptr<ClusterState>> Borrowing(
      const Snapshot& snapshot, std::vector<std::pair<std::string, Status>>* rejected = nullptr);

  // ---- deltas ----
  Status AddNode(const Node& node);
  // Removes a node. Tasks bound to it lose their allocation (their jobs go back to pending
  // if they fall below the gang minimum the host decides; the state only releases capacity).
  Status RemoveNode(const std::string& name);
  Status UpsertQueue(const Queue& queue);
  Status UpsertPriorityClass(const PriorityClass& pc);
  // Adds a pending or running job (running allocations are bound as given).
  Status AddJob(const Job& job);
  // Removes a finished or cancelled job, releasing all its tasks.
  Status RemoveJob(const std::string& id);
  // Binds one task (start_time of the job becomes `now` if it had none).
  Status Bind(const std::string& job, int32_t task, const TaskAllocation& alloc, int64_t now);
  // Releases one running task (finished, evicted or lost).
  Status Release(const std::string& job, int32_t task);
  // Applies a plan the host accepted: bindings bound at plan.now, evictions released.
  Status ApplyPlan(const Plan& plan);

  // ---- reads ----
  // The job as the state holds it (its allocations and start time), or nullopt.
  std::optional<Job> FindJob(const std::string& id) const;
  const NodeState* FindNode(const std::string& name) const;
  size_t node_count() const;
  size_t job_count() const;
  size_t pending_count() const;
  // The state as a canonical snapshot (for tests and for hosts that want to persist it).
  Snapshot ToSnapshot() const;

  struct Impl;
  Impl& impl() { return *impl_; }
  const Impl& impl() const { return *impl_; }

 private:
  static StatusOr<std::unique_ptr<ClusterState>> Build(
      const Snapshot& snapshot, std::vector<std::pair<std::string, Status>>* rejected, bool borrow);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
