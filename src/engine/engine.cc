// Placeholder until the real actions land: every pending job is reported, none placed.
#include "engine/engine.h"

namespace tessera {

StatusOr<EngineConfig> ParseEngineConfig(const Json& doc) { return DefaultEngineConfig(); }
StatusOr<EngineConfig> LoadEngineConfig(const std::string& path) {
  auto doc = LoadYamlFile(path);
  if (!doc.ok()) return doc.status();
  return ParseEngineConfig(*doc);
}
EngineConfig DefaultEngineConfig() { return EngineConfig{}; }

namespace {
class NullEngine : public Engine {
 public:
  Plan Cycle(const Snapshot& snapshot, int64_t now, Rng& rng) const override {
    Plan plan;
    plan.now = now;
    for (const Job& j : snapshot.jobs)
      if (j.RunningTasks() == 0)
        plan.decisions.push_back({j.id, Outcome::kUnschedulable, {"NotImplemented", "engine not built yet", "", {}}});
    return plan;
  }
  Plan Cycle(ClusterState& state, int64_t now, Rng& rng) const override {
    Plan plan;
    plan.now = now;
    return plan;
  }
};
}  // namespace

StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineConfig& config) {
  return std::unique_ptr<Engine>(new NullEngine());
}

}  // namespace tessera
