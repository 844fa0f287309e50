// The `fragmentation` score's resolution: by default changes in expected fragmentation are
// rounded toward zero to 100 milli-GPU (a tenth of a GPU), nodes in the same step tie and the
// lowest node wins; `resolutionMilli: R` sets another step, and `resolutionMilli: 0` makes
// every difference decide. The default configuration breaks such ties by node, not by node
// size (no binpack); CPU-only tasks break them towards nodes without free GPUs.
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "common/rng.h"
#include "engine/cluster_state.h"
#include "engine/engine.h"
#include "engine/node_state.h"
#include "engine/plugins/builtin.h"
#include "engine/synthetic.h"

namespace tessera {
namespace {

Node GpuNode(const std::string& name, const std::string& model, int32_t gpus = 1) {
  Node n;
  n.name = name;
  n.cpu_milli = 8000 * gpus;
  n.memory_bytes = int64_t{64} * gpus << 30;
  for (int32_t i = 0; i < gpus; ++i) {
    Device d;
    d.index = i;
    d.model = model;
    d.uuid = "GPU-" + name + "-" + std::to_string(i);
    n.devices.push_back(d);
  }
  return n;
}

// The node that `config` gives one task of `request` on `nodes`.
std::string NodeChosen(const EngineConfig& config, std::vector<Node> nodes,
                       const TaskRequest& request) {
  auto engine = Engine::Create(config);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return "";
  Snapshot s;
  s.nodes = std::move(nodes);
  Queue q;
  q.name = "default";
  s.queues.push_back(q);
  Job job;
  job.id = "task";
  job.groups.push_back(TaskGroup{"pod", 1, request, {}});
  job.allocations.resize(1);
  s.jobs.push_back(job);
  Rng rng(1);
  Plan plan = (*engine)->Cycle(s, 0, rng);
  EXPECT_EQ(plan.bindings.size(), 1u);
  return plan.bindings.empty() ? "" : plan.bindings[0].allocation.node;
}

TaskRequest WholeGpu(std::vector<std::string> models = {}) {
  TaskRequest r;
  r.cpu_milli = 1000;
  r.gpu.kind = GpuRequestKind::kWhole;
  r.gpu.count = 1;
  r.gpu.models = std::move(models);
  return r;
}

// Places one 450-milli task on nodes "a" (A100) and "b" (V100), both idle, with a typical
// workload of whole GPUs of any model (weight `any`) and whole A100s (weight `a100`).
// Per unit of weight: on a the task fragments 550 milli for both shapes; on b, 550 for
// any-model GPUs but -450 for A100-only ones (b's GPU was all fragment for them already),
// so b is better by 1000 * a100 / (any + a100) milli-GPU. No `resolution`: the default.
std::string NodeChosen(int64_t any, int64_t a100, std::optional<int64_t> resolution) {
  EngineConfig c;
  c.actions = {"allocate"};
  EngineConfig::PluginConfig pred, frag;
  pred.name = "predicates";
  frag.name = "fragmentation";
  if (resolution) frag.arguments = Json{{"resolutionMilli", *resolution}};
  c.tiers = {{pred, frag}};
  c.typical_requests = {{WholeGpu(), any}, {WholeGpu({"A100"}), a100}};
  TaskRequest r;
  r.cpu_milli = 1000;
  r.gpu.kind = GpuRequestKind::kFraction;
  r.gpu.count = 1;
  r.gpu.milli = 450;
  return NodeChosen(c, {GpuNode("a", "A100"), GpuNode("b", "V100")}, r);
}

TEST(Fragmentation, ByDefaultDifferencesBelowATenthOfAGpuTieToTheLowestNode) {
  // a scores -550 -> -500 milli-GPU; b -550 + 1000 * a100 / (any + a100), rounded toward
  // zero to 100s.
  EXPECT_EQ(NodeChosen(199, 1, std::nullopt), "a");  // b -545 -> -500: a tie
  EXPECT_EQ(NodeChosen(19, 1, std::nullopt), "a");   // b -500 -> -500: a tie
  EXPECT_EQ(NodeChosen(9, 1, std::nullopt), "b");    // b -450 -> -400: better by 100
  EXPECT_EQ(NodeChosen(1, 1, std::nullopt), "b");    // b -50 -> 0: better by 500
}

TEST(Fragmentation, ResolutionZeroLetsEveryDifferenceDecide) {
  EXPECT_EQ(NodeChosen(199, 1, 0), "b");  // b better by 5 milli-GPU
  EXPECT_EQ(NodeChosen(9, 1, 0), "b");    // 100 milli-GPU
}

TEST(Fragmentation, DifferencesBelowTheResolutionTieToTheLowestNode) {
  // a -550 -> -540; b -545 and -540 -> -540.
  EXPECT_EQ(NodeChosen(199, 1, 20), "a");  // b better by 5 milli-GPU: a tie
  EXPECT_EQ(NodeChosen(99, 1, 20), "a");   // 10 milli-GPU: still a tie
}

TEST(Fragmentation, DifferencesAboveTheResolutionDecide) {
  EXPECT_EQ(NodeChosen(9, 1, 20), "b");  // 100 milli-GPU
  EXPECT_EQ(NodeChosen(1, 1, 20), "b");  // 500 milli-GPU
}

// One whole GPU on an idle 8-GPU node "a" or an idle 2-GPU node "b", typical workload whole
// GPUs: fragmentation is 0 on both before and after, a tie. The default configuration
// gives it to the lowest node; a percent-of-capacity binpack would take the small node
// (1/2 used against 1/8), and in mixed-model pools small nodes are often the scarce models.
TEST(Fragmentation, TheDefaultConfigurationBreaksTiesByNodeNotBySize) {
  EngineConfig c = DefaultEngineConfig();
  c.typical_requests = {{WholeGpu(), 1}};
  std::vector<Node> nodes = {GpuNode("a", "G2", 8), GpuNode("b", "T4", 2)};
  EXPECT_EQ(NodeChosen(c, nodes, WholeGpu()), "a");

  EngineConfig::PluginConfig binpack;
  binpack.name = "binpack";
  c.tiers.back().push_back(binpack);
  EXPECT_EQ(NodeChosen(c, nodes, WholeGpu()), "b");
}

EngineConfig FragmentationOnly(std::vector<TypicalRequest> typical) {
  EngineConfig c;
  c.actions = {"allocate"};
  EngineConfig::PluginConfig frag;
  frag.name = "fragmentation";
  c.tiers = {{frag}};
  c.typical_requests = std::move(typical);
  return c;
}

TaskRequest CpuOnly(int64_t cpu_milli) {
  TaskRequest r;
  r.cpu_milli = cpu_milli;
  return r;
}

// A CPU-only task on idle 1-GPU nodes "a" (8 cores) and "b" (16 cores). Typical workload:
// a whole GPU with 1 core (weight 100 - w) and with 8 cores (weight w). On a the task leaves
// 7 cores, so the 8-core shape no longer fits: F rises by w * 1000 / 100 = 10 * w milli-GPU;
// on b nothing changes. Rounding toward zero makes a rise below 100 milli count as none (a
// tie, the lowest node wins); rounding down would have put a a whole step behind b.
TEST(Fragmentation, AChangeSmallerThanTheResolutionCountsAsNone) {
  for (int64_t w : {5, 9, 10, 15}) {
    TaskRequest small = WholeGpu(), large = WholeGpu();
    large.cpu_milli = 8000;
    EngineConfig c = FragmentationOnly({{small, 100 - w}, {large, w}});
    Node a = GpuNode("a", "G", 1), b = GpuNode("b", "G", 1);
    b.cpu_milli = 16000;
    EXPECT_EQ(NodeChosen(c, {a, b}, CpuOnly(1000)), w < 10 ? "a" : "b") << "w = " << w;
  }
}

// A CPU-only task where it changes no fragmentation: on an idle 1-GPU node "a" or a node "b"
// whose GPU is taken (here: one without GPUs). Same step; the task takes b's CPU and leaves
// a's for the GPU tasks, which need a's CPU and GPU together.
TEST(Fragmentation, ACpuOnlyTaskPrefersTheNodeWithoutFreeGpus) {
  EngineConfig c = FragmentationOnly({{WholeGpu(), 1}});
  Node a = GpuNode("a", "G", 1), b = GpuNode("b", "G", 1);
  b.devices.clear();
  EXPECT_EQ(NodeChosen(c, {a, b}, CpuOnly(1000)), "b");
  // GPU tasks are not affected: a whole GPU goes to the lowest node that has one.
  EXPECT_EQ(NodeChosen(c, {a, GpuNode("b", "G", 1)}, WholeGpu()), "a");
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

// F(n) as defined (plugin comment): per typical request, weight x (all free GPU milli G(n) if
// it uses no GPU or does not fit n, else the free milli on devices too small for it). The
// plugin computes it from one summary pass; this is the slow, obvious reading.
int64_t FragmentationByDefinition(const std::vector<TypicalRequest>& typical, const NodeState& n) {
  int64_t g = 0;
  for (size_t i = 0; i < n.devices.size(); ++i)
    if (n.node->devices[i].healthy && !n.node->devices[i].mig_enabled())
      g += std::max(0, n.devices[i].free_milli);
  int64_t total = 0;
  for (const TypicalRequest& t : typical) {
    const GpuRequest& r = t.request.gpu;
    int64_t f = g;
    if (r.kind != GpuRequestKind::kNone && Fits(t.request, n)) {
      f = 0;
      for (size_t i = 0; i < n.devices.size(); ++i) {
        const Device& d = n.node->devices[i];
        const int32_t free = n.devices[i].free_milli;
        if (!d.healthy || d.mig_enabled()) continue;
        if ((r.kind == GpuRequestKind::kWhole && free < 1000) ||
            (r.kind == GpuRequestKind::kFraction && free < r.milli))
          f += std::max(0, free);
      }
    }
    total += t.weight * f;
  }
  return total;
}

// A random node of 0-20 devices (Frag's summary covers 16), mixed models, some unhealthy
// or MIG, partly used; `node` holds its static side.
NodeState RandomNode(Rng& rng, Node& node) {
  const std::vector<std::string> models = {"A100", "H100"};
  auto pick = [&](uint64_t n) { return static_cast<int32_t>(rng.Below(n)); };
  node = GpuNode("n", models[pick(2)], pick(21));
  const bool mixed = pick(4) == 0;
  for (Device& d : node.devices) {
    d.memory_bytes = int64_t{pick(2) ? 40 : 80} << 30;
    if (mixed) d.model = models[pick(2)];
    d.healthy = pick(10) != 0;
    if (pick(10) == 0) d.mig = {{"1g.10gb", 0, ""}, {"3g.40gb", 4, ""}};
  }
  NodeState n;
  n.node = &node;
  n.free_cpu_milli = pick(3) * 8000;
  n.free_memory_bytes = int64_t{pick(3)} << 35;
  for (const Device& d : node.devices) {
    DeviceState s;
    const int32_t used = std::vector<int32_t>{0, 0, 250, 500, 750, 1000, pick(1001)}[pick(7)];
    s.free_milli = 1000 - used;
    s.tasks = used > 0 ? 1 + pick(3) : pick(8) == 0;  // now and then a task using no compute
    s.free_memory_bytes = d.memory_bytes - (int64_t{used} << 30) / 25 * 2;
    if (d.mig_enabled()) s.mig_used = static_cast<uint32_t>(pick(4));
    n.devices.push_back(s);
  }
  return n;
}

// A random request: CPU only, whole GPUs, a fraction or a MIG slice; some with GPU memory
// or a model.
TaskRequest RandomRequest(Rng& rng) {
  const std::vector<std::string> models = {"A100", "H100"};
  auto pick = [&](uint64_t n) { return static_cast<int32_t>(rng.Below(n)); };
  TaskRequest r;
  r.cpu_milli = pick(3) * 4000;
  r.memory_bytes = int64_t{pick(3)} << 34;
  switch (pick(4)) {
    case 0:
      break;  // CPU only
    case 1:
      r.gpu.kind = GpuRequestKind::kWhole;
      r.gpu.count = 1 + pick(4);
      break;
    case 2:
      r.gpu.kind = GpuRequestKind::kFraction;
      r.gpu.count = 1;
      r.gpu.milli = 1 + pick(999);
      break;
    default:
      r.gpu.kind = GpuRequestKind::kMig;
      r.gpu.count = 1;
      r.gpu.mig_profile = pick(2) ? "1g.10gb" : "3g.40gb";
  }
  if (r.gpu.kind != GpuRequestKind::kMig && pick(3) == 0)
    r.gpu.memory_bytes = int64_t{pick(81)} << 30;
  if (pick(3) == 0) r.gpu.models = {models[pick(2)]};
  return r;
}

std::vector<TypicalRequest> RandomTypical(Rng& rng) {
  std::vector<TypicalRequest> typical;
  for (int k = static_cast<int>(rng.Below(6)) + 1; k-- > 0;)
    typical.push_back({RandomRequest(rng), 1 + static_cast<int64_t>(rng.Below(100))});
  return typical;
}

TEST(Fragmentation, ExpectedFragmentationMatchesItsDefinitionOnRandomNodes) {
  Rng rng(7);
  for (int round = 0; round < 20000; ++round) {
    Node node;
    const NodeState n = RandomNode(rng, node);
    const std::vector<TypicalRequest> typical = RandomTypical(rng);
    ASSERT_EQ(ExpectedFragmentation(typical, n), FragmentationByDefinition(typical, n))
        << "round " << round;
  }
}

// The engine keeps the device choice that ScoreChoosing makes with a node class's score and
// uses it instead of asking ChooseDevices: both must agree, and the score must be Score's.
TEST(Fragmentation, ScoreChoosingAgreesWithScoreAndChooseDevices) {
  auto plugin = MakeFragmentation(Json::object(), "fragmentation");
  ASSERT_TRUE(plugin.ok());
  const ScorePlugin& frag = *plugin->score;
  Rng rng(11);
  int chosen = 0;
  for (int round = 0; round < 5000; ++round) {
    Node node;
    const NodeState n = RandomNode(rng, node);
    const std::vector<TypicalRequest> typical = RandomTypical(rng);
    const std::vector<TypicalGpuGroup> groups = GroupTypicalByGpu(typical);
    CycleContext ctx;
    ctx.typical = &typical;
    ctx.typical_by_gpu = &groups;
    for (const auto& t : typical) ctx.typical_total_weight += t.weight;
    Job job;
    job.groups.push_back({"pod", 1, RandomRequest(rng), {}});
    const std::vector<int32_t> none;
    TaskContext t{&job, 0, &job.groups[0].request, &ctx, &none, nullptr, 0};
    std::vector<DeviceAssignment> with_score, asked;
    const int64_t score = frag.ScoreChoosing(t, n, with_score);
    EXPECT_EQ(score, frag.Score(t, n)) << "round " << round;
    const bool chooses = frag.ChooseDevices(t, n, asked);
    EXPECT_EQ(chooses, !with_score.empty()) << "round " << round;
    if (chooses) {
      EXPECT_EQ(with_score, asked) << "round " << round;
    }
    chosen += chooses;
  }
  EXPECT_GT(chosen, 200) << "too few rounds where a fraction fits to check the choice";
}

// The same through the engine, which reuses choices across the nodes of a class: replaying
// a plan's bindings in order, each fraction's devices are what ChooseDevices picks on its
// node at that point.
TEST(Fragmentation, EveryFractionGetsTheDevicesChooseDevicesPicksThen) {
  EngineConfig c;
  c.actions = {"allocate"};
  EngineConfig::PluginConfig pred, frag;
  pred.name = "predicates";
  frag.name = "fragmentation";
  c.tiers = {{pred, frag}};
  TaskRequest half;
  half.cpu_milli = 1000;
  half.gpu.kind = GpuRequestKind::kFraction;
  half.gpu.count = 1;
  half.gpu.milli = 500;
  c.typical_requests = {{WholeGpu(), 5}, {half, 3}};
  auto engine = Engine::Create(c);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto plugin = MakeFragmentation(Json::object(), "fragmentation");
  ASSERT_TRUE(plugin.ok());
  const std::vector<TypicalGpuGroup> groups = GroupTypicalByGpu(c.typical_requests);
  CycleContext ctx;
  ctx.typical = &c.typical_requests;
  ctx.typical_by_gpu = &groups;
  ctx.typical_total_weight = 8;
  int fractions = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    SyntheticSpec spec;
    spec.nodes = 4 + static_cast<int32_t>(seed % 7);
    spec.gpus_per_node = 1 + static_cast<int32_t>(seed % 8);
    spec.jobs = 12 * spec.nodes;
    spec.seed = seed;
    spec.fraction_percent = 70;
    spec.one_percent = 20;
    Snapshot s = SyntheticSnapshot(spec);
    Rng rng(seed);
    const Plan plan = (*engine)->Cycle(s, 0, rng);
    auto state = ClusterState::FromSnapshot(s);
    ASSERT_TRUE(state.ok());
    std::map<std::string, const Job*> jobs;
    for (const Job& j : s.jobs) jobs[j.id] = &j;
    for (const Binding& b : plan.bindings) {
      const Job& job = *jobs.at(b.job);
      const TaskRequest& r = job.groups[0].request;
      if (r.gpu.kind == GpuRequestKind::kFraction) {
        const std::vector<int32_t> none;
        TaskContext t{&job, b.task, &r, &ctx, &none, nullptr, 0};
        std::vector<DeviceAssignment> devs;
        ASSERT_TRUE(plugin->score->ChooseDevices(t, *(*state)->FindNode(b.allocation.node), devs));
        EXPECT_EQ(devs, b.allocation.devices) << "seed " << seed << ", " << b.job;
        ++fractions;
      }
      ASSERT_TRUE((*state)->Bind(b.job, b.task, b.allocation, 0).ok());
    }
  }
  EXPECT_GT(fractions, 300);
}

}  // namespace
}  // namespace tessera
