#include "agent/inventory.h"

#include <unistd.h>

#include "agent/nvml.h"

namespace tessera::agent {

const std::string& SeedMinimalInventoryYaml() {
  static const std::string kText =
      R"(# The seed's minimal environment: 2 GPU nodes x 8 A100-80GB, NVSwitch inside each node.
# Declared, not discovered: every GPU here is virtual (no NVML needed) and says so.
nodes:
  - name: gpu-node-1
    pool: default
    labels: {nvidia.com/gpu.product: A100-80GB}
    cpu: 128
    memory: 1Ti
    gpus: {model: A100-80GB, count: 8, memory: 80Gi, domain: gpu-node-1-nvswitch}
  - name: gpu-node-2
    pool: default
    labels: {nvidia.com/gpu.product: A100-80GB}
    cpu: 128
    memory: 1Ti
    gpus: {model: A100-80GB, count: 8, memory: 80Gi, domain: gpu-node-2-nvswitch}
)";
  return kText;
}

StatusOr<std::vector<Node>> ParseInventory(const Json& doc) {
  if (!doc.is_object()) return InvalidArgument("inventory: must be an object with `nodes`");
  ObjectReader r(doc, "");
  const Json* nodes = r.Get("nodes");
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (nodes == nullptr || !nodes->is_array() || nodes->empty())
    return InvalidArgument("nodes: must be a non-empty list");
  std::vector<Node> out;
  for (size_t i = 0; i < nodes->size(); ++i) {
    const std::string path = "nodes[" + std::to_string(i) + "]";
    auto n = NodeFromJson((*nodes)[i], path);
    if (!n.ok()) return n.status();
    for (const auto& prev : out) {
      if (prev.name == n->name)
        return InvalidArgument(path + ".name: \"" + n->name + "\" appears twice");
    }
    for (auto& d : n->devices) {
      d.is_virtual = true;
      if (d.uuid.empty()) d.uuid = "GPU-VIRTUAL-" + n->name + "-" + std::to_string(d.index);
      for (size_t m = 0; m < d.mig.size(); ++m) {
        if (d.mig[m].uuid.empty())
          d.mig[m].uuid =
              "MIG-VIRTUAL-" + n->name + "-" + std::to_string(d.index) + "-" + std::to_string(m);
      }
    }
    if (!n->devices.empty()) n->labels[kVirtualLabel] = "true";
    out.push_back(std::move(*n));
  }
  return out;
}

StatusOr<std::vector<Node>> LoadInventoryFile(const std::string& path) {
  auto doc = LoadYamlFile(path);
  if (!doc.ok()) return doc.status();
  auto nodes = ParseInventory(*doc);
  if (!nodes.ok()) return nodes.status().WithContext(path);
  return nodes;
}

StatusOr<std::vector<Node>> LoadInventory(const std::string& path_or_builtin) {
  if (path_or_builtin.empty() || path_or_builtin == "seed-minimal") {
    auto doc = ParseYaml(SeedMinimalInventoryYaml());
    if (!doc.ok()) return doc.status();
    return ParseInventory(*doc);
  }
  return LoadInventoryFile(path_or_builtin);
}

StatusOr<Node> DiscoverHostNode(const std::string& name, NvmlGpus* nvml) {
  Node n;
  n.name = name;
  if (n.name.empty()) {
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == 0)
      return Unavailable("node name: gethostname failed; pass --node");
    n.name = host;
  }
  long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  long pages = ::sysconf(_SC_PHYS_PAGES);
  long page = ::sysconf(_SC_PAGESIZE);
  n.cpu_milli = cpus > 0 ? cpus * 1000 : 1000;
  n.memory_bytes = (pages > 0 && page > 0) ? static_cast<int64_t>(pages) * page : 0;
  if (nvml != nullptr) {
    auto devs = nvml->Discover();
    if (!devs.ok()) return devs.status();
    n.devices = std::move(*devs);
    if (!n.devices.empty()) n.labels["nvidia.com/gpu.product"] = n.devices[0].model;
  }
  return n;
}

}  // namespace tessera::agent
