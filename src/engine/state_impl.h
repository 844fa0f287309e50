// ClusterState internals shared by cluster_state.cc and the cycle (scheduler.cc).
// Not part of the engine's public API. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/cluster_state.h"
#include "engine/node_state.h"
#include "model/snapshot.h"

namespace tessera {

struct JobRec {
  Job job;
  int32_t queue = -1;  // index into Impl::queues; -1 if the queue is unknown
  ResourceVector allocated;
  int32_t running = 0;
  bool pending() const { return running < static_cast<int32_t>(job.allocations.size()); }
};

struct QueueRec {
  Queue q;
  int32_t parent = -1;
  int32_t depth = 0;
  ResourceVector allocated;  // this queue and its descendants
};

// An equivalence class: nodes with equal static signature and equal free state. Scores
// and filters that do not depend on node identity are computed once per class.
struct NodeClass {
  std::vector<int64_t> key;
  std::set<int32_t> members;  // node indices (name order): the lowest is the tie-break
  int32_t live_pos = -1;      // position in Impl::live_classes, -1 when empty
};

struct VecHash {
  size_t operator()(const std::vector<int64_t>& v) const {
    uint64_t h = 1469598103934665603ULL;
    for (int64_t x : v) {
      h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
      h *= 1099511628211ULL;
    }
    return static_cast<size_t>(h);
  }
};

struct UndoOp {
  enum Kind { kBind, kRelease } kind;
  JobRec* job;
  int32_t task;
  TaskAllocation alloc;  // what was bound / released
  int64_t old_start_time;
};

struct ClusterState::Impl {
  std::vector<std::unique_ptr<Node>> statics;  // parallel to nodes; stable pointers
  std::vector<NodeState> nodes;                // by name
  std::map<std::string, int32_t> node_index;
  std::vector<int32_t> node_signature;  // static signature id per node
  std::vector<int32_t> node_class;      // class id per node

  std::map<std::string, int32_t> signatures;  // serialized static signature -> id
  std::vector<int32_t> signature_rep;         // a node index per signature (for capacity views)

  std::vector<NodeClass> classes;
  std::unordered_map<std::vector<int64_t>, int32_t, VecHash> class_index;
  std::vector<int32_t> live_classes;  // non-empty classes, in no particular order

  std::map<std::string, JobRec> jobs;
  std::set<std::string> pending;  // ids of jobs with at least one unplaced task
  std::vector<QueueRec> queues;
  std::map<std::string, int32_t> queue_index;
  std::map<std::string, PriorityClass> priority_classes;

  // Learnt typical workload: request shape -> task count over all jobs.
  std::map<std::string, std::pair<TaskRequest, int64_t>> shape_counts;

  ResourceVector capacity;  // of schedulable nodes
  std::vector<UndoOp> undo;
  bool logging = false;  // record undo ops (during a cycle)
  // Classes whose membership changed, for the cycle's per-shape indexes (drained by it).
  std::vector<int32_t> touched;
  bool tracking = false;
  std::vector<int64_t> key_scratch;  // Reclassify's buffer

  // ---- mutation primitives (keep every index consistent) ----
  Status BindTask(JobRec& j, int32_t task, const TaskAllocation& a, int64_t now);
  Status ReleaseTask(JobRec& j, int32_t task);
  void Rollback(size_t mark);
  void RebuildNodeIndexes();  // after node add/remove
  void Reclassify(int32_t node);
  void RebuildQueues();
  void CountShapes(const Job& j, int64_t sign);
  int32_t QueueOf(const std::string& name) const;
};

ResourceVector AllocationVector(const TaskAllocation& a);
ResourceVector RequestVector(const TaskRequest& r);

}  // namespace tessera
