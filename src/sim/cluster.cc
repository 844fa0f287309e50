#include "sim/cluster.h"

#include <cstdio>
#include <map>

namespace tessera::sim {

namespace {

// The guarantees of the top-level queues must fit in the cluster, and the tree must be one
// that can honour them (CheckQueueGuarantees): a guarantee nothing can honour would make
// reclaim promise what is not there, and the replay's share-vs-guarantee report meaningless.
Status CheckGuarantees(const Snapshot& s) {
  // First a tree: a queue under an unknown parent would escape the top-level sum below.
  if (Status tree = CheckQueueParents(s.queues, "parent"); !tree.ok())
    return InvalidArgument("queues: " + tree.message());
  ResourceVector cluster, top;
  for (const Node& n : s.nodes) {
    cluster.gpu_milli += static_cast<int64_t>(n.devices.size()) * 1000;
    cluster.cpu_milli += n.cpu_milli;
    cluster.memory_bytes += n.memory_bytes;
  }
  for (const Queue& q : s.queues)
    if (q.parent.empty()) top += q.guarantee;
  struct Dim {
    const char* name;
    int64_t want, have;
    bool bytes;
  } dims[] = {{"nvidia.com/gpu", top.gpu_milli, cluster.gpu_milli, false},
              {"cpu", top.cpu_milli, cluster.cpu_milli, false},
              {"memory", top.memory_bytes, cluster.memory_bytes, true}};
  for (const Dim& d : dims) {
    if (d.want <= d.have) continue;
    auto amount = [&](int64_t v) { return d.bytes ? FormatBytes(v) : FormatMilli(v); };
    return InvalidArgument("queues: the guarantees of the top-level queues add up to " +
                           amount(d.want) + " " + d.name + "; the cluster has " + amount(d.have));
  }
  Status tree = CheckQueueGuarantees(s.queues);
  return tree.ok() ? tree : InvalidArgument("queues: " + tree.message());
}

}  // namespace

StatusOr<Snapshot> ClusterFromJson(const Json& doc) {
  ObjectReader r(doc, "");
  Json snap = Json::object();
  Json nodes = Json::array();
  if (const Json* list = r.Get("nodes")) {
    if (!list->is_array()) return InvalidArgument("nodes: expected a list");
    for (const Json& n : *list) nodes.push_back(n);
  }
  if (const Json* groups = r.Get("nodeGroups")) {
    if (!groups->is_array()) return InvalidArgument("nodeGroups: expected a list");
    for (size_t g = 0; g < groups->size(); ++g) {
      const std::string path = "nodeGroups[" + std::to_string(g) + "]";
      ObjectReader gr((*groups)[g], path);
      std::string prefix;
      int64_t count = 0;
      TESSERA_RETURN_IF_ERROR(gr.String("namePrefix", prefix, true));
      TESSERA_RETURN_IF_ERROR(gr.Int("count", count, true, 1));
      if (count > 1000000)
        return InvalidArgument(path + ".count: at most 1000000, got " + std::to_string(count));
      const Json* tmpl = gr.Get("node");
      if (tmpl == nullptr || !tmpl->is_object())
        return InvalidArgument(path + ".node: required, a node without a name");
      if (tmpl->contains("name"))
        return InvalidArgument(path + ".node.name: not allowed; names come from namePrefix");
      TESSERA_RETURN_IF_ERROR(gr.Finish());
      int width = static_cast<int>(std::to_string(count - 1).size());
      for (int64_t i = 0; i < count; ++i) {
        char idx[32];
        std::snprintf(idx, sizeof idx, "%0*lld", width, static_cast<long long>(i));
        Json n = Json::object();
        n["name"] = prefix + idx;
        for (auto it = tmpl->begin(); it != tmpl->end(); ++it) n[it.key()] = it.value();
        // Errors in the template name the group, not the thousandth copy.
        if (i == 0) {
          auto check = NodeFromJson(n, path + ".node");
          if (!check.ok()) return check.status();
        }
        nodes.push_back(std::move(n));
      }
    }
  }
  snap["nodes"] = nodes;
  if (const Json* q = r.Get("queues")) snap["queues"] = *q;
  if (const Json* pc = r.Get("priorityClasses")) snap["priorityClasses"] = *pc;
  TESSERA_RETURN_IF_ERROR(r.Finish());
  auto s = SnapshotFromJson(snap);
  if (!s.ok()) return s.status();
  if (s->nodes.empty())
    return InvalidArgument("nodes: the cluster has no nodes (nodes or nodeGroups)");
  TESSERA_RETURN_IF_ERROR(CheckGuarantees(*s));
  if (s->queues.empty()) {
    Queue q;
    q.name = "default";
    s->queues.push_back(q);
  }
  return s;
}

StatusOr<Snapshot> LoadCluster(const std::string& path) {
  auto doc = LoadYamlFile(path);
  if (!doc.ok()) return doc.status();
  auto s = ClusterFromJson(*doc);
  if (!s.ok()) return s.status().WithContext(path);
  return s;
}

}  // namespace tessera::sim
