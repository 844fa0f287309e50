#include "model/job.h"

#include <algorithm>
#include <cassert>

#include "model/snapshot.h"

namespace tessera {

int32_t Job::TaskCount() const {
  int32_t n = 0;
  for (const TaskGroup& g : groups) n += g.replicas;
  return n;
}

int32_t Job::GangMinimum() const { return min_available > 0 ? min_available : TaskCount(); }

const TaskGroup& Job::GroupOfTask(int32_t task) const {
  for (const TaskGroup& g : groups) {
    if (task < g.replicas) return g;
    task -= g.replicas;
  }
  assert(false && "task index out of range");
  return groups.back();
}

bool Job::Unconstrained() const {
  return placement.empty() && std::all_of(groups.begin(), groups.end(), [](const TaskGroup& g) {
           return (!g.placement || g.placement->empty()) && g.spread.empty();
         });
}

int32_t Job::RunningTasks() const {
  return static_cast<int32_t>(
      std::count_if(allocations.begin(), allocations.end(), [](const auto& a) { return a.has_value(); }));
}

void Snapshot::Canonicalize() {
  std::sort(nodes.begin(), nodes.end(), [](const Node& a, const Node& b) { return a.name < b.name; });
  std::sort(queues.begin(), queues.end(), [](const Queue& a, const Queue& b) { return a.name < b.name; });
  std::sort(priority_classes.begin(), priority_classes.end(),
            [](const PriorityClass& a, const PriorityClass& b) { return a.name < b.name; });
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.id < b.id; });
}

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kPlaced: return "Placed";
    case Outcome::kUnschedulable: return "Unschedulable";
    case Outcome::kInfeasible: return "Infeasible";
    case Outcome::kWaiting: return "Waiting";
    case Outcome::kError: return "Error";
  }
  return "Unknown";
}

}  // namespace tessera
