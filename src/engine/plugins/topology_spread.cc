// The `topologyspread` score: ScheduleAnyway topology spread constraints (and a service's
// default ones) prefer the domains holding the fewest of the task group's tasks. The
// DoNotSchedule ones are a filter the engine always applies (engine/topology_spread.h).
#include "engine/topology_spread.h"
#include "engine/plugins/builtin.h"

namespace tessera {
namespace {

class TopologySpreadScore : public ScorePlugin {
 public:
  // 0 on the least-loaded domains, -100 per task of the group above them.
  int64_t Score(const TaskContext& t, const NodeState& n) const override {
    if (t.spread == nullptr || !t.spread->HasSoft(t.task)) return 0;
    return -100 * t.spread->Excess(t.task, n.index);
  }
  // It reads the node's labels and where the job's tasks are.
  bool NodeSpecific(const TaskContext& t) const override {
    return t.spread != nullptr && t.spread->HasSoft(t.task);
  }
};

}  // namespace

StatusOr<PluginInstance> MakeTopologySpread(const Json& args, const std::string& path) {
  const Json a = args.is_null() ? Json::object() : args;
  ObjectReader r(a, path);
  PluginInstance p;
  p.name = "topologyspread";
  // A task above the least-loaded domain costs 10,000: more than any default score's
  // difference between two nodes (fragmentation's is at most a node's GPU milli), so that
  // spreading decides and the other scores break its ties. Weight 1 weighs it as one more
  // 0..100 score.
  p.score_weight = 100;
  TESSERA_RETURN_IF_ERROR(r.Int("weight", p.score_weight));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  p.score = std::make_shared<TopologySpreadScore>();
  return p;
}

}  // namespace tessera
