// The configured engine: resolved actions and plugins. Internal to src/engine.
// Immutable after construction; Cycle() is const and keeps its scratch on the stack and in
// the ClusterState it is given.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/cluster_state.h"
#include "engine/engine.h"
#include "engine/plugin.h"

namespace tessera {

enum class Action { kEnqueue, kAllocate, kPreempt, kReclaim, kBackfill };

struct ScoreEntry {
  std::shared_ptr<const ScorePlugin> plugin;
  int64_t weight = 1;
  std::string name;
};

class EngineImpl : public Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Build(const EngineConfig& config);

  Plan Cycle(const Snapshot& snapshot, int64_t now, Rng& rng) const override;
  Plan Cycle(ClusterState& state, int64_t now, Rng& rng) const override;

  uint64_t id = 0;  // unique per engine built in this process (PlacementMemo's owner)
  std::vector<Action> actions;
  std::vector<std::shared_ptr<const JobOrderPlugin>> orders;
  std::vector<std::shared_ptr<const FilterPlugin>> filters;
  std::vector<ScoreEntry> scores;       // in configuration order
  std::vector<size_t> device_choosers;  // indices into scores, highest weight first
  bool queue_drf = false;
  bool queue_proportion = false;
  int64_t preempt_exempt_seconds = 0;           // EngineConfig::preempt_exempt_seconds
  std::vector<TypicalRequest> typical;          // configured; empty = learnt per cycle
  std::vector<TypicalGpuGroup> typical_by_gpu;  // GroupTypicalByGpu(typical)
};

}  // namespace tessera
