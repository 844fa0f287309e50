#include "engine/engine.h"

#include <algorithm>
#include <atomic>

#include "engine/engine_impl.h"
#include "engine/plugins/registry.h"

namespace tessera {

StatusOr<std::unique_ptr<Engine>> EngineImpl::Build(const EngineConfig& config) {
  static std::atomic<uint64_t> last_id{0};
  auto e = std::make_unique<EngineImpl>();
  e->id = ++last_id;
  for (size_t i = 0; i < config.actions.size(); ++i) {
    const std::string& a = config.actions[i];
    if (a == "enqueue")
      e->actions.push_back(Action::kEnqueue);
    else if (a == "allocate")
      e->actions.push_back(Action::kAllocate);
    else if (a == "preempt")
      e->actions.push_back(Action::kPreempt);
    else if (a == "reclaim")
      e->actions.push_back(Action::kReclaim);
    else if (a == "backfill")
      e->actions.push_back(Action::kBackfill);
    else
      return InvalidArgument("actions[" + std::to_string(i) + "]: unknown action \"" + a + "\"");
  }
  for (size_t ti = 0; ti < config.tiers.size(); ++ti) {
    for (size_t pi = 0; pi < config.tiers[ti].size(); ++pi) {
      const auto& pc = config.tiers[ti][pi];
      std::string path = "tiers[" + std::to_string(ti) + "].plugins[" + std::to_string(pi) + "]";
      auto made = MakePlugin(pc.name, pc.arguments, path);
      if (!made.ok()) return made.status();
      PluginInstance& p = *made;
      auto on = [&](const char* sw) {
        auto it = pc.switches.find(sw);
        return it == pc.switches.end() || it->second;
      };
      if (p.order && on("JobOrder")) e->orders.push_back(p.order);
      if (p.filter && on("Predicate")) e->filters.push_back(p.filter);
      if (p.score && on("NodeOrder") && p.score_weight > 0)
        e->scores.push_back({p.score, p.score_weight, p.name});
      if (on("QueueOrder")) {
        e->queue_drf |= p.queue_drf;
        e->queue_proportion |= p.queue_proportion;
      }
    }
  }
  // Guard the Normalize/Normalizes contract: the indexed placement path skips Normalize.
  {
    Job job;
    job.groups.emplace_back();
    std::vector<int32_t> none;
    std::vector<TypicalRequest> typical;
    CycleContext ctx;
    ctx.typical = &typical;
    TaskContext t{&job, 0, &job.groups[0].request, &ctx, &none, nullptr, -1};
    for (const auto& sc : e->scores) {
      if (sc.plugin->Normalizes()) continue;
      std::vector<int64_t> probe = {10, 20, 35};
      sc.plugin->Normalize(t, probe);
      if (probe != std::vector<int64_t>{10, 20, 35})
        return InvalidArgument("plugin " + sc.name +
                               ": overrides Normalize but not Normalizes() (see engine/plugin.h)");
    }
  }
  for (size_t i = 0; i < e->scores.size(); ++i) e->device_choosers.push_back(i);
  std::stable_sort(e->device_choosers.begin(), e->device_choosers.end(),
                   [&](size_t a, size_t b) { return e->scores[a].weight > e->scores[b].weight; });
  e->typical = config.typical_requests;
  e->preempt_exempt_seconds = config.preempt_exempt_seconds;
  e->typical_by_gpu = GroupTypicalByGpu(e->typical);
  return std::unique_ptr<Engine>(std::move(e));
}

std::vector<TypicalGpuGroup> GroupTypicalByGpu(const std::vector<TypicalRequest>& typical) {
  std::vector<TypicalGpuGroup> groups;
  for (const TypicalRequest& t : typical) {
    auto g = std::find_if(groups.begin(), groups.end(), [&](const TypicalGpuGroup& x) {
      return x.gpu_only.gpu == t.request.gpu;
    });
    if (g == groups.end()) {
      g = groups.emplace(groups.end());
      g->gpu_only.gpu = t.request.gpu;
    }
    g->members.push_back({t.request.cpu_milli, t.request.memory_bytes, t.weight});
    g->weight += t.weight;
  }
  return groups;
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config) {
  return EngineImpl::Build(config);
}

}  // namespace tessera
