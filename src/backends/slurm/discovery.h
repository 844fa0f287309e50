// Discovery: Slurm nodes (sinfo) as Tessera nodes in the "slurm" pool.
//
// One model::Node per Slurm node that is in at least one partition we serve:
//   - cpu_milli = CPUs * 1000 and memory = RealMemory, less what jobs NOT started by
//     Tessera hold there (Slurm's alloc_cpus/alloc_memory minus Tessera's own jobs), so
//     the engine only plans into capacity Slurm will really give;
//   - one Device per GPU of the node's gpu GRES, in gres order ("gpu:a100:4,gpu:v100:2"
//     gives devices 0-3 a100, 4-5 v100); model from DiscoveryOptions::gpu_models (the
//     GRES type upper-cased by default: "a100" -> "A100", as the sbatch parser expects). GPUs held
//     by non-Tessera jobs are marked unhealthy (highest indices first) so the engine does not count
//     them; Slurm, not Tessera, picks which physical GPUs a job gets (CUDA_VISIBLE_DEVICES);
//   - labels: slurm.partition (comma-separated), slurm.partition.<name>=true,
//     slurm.feature.<name>=true, slurm.state, slurm.reason (when set);
//   - ready=false for down/unknown/not-responding nodes; unschedulable=true for those and
//     for drained/draining/failing/maintenance/rebooting/powered-down ones.
// Output is sorted by node name. Stateless; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backends/slurm/slurm_json.h"
#include "model/node.h"

namespace tessera::slurm {

struct DiscoveryOptions {
  std::string pool = "slurm";
  std::vector<std::string> partitions;              // serve only these; empty = every partition
  std::map<std::string, std::string> gpu_models;    // GRES type -> model, "a100" -> "A100-80GB"
  std::map<std::string, int64_t> gpu_memory_bytes;  // GRES type -> device memory
};

// What Slurm holds on one node for jobs (Tessera's own, or everyone's).
struct NodeUsage {
  int64_t cpus = 0;
  int64_t memory_mib = 0;
  int64_t gpus = 0;
  NodeUsage& operator+=(const NodeUsage& o) {
    cpus += o.cpus;
    memory_mib += o.memory_mib;
    gpus += o.gpus;
    return *this;
  }
  friend bool operator==(const NodeUsage&, const NodeUsage&) = default;
};

// `own`: per node, what Tessera's running Slurm jobs hold (as requested from Slurm).
// `partitions`: their states by name (scontrol show partition); a node none of whose served
// partitions is UP takes no new work there (unschedulable, labelled slurm.partition.down).
// A partition missing from it counts as UP.
std::vector<Node> NodesFromSlurm(const std::vector<SlurmNode>& nodes,
                                 const DiscoveryOptions& options,
                                 const std::map<std::string, NodeUsage>& own,
                                 const std::map<std::string, SlurmPartition>& partitions = {});

// The GRES type of each GPU device index of a node, in Tessera's device order.
std::vector<std::string> GpuTypes(const SlurmNode& node);

// True where Slurm cannot start new work on the node now (see the header comment).
bool SlurmNodeReady(const SlurmNode& node);
bool SlurmNodeSchedulable(const SlurmNode& node);

}  // namespace tessera::slurm
