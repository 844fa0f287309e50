#include "engine/node_state.h"

#include <algorithm>

#include "model/gpu.h"

namespace tessera {

namespace {

bool WholeFree(const TaskRequest& r, const NodeState& n, int32_t d) {
  const DeviceState& ds = n.devices[d];
  return ds.tasks == 0 && ds.free_milli == 1000 && ds.free_memory_bytes >= r.gpu.memory_bytes &&
         DeviceMatches(r, n, d);
}

bool FractionFits(const TaskRequest& r, const NodeState& n, int32_t d) {
  const DeviceState& ds = n.devices[d];
  return ds.free_milli >= r.gpu.milli && ds.free_memory_bytes >= r.gpu.memory_bytes &&
         DeviceMatches(r, n, d);
}

}  // namespace

int32_t NodeState::FullyFreeDevices() const {
  int32_t n = 0;
  for (size_t i = 0; i < devices.size(); ++i)
    if (node->devices[i].healthy && devices[i].tasks == 0 && devices[i].free_milli == 1000 &&
        devices[i].mig_used == 0)
      ++n;
  return n;
}

int64_t NodeState::FreeGpuMilli() const {
  int64_t m = 0;
  for (size_t i = 0; i < devices.size(); ++i)
    if (node->devices[i].healthy && !node->devices[i].mig_enabled()) m += devices[i].free_milli;
  return m;
}

int32_t NodeState::UsableDevices() const {
  int32_t n = 0;
  for (size_t i = 0; i < devices.size(); ++i)
    if (node->devices[i].healthy && !node->devices[i].mig_enabled()) ++n;
  return n;
}

int32_t NodeState::FreeMigInstances(const std::string& profile) const {
  int32_t n = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    const Device& d = node->devices[i];
    if (!d.healthy) continue;
    for (size_t k = 0; k < d.mig.size(); ++k)
      if (d.mig[k].profile == profile && !(devices[i].mig_used & (1u << k))) ++n;
  }
  return n;
}

std::optional<int32_t> GpuShapeOf(const TaskAllocation& a) {
  if (a.devices.empty()) return std::nullopt;
  if (a.devices[0].mig_instance >= 0) return -1;
  if (a.devices.size() == 1 && a.devices[0].milli < 1000) return 0;
  return static_cast<int32_t>(a.devices.size());
}

bool DeviceMatches(const TaskRequest& r, const NodeState& node, int32_t d) {
  const Device& dev = node.node->devices[d];
  if (!dev.healthy || !ModelAllowed(r.gpu, dev.model)) return false;
  if (r.gpu.kind == GpuRequestKind::kFraction && !dev.shareable) return false;
  return (r.gpu.kind == GpuRequestKind::kMig) == dev.mig_enabled();
}

