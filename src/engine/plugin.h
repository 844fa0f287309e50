// Plugin interfaces of the engine: what a job-order, filter or score plugin sees and returns.
//
// The engine keeps "who goes next" (job order, queue share) apart from "where it goes"
// (filters, then scores). A plugin implements only the extension points it needs; a
// registry entry (plugins/registry.cc, one line per plugin) maps a configuration name to a
// factory that builds a PluginInstance from the plugin's YAML arguments.
//
// Plugins are immutable after construction and are shared by every cycle of an Engine
// (which may run on several threads), so every method is const and must not keep state;
// per-cycle inputs (clock, random generator, typical workload) arrive in CycleContext.
// Scores and all arithmetic are integers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/rng.h"
#include "common/status.h"
#include "engine/node_state.h"
#include "engine/topology_spread.h"
#include "model/codec.h"
#include "model/job.h"

namespace tessera {

// One "typical" request shape with its frequency, for fragmentation-aware scoring.
struct TypicalRequest {
  TaskRequest request;
  int64_t weight = 1;  // relative frequency (integer: a count, or parts per million)
  friend bool operator==(const TypicalRequest&, const TypicalRequest&) = default;
};

// The typical requests that share a GPU part (kind, count, milli, GPU memory, MIG profile,
// models), with each one's CPU, memory and weight: fragmentation-aware scoring walks a
// node's devices once per group rather than once per request (the openb traces have 5-6
// times more request shapes than GPU parts).
struct TypicalGpuGroup {
  TaskRequest gpu_only;  // the shared GPU part, with no CPU or memory
  struct Member {
    int64_t cpu_milli = 0;
    int64_t memory_bytes = 0;
    int64_t weight = 0;
  };
  std::vector<Member> members;
  int64_t weight = 0;  // of all members
};
// Groups in order of first appearance.
std::vector<TypicalGpuGroup> GroupTypicalByGpu(const std::vector<TypicalRequest>& typical);

// What stays fixed during one cycle.
struct CycleContext {
  int64_t now = 0;
  Rng* rng = nullptr;  // the cycle's only randomness; node-specific plugins may draw from it
  // The workload's typical requests, heaviest first: from the configuration
  // (`typicalRequests:`) or learnt from the snapshot's jobs (see docs/engine.md).
  const std::vector<TypicalRequest>* typical = nullptr;
  int64_t typical_total_weight = 0;                              // sum of typical[i].weight
  const std::vector<TypicalGpuGroup>* typical_by_gpu = nullptr;  // `typical`, grouped
};

// The task being placed.
struct TaskContext {
  const Job* job = nullptr;
  int32_t task = 0;                      // index in the job
  const TaskRequest* request = nullptr;  // job->GroupOfTask(task).request
  const CycleContext* cycle = nullptr;
  // Nodes that already hold tasks of this job (running, or placed earlier in the same
  // gang transaction), sorted by index, possibly repeated. Empty for the first task.
  const std::vector<int32_t>* gang_nodes = nullptr;
  // Every node of the cluster by index (to look up gang_nodes); read-only.
  const std::vector<NodeState>* all_nodes = nullptr;
  // A dense id of the task's placement-relevant shape (request + constraints); equal ids
  // mean equal filter and score results on equal node states. Engine-internal cache key.
  int32_t shape_id = -1;
  // The job's topology spread constraints with its tasks counted (this transaction's
  // included), when the task's group has ScheduleAnyway ones; else null. Node-specific.
  const TopologySpread* spread = nullptr;
  // Where the task may go: its group's node selector, affinity and tolerations.
  const Placement& placement() const { return job->PlacementOfTask(task); }
};

// What one task asks for as a ResourceVector: whole GPUs 1000 milli each, a fraction its
// milli, a MIG instance its profile's compute slices out of 7 (1000 * slices / 7).
ResourceVector RequestVector(const TaskRequest& r);

// A job's progress as the engine's state holds it at cycle time. Read this, not the Job's
// own `allocations` and `start_time`: those are the definition the host submitted.
struct JobProgress {
  int64_t start_time = -1;  // when its gang started; -1 if it is not running
  int64_t gpu_milli = 0;    // GPU milli its running tasks hold
  int32_t running_tasks = 0;
};

class JobOrderPlugin {
 public:
  virtual ~JobOrderPlugin() = default;
  // The job's key under this order: lower goes first; equal keys leave it to the next
  // plugin, then submit time, then job id. Asked once per job per cycle (the sort then
  // compares integers, not jobs scattered over the heap).
  virtual int64_t Key(const Job& job, const JobProgress& progress,
                      const CycleContext& ctx) const = 0;
  // Optional, for the preempt action: a preemption rank (lower = more urgent). A waiting
  // job may evict running jobs of its own priority whose rank is strictly higher (e.g. the
  // least-attained-service levels of `las`). The engine asks the first order plugin that
  // returns a value; nullopt (the default) means "this order never preempts".
  virtual std::optional<int64_t> PreemptionRank(const Job& job, const JobProgress& progress,
                                                const CycleContext& ctx) const {
    return std::nullopt;
  }
  // What a rank means, for the eviction's message: "<order>: its <RankWords(victim)>, the
  // preemptor's <RankWords(preemptor)>".
  virtual std::string OrderWords() const { return "job order"; }
  virtual std::string RankWords(int64_t rank) const { return "rank " + std::to_string(rank); }
};

class FilterPlugin {
 public:
  virtual ~FilterPlugin() = default;
  // Judge only what `node` shows: to tell "infeasible" from "unschedulable" the engine
  // also asks about an empty copy of the node (everything free).
  virtual FilterVerdict Filter(const TaskContext& task, const NodeState& node) const = 0;
};

class ScorePlugin {
 public:
  virtual ~ScorePlugin() = default;
  // Higher is better, conventionally 0..100; only feasible nodes are scored. The engine
  // sums weight * score over the configured score plugins and picks the maximum; ties go
  // to the lowest node name (nodes are indexed in name order).
  virtual int64_t Score(const TaskContext& task, const NodeState& node) const = 0;
  // Optional: rescale the raw scores of all feasible candidates (e.g. min-max to 0..100).
  // Candidates are distinct node states, so min and max are those over the nodes.
  // A plugin that overrides Normalize must also override Normalizes() to return true (the
  // engine checks this at Create with a probe and rejects the configuration otherwise).
  virtual void Normalize(const TaskContext& task, std::vector<int64_t>& scores) const {}
  virtual bool Normalizes() const { return false; }
  // Optional: choose the devices on the chosen node (e.g. FGD picks the GPU that maximises
  // its score). Return false to leave the choice to the engine's default (whole GPUs: one
  // interconnect domain, lowest indices; fractions: best fit; MIG: lowest free instance).
  // The engine only asks the highest-weighted score plugin that returns true; it checks
  // the choice and falls back to its default if the choice does not fit.
  virtual bool ChooseDevices(const TaskContext& task, const NodeState& node,
                             std::vector<DeviceAssignment>& out) const {
    return false;
  }
  // Optional: Score() and, when ChooseDevices would choose for this task and node, that
  // choice in `devices` (left empty otherwise), from one evaluation. The engine keeps a
  // one-device choice with the class's score, and then does not ask ChooseDevices for a node
  // of that class. For plugins whose choice comes out of their score (fragmentation).
  virtual int64_t ScoreChoosing(const TaskContext& task, const NodeState& node,
                                std::vector<DeviceAssignment>& devices) const {
    return Score(task, node);
  }
  // True when, for this task, the score depends on more than (the node's static info, its
  // free state and the task shape): the node's name, the random generator, `gang_nodes`, or
  // a label whose key the task's job does not name. The engine then scores node by node
  // instead of once per equivalence class of identical nodes. Slower; correct.
  // Filters must never depend on the node's name, nor on a label whose key the job does not
  // name in its node selector or affinity: nodes that differ only in such labels (a
  // hostname, a rack) share an equivalence class.
  virtual bool NodeSpecific(const TaskContext& task) const { return false; }
};

// What one configured plugin contributes. A plugin may fill several extension points.
struct PluginInstance {
  std::string name;
  std::shared_ptr<const JobOrderPlugin> order;
  std::shared_ptr<const FilterPlugin> filter;
  std::shared_ptr<const ScorePlugin> score;
  int64_t score_weight = 1;
  // Engine policies switched on by name rather than by an interface (Volcano's gang,
  // drf, proportion, conformance). See docs/engine.md.
  bool queue_drf = false;         // queues ordered by weighted dominant resource share
  bool queue_proportion = false;  // guarantees/limits/weights of the queue tree enforced
  bool gang = false;              // all-or-nothing gang minimum (always on; accepted by name)
};

// Builds a plugin from its YAML `arguments` (a JSON object; unknown keys must be rejected
// with an error naming `path` + ".<key>").
using PluginFactory = StatusOr<PluginInstance> (*)(const Json& arguments, const std::string& path);

}  // namespace tessera
