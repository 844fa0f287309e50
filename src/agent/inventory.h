// Inventory: what a node agent offers the server.
//
// Either discovered (this host's name, CPUs and memory, GPUs from NVML) or declared by an
// inventory file: `nodes: [<Node as in docs/model.md>, ...]`. Declared GPUs are virtual:
// every one is marked `virtual: true`, gets a UUID that says so ("GPU-VIRTUAL-<node>-<i>",
// MIG instances "MIG-VIRTUAL-<node>-<i>-<j>") and each such node gets the label
// tessera.io/virtual-gpus=true, so that no output can pass them off as real hardware.
// Stateless functions; thread-safe.
#pragma once

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
// reports (none when `nvml` is null).
StatusOr<Node> DiscoverHostNode(const std::string& name, NvmlGpus* nvml);

}  // namespace tessera::agent