namespace {
// What a node lacks for a request, without building the words (scores ask this millions of
// times per cycle; only the pending reason needs the words).
enum class Shortfall {
  kNone,
  kGpu,
  kGpuModel,
  kGpuMilli,
  kGpuMemory,
  kGpuWholeOnly,
  kMig,
  kCpu,
  kMemory,
  kTasks
};

// A GPU request that failed: for want of the model when the node has no device of the models
// asked for; for want of device memory when it has devices of the model but none with as much
// as each device is asked for (more GPUs or a larger share could never help); else `other`.
Shortfall GpuShortfall(const TaskRequest& r, const NodeState& node, Shortfall other) {
  if (!r.gpu.models.empty() &&
      std::none_of(node.node->devices.begin(), node.node->devices.end(),
                   [&](const Device& d) { return ModelAllowed(r.gpu, d.model); }))
    return Shortfall::kGpuModel;
  if (r.gpu.memory_bytes <= 0) return other;
  bool matched = false;
  for (int32_t d = 0; d < static_cast<int32_t>(node.devices.size()); ++d) {
    if (!DeviceMatches(r, node, d)) continue;
    if (node.node->devices[d].memory_bytes >= r.gpu.memory_bytes) return other;
    matched = true;
  }
  return matched ? Shortfall::kGpuMemory : other;
}

Shortfall FitShortfall(const TaskRequest& r, const NodeState& node) {
  if (node.node->max_tasks > 0 && node.live_tasks >= node.node->max_tasks) return Shortfall::kTasks;
  const int32_t nd = static_cast<int32_t>(node.devices.size());
  switch (r.gpu.kind) {
    case GpuRequestKind::kNone:
      break;
    case GpuRequestKind::kWhole: {
      int32_t free = 0;
      for (int32_t d = 0; d < nd && free < r.gpu.count; ++d) free += WholeFree(r, node, d);
      if (free < r.gpu.count) return GpuShortfall(r, node, Shortfall::kGpu);
      break;
    }
    case GpuRequestKind::kFraction: {
      bool any = false;
      for (int32_t d = 0; d < nd && !any; ++d) any = FractionFits(r, node, d);
      if (any) break;
      const Shortfall s = GpuShortfall(r, node, Shortfall::kGpuMilli);
      // Devices no fractional task may share (a Slurm node's): waiting frees no share.
      if (s == Shortfall::kGpuMilli && nd > 0 &&
          std::none_of(node.node->devices.begin(), node.node->devices.end(),
                       [](const Device& d) { return d.shareable; }))
        return Shortfall::kGpuWholeOnly;
      return s;
      break;
    }
    case GpuRequestKind::kMig: {
      int32_t free = 0;
      for (int32_t d = 0; d < nd; ++d) {
        if (!DeviceMatches(r, node, d)) continue;
        const Device& dev = node.node->devices[d];
        for (size_t k = 0; k < dev.mig.size(); ++k)
          if (dev.mig[k].profile == r.gpu.mig_profile && !(node.devices[d].mig_used & (1u << k)))
            ++free;
      }
      if (free < r.gpu.count) return GpuShortfall(r, node, Shortfall::kMig);
      break;
    }
  }
  if (node.free_cpu_milli < r.cpu_milli) return Shortfall::kCpu;
  if (node.free_memory_bytes < r.memory_bytes) return Shortfall::kMemory;
  return Shortfall::kNone;
}
}  // namespace

bool Fits(const TaskRequest& r, const NodeState& node) {
  return FitShortfall(r, node) == Shortfall::kNone;
}

FilterVerdict CheckFit(const TaskRequest& r, const NodeState& node) {
  switch (FitShortfall(r, node)) {
    case Shortfall::kNone:
      return FilterVerdict::Pass();
    case Shortfall::kGpu:
      return FilterVerdict::Fail("Insufficient nvidia.com/gpu", "nvidia.com/gpu");
    case Shortfall::kGpuModel: {
      // Not a shortage (no code "Insufficient"): no amount of waiting frees such a device.
      std::string models;
      for (size_t i = 0; i < r.gpu.models.size(); ++i)
        models += (i == 0 ? "" : i + 1 == r.gpu.models.size() ? " or " : ", ") + r.gpu.models[i];
      return FilterVerdict::Fail("node(s) had no " + models + " GPU");
    }
    case Shortfall::kGpuMilli:
      return FilterVerdict::Fail("Insufficient tessera.io/gpu-milli", "tessera.io/gpu-milli");
    case Shortfall::kGpuMemory:
      return FilterVerdict::Fail("Insufficient tessera.io/gpu-memory", "tessera.io/gpu-memory");
    case Shortfall::kGpuWholeOnly:  // not a shortage either
      return FilterVerdict::Fail("node(s) give whole GPUs only, no fractional share");
    case Shortfall::kMig: {
      std::string res = "nvidia.com/mig-" + r.gpu.mig_profile;
      return FilterVerdict::Fail("Insufficient " + res, res);
    }
    case Shortfall::kCpu:
      return FilterVerdict::Fail("Insufficient cpu", "cpu");
    case Shortfall::kMemory:
      return FilterVerdict::Fail("Insufficient memory", "memory");
    case Shortfall::kTasks:  // kube-scheduler's "Too many pods"
      return FilterVerdict::Fail("Too many tasks", "tasks");
  }
  return FilterVerdict::Pass();
}

