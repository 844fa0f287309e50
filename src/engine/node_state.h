// NodeState: the engine's view of one node during a cycle, as filters and scores see it.
//
// Static facts (name, labels, taints, pool, device models, memory, interconnect domains, MIG
// layout, health) are read through `node` (the model's Node, owned by the cluster state and
// unchanged for the node's lifetime); the free capacity is kept here and moves as tasks are
// bound and released. All integers. Thread-compatible; owned by ClusterState.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/job.h"
#include "model/node.h"

namespace tessera {

struct DeviceState {
  // Free compute of the device in milli-GPU: 1000 when idle, 0 when a whole-GPU task holds
  // it or the device is unhealthy. For a MIG-enabled device: 1000 minus the milli of the
  // instances in use (informational; MIG requests look at mig_used).
  int32_t free_milli = 1000;
  int64_t free_memory_bytes = 0;  // device memory not promised to tasks
  int32_t tasks = 0;              // tasks holding a share of this device
  uint32_t mig_used = 0;          // bit i set: Device::mig[i] is taken
  friend bool operator==(const DeviceState&, const DeviceState&) = default;
};

struct NodeState {
  const Node* node = nullptr;  // static info; never null in a live state
  int32_t index = 0;           // dense id; nodes are indexed in name order
  int64_t free_cpu_milli = 0;
  int64_t free_memory_bytes = 0;
  std::vector<DeviceState> devices;  // one per node->devices[i]
  int32_t tasks = 0;                 // tasks bound to the node
  // Of those, the ones that run there (not a finished task's idle place: TaskAllocation::
  // idle): what Node::max_tasks counts.
  int32_t live_tasks = 0;
  // Of those, tasks of an exclusive job (Job::exclusive): while any, the node is that job's
  // alone (then exclusive_tasks == tasks) and takes no other job's task.
  int32_t exclusive_tasks = 0;
  // Tasks by GPU shape: (GPUs per task, with 0 = a fraction and -1 = MIG) -> count,
  // sorted by shape; CPU-only tasks are not listed. For GPU-clustering style scores.
  std::vector<std::pair<int32_t, int32_t>> gpu_task_shapes;

  const std::string& name() const { return node->name; }
  // Schedulable: ready, not cordoned.
  bool schedulable() const { return node->ready && !node->unschedulable; }
  // Devices that are healthy and completely idle (no task, no MIG instance in use).
  int32_t FullyFreeDevices() const;
  // Sum of free milli over healthy devices without MIG.
  int64_t FreeGpuMilli() const;
  // Healthy devices without MIG (whole and fractional requests can use them).
  int32_t UsableDevices() const;
  // Number of free MIG instances of `profile` on this node.
  int32_t FreeMigInstances(const std::string& profile) const;
};

// Shape key of an allocation for NodeState::gpu_task_shapes: GPUs held, 0 = a fraction,
// -1 = MIG; nullopt for CPU-only.
std::optional<int32_t> GpuShapeOf(const TaskAllocation& a);

// A filter's verdict on one node for one task. An empty reason means the node passes.
struct FilterVerdict {
  // What the user reads, in kube-scheduler words: "Insufficient nvidia.com/gpu",
  // "node(s) had untolerated taint {gpu: true}", "node(s) didn't match Pod's node
  // affinity/selector", "node(s) were unschedulable", ...
  std::string reason;
  // The resource at fault for Insufficient* verdicts ("cpu", "memory", "nvidia.com/gpu",
  // "nvidia.com/mig-1g.10gb", "tessera.io/gpu-milli"); "" otherwise.
  std::string resource;
  bool ok() const { return reason.empty(); }
  static FilterVerdict Pass() { return {}; }
  static FilterVerdict Fail(std::string reason, std::string resource = "") {
    return {std::move(reason), std::move(resource)};
  }
};

// ---- resource arithmetic shared by the engine and by plugins ----

// True if `g` names no models or names `model` (GpuModelMatches: a family entry too).
// (Inline: placement asks it per device, millions of times per cycle.)
inline bool ModelAllowed(const GpuRequest& g, const std::string& model) {
  return g.models.empty() || std::any_of(g.models.begin(), g.models.end(),
                                         [&](const auto& m) { return GpuModelMatches(m, model); });
}
// True if device `d` of `node` may serve `r` at all: healthy, model allowed, MIG mode
// matching the request kind.
bool DeviceMatches(const TaskRequest& r, const NodeState& node, int32_t d);
// Whether `r` fits the node's free capacity (CPU, memory, devices). On failure the verdict
// names the resource: "Insufficient nvidia.com/gpu", "Insufficient cpu", ...
FilterVerdict CheckFit(const TaskRequest& r, const NodeState& node);
// CheckFit(r, node).ok(), without the words.
bool Fits(const TaskRequest& r, const NodeState& node);
// The engine's default device choice (see docs/engine.md); false if it does not fit.
bool DefaultDevices(const TaskRequest& r, const NodeState& node,
                    std::vector<DeviceAssignment>& out);
// True if `devices` is a valid choice for `r` on `node` now.
bool ValidDevices(const TaskRequest& r, const NodeState& node,
                  const std::vector<DeviceAssignment>& devices);
// Takes / gives back the capacity of an allocation on `node` (no checks).
void TakeAllocation(NodeState& node, const TaskAllocation& a);
void GiveBackAllocation(NodeState& node, const TaskAllocation& a);
// Their part on the free capacity only (CPU, memory, each device's share, tasks and MIG
// instances), sign +1 to take, -1 to give back: no task count or task-shape list, for
// scratch copies that read only the free capacity.
void AdjustFree(NodeState& node, const TaskAllocation& a, int sign);
// A fresh state with everything free (capacity view) for `node`.
NodeState EmptyNodeState(const Node* node, int32_t index);

}  // namespace tessera
