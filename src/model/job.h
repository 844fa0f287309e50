// Jobs, task groups, tasks and their placement constraints, as the engine sees them.
//
// A job is what a user submits: one or more task groups (replicas of one request), a
// queue, a priority, and a gang minimum (`minAvailable`): the number of tasks that must
// start together or not at all. Tasks are numbered 0..N-1 across groups in group order.
// Plain values; thread-compatible.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/node.h"
#include "model/resources.h"

namespace tessera {

struct Toleration {
  enum class Op { kEqual, kExists };
  std::string key;  // empty with kExists tolerates every taint
  Op op = Op::kEqual;
  std::string value;
  std::optional<TaintEffect> effect;  // nullopt: every effect
  friend bool operator==(const Toleration&, const Toleration&) = default;
};

struct NodeSelectorRequirement {
  enum class Op { kIn, kNotIn, kExists, kDoesNotExist, kGt, kLt };
  std::string key;
  Op op = Op::kIn;
  std::vector<std::string> values;
  friend bool operator==(const NodeSelectorRequirement&, const NodeSelectorRequirement&) = default;
};

// All requirements of a term must hold (AND).
struct NodeSelectorTerm {
  std::vector<NodeSelectorRequirement> match_expressions;
  friend bool operator==(const NodeSelectorTerm&, const NodeSelectorTerm&) = default;
};

struct PreferredTerm {
  int32_t weight = 1;  // 1..100, as in Kubernetes
  NodeSelectorTerm term;
  friend bool operator==(const PreferredTerm&, const PreferredTerm&) = default;
};

struct NodeAffinity {
  std::vector<NodeSelectorTerm> required;  // any one term must hold (OR); empty = no constraint
  std::vector<PreferredTerm> preferred;
  friend bool operator==(const NodeAffinity&, const NodeAffinity&) = default;
};

// Where a task may go: Kubernetes' node selector, node affinity and tolerations.
struct Placement {
  std::map<std::string, std::string> node_selector;
  NodeAffinity affinity;
  std::vector<Toleration> tolerations;
  bool empty() const {
    return node_selector.empty() && affinity.required.empty() && affinity.preferred.empty() &&
           tolerations.empty();
  }
  friend bool operator==(const Placement&, const Placement&) = default;
};

// Kubernetes' topologySpreadConstraints, for the tasks of one task group: among the
// domains of `topology_key` (the values of that node label), the group's tasks in a domain
// may exceed those in the least-loaded eligible domain by at most `max_skew`. A constraint
// counts its own group's tasks only (never other jobs' pods: docs/model.md).
struct TopologySpreadConstraint {
  int32_t max_skew = 1;  // >= 1
  std::string topology_key;
  // whenUnsatisfiable: DoNotSchedule (a filter) or ScheduleAnyway (a score).
  bool schedule_anyway = false;
  // With DoNotSchedule: while fewer eligible domains than this exist, the least-loaded
  // count is taken as 0 (more domains are wanted). 0: not set.
  int32_t min_domains = 0;
  // nodeAffinityPolicy / nodeTaintsPolicy: whether a node the task's node selector and
  // affinity (Honor, the default), or its taints (Ignore, the default), keep it from makes
  // a domain at all.
  bool honor_node_affinity = true;
  bool honor_taints = false;
  friend bool operator==(const TopologySpreadConstraint&,
                         const TopologySpreadConstraint&) = default;
};

struct TaskGroup {
  std::string name;  // "master", "worker", ...
  int32_t replicas = 1;
  TaskRequest request;
  // The group's own placement instead of the job's (a Volcano job's CPU launcher and its
  // tainted GPU workers); nullopt: the job's.
  std::optional<Placement> placement;
  std::vector<TopologySpreadConstraint> spread = {};  // topologySpreadConstraints
};

// Where and with what one running task is placed.
struct DeviceAssignment {
  int32_t device = 0;         // index on the node
  int32_t milli = 1000;       // compute taken: 1000 whole; <1000 fraction; MIG: profile milli
  int64_t memory_bytes = 0;   // device memory taken
  int32_t mig_instance = -1;  // index into Device::mig, or -1
  friend bool operator==(const DeviceAssignment&, const DeviceAssignment&) = default;
};

struct TaskAllocation {
  std::string node;
  int64_t cpu_milli = 0;
  int64_t memory_bytes = 0;
  std::vector<DeviceAssignment> devices;
  // A finished task's place: the host keeps it placed on its node, holding nothing, for its
  // job's gang; it runs nothing there (a node's maxTasks does not count it).
  bool idle = false;
  int64_t GpuMilli() const {  // GPU compute taken on all its devices
    int64_t m = 0;
    for (const DeviceAssignment& d : devices) m += d.milli;
    return m;
  }
  friend bool operator==(const TaskAllocation&, const TaskAllocation&) = default;
};

inline ResourceVector AllocationVector(const TaskAllocation& a) {
  return ResourceVector{a.cpu_milli, a.memory_bytes, a.GpuMilli()};
}

// The GPU share a device assignment on node `n` is charged: its compute, or for a fraction of
// a device the larger of its compute and its share of the device's memory (rounded up). A
// task holding 60 GiB of an 80 GiB device leaves others a quarter of it, whatever compute it
// asked for; charged its 100 milli of compute, it would pass queue limits and fair shares
// while holding most of a device.
inline int64_t DeviceCharge(const DeviceAssignment& d, const Node& n) {
  if (d.milli >= 1000 || d.mig_instance >= 0 || d.memory_bytes <= 0 || d.device < 0 ||
      d.device >= static_cast<int32_t>(n.devices.size()))
    return d.milli;
  const int64_t memory = n.devices[d.device].memory_bytes;
  if (memory <= 0) return d.milli;
  // (128-bit: memory_bytes * 1000 overflows int64 past 9 PB, never, but a garbage report...)
  const __int128 share = (static_cast<__int128>(d.memory_bytes) * 1000 + memory - 1) / memory;
  return std::max<int64_t>(d.milli, static_cast<int64_t>(std::min<__int128>(share, 1000)));
}

// What allocation `a` on node `n` counts against its job and queues (the engine's limits
// and shares, `get queues`, the cost metrics): the allocation itself, its fractions of a
// device as DeviceCharge says, except for an exclusive job, which is charged the whole node
// (its CPUs and healthy GPUs) with one of its tasks there (`first`) and only the memory of
// the others (as Slurm allocates an exclusive job every CPU and GPU of its nodes, and the
// memory it asks for).
inline ResourceVector ChargeOf(const TaskAllocation& a, const Node& n, bool exclusive, bool first) {
  if (exclusive)
    return ResourceVector{first ? n.cpu_milli : 0, a.memory_bytes, first ? HealthyGpuMilli(n) : 0};
  ResourceVector v{a.cpu_milli, a.memory_bytes, 0};
  for (const DeviceAssignment& d : a.devices) v.gpu_milli += DeviceCharge(d, n);
  return v;
}

struct Job {
  std::string id;  // unique and stable; the last key of every ordering
  std::string queue = "default";
  std::string priority_class;
  int32_t priority = 0;     // resolved value of priority_class; higher goes first
  int64_t submit_time = 0;  // seconds, engine clock
  // Order of submission among jobs of the same submit_time (the server's job sequence), so
  // that FIFO holds within a second; 0 where unknown (traces), and the id decides.
  int64_t submit_seq = 0;
  std::vector<TaskGroup> groups;
  int32_t min_available = 0;  // gang minimum; 0 means all tasks
  Placement placement;        // of every task group without its own
  bool preemptible = true;
  // Its tasks are being stopped (their grace period runs): what they hold is as good as free
  // for a preemptor, which waits for it instead of evicting more (as kube-scheduler does
  // with terminating victims).
  bool terminating = false;
  int64_t grace_period_seconds = 30;                // between SIGTERM and SIGKILL on eviction
  std::optional<int64_t> runtime_estimate_seconds;  // user's or oracle's; backfill uses it
  // No two tasks of the job on one node, running ones included (Slurm's `-N`: distinct
  // nodes). The engine then needs as many nodes as tasks that run together.
  bool one_task_per_node = false;
  // The job's nodes are its own (Slurm's `--exclusive`): its tasks go only to nodes where no
  // other job has a task, running or stopping, and no other job's task goes to a node while
  // it holds one (its own tasks may share it). It is charged each node whole: all of its
  // CPUs and healthy GPUs, and the memory its tasks ask for, as Slurm allocates them.
  bool exclusive = false;
  // Long-running replicas (a Deployment): with no spread constraint in any group, its tasks
  // are spread softly as kube-scheduler's system defaults spread a ReplicaSet's pods
  // (kubernetes.io/hostname maxSkew 3, topology.kubernetes.io/zone maxSkew 5, ScheduleAnyway).
  bool service = false;

  // Running state. allocations[i] is task i's placement, or nullopt while it waits.
  std::vector<std::optional<TaskAllocation>> allocations;
  int64_t start_time = -1;                 // when the gang started; -1 if never
  int64_t attained_gpu_milli_seconds = 0;  // service received so far (LAS policies)

  int32_t TaskCount() const;
  int32_t GangMinimum() const;  // min_available, or TaskCount() when 0
  const TaskGroup& GroupOfTask(int32_t task) const;
  const Placement& PlacementOf(const TaskGroup& g) const {
    return g.placement ? *g.placement : placement;
  }
  const Placement& PlacementOfTask(int32_t task) const { return PlacementOf(GroupOfTask(task)); }
  // No group, nor the job, constrains where tasks go (placement or spread constraints).
  bool Unconstrained() const;
  int32_t RunningTasks() const;
};

}  // namespace tessera
