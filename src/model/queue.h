// Queues (a tree), priority classes: the capacity-sharing vocabulary of Volcano and Kueue.
// Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/resources.h"

namespace tessera {

struct Queue {
  std::string name;
  std::string parent;                   // "" for a child of the root
  int32_t weight = 1;                   // share of what is left after guarantees, among siblings
  ResourceVector guarantee;             // always available to this queue (reclaimable from others)
  std::optional<ResourceVector> limit;  // capability: never more than this; nullopt = none
  bool reclaimable = true;              // others may take back what it borrowed above its guarantee
  bool borrowing = true;                // may use idle capacity beyond its deserved share
  bool open = true;                     // accepts new jobs
  // The priority classes its jobs may use (as Slurm's QOS allowed per association); empty:
  // its nearest ancestor's list, and any class when none has one.
  std::vector<std::string> priority_classes;
};

struct PriorityClass {
  std::string name;
  int32_t value = 0;
  bool preempt_lower = true;  // preemptionPolicy: PreemptLowerPriority (true) or Never
  bool global_default = false;
};

// A tree: every parent is one of `queues`, and no parent chain comes back to where it began.
// The first fault, as "queue NAME: <parent_field>: ..." (a loop with its path: qa -> qb -> qa).
Status CheckQueueParents(const std::vector<Queue>& queues, const std::string& parent_field);

// Guarantees a queue tree can honour: the children of a parent together are guaranteed no
// more than the parent (in the resources the parent is guaranteed), and no queue more than
// an ancestor's limit. (Unknown parents and loops are the caller's to refuse first.)
Status CheckQueueGuarantees(const std::vector<Queue>& queues);  // the first violation
std::vector<std::string> QueueGuaranteeViolations(const std::vector<Queue>& queues);  // all

// The ancestors of queue `name` in `queues` (by name), its parent first: whose figures a
// queue's use adds to (a parent's limit caps its subtree). Stops at an unknown parent, and
// after as many steps as there are queues (a loop, which apply refuses, would not end).
std::vector<std::string> QueueAncestors(const std::map<std::string, Queue>& queues,
                                        const std::string& name);

}  // namespace tessera
