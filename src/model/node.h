// Nodes: machines with CPUs, memory and GPU devices, in exactly one pool.
// Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/gpu.h"

namespace tessera {

// Every node a server knows carries this label with its own name, as kubelet sets it, so
// that a selector or affinity can name one node (sbatch -w/-x are node affinity on it). The
// server sets it; what a registration says under this key is replaced.
inline constexpr char kHostnameLabel[] = "kubernetes.io/hostname";

enum class TaintEffect { kNoSchedule, kPreferNoSchedule, kNoExecute };

struct Taint {
  std::string key;
  std::string value;
  TaintEffect effect = TaintEffect::kNoSchedule;
  friend bool operator==(const Taint&, const Taint&) = default;
};

struct Node {
  std::string name;              // unique; the stable tie-breaker of every sort
  std::string pool = "default";  // which backend runs it: own agents, slurm, kubernetes, cloud
  std::map<std::string, std::string> labels;  // ordered: iteration order is deterministic
  std::vector<Taint> taints;
  int64_t cpu_milli = 0;     // allocatable
  int64_t memory_bytes = 0;  // allocatable
  std::vector<Device> devices;
  int64_t cost_micros_per_gpu_hour = 0;  // price in millionths of the currency unit
  bool spot = false;
  bool ready = true;           // heartbeats arrive
  bool unschedulable = false;  // cordoned / drained
  int32_t max_tasks = 0;       // tasks it runs at most (kubelet's maxPods); 0: no limit
};

// GPU compute of the node's healthy devices: what an exclusive job holding it is charged,
// whichever devices its tasks were bound.
inline int64_t HealthyGpuMilli(const Node& n) {
  int64_t milli = 0;
  for (const Device& d : n.devices) milli += d.healthy ? 1000 : 0;
  return milli;
}

}  // namespace tessera
