#include "model/queue.h"

#include <map>

namespace tessera {

namespace {

struct Dim {
  const char* name;
  int64_t ResourceVector::*field;
  bool bytes;
};
constexpr Dim kDims[] = {{"nvidia.com/gpu", &ResourceVector::gpu_milli, false},
                         {"cpu", &ResourceVector::cpu_milli, false},
                         {"memory", &ResourceVector::memory_bytes, true}};

std::string Amount(const Dim& d, int64_t v) { return d.bytes ? FormatBytes(v) : FormatMilli(v); }

}  // namespace

Status CheckQueueParents(const std::vector<Queue>& queues, const std::string& parent_field) {
  std::map<std::string, const Queue*> by_name;
  for (const Queue& q : queues) by_name[q.name] = &q;
  for (const Queue& q : queues) {
    if (!q.parent.empty() && by_name.count(q.parent) == 0)
      return InvalidArgument("queue " + q.name + ": " + parent_field + ": unknown queue \"" +
                             q.parent + "\"");
    // A chain into a loop elsewhere stops after as many steps as there are queues: that
    // loop's own queues are refused.
    std::string path = q.name;
    const Queue* at = &q;
    for (size_t steps = 0; !at->parent.empty() && steps < queues.size(); ++steps) {
      path += " -> " + at->parent;
      if (at->parent == q.name)
        return InvalidArgument("queue " + q.name + ": " + parent_field + ": \"" + q.parent +
                               "\" makes a loop (" + path + ")");
      at = by_name.at(at->parent);
    }
  }
  return Status::Ok();
}

std::vector<std::string> QueueGuaranteeViolations(const std::vector<Queue>& queues) {
  std::vector<std::string> out;
  std::map<std::string, const Queue*> by_name;
  std::map<std::string, ResourceVector> children;  // parent -> the sum of its children's
  for (const Queue& q : queues) {
    by_name[q.name] = &q;
    if (!q.parent.empty()) children[q.parent] += q.guarantee;
  }
  for (const auto& [parent, sum] : children) {
    auto it = by_name.find(parent);
    if (it == by_name.end()) continue;
    for (const Dim& d : kDims) {
      const int64_t have = it->second->guarantee.*d.field, want = sum.*d.field;
      // Only the resources the parent is guaranteed bound its children's guarantees.
      if (have == 0 || want <= have) continue;
      out.push_back("queue " + parent + ": its children are guaranteed " + Amount(d, want) + " " +
                    d.name + " together; it is guaranteed " + Amount(d, have) +
                    " (a parent divides its guarantee among them)");
    }
  }
  for (const Queue& q : queues) {
    auto up = by_name.find(q.parent);
    for (size_t steps = 0; up != by_name.end() && steps < queues.size(); ++steps) {
      const Queue& a = *up->second;
      for (const Dim& d : kDims) {
        const int64_t g = q.guarantee.*d.field, l = a.limit ? (*a.limit).*d.field : 0;
        if (l != 0 && g > l)
          out.push_back("queue " + q.name + ": guaranteed " + Amount(d, g) + " " + d.name +
                        ", more than queue " + a.name + " may use (limit " + Amount(d, l) + ")");
        // As Volcano's hierarchy check: a child may not be allowed more than an ancestor
        // (the ancestor's limit caps it anyway: `get queues` would show a limit never reached).
        const int64_t own = q.limit ? (*q.limit).*d.field : 0;
        if (l != 0 && own > l)
          out.push_back("queue " + q.name + ": limit " + Amount(d, own) + " " + d.name +
                        ", more than queue " + a.name + " may use (limit " + Amount(d, l) + ")");
      }
      up = by_name.find(a.parent);
    }
  }
  return out;
}

std::vector<std::string> QueueAncestors(const std::map<std::string, Queue>& queues,
                                        const std::string& name) {
  std::vector<std::string> out;
  auto at = queues.find(name);
  while (at != queues.end() && !at->second.parent.empty() && out.size() < queues.size()) {
    out.push_back(at->second.parent);
    at = queues.find(at->second.parent);
  }
  return out;
}

Status CheckQueueGuarantees(const std::vector<Queue>& queues) {
  auto v = QueueGuaranteeViolations(queues);
  return v.empty() ? Status::Ok() : InvalidArgument(v.front());
}

}  // namespace tessera
