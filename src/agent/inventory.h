// Inventory: what a node agent offers the server.
//
// Either discovered (this host's name, CPUs and memory, GPUs from NVML) or declared by an
// inventory file: `nodes: [<Node as in docs/model.md>, ...]`. Declared GPUs are virtual:
// every one is marked `virtual: true`, gets a UUID that says so ("GPU-VIRTUAL-<node>-<i>",
// MIG instances "MIG-VIRTUAL-<node>-<i>-<j>") and each such node gets the label
// tessera.io/virtual-gpus=true, so that no output can pass them off as real hardware.
// Stateless functions; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/codec.h"
#include "model/node.h"

namespace tessera::agent {

class NvmlGpus;

inline constexpr char kVirtualLabel[] = "tessera.io/virtual-gpus";

// The seed's minimal environment: 2 GPU nodes x 8 A100-80GB (virtual). The same text as
// examples/inventory/seed-minimal.yaml (a test keeps them equal), built in so that the
// embedded default works from any directory.
const std::string& SeedMinimalInventoryYaml();

StatusOr<std::vector<Node>> ParseInventory(const Json& doc);
StatusOr<std::vector<Node>> LoadInventoryFile(const std::string& path);
// "" or "seed-minimal" is the built-in seed inventory; anything else is a file path.
StatusOr<std::vector<Node>> LoadInventory(const std::string& path_or_builtin);

// This host as a node: hostname (or `name`), online CPUs, physical memory, and the GPUs NVML
// reports (none when `nvml` is null), labelled nvidia.com/gpu.product=<model of GPU 0>.
StatusOr<Node> DiscoverHostNode(const std::string& name, NvmlGpus* nvml);

inline constexpr char kGpuProductLabel[] = "nvidia.com/gpu.product";

// What an operator adds to the node an agent registers (`tessera agent --node-labels
// --register-with-taints --pool --cost-per-gpu-hour`, kubelet's names and syntax for the
// first two), on a discovered node and on an inventory node alike.
struct NodeAdditions {
  std::map<std::string, std::string> labels;  // over the node's own, key by key
  std::vector<Taint> taints;                  // replace the node's of the same key and effect
  std::string pool;                           // "" = the node's
  std::optional<int64_t> cost_micros_per_gpu_hour;
  int32_t max_tasks = 0;  // 0 = the node's (the server gives an agent's node 110 when none)
};

// The flags as given (each list flag may repeat). Refused, naming the flag and the bad part
// (`--node-labels: "rack": expected key=value`): a label key or value that Kubernetes would
// refuse, a label Tessera sets itself (kubernetes.io/hostname, tessera.io/virtual-gpus,
// nvidia.com/gpu.product), a taint without an effect or with another effect than
// NoSchedule, PreferNoSchedule or NoExecute, a pool name that is not a label value, a price
// that is not a quantity.
struct NodeAdditionFlags {
  std::vector<std::string> node_labels;  // "k=v,k2=v2"
  std::vector<std::string> taints;       // "key=value:Effect,key:Effect"
  std::string pool;
  std::string cost_per_gpu_hour;  // "2.5": as an inventory's costPerGpuHour
  int64_t max_tasks = 0;          // kubelet's --max-pods; 0 = not given
};
StatusOr<NodeAdditions> ParseNodeAdditions(const NodeAdditionFlags& flags);
void ApplyNodeAdditions(const NodeAdditions& additions, Node& node);

}  // namespace tessera::agent
