// Engine score plugins for the FGD paper's comparison policies (paper_scores.h), so that
// `tessera sim fgd` measures them through the very same engine as Tessera's own policy.
//
// | name                | score (FGD-PROTOCOL.md s.4)                  | devices for fractions |
// |---------------------|----------------------------------------------|-----------------------|
// | paper-random        | a uniform draw per feasible node (rng)       | uniform among fitting |
// | paper-dotprod       | 100*(1 - <free, request>/2), max-normalised  | best fit              |
// | paper-gpuclustering | same-shape clustering + used share           | best fit              |
// | paper-gpupacking    | prefer partly used GPUs, then few free ones  | best fit              |
// | paper-bestfit       | least (cpu, gpu) left over, min-max to 0..100| best fit              |
// | paper-fgd           | sigmoid of the fragmentation decrease        | the FGD-best device   |
//
// Whole-GPU tasks always take the first free devices by index, as the paper's simulator
// does. Arguments: `weight` (default 1) for all; paper-fgd also takes `typicalPods` (a list
// of {cpuMilli, gpuMilli, gpus, gpuType, count}: the workload's request histogram, from
// which it keeps the most frequent shapes up to `percent`, default 95) and falls back to the
// cycle's typical workload (CycleContext::typical) when it is absent. Immutable; thread-safe.
#pragma once

#include <string>

#include "engine/plugin.h"
#include "engine/plugins/paper/paper_scores.h"

namespace tessera::paper {

StatusOr<PluginInstance> MakeRandomPlugin(const Json& arguments, const std::string& path);
StatusOr<PluginInstance> MakeDotProdPlugin(const Json& arguments, const std::string& path);
StatusOr<PluginInstance> MakeGpuClusteringPlugin(const Json& arguments, const std::string& path);
StatusOr<PluginInstance> MakeGpuPackingPlugin(const Json& arguments, const std::string& path);
StatusOr<PluginInstance> MakeBestFitPlugin(const Json& arguments, const std::string& path);
StatusOr<PluginInstance> MakeFgdPlugin(const Json& arguments, const std::string& path);

// The paper's view of a task and a node, from the engine's.
PodShape ShapeOf(const TaskRequest& request);
NodeFree FreeOf(const NodeState& node);

}  // namespace tessera::paper
