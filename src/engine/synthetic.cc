#include "engine/synthetic.h"

#include <cstdio>

namespace tessera {

Snapshot SyntheticSnapshot(const SyntheticSpec& spec) {
  constexpr int64_t kGi = 1LL << 30;
  Rng rng(spec.seed);
  Snapshot s;
  s.nodes.reserve(spec.nodes);
  const int32_t g = std::max(0, spec.gpus_per_node);
  for (int32_t i = 0; i < spec.nodes; ++i) {
    Node n;
    char name[32];
    std::snprintf(name, sizeof name, "n%06d", i);
    n.name = name;
    n.cpu_milli = std::max<int64_t>(16, 16LL * g) * 1000;
    n.memory_bytes = std::max<int64_t>(128, 128LL * g) * kGi;
    n.labels["topology.tessera.io/block"] = "b" + std::to_string(i / 32);
    for (int32_t d = 0; d < g; ++d) {
      Device dev;
      dev.index = d;
      dev.model = "H100-80GB";
      dev.memory_bytes = 80 * kGi;
      dev.domain = d < (g + 1) / 2 ? "nvl0" : "nvl1";
      n.devices.push_back(dev);
    }
    s.nodes.push_back(std::move(n));
  }
  if (spec.queues > 1) {
    for (int32_t q = 0; q < spec.queues; ++q) {
      Queue queue;
      char name[16];
      std::snprintf(name, sizeof name, "q%02d", q);
      queue.name = name;
      queue.guarantee.gpu_milli = int64_t{spec.nodes} * g * 1000 / spec.queues;
      s.queues.push_back(queue);
    }
  }
  s.jobs.reserve(spec.jobs);
  for (int32_t i = 0; i < spec.jobs; ++i) {
    Job j;
    char id[32];
    std::snprintf(id, sizeof id, "j%07d", i);
    j.id = id;
    j.submit_time = i;
    j.priority = static_cast<int32_t>(rng.Below(4));
    j.runtime_estimate_seconds = 60 + static_cast<int64_t>(rng.Below(3600));
    TaskGroup grp;
    TaskRequest& r = grp.request;
    int64_t pick = static_cast<int64_t>(rng.Below(100));
    int32_t gpus = 0;
    if ((pick -= spec.fraction_percent) < 0) {
      r.gpu.kind = GpuRequestKind::kFraction;
      r.gpu.count = 1;
      r.gpu.milli = rng.Below(2) ? 500 : 250;
      r.gpu.memory_bytes = r.gpu.milli == 500 ? 40 * kGi : 20 * kGi;
      r.cpu_milli = 4000;
      r.memory_bytes = 32 * kGi;
    } else if ((pick -= spec.one_percent) < 0) {
      gpus = 1;
    } else if ((pick -= spec.two_percent) < 0) {
      gpus = 2;
    } else if ((pick -= spec.four_percent) < 0) {
      gpus = 4;
    } else if ((pick -= spec.eight_percent) < 0) {
      gpus = 8;
    } else {
      r.cpu_milli = 8000;
      r.memory_bytes = 32 * kGi;
    }
    if (gpus > 0) {
      r.gpu.kind = GpuRequestKind::kWhole;
      r.gpu.count = gpus;
      r.cpu_milli = 12000LL * gpus;
      r.memory_bytes = 96 * kGi * gpus;
    }
    if (spec.gang_percent > 0 && static_cast<int32_t>(rng.Below(100)) < spec.gang_percent) {
      grp.replicas = 2 + static_cast<int32_t>(rng.Below(3));
      r = TaskRequest{};
      r.cpu_milli = 8000;
      r.memory_bytes = 64 * kGi;
      r.gpu.kind = GpuRequestKind::kWhole;
      r.gpu.count = 1;
    }
    if (spec.queues > 1) j.queue = s.queues[rng.Below(spec.queues)].name;
    j.groups.push_back(grp);
    j.allocations.assign(j.TaskCount(), std::nullopt);
    s.jobs.push_back(std::move(j));
  }
  s.Canonicalize();
  return s;
}

}  // namespace tessera
