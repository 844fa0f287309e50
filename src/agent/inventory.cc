#include "agent/inventory.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "agent/nvml.h"
#include "model/labels.h"
#include "model/resources.h"

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
    if (!n.devices.empty()) n.labels[kGpuProductLabel] = n.devices[0].model;
  }
  return n;
}

namespace {

// The key and value of one item of a label or taint flag, as Kubernetes checks them.
Status CheckKeyValue(const std::string& flag, const std::string& item, const std::string& key,
                     const std::string& value) {
  if (std::string why = LabelKeyProblem(key); !why.empty())
    return InvalidArgument(flag + ": \"" + item + "\": key \"" + key + "\": " + why);
  if (std::string why = LabelValueProblem(value); !why.empty())
    return InvalidArgument(flag + ": \"" + item + "\": value \"" + value + "\": " + why);
  return Status::Ok();
}

// The comma-separated items of every occurrence of a list flag; an empty item is refused.
StatusOr<std::vector<std::string>> FlagItems(const std::vector<std::string>& values,
                                             const std::string& flag) {
  std::vector<std::string> out;
  for (const std::string& v : values) {
    for (size_t start = 0; start <= v.size();) {
      size_t comma = std::min(v.find(',', start), v.size());
      std::string item = v.substr(start, comma - start);
      if (item.empty()) return InvalidArgument(flag + ": an empty item in \"" + v + "\"");
      out.push_back(std::move(item));
      start = comma + 1;
    }
  }
  return out;
}

// Kubernetes keeps one taint per key and effect: `t` replaces one of those, or is added.
void PutTaint(std::vector<Taint>& taints, const Taint& t) {
  auto same = std::find_if(taints.begin(), taints.end(),
                           [&](const Taint& o) { return o.key == t.key && o.effect == t.effect; });
  if (same != taints.end())
    *same = t;
  else
    taints.push_back(t);
}

}  // namespace

StatusOr<NodeAdditions> ParseNodeAdditions(const NodeAdditionFlags& flags) {
  NodeAdditions out;
  const std::string labels_flag = "--node-labels";
  auto labels = FlagItems(flags.node_labels, labels_flag);
  if (!labels.ok()) return labels.status();
  for (const std::string& item : *labels) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return InvalidArgument(labels_flag + ": \"" + item + "\": expected key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    TESSERA_RETURN_IF_ERROR(CheckKeyValue(labels_flag, item, key, value));
    if (key == kHostnameLabel)
      return InvalidArgument(labels_flag + ": \"" + item + "\": " + key +
                             " is set by Tessera to the node's name on every node (name the "
                             "node with --node)");
    if (key == kVirtualLabel)
      return InvalidArgument(labels_flag + ": \"" + item + "\": " + key +
                             " is set by Tessera: true on a node whose GPUs an inventory "
                             "declares, absent on one whose GPUs NVML found");
    if (key == kGpuProductLabel)
      return InvalidArgument(labels_flag + ": \"" + item + "\": " + key +
                             " is set by Tessera from the node's GPUs (NVML's model, or the "
                             "inventory file's labels)");
    out.labels[key] = value;  // a repeated key: the last, as kubelet
  }

  const std::string taints_flag = "--register-with-taints";
  auto taints = FlagItems(flags.taints, taints_flag);
  if (!taints.ok()) return taints.status();
  for (const std::string& item : *taints) {
    const size_t colon = item.rfind(':');
    if (colon == std::string::npos)
      return InvalidArgument(taints_flag + ": \"" + item +
                             "\": expected key=value:Effect or key:Effect (Effect: NoSchedule, "
                             "PreferNoSchedule or NoExecute)");
    const std::string kv = item.substr(0, colon), effect = item.substr(colon + 1);
    Taint t;
    const size_t eq = kv.find('=');
    t.key = kv.substr(0, eq);
    if (eq != std::string::npos) t.value = kv.substr(eq + 1);
    auto parsed = ParseTaintEffect(effect, taints_flag + ": \"" + item + "\"");
    if (!parsed.ok()) return parsed.status();
    t.effect = *parsed;
    TESSERA_RETURN_IF_ERROR(CheckKeyValue(taints_flag, item, t.key, t.value));
    PutTaint(out.taints, t);  // a repeated key and effect: the last
  }

  if (!flags.pool.empty()) {
    if (!LabelValueProblem(flags.pool).empty())
      return InvalidArgument("--pool: \"" + flags.pool +
                             "\": a pool name must be 1-63 characters, letters, digits, '-', '_' "
                             "or '.', with a letter or digit at each end");
    out.pool = flags.pool;
  }

  if (!flags.cost_per_gpu_hour.empty()) {
    auto micros = ParseMicroQuantity(flags.cost_per_gpu_hour);  // as costPerGpuHour
    if (!micros.ok())
      return InvalidArgument("--cost-per-gpu-hour: \"" + flags.cost_per_gpu_hour +
                             "\": not a price (e.g. 2.5, in the currency's units per GPU-hour): " +
                             micros.status().message());
    out.cost_micros_per_gpu_hour = *micros;
  }
  if (flags.max_tasks < 0 || flags.max_tasks > 1000000)
    return InvalidArgument("--max-tasks: " + std::to_string(flags.max_tasks) +
                           ": between 1 and 1000000 (0 or absent: 110)");
  out.max_tasks = static_cast<int32_t>(flags.max_tasks);
  return out;
}

void ApplyNodeAdditions(const NodeAdditions& additions, Node& node) {
  for (const auto& [k, v] : additions.labels) node.labels[k] = v;
  for (const Taint& t : additions.taints) PutTaint(node.taints, t);
  if (!additions.pool.empty()) node.pool = additions.pool;
  if (additions.cost_micros_per_gpu_hour)
    node.cost_micros_per_gpu_hour = *additions.cost_micros_per_gpu_hour;
  if (additions.max_tasks > 0) node.max_tasks = additions.max_tasks;
}

}  // namespace tessera::agent