bool DefaultDevices(const TaskRequest& r, const NodeState& node,
                    std::vector<DeviceAssignment>& out) {
  out.clear();
  const int32_t nd = static_cast<int32_t>(node.devices.size());
  switch (r.gpu.kind) {
    case GpuRequestKind::kNone:
      return true;
    case GpuRequestKind::kWhole: {
      const int32_t k = r.gpu.count;
      // Best-fit domain: the interconnect island with the fewest free devices that still
      // holds all k (ties: the island whose first free device has the lowest index). A
      // device with domain "" is an island of its own.
      int32_t best_first = -1, best_free = INT32_MAX;
      // Devices already counted in a domain. Nodes have few devices: a word on the stack
      // (this runs for every whole-GPU placement); a vector only past 64.
      uint64_t seen_bits = 0;
      std::vector<bool> seen_more(nd > 64 ? nd : 0, false);
      auto seen = [&](int32_t d) {
        return d < 64 ? (seen_bits >> d & 1) != 0 : bool(seen_more[d]);
      };
      auto mark = [&](int32_t d) {
        if (d < 64)
          seen_bits |= uint64_t{1} << d;
        else
          seen_more[d] = true;
      };
      for (int32_t d = 0; d < nd; ++d) {
        if (seen(d) || !WholeFree(r, node, d)) continue;
        const std::string& dom = node.node->devices[d].domain;
        int32_t free = 0;
        for (int32_t e = d; e < nd; ++e) {
          if (e != d && (dom.empty() || node.node->devices[e].domain != dom)) continue;
          if (WholeFree(r, node, e)) {
            ++free;
            mark(e);
          }
        }
        if (free >= k && free < best_free) {
          best_free = free;
          best_first = d;
        }
      }
      if (best_first >= 0) {
        const std::string& dom = node.node->devices[best_first].domain;
        for (int32_t d = best_first; d < nd && static_cast<int32_t>(out.size()) < k; ++d) {
          if (d != best_first && (dom.empty() || node.node->devices[d].domain != dom)) continue;
          if (WholeFree(r, node, d))
            out.push_back(
                {d, 1000, std::max(r.gpu.memory_bytes, node.node->devices[d].memory_bytes), -1});
        }
        return true;
      }
      for (int32_t d = 0; d < nd && static_cast<int32_t>(out.size()) < k; ++d)
        if (WholeFree(r, node, d))
          out.push_back(
              {d, 1000, std::max(r.gpu.memory_bytes, node.node->devices[d].memory_bytes), -1});
      if (static_cast<int32_t>(out.size()) == k) return true;
      out.clear();
      return false;
    }
    case GpuRequestKind::kFraction: {
      int32_t best = -1;
      for (int32_t d = 0; d < nd; ++d) {
        if (!FractionFits(r, node, d)) continue;
        if (best < 0 || node.devices[d].free_milli < node.devices[best].free_milli ||
            (node.devices[d].free_milli == node.devices[best].free_milli &&
             node.devices[d].free_memory_bytes < node.devices[best].free_memory_bytes))
          best = d;
      }
      if (best < 0) return false;
      out.push_back({best, r.gpu.milli, r.gpu.memory_bytes, -1});
      return true;
    }
    case GpuRequestKind::kMig: {
      for (int32_t d = 0; d < nd && static_cast<int32_t>(out.size()) < r.gpu.count; ++d) {
        if (!DeviceMatches(r, node, d)) continue;
        const Device& dev = node.node->devices[d];
        const MigProfile* p = FindMigProfile(dev.model, r.gpu.mig_profile);
        if (p == nullptr) continue;
        for (size_t k = 0; k < dev.mig.size() && static_cast<int32_t>(out.size()) < r.gpu.count;
             ++k)
          if (dev.mig[k].profile == r.gpu.mig_profile && !(node.devices[d].mig_used & (1u << k)))
            out.push_back({d, static_cast<int32_t>(MigProfileMilli(*p)), p->memory_bytes,
                           static_cast<int32_t>(k)});
      }
      if (static_cast<int32_t>(out.size()) == r.gpu.count) return true;
      out.clear();
      return false;
    }
  }
  return false;
}

