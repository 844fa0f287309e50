// TopologySpread: one job's topology spread constraints (Kubernetes'
// topologySpreadConstraints, Job::service's defaults) while its tasks are placed.
//
// Per constraint it knows each node's domain (its value of the topology key), which nodes
// make a domain (eligible: the key, and the job's node selector and affinity or taints
// where the constraint's policies honour them), and how many of the group's tasks each
// domain holds. The engine builds one per gang transaction of a job that has constraints,
// adds each task it places, and asks it for the DoNotSchedule verdict (built in, beside the
// filter plugins); the `topologyspread` score reads the ScheduleAnyway excess. A constraint
// counts the tasks of its own task group only. Thread-compatible; plain value.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/node_state.h"
#include "model/job.h"

namespace tessera {

// Pending reasons, in kube-scheduler's words.
inline constexpr char kSpreadSkew[] = "node(s) didn't match pod topology spread constraints";
inline constexpr char kSpreadMissingLabel[] =
    "node(s) didn't match pod topology spread constraints (missing required label)";

class TopologySpread {
 public:
  // Whether `job` has constraints of its own or by default (a service).
  static bool Applies(const Job& job);
  // The job's constraints over `nodes` (indexed as the engine's), none of its tasks counted.
  TopologySpread(const Job& job, const std::vector<NodeState>& nodes);

  // Counts a task of the job placed (or running) on node `node`.
  void Add(int32_t task, int32_t node);
  // Why node `node` may not take task `task` under a DoNotSchedule constraint of its group,
  // or nullptr: the node lacks the key (kSpreadMissingLabel), or the task there would make
  // its domain's count exceed the least-loaded eligible domain's by more than maxSkew.
  const char* Refusal(int32_t task, int32_t node) const;
  bool HasHard(int32_t task) const { return rules_of_[GroupOf(task)].hard; }
  bool HasSoft(int32_t task) const { return rules_of_[GroupOf(task)].soft; }
  // For the ScheduleAnyway constraints of the task's group: how many tasks of the group the
  // node's domain holds above the least-loaded eligible domain, summed over them. A node
  // without the key of a constraint of the job's own counts as the most loaded domain plus
  // one; without the key of a default one, as 0 (kube-scheduler does the same).
  int64_t Excess(int32_t task, int32_t node) const;

 private:
  struct Rule {
    TopologySpreadConstraint c;
    int32_t group = 0;
    bool system_default = false;
    std::vector<int32_t> domain;           // per node: domain id, -1 without the key
    std::vector<uint8_t> eligible;         // per node: makes its domain, and its tasks count
    std::vector<int32_t> count;            // per domain: the group's tasks on its eligible nodes
    std::vector<uint8_t> domain_eligible;  // per domain: some eligible node has it
    int32_t eligible_domains = 0;
    // Over eligible domains: the least count, how many domains have it, the most count.
    int32_t min = 0, at_min = 0, max = 0;
    int32_t Min() const { return eligible_domains < c.min_domains ? 0 : min; }
  };
  struct GroupRules {
    std::vector<int32_t> rules;  // indices into rules_
    bool hard = false, soft = false;
  };
  int32_t GroupOf(int32_t task) const;
  void Recount(Rule& r);

  std::vector<int32_t> group_end_;  // per group: one past its last task
  std::vector<Rule> rules_;
  std::vector<GroupRules> rules_of_;  // per group
};

}  // namespace tessera
