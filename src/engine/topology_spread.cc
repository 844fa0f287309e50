#include "engine/topology_spread.h"

#include <algorithm>
#include <map>
#include <string>

#include "engine/plugins/builtin.h"

namespace tessera {
namespace {

// kube-scheduler's system default constraints (PodTopologySpreadArgs, defaultingType
// System), for a service with none of its own.
std::vector<TopologySpreadConstraint> DefaultConstraints() {
  TopologySpreadConstraint host, zone;
  host.max_skew = 3;
  host.topology_key = "kubernetes.io/hostname";
  host.schedule_anyway = true;
  zone.max_skew = 5;
  zone.topology_key = "topology.kubernetes.io/zone";
  zone.schedule_anyway = true;
  return {host, zone};
}

bool AnyOwn(const Job& job) {
  return std::any_of(job.groups.begin(), job.groups.end(),
                     [](const TaskGroup& g) { return !g.spread.empty(); });
}

}  // namespace

// (A service of one task has nothing to spread: the defaults score every node 0 for it.)
bool TopologySpread::Applies(const Job& job) {
  return AnyOwn(job) || (job.service && job.TaskCount() > 1);
}

TopologySpread::TopologySpread(const Job& job, const std::vector<NodeState>& nodes) {
  const bool defaults = !AnyOwn(job);
  rules_of_.resize(job.groups.size());
  for (int32_t g = 0, end = 0; g < static_cast<int32_t>(job.groups.size()); ++g) {
    const TaskGroup& group = job.groups[g];
    group_end_.push_back(end += group.replicas);
    const Placement& place = job.PlacementOf(group);
    const std::vector<TopologySpreadConstraint> cs = defaults ? DefaultConstraints() : group.spread;
    for (const TopologySpreadConstraint& c : cs) {
      Rule r;
      r.c = c;
      r.group = g;
      r.system_default = defaults;
      r.domain.assign(nodes.size(), -1);
      r.eligible.assign(nodes.size(), 0);
      std::map<std::string, int32_t> ids;
      for (size_t i = 0; i < nodes.size(); ++i) {
        const Node& n = *nodes[i].node;
        auto it = n.labels.find(c.topology_key);
        if (it == n.labels.end()) continue;
        auto [id, fresh] = ids.try_emplace(it->second, static_cast<int32_t>(ids.size()));
        if (fresh) r.domain_eligible.push_back(0);
        r.domain[i] = id->second;
        // As kube-scheduler: a node makes a domain only with every key of the group's
        // constraints of the same kind (not for the defaults), and where the policies say,
        // only if the task's node selector and affinity, or taints, let it there.
        bool ok = true;
        for (const TopologySpreadConstraint& o : cs)
          if (!defaults && o.schedule_anyway == c.schedule_anyway)
            ok &= n.labels.count(o.topology_key) > 0;
        if (c.honor_node_affinity) ok &= MatchesSelection(place, n.labels);
        if (c.honor_taints) ok &= UntoleratedTaint(place, n) == nullptr;
        r.eligible[i] = ok;
        if (ok && !r.domain_eligible[id->second]) {
          r.domain_eligible[id->second] = 1;
          ++r.eligible_domains;
        }
      }
      r.count.assign(ids.size(), 0);
      Recount(r);
      GroupRules& gr = rules_of_[g];
      gr.rules.push_back(static_cast<int32_t>(rules_.size()));
      (c.schedule_anyway ? gr.soft : gr.hard) = true;
      rules_.push_back(std::move(r));
    }
  }
}

int32_t TopologySpread::GroupOf(int32_t task) const {
  return static_cast<int32_t>(std::upper_bound(group_end_.begin(), group_end_.end(), task) -
                              group_end_.begin());
}

void TopologySpread::Recount(Rule& r) {
  r.min = r.at_min = r.max = 0;
  bool first = true;
  for (size_t d = 0; d < r.count.size(); ++d) {
    if (!r.domain_eligible[d]) continue;
    const int32_t n = r.count[d];
    r.max = std::max(r.max, n);
    if (first || n < r.min) {
      r.min = n;
      r.at_min = 0;
      first = false;
    }
    r.at_min += n == r.min;
  }
}

void TopologySpread::Add(int32_t task, int32_t node) {
  for (int32_t k : rules_of_[GroupOf(task)].rules) {
    Rule& r = rules_[k];
    if (!r.eligible[node]) continue;
    const int32_t d = r.domain[node];
    const int32_t n = ++r.count[d];
    r.max = std::max(r.max, n);
    // Counts only grow: the least changes when its last domain leaves it.
    if (n - 1 == r.min && --r.at_min == 0) Recount(r);
  }
}

const char* TopologySpread::Refusal(int32_t task, int32_t node) const {
  for (int32_t k : rules_of_[GroupOf(task)].rules) {
    const Rule& r = rules_[k];
    if (r.c.schedule_anyway) continue;
    const int32_t d = r.domain[node];
    if (d < 0) return kSpreadMissingLabel;
    // The task itself is of the group: it counts where it goes.
    if (r.count[d] + 1 - r.Min() > r.c.max_skew) return kSpreadSkew;
  }
  return nullptr;
}

int64_t TopologySpread::Excess(int32_t task, int32_t node) const {
  int64_t sum = 0;
  for (int32_t k : rules_of_[GroupOf(task)].rules) {
    const Rule& r = rules_[k];
    if (!r.c.schedule_anyway) continue;
    const int32_t d = r.domain[node];
    if (d >= 0)
      sum += std::max(0, r.count[d] - r.min);
    else if (!r.system_default)
      sum += r.max - r.min + 1;
  }
  return sum;
}

}  // namespace tessera
