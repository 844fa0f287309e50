// Test helpers for the control plane: a scripted engine, a fake clock, temp dirs.
#pragma once

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <string>

#include "engine/engine.h"

namespace tessera::server::testing {

// An engine whose plan is whatever the test says; by default first-fit of whole GPUs, so the
// control plane's lifecycle can be tested exactly without depending on the real engine.
class ScriptedEngine : public Engine {
 public:
  using Fn = std::function<Plan(const Snapshot&, int64_t)>;
  explicit ScriptedEngine(Fn fn = nullptr) : fn_(std::move(fn)) {}
  Plan Cycle(const Snapshot& s, int64_t now, Rng&) const override {
    return fn_ ? fn_(s, now) : FirstFit(s, now);
  }
  // The server only uses the snapshot form.
  Plan Cycle(ClusterState&, int64_t now, Rng&) const override {
    Plan p;
    p.now = now;
    return p;
  }

  // Places pending jobs' tasks on the first devices free; reports the rest Unschedulable.
  static Plan FirstFit(const Snapshot& s, int64_t now, bool top_up = false) {
    Plan plan;
    plan.now = now;
    std::map<std::pair<std::string, int32_t>, bool> used;
    for (const auto& j : s.jobs)
      for (const auto& a : j.allocations)
        if (a)
          for (const auto& d : a->devices) used[{a->node, d.device}] = true;
    // Higher priority first, then by id (a total order).
    std::vector<const Job*> order;
    for (const auto& j : s.jobs) order.push_back(&j);
    std::stable_sort(order.begin(), order.end(),
                     [](const Job* a, const Job* b) { return a->priority > b->priority; });
    for (const Job* jp : order) {
      const Job& j = *jp;
      if (j.RunningTasks() > 0) {
        // Tops up a running job's missing tasks (RestartTask), each on its own.
        for (int32_t t = 0; top_up && t < j.TaskCount(); ++t) {
          if (j.allocations[t]) continue;
          int32_t want = j.GroupOfTask(t).request.gpu.count;
          for (const auto& n : s.nodes) {
            std::vector<DeviceAssignment> devs;
            for (const auto& d : n.devices)
              if (n.ready && static_cast<int32_t>(devs.size()) < want && !used[{n.name, d.index}])
                devs.push_back({d.index, 1000, 0, -1});
            if (static_cast<int32_t>(devs.size()) < want) continue;
            for (const auto& d : devs) used[{n.name, d.device}] = true;
            plan.bindings.push_back(
                {j.id, t, {n.name, j.GroupOfTask(t).request.cpu_milli, 0, devs}});
            break;
          }
        }
        continue;
      }
      std::vector<Binding> binds;
      auto trial = used;
      for (int32_t t = 0; t < j.TaskCount(); ++t) {
        int32_t want = j.GroupOfTask(t).request.gpu.kind == GpuRequestKind::kWhole
                           ? j.GroupOfTask(t).request.gpu.count
                           : 0;
        for (const auto& n : s.nodes) {
          if (!n.ready) continue;
          std::vector<DeviceAssignment> devs;
          for (const auto& d : n.devices)
            if (static_cast<int32_t>(devs.size()) < want && !trial[{n.name, d.index}])
              devs.push_back({d.index, 1000, 0, -1});
          if (static_cast<int32_t>(devs.size()) < want) continue;
          for (const auto& d : devs) trial[{n.name, d.device}] = true;
          binds.push_back({j.id, t, {n.name, j.GroupOfTask(t).request.cpu_milli, 0, devs}});
          break;
        }
      }
      if (static_cast<int32_t>(binds.size()) >= j.GangMinimum()) {
        used = trial;
        for (auto& b : binds) plan.bindings.push_back(b);
        plan.decisions.push_back({j.id, Outcome::kPlaced, {}});
      } else {
        plan.decisions.push_back(
            {j.id, Outcome::kUnschedulable,
             std::make_shared<const PendingReason>(
                 PendingReason{"Insufficient",
                               "0/" + std::to_string(s.nodes.size()) + " nodes have free GPUs",
                               "nvidia.com/gpu",
                               {}})});
      }
    }
    return plan;
  }

 private:
  Fn fn_;
};

struct FakeClock {
  std::atomic<int64_t> now{1'800'000'000};
  std::function<int64_t()> fn() {
    return [this] { return now.load(); };
  }
};

inline std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tessera_server_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

}  // namespace tessera::server::testing
