// The `fragmentation` score's resolution: exact by default (any difference decides); with
// `resolutionMilli: 20`, differences in expected fragmentation below 20 milli-GPU tie (the
// lowest node wins) and larger ones decide.
#include <gtest/gtest.h>

#include "engine/engine.h"

namespace tessera {
namespace {

Node OneGpuNode(const std::string& name, const std::string& model) {
  Node n;
  n.name = name;
  n.cpu_milli = 8000;
  n.memory_bytes = int64_t{64} << 30;
  Device d;
  d.index = 0;
  d.model = model;
  d.uuid = "GPU-" + name;
  n.devices.push_back(d);
  return n;
}

TaskRequest WholeGpu(std::vector<std::string> models = {}) {
  TaskRequest r;
  r.cpu_milli = 1000;
  r.gpu.kind = GpuRequestKind::kWhole;
  r.gpu.count = 1;
  r.gpu.models = std::move(models);
  return r;
}

// Places one half-GPU task on nodes "a" (A100) and "b" (V100), both idle, with a typical
// workload of whole GPUs of any model (weight `any`) and whole A100s (weight `a100`).
// Per unit of weight: on a the task fragments 500 milli for both shapes; on b, 500 for
// any-model GPUs but -500 for A100-only ones (b's GPU was all fragment for them already),
// so b is better by 1000 * a100 / (any + a100) milli-GPU.
std::string NodeChosen(int64_t any, int64_t a100, int64_t resolution) {
  EngineConfig c;
  c.actions = {"allocate"};
  EngineConfig::PluginConfig pred, frag;
  pred.name = "predicates";
  frag.name = "fragmentation";
  if (resolution > 0) frag.arguments = Json{{"resolutionMilli", resolution}};
  c.tiers = {{pred, frag}};
  c.typical_requests = {{WholeGpu(), any}, {WholeGpu({"A100"}), a100}};
  auto engine = Engine::Create(c);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return "";
  Snapshot s;
  s.nodes = {OneGpuNode("a", "A100"), OneGpuNode("b", "V100")};
  Queue q;
  q.name = "default";
  s.queues.push_back(q);
  Job job;
  job.id = "half";
  TaskRequest r;
  r.cpu_milli = 1000;
  r.gpu.kind = GpuRequestKind::kFraction;
  r.gpu.count = 1;
  r.gpu.milli = 500;
  job.groups.push_back(TaskGroup{"pod", 1, r});
  job.allocations.resize(1);
  s.jobs.push_back(job);
  Rng rng(1);
  Plan plan = (*engine)->Cycle(s, 0, rng);
  EXPECT_EQ(plan.bindings.size(), 1u);
  return plan.bindings.empty() ? "" : plan.bindings[0].allocation.node;
}

TEST(Fragmentation, ByDefaultEveryDifferenceDecides) {
  EXPECT_EQ(NodeChosen(199, 1, 0), "b");  // b better by 5 milli-GPU
  EXPECT_EQ(NodeChosen(9, 1, 0), "b");    // 100 milli-GPU
}

TEST(Fragmentation, DifferencesBelowTheResolutionTieToTheLowestNode) {
  EXPECT_EQ(NodeChosen(199, 1, 20), "a");  // b better by 5 milli-GPU: a tie
  EXPECT_EQ(NodeChosen(99, 1, 20), "a");   // 10 milli-GPU: still a tie
}

TEST(Fragmentation, DifferencesAboveTheResolutionDecide) {
  EXPECT_EQ(NodeChosen(9, 1, 20), "b");  // 100 milli-GPU
  EXPECT_EQ(NodeChosen(1, 1, 20), "b");  // 500 milli-GPU
}

TEST(Fragmentation, ANegativeResolutionIsRefused) {
  EngineConfig c;
  c.actions = {"allocate"};
  EngineConfig::PluginConfig frag;
  frag.name = "fragmentation";
  frag.arguments = Json{{"resolutionMilli", -5}};
  c.tiers = {{frag}};
  auto engine = Engine::Create(c);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("resolutionMilli"), std::string::npos)
      << engine.status().ToString();
}

}  // namespace
}  // namespace tessera
