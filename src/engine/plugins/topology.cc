// Topology locality: keep a multi-GPU task inside one interconnect domain (NVLink island)
// and a gang's tasks on the nodes, or the node group (a label, default
// `topology.tessera.io/block`), that already hold its other tasks.
#include <algorithm>
#include <map>

#include "engine/plugins/builtin.h"
#include "engine/plugins/registry.h"

namespace tessera {
namespace {

class Topology : public ScorePlugin {
 public:
  explicit Topology(std::string label) : label_(std::move(label)) {}

  int64_t Score(const TaskContext& t, const NodeState& n) const override {
    int64_t dev = DeviceLocality(t, n);
    if (t.gang_nodes == nullptr || t.gang_nodes->empty()) return dev;
    return (dev + GangLocality(t, n)) / 2;
  }
  bool NodeSpecific(const TaskContext& t) const override {
    return t.gang_nodes && !t.gang_nodes->empty();
  }

 private:
  // 100 when the devices the engine would pick share one domain; else the share of the
  // largest same-domain group among them.
  int64_t DeviceLocality(const TaskContext& t, const NodeState& n) const {
    if (t.request->gpu.kind != GpuRequestKind::kWhole || t.request->gpu.count <= 1) return 100;
    std::vector<DeviceAssignment> devs;
    if (!DefaultDevices(*t.request, n, devs) || devs.empty()) return 0;
    std::map<std::string, int64_t> per;
    int64_t most = 1;
    for (const auto& d : devs) {
      const std::string& dom = n.node->devices[d.device].domain;
      if (!dom.empty()) most = std::max(most, ++per[dom]);
    }
    return most * 100 / static_cast<int64_t>(devs.size());
  }
  int64_t GangLocality(const TaskContext& t, const NodeState& n) const {
    if (std::binary_search(t.gang_nodes->begin(), t.gang_nodes->end(), n.index)) return 100;
    auto mine = n.node->labels.find(label_);
    if (mine == n.node->labels.end() || t.all_nodes == nullptr) return 0;
    for (int32_t g : *t.gang_nodes) {
      const auto& labels = (*t.all_nodes)[g].node->labels;
      auto it = labels.find(label_);
      if (it != labels.end() && it->second == mine->second) return 50;
    }
    return 0;
  }
  std::string label_;
};

}  // namespace

StatusOr<PluginInstance> MakeTopology(const Json& args, const std::string& path) {
  const Json a = args.is_null() ? Json::object() : args;
  ObjectReader r(a, path);
  PluginInstance p;
  p.name = "topology";
  std::string label = "topology.tessera.io/block";
  TESSERA_RETURN_IF_ERROR(r.Int("weight", p.score_weight));
  TESSERA_RETURN_IF_ERROR(r.String("label", label));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  p.score = std::make_shared<Topology>(label);
  return p;
}

}  // namespace tessera
