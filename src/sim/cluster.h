// Cluster files for the simulator: nodes (explicit, or replicated from a template), queues
// and priority classes, in the model's YAML shape (docs/model.md) plus `nodeGroups`:
//
//   nodeGroups:
//     - {namePrefix: philly-, count: 80, node: {cpu: 48, memory: 256Gi, gpus: {model: P100, count:
//     8}}}
//   nodes: [...]            # optional, model shape
//   queues: [...]           # model shape; jobs of an unknown queue are an error
//   priorityClasses: [...]
//
// Group members are named <namePrefix><index, zero-padded to the group's width>. Strict: an
// unknown key is an error naming its path. Stateless; thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "model/codec.h"
#include "model/snapshot.h"

namespace tessera::sim {

// A snapshot with nodes, queues and priority classes and no jobs.
StatusOr<Snapshot> ClusterFromJson(const Json& doc);
StatusOr<Snapshot> LoadCluster(const std::string& path);

}  // namespace tessera::sim
