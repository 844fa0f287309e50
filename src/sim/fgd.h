// The FGD paper's evaluation protocol (`tessera sim fgd`), ../shared/traces/FGD-PROTOCOL.md.
//
// Builds the workload (name-sorted pods, a seeded shuffle, then i.i.d. clones until the GPU
// request reaches the target load), names the nodes by their permuted tie-break names, and
// feeds pods one by one, arrival only, to a placer that hosts the engine. A pod that does
// not fit is dropped at once and never retried; every pod counts as arrived. The allocated
// GPU share is sampled after every pod and discretised as the paper does (alloc_curve.h).
//
// Randomness: with --arrival-order and --node-order (the original simulator's seed-42 draws
// in ../shared/traces/openb/fgd-seed42/) the run reproduces the paper's simulator. Without
// them the shuffle, the clone draws and the node permutation come from Tessera's own Rng
// seeded with the seed: the same procedure, but not Go's math/rand sequence, so seeds give
// statistically equivalent, not bit-identical, workloads. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "model/node.h"
#include "sim/alloc_curve.h"
#include "sim/traces.h"

namespace tessera::sim {

struct FgdPod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  int32_t gpu_milli = 0;  // per GPU
  std::vector<std::string> models;
  int64_t GpuMilli() const { return static_cast<int64_t>(num_gpu) * gpu_milli; }
};

struct FgdWorkload {
  // Named by their tie-break names (the engine breaks score ties by the lowest node name);
  // no per-node labels, so identical nodes stay one equivalence class for the engine.
  std::vector<Node> nodes;
  std::map<std::string, std::string> trace_names;  // node name -> the trace's name
  std::vector<FgdPod> originals;  // the trace's pods, name-sorted (the typical-pod statistics)
  std::vector<FgdPod> arrivals;   // in arrival order
  int64_t total_gpu_milli = 0;
  int64_t total_gpus = 0;
  int64_t arrived_percent = 0;  // the arrivals' GPU request, % of capacity (rounded up)
};

struct FgdWorkloadOptions {
  uint64_t seed = 42;
  // Inflate to this share of cluster GPU capacity; below the trace's own load, the shuffled
  // pods arrive until it is reached. An arrival order fixes the workload and ignores it.
  int64_t load_percent = 130;
  // Pod names, clones "<n>-tuned-<i>"; a row's request columns must match the pod list's.
  std::optional<std::vector<ArrivalOrderEntry>> arrival_order;
  std::optional<std::map<std::string, std::string>> node_order;  // trace name -> tie-break name
};

StatusOr<FgdWorkload> BuildFgdWorkload(const std::vector<OpenbNode>& nodes,
                                       const std::vector<OpenbPod>& pods,
                                       const FgdWorkloadOptions& options);

// Hosts a placement policy for one experiment: Place() offers one pod and reports whether it
// was bound; the placer keeps the cluster state between calls.
class FgdPlacer {
 public:
  virtual ~FgdPlacer() = default;
  virtual StatusOr<bool> Place(const FgdPod& pod) = 0;
  virtual int64_t AllocatedGpuMilli() const = 0;
};

struct FgdRun {
  std::vector<AllocSample> samples;  // one per pod, after it was placed or dropped
  AllocCurve curve;
  int64_t arrived = 0;
  int64_t placed = 0;
  int64_t failed = 0;
  int64_t failed_gpu_milli = 0;
};

StatusOr<FgdRun> RunFgd(const FgdWorkload& workload, FgdPlacer& placer, int max_percent = 130);

// The engine configuration of a named policy: "random", "dotprod", "gpuclustering",
// "gpupacking", "bestfit", "fgd" (the paper's, as engine plugins paper-*), or "tessera"
// (the engine's default configuration). Every configuration gets the workload's request
// histogram (its original pods) as its typical workload.
std::vector<std::string> FgdPolicyNames();
StatusOr<EngineConfig> FgdPolicyConfig(const std::string& policy, const FgdWorkload& workload);
// Adds the workload's typical requests to a configuration loaded from a file.
void AddTypicalRequests(const FgdWorkload& workload, EngineConfig& config);

// Hosts the engine: one ClusterState kept across pods, one cycle per pod; the plan's
// bindings are applied, a pod the cycle does not place is removed. `seed` seeds the one Rng
// of the run (only random policies draw from it).
class EnginePlacer : public FgdPlacer {
 public:
  static StatusOr<std::unique_ptr<EnginePlacer>> Create(const FgdWorkload& workload,
                                                        const EngineConfig& config, uint64_t seed);
  ~EnginePlacer() override;
  StatusOr<bool> Place(const FgdPod& pod) override;
  int64_t AllocatedGpuMilli() const override { return allocated_; }

 private:
  EnginePlacer(std::unique_ptr<Engine> engine, std::unique_ptr<ClusterState> state, uint64_t seed);
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ClusterState> state_;
  Rng rng_;
  int64_t allocated_ = 0;
  int64_t now_ = 0;
};

}  // namespace tessera::sim
