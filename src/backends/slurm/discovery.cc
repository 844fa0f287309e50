#include "backends/slurm/discovery.h"

#include <algorithm>

namespace tessera::slurm {
namespace {

bool HasFlag(const SlurmNode& n, std::initializer_list<const char*> flags) {
  for (const std::string& f : n.state_flags) {
    for (const char* want : flags) {
      if (f == want) return true;
    }
  }
  return false;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

int64_t GpuCount(const std::vector<GresEntry>& gres) {
  int64_t n = 0;
  for (const GresEntry& g : gres) {
    if (g.name == "gpu") n += g.count;
  }
  return n;
}

}  // namespace

std::vector<std::string> GpuTypes(const SlurmNode& node) {
  std::vector<std::string> types;
  for (const GresEntry& g : node.gres) {
    if (g.name != "gpu") continue;
    for (int64_t i = 0; i < g.count; ++i) types.push_back(g.type);
  }
  return types;
}

bool SlurmNodeReady(const SlurmNode& node) {
  std::string s = Lower(node.state);
  if (s == "down" || s == "unknown" || s == "future" || s == "error" || s == "fail") return false;
  return !HasFlag(
      node, {"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "REBOOT_ISSUED"});
}

bool SlurmNodeSchedulable(const SlurmNode& node) {
  if (!SlurmNodeReady(node)) return false;
  std::string s = Lower(node.state);
  if (s == "drained" || s == "draining" || s == "maint" || s == "reboot") return false;
  return !HasFlag(node, {"DRAIN", "DRAINED", "DRAINING", "FAIL", "FAILING", "MAINTENANCE",
                         "REBOOT_REQUESTED", "POWER_DOWN", "RESERVED"});
}

std::vector<Node> NodesFromSlurm(const std::vector<SlurmNode>& nodes,
                                 const DiscoveryOptions& options,
                                 const std::map<std::string, NodeUsage>& own,
                                 const std::map<std::string, SlurmPartition>& partitions) {
  std::vector<Node> out;
  for (const SlurmNode& sn : nodes) {
    std::vector<std::string> parts;
    for (const std::string& p : sn.partitions) {
      if (options.partitions.empty() ||
          std::find(options.partitions.begin(), options.partitions.end(), p) !=
              options.partitions.end()) {
        parts.push_back(p);
      }
    }
    if (parts.empty()) continue;  // we could not submit there
    std::sort(parts.begin(), parts.end());

    Node n;
    n.name = sn.name;
    n.pool = options.pool;
    std::string joined;
    for (const std::string& p : parts) {
      joined += (joined.empty() ? "" : ",") + p;
      n.labels["slurm.partition." + p] = "true";
    }
    n.labels["slurm.partition"] = joined;
    // Slurm starts nothing in a DOWN partition and takes nothing into a DRAIN or INACTIVE one.
    std::string down;
    bool any_up = false;
    for (const std::string& p : parts) {
      auto it = partitions.find(p);
      if (it == partitions.end() || it->second.state == "UP") {
        any_up = true;
      } else {
        down += (down.empty() ? "" : ",") + p + "=" + it->second.state;
      }
    }
    if (!any_up) n.labels["slurm.partition.down"] = down;
    for (const std::string& f : sn.features) n.labels["slurm.feature." + f] = "true";
    n.labels["slurm.state"] = Lower(sn.state);
    if (!sn.reason.empty()) n.labels["slurm.reason"] = sn.reason;

    // What others (not Tessera) hold here. Tessera's own jobs are in the snapshot already.
    NodeUsage mine;
    if (auto it = own.find(sn.name); it != own.end()) mine = it->second;
    int64_t foreign_cpus = std::max<int64_t>(0, sn.alloc_cpus - mine.cpus);
    int64_t foreign_mem = std::max<int64_t>(0, sn.alloc_memory_mib - mine.memory_mib);
    int64_t foreign_gpus = std::max<int64_t>(0, GpuCount(sn.gres_used) - mine.gpus);
    n.cpu_milli = std::max<int64_t>(0, sn.cpus - foreign_cpus) * 1000;
    n.memory_bytes = std::max<int64_t>(0, sn.real_memory_mib - foreign_mem) * (int64_t{1} << 20);

    std::vector<std::string> types = GpuTypes(sn);
    for (size_t i = 0; i < types.size(); ++i) {
      Device d;
      d.index = static_cast<int32_t>(i);
      const std::string& type = types[i];
      auto model = options.gpu_models.find(type);
      // Unmapped: the type upper-cased, the convention of the sbatch parser (spec), which
      // asks for "--gres=gpu:a100:N" as model A100 (or A100-40GB / A100-80GB).
      d.model =
          model != options.gpu_models.end() ? model->second : Upper(type.empty() ? "gpu" : type);
      auto mem = options.gpu_memory_bytes.find(type);
      d.memory_bytes = mem != options.gpu_memory_bytes.end() ? mem->second : 0;
      d.uuid = "SLURM-" + sn.name + "-gpu" + std::to_string(i);
      d.shareable = false;  // Slurm's GRES hands out whole GPUs: no fractional tasks here
      d.healthy = static_cast<int64_t>(types.size() - i) > foreign_gpus;
      n.devices.push_back(std::move(d));
    }
    if (foreign_gpus > 0) n.labels["slurm.gpus.foreign"] = std::to_string(foreign_gpus);
    n.ready = SlurmNodeReady(sn);
    n.unschedulable = !SlurmNodeSchedulable(sn) || !any_up;
    out.push_back(std::move(n));
  }
  std::sort(out.begin(), out.end(), [](const Node& a, const Node& b) { return a.name < b.name; });
  return out;
}

}  // namespace tessera::slurm
