// Engine: the pure scheduling core. `plan = engine.Cycle(snapshot, now, rng)`.
//
// No I/O, no threads, no wall clock, no global state: everything it knows comes in the
// snapshot, everything it decides goes out in the plan. Equal inputs give byte-identical
// plans (PlanToJson). Hosts: the server (real time) and the simulator (virtual time).
// An Engine is immutable after Create() and may be shared by threads; Cycle() is const.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"
#include "common/status.h"
#include "engine/plugin.h"
#include "model/codec.h"
#include "model/snapshot.h"

namespace tessera {

// Which actions run, in order, and which plugins with which arguments.
// Read from Tessera's own YAML or from Volcano's scheduler.conf shape (see docs/engine.md).
struct EngineConfig {
  std::vector<std::string> actions = {"enqueue", "allocate", "preempt", "reclaim", "backfill"};
  struct PluginConfig {
    std::string name;
    Json arguments = Json::object();
    // Volcano's per-plugin switches (enableJobOrder, enableNodeOrder, enablePredicate,
    // enableQueueOrder, ...): name without the enable/enabled prefix -> value.
    std::map<std::string, bool> switches;
  };
  std::vector<std::vector<PluginConfig>> tiers;  // plugins in tiers, as in Volcano
  // The workload's typical requests for fragmentation-aware scoring; empty = learn them
  // from the jobs in the cluster state (every job's task groups, weighted by replicas).
  std::vector<TypicalRequest> typical_requests;
  // A running job is no victim of preempt or reclaim until its current run has lasted this
  // long (Slurm's PreemptExemptTime): with a real checkpoint/restart cost, a job evicted
  // soon after it (re)started loses its restart and has made no progress.
  int64_t preempt_exempt_seconds = 0;
};

StatusOr<EngineConfig> ParseEngineConfig(const Json& doc);
StatusOr<EngineConfig> LoadEngineConfig(const std::string& path);
EngineConfig DefaultEngineConfig();

class ClusterState;

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Create(const EngineConfig& config);
  virtual ~Engine() = default;
  // Equal to ClusterState::FromSnapshot(snapshot) followed by Cycle(state, ...); a job the
  // state rejects (unknown queue, bad running allocation) gets an Outcome::kError decision.
  virtual Plan Cycle(const Snapshot& snapshot, int64_t now, Rng& rng) const = 0;
  // The incremental form for hosts that keep a ClusterState across cycles (the simulator).
  // `state` is used as scratch space and is left exactly as it was; apply the plan with
  // ClusterState::ApplyPlan if the host accepts it.
  virtual Plan Cycle(ClusterState& state, int64_t now, Rng& rng) const = 0;
};

}  // namespace tessera
