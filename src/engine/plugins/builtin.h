// Factories of the built-in plugins (listed in registry.cc) and the label matching they
// share. Internal to src/engine.
#pragma once

#include <map>
#include <string>

#include "engine/plugin.h"

namespace tessera {

// Job order
StatusOr<PluginInstance> MakePriority(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeFifo(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeSjf(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeLas(const Json& args, const std::string& path);
// Engine policies by name
StatusOr<PluginInstance> MakeGang(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeConformance(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeDrf(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeProportion(const Json& args, const std::string& path);
// Filters
StatusOr<PluginInstance> MakePredicates(const Json& args, const std::string& path);
// Scores
StatusOr<PluginInstance> MakeBinpack(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeSpread(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeNodeOrder(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeNodeAffinity(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeFragmentation(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeTopology(const Json& args, const std::string& path);
StatusOr<PluginInstance> MakeTopologySpread(const Json& args, const std::string& path);

// Label matching (Kubernetes semantics).
bool MatchesTerm(const NodeSelectorTerm& term, const std::map<std::string, std::string>& labels);
// The node selector and required node affinity of `place` hold for `labels`.
bool MatchesSelection(const Placement& place, const std::map<std::string, std::string>& labels);
// A NoSchedule or NoExecute taint of `node` that `place` does not tolerate, or nullptr.
const Taint* UntoleratedTaint(const Placement& place, const Node& node);
// F(n) of the `fragmentation` score: sum over `typical` of weight x the free GPU milli on n
// that the request could not use (all of it if the request does not fit n or uses no GPU).
int64_t ExpectedFragmentation(const std::vector<TypicalRequest>& typical, const NodeState& n);
// Percent of a node's capacity used after placing `r` (binpack's view): weighted over cpu,
// memory and GPU with the given weights; resources the node lacks are skipped.
int64_t UsedAfterPercent(const NodeState& n, const TaskRequest& r, int64_t w_cpu, int64_t w_mem,
                         int64_t w_gpu);

}  // namespace tessera