bool ValidDevices(const TaskRequest& r, const NodeState& node,
                  const std::vector<DeviceAssignment>& devices) {
  const int32_t nd = static_cast<int32_t>(node.devices.size());
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceAssignment& a = devices[i];
    if (a.device < 0 || a.device >= nd) return false;
    for (size_t j = 0; j < i; ++j)
      if (devices[j].device == a.device && devices[j].mig_instance == a.mig_instance) return false;
  }
  switch (r.gpu.kind) {
    case GpuRequestKind::kNone:
      return devices.empty();
    case GpuRequestKind::kWhole:
      if (static_cast<int32_t>(devices.size()) != r.gpu.count) return false;
      for (const auto& a : devices)
        if (a.mig_instance >= 0 || a.milli != 1000 || !WholeFree(r, node, a.device)) return false;
      return true;
    case GpuRequestKind::kFraction:
      return devices.size() == 1 && devices[0].mig_instance < 0 &&
             devices[0].milli == r.gpu.milli && devices[0].memory_bytes == r.gpu.memory_bytes &&
             FractionFits(r, node, devices[0].device);
    case GpuRequestKind::kMig:
      if (static_cast<int32_t>(devices.size()) != r.gpu.count) return false;
      for (const auto& a : devices) {
        if (!DeviceMatches(r, node, a.device)) return false;
        const Device& dev = node.node->devices[a.device];
        if (a.mig_instance < 0 || a.mig_instance >= static_cast<int32_t>(dev.mig.size()))
          return false;
        if (dev.mig[a.mig_instance].profile != r.gpu.mig_profile) return false;
        if (node.devices[a.device].mig_used & (1u << a.mig_instance)) return false;
      }
      return true;
  }
  return false;
}

namespace {
void AdjustShape(NodeState& node, const TaskAllocation& a, int32_t delta) {
  auto shape = GpuShapeOf(a);
  if (!shape) return;
  auto& v = node.gpu_task_shapes;
  auto it = std::lower_bound(v.begin(), v.end(), std::make_pair(*shape, INT32_MIN));
  if (it != v.end() && it->first == *shape) {
    it->second += delta;
    if (it->second == 0) v.erase(it);
  } else if (delta > 0) {
    v.insert(it, {*shape, delta});
  }
}
}  // namespace

void AdjustFree(NodeState& node, const TaskAllocation& a, int sign) {
  node.free_cpu_milli -= sign * a.cpu_milli;
  node.free_memory_bytes -= sign * a.memory_bytes;
  for (const auto& da : a.devices) {
    DeviceState& ds = node.devices[da.device];
    ds.free_milli -= sign * da.milli;
    ds.free_memory_bytes -= sign * da.memory_bytes;
    ds.tasks += sign;
    if (da.mig_instance >= 0) {
      if (sign > 0)
        ds.mig_used |= (1u << da.mig_instance);
      else
        ds.mig_used &= ~(1u << da.mig_instance);
    }
  }
}

void TakeAllocation(NodeState& node, const TaskAllocation& a) {
  AdjustFree(node, a, +1);
  node.tasks += 1;
  node.live_tasks += !a.idle;
  AdjustShape(node, a, +1);
}

void GiveBackAllocation(NodeState& node, const TaskAllocation& a) {
  AdjustFree(node, a, -1);
  node.tasks -= 1;
  node.live_tasks -= !a.idle;
  AdjustShape(node, a, -1);
}

NodeState EmptyNodeState(const Node* node, int32_t index) {
  NodeState s;
  s.node = node;
  s.index = index;
  s.free_cpu_milli = node->cpu_milli;
  s.free_memory_bytes = node->memory_bytes;
  s.devices.resize(node->devices.size());
  for (size_t i = 0; i < node->devices.size(); ++i) {
    const Device& d = node->devices[i];
    s.devices[i].free_memory_bytes = d.memory_bytes;
    s.devices[i].free_milli = d.healthy ? 1000 : 0;
  }
  return s;
}

}  // namespace tessera
