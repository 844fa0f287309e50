// The `predicates` filter: taints/tolerations and node selector / required node affinity,
// in Kubernetes semantics. Resource fit, GPU model, MIG and health are always checked by
// the engine itself (engine/node_state.h CheckFit), whatever the configuration.
#include <algorithm>
#include <cstdlib>

#include "engine/plugins/builtin.h"

namespace tessera {

bool MatchesTerm(const NodeSelectorTerm& term, const std::map<std::string, std::string>& labels) {
  for (const auto& e : term.match_expressions) {
    auto it = labels.find(e.key);
    bool has = it != labels.end();
    auto in = [&] {
      return has && std::find(e.values.begin(), e.values.end(), it->second) != e.values.end();
    };
    auto num = [&](bool gt) {
      if (!has || e.values.size() != 1) return false;
      char* end = nullptr;
      long long a = std::strtoll(it->second.c_str(), &end, 10);
      if (*end != '\0') return false;
      long long b = std::strtoll(e.values[0].c_str(), &end, 10);
      if (*end != '\0') return false;
      return gt ? a > b : a < b;
    };
    bool ok = false;
    switch (e.op) {
      case NodeSelectorRequirement::Op::kIn:
        ok = in();
        break;
      case NodeSelectorRequirement::Op::kNotIn:
        ok = !in();
        break;
      case NodeSelectorRequirement::Op::kExists:
        ok = has;
        break;
      case NodeSelectorRequirement::Op::kDoesNotExist:
        ok = !has;
        break;
      case NodeSelectorRequirement::Op::kGt:
        ok = num(true);
        break;
      case NodeSelectorRequirement::Op::kLt:
        ok = num(false);
        break;
    }
    if (!ok) return false;
  }
  return true;
}

namespace {

bool Tolerates(const Toleration& t, const Taint& taint) {
  if (t.effect && *t.effect != taint.effect) return false;
  if (t.op == Toleration::Op::kExists) return t.key.empty() || t.key == taint.key;
  return t.key == taint.key && t.value == taint.value;
}

}  // namespace

const Taint* UntoleratedTaint(const Placement& place, const Node& node) {
  for (const Taint& taint : node.taints) {
    if (taint.effect == TaintEffect::kPreferNoSchedule) continue;
    if (std::none_of(place.tolerations.begin(), place.tolerations.end(),
                     [&](const Toleration& t) { return Tolerates(t, taint); }))
      return &taint;
  }
  return nullptr;
}

bool MatchesSelection(const Placement& place, const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : place.node_selector) {
    auto it = labels.find(k);
    if (it == labels.end() || it->second != v) return false;
  }
  // A required term with no expressions matches no node (Kubernetes: "a null or empty node
  // selector term matches no objects"); the API refuses one, a snapshot may still hold one.
  return place.affinity.required.empty() ||
         std::any_of(place.affinity.required.begin(), place.affinity.required.end(),
                     [&](const NodeSelectorTerm& t) {
                       return !t.match_expressions.empty() && MatchesTerm(t, labels);
                     });
}

namespace {

class Predicates : public FilterPlugin {
 public:
  FilterVerdict Filter(const TaskContext& task, const NodeState& node) const override {
    const Placement& place = task.placement();
    if (const Taint* taint = UntoleratedTaint(place, *node.node))
      return FilterVerdict::Fail("node(s) had untolerated taint {" + taint->key + ": " +
                                 taint->value + "}");
    if (!MatchesSelection(place, node.node->labels))
      return FilterVerdict::Fail("node(s) didn't match Pod's node affinity/selector");
    return FilterVerdict::Pass();
  }
};

}  // namespace

StatusOr<PluginInstance> MakePredicates(const Json& args, const std::string& path) {
  const Json a = args.is_null() ? Json::object() : args;
  ObjectReader r(a, path);
  TESSERA_RETURN_IF_ERROR(r.Finish());
  PluginInstance p;
  p.name = "predicates";
  p.filter = std::make_shared<Predicates>();
  return p;
}

}  // namespace tessera
