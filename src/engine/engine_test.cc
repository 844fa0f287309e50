// Table-driven and property tests of the engine: configuration parsing, determinism,
// the incremental state equals the snapshot path, and capacity is never exceeded.
#include "engine/engine.h"

#include <filesystem>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "engine/cluster_state.h"
#include "engine/plugins/registry.h"
#include "engine/state_impl.h"
#include "engine/synthetic.h"

namespace tessera {
namespace {

std::string SourceDir() {
  const char* s = std::getenv("TESSERA_SOURCE_DIR");
  return s ? s : ".";
}

// ---- configuration ----

struct ConfigCase {
  const char* name;
  const char* yaml;
  const char* error;  // substring of the expected error; nullptr = must parse
};

class ConfigTest : public ::testing::TestWithParam<ConfigCase> {};

TEST_P(ConfigTest, ParsesOrNamesThePath) {
  const ConfigCase& c = GetParam();
  auto doc = ParseYaml(c.yaml);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto cfg = ParseEngineConfig(*doc);
  if (c.error == nullptr) {
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto engine = Engine::Create(*cfg);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  } else {
    ASSERT_FALSE(cfg.ok());
    EXPECT_NE(cfg.status().message().find(c.error), std::string::npos) << cfg.status().message();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ConfigTest,
    ::testing::Values(
        ConfigCase{"volcano", R"(
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
    arguments:
      nodeorder.orderPolicyName: most_allocated
      mostrequested.weight: 2
)",
                   nullptr},
        ConfigCase{"native", R"(
actions: [enqueue, allocate, preempt, reclaim, backfill]
order: [priority, fifo]
filters: [predicates]
scores:
  - {name: fragmentation, weight: 2}
  - {name: topology}
typicalRequests:
  - {resources: {nvidia.com/gpu: 1}, weight: 5}
)",
                   nullptr},
        ConfigCase{"scores_only", "scores: [binpack]", nullptr},
        ConfigCase{"wrong_role", "scores: [priority]",
                   "scores[0]: \"priority\" is not one of the scores (it belongs under: order)"},
        ConfigCase{"native_and_tiers", "scores: [binpack]\ntiers: [{plugins: [{name: gang}]}]",
                   "tiers: use either tiers or order/policies/filters/scores, not both"},
        ConfigCase{"unknown_action", "actions: \"enqueue, allocat\"",
                   "actions[1]: unknown action \"allocat\""},
        ConfigCase{"unknown_plugin", "tiers: [{plugins: [{name: priority}, {name: nope}]}]",
                   "tiers[0].plugins[1].name: unknown plugin \"nope\""},
        ConfigCase{"unknown_argument",
                   "tiers: [{plugins: [{name: binpack, arguments: {cpuu: 1}}]}]",
                   "tiers[0].plugins[0].arguments.cpuu: unknown field"},
        ConfigCase{"unknown_field", "actionz: allocate", "actionz: unknown field"},
        ConfigCase{"unknown_switch", "tiers: [{plugins: [{name: gang, enableFoo: true}]}]",
                   "tiers[0].plugins[0].enableFoo: unknown field"},
        ConfigCase{"preempt_exempt", "preemptExemptSeconds: 600", nullptr},
        ConfigCase{"negative_preempt_exempt", "preemptExemptSeconds: -1",
                   "preemptExemptSeconds: expected an integer >= 0, got -1"},
        ConfigCase{"text_preempt_exempt", "preemptExemptSeconds: 10m",
                   "preemptExemptSeconds: expected an integer >= 0, got \"10m\""},
        ConfigCase{"bad_policy",
                   "tiers: [{plugins: [{name: nodeorder, arguments: {orderPolicyName: best}}]}]",
                   "orderPolicyName: unknown \"best\""}),
    [](const ::testing::TestParamInfo<ConfigCase>& i) { return std::string(i.param.name); });

// Each role given in Tessera's own form replaces the default's plugins of that role only:
// `scores:` alone keeps the default job order, queue policies and filters.
TEST(EngineConfig, ARoleGivenReplacesOnlyThatRoleOfTheDefault) {
  auto names = [](const EngineConfig& c) {
    std::vector<std::string> out;
    for (const auto& tier : c.tiers)
      for (const auto& p : tier) out.push_back(p.name);
    return out;
  };
  auto scores = ParseEngineConfig(*ParseYaml("scores: [{name: binpack, weight: 2}]"));
  ASSERT_TRUE(scores.ok()) << scores.status().ToString();
  EXPECT_EQ(names(*scores), (std::vector<std::string>{"priority", "gang", "las", "drf",
                                                      "proportion", "predicates", "binpack"}));
  auto order = ParseEngineConfig(*ParseYaml("order: [priority, fifo]\npolicies: []"));
  ASSERT_TRUE(order.ok()) << order.status().ToString();
  EXPECT_EQ(names(*order),
            (std::vector<std::string>{"priority", "fifo", "predicates", "fragmentation", "topology",
                                      "nodeaffinity", "topologyspread"}));
  // The example that spells the default out is the default.
  auto spelled = LoadEngineConfig(std::string(SourceDir()) + "/examples/scheduler/tessera.yaml");
  ASSERT_TRUE(spelled.ok()) << spelled.status().ToString();
  EXPECT_EQ(names(*spelled), names(DefaultEngineConfig()));
}

TEST(Examples, SchedulerConfigsParse) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(SourceDir()) / "examples" / "scheduler";
  int n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    auto cfg = LoadEngineConfig(e.path().string());
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    EXPECT_TRUE(Engine::Create(*cfg).ok()) << e.path();
    ++n;
  }
  EXPECT_GE(n, 2) << "expected the Volcano and Tessera examples in " << dir;
  // tessera.yaml says it is the default engine spelled out: it is (its typical requests
  // aside, which the default learns).
  auto spelled = LoadEngineConfig((dir / "tessera.yaml").string());
  ASSERT_TRUE(spelled.ok()) << spelled.status().ToString();
  const EngineConfig def = DefaultEngineConfig();
  EXPECT_EQ(spelled->actions, def.actions);
  auto names = [](const EngineConfig& c) {
    std::vector<std::string> out;
    for (const auto& tier : c.tiers)
      for (const auto& p : tier) out.push_back(p.name + p.arguments.dump());
    return out;
  };
  EXPECT_EQ(names(*spelled), names(def));
}

TEST(Registry, SortedUniqueAndBuildsWithDefaults) {
  const auto& r = PluginRegistry();
  for (size_t i = 1; i < r.size(); ++i)
    EXPECT_LT(std::string(r[i - 1].name), std::string(r[i].name));
  for (const auto& p : r) EXPECT_TRUE(MakePlugin(p.name, Json::object(), "p").ok()) << p.name;
}

// ---- properties over random clusters ----

Snapshot RandomCluster(uint64_t seed) {
  Rng rng(seed);
  SyntheticSpec spec;
  spec.nodes = 3 + static_cast<int32_t>(rng.Below(20));
  spec.gpus_per_node = static_cast<int32_t>(rng.Below(9));
  spec.jobs = 5 + static_cast<int32_t>(rng.Below(120));
  spec.seed = seed;
  spec.gang_percent = static_cast<int32_t>(rng.Below(40));
  Snapshot s = SyntheticSnapshot(spec);
  // Some MIG devices, taints and unhealthy devices, and a few tolerating jobs.
  for (Node& n : s.nodes) {
    if (rng.Below(5) == 0 && !n.devices.empty()) {
      for (Device& d : n.devices) {
        d.model = "A100-40GB";
        d.memory_bytes = 40LL << 30;
        d.mig = {{"3g.20gb", 0, ""}, {"2g.10gb", 4, ""}, {"1g.5gb", 6, ""}};
      }
    }
    if (rng.Below(6) == 0) n.taints.push_back({"dedicated", "x", TaintEffect::kNoSchedule});
    if (rng.Below(8) == 0 && !n.devices.empty()) n.devices[0].healthy = false;
  }
  for (Job& j : s.jobs) {
    if (rng.Below(7) == 0)
      j.placement.tolerations.push_back({"dedicated", Toleration::Op::kExists, "", std::nullopt});
    if (rng.Below(10) == 0) {
      j.groups[0].request = TaskRequest{};
      j.groups[0].request.cpu_milli = 1000;
      j.groups[0].request.memory_bytes = 1LL << 30;
      j.groups[0].request.gpu.kind = GpuRequestKind::kMig;
      j.groups[0].request.gpu.count = 1;
      j.groups[0].request.gpu.mig_profile = rng.Below(2) ? "1g.5gb" : "3g.20gb";
    }
  }
  // Some exclusive jobs (drawn apart, so that the rest of each seed's cluster stays as it was).
  Rng excl(seed * 7919 + 1);
  for (Job& j : s.jobs) j.exclusive = excl.Below(5) == 0;
  // Some task groups with their own placement (tolerating where their job does not, or the
  // other way round), likewise drawn apart.
  Rng own(seed * 104729 + 3);
  for (Job& j : s.jobs) {
    if (own.Below(6) != 0) continue;
    Placement p;
    if (j.placement.tolerations.empty())
      p.tolerations.push_back({"dedicated", Toleration::Op::kExists, "", std::nullopt});
    j.groups.back().placement = p;
  }
  return s;
}

// Checks that no node holds tasks of an exclusive job and of another job, counting what runs
// (evicted tasks too: they run until they exit) and what the plan binds.
void ExpectExclusiveNodesAlone(const Snapshot& s, const Plan& plan) {
  std::map<std::string, bool> exclusive;
  std::map<std::string, std::set<std::string>> jobs_on;  // node -> jobs
  for (const Job& j : s.jobs) {
    exclusive[j.id] = j.exclusive;
    for (const auto& a : j.allocations)
      if (a) jobs_on[a->node].insert(j.id);
  }
  for (const Binding& b : plan.bindings) jobs_on[b.allocation.node].insert(b.job);
  for (const auto& [node, jobs] : jobs_on)
    for (const std::string& j : jobs)
      EXPECT_TRUE(!exclusive[j] || jobs.size() == 1)
          << "node " << node << " holds exclusive job " << j << " and " << jobs.size() - 1
          << " other job(s)";
}

// Checks that the bindings never over-commit a node, a device or a MIG instance.
void ExpectWithinCapacity(const Snapshot& s, const Plan& plan) {
  std::map<std::string, const Node*> nodes;
  for (const Node& n : s.nodes) nodes[n.name] = &n;
  std::map<std::string, int64_t> cpu, mem;
  std::map<std::pair<std::string, int32_t>, int64_t> milli;
  std::set<std::tuple<std::string, int32_t, int32_t>> mig;
  std::set<std::pair<std::string, int32_t>> whole;
  auto take = [&](const TaskAllocation& a) {
    cpu[a.node] += a.cpu_milli;
    mem[a.node] += a.memory_bytes;
    for (const auto& d : a.devices) {
      milli[{a.node, d.device}] += d.milli;
      if (d.mig_instance >= 0) {
        EXPECT_TRUE(mig.insert({a.node, d.device, d.mig_instance}).second) << "MIG instance twice";
      }
    }
  };
  for (const Job& j : s.jobs)
    for (const auto& a : j.allocations)
      if (a) take(*a);
  for (const Binding& b : plan.bindings) {
    ASSERT_TRUE(nodes.count(b.allocation.node));
    const Node& n = *nodes[b.allocation.node];
    for (const auto& d : b.allocation.devices) {
      ASSERT_LT(d.device, static_cast<int32_t>(n.devices.size()));
      EXPECT_TRUE(n.devices[d.device].healthy) << "bound to an unhealthy device";
      EXPECT_EQ(d.mig_instance >= 0, n.devices[d.device].mig_enabled());
    }
    take(b.allocation);
  }
  for (const auto& [name, used] : cpu) EXPECT_LE(used, nodes[name]->cpu_milli) << name;
  for (const auto& [name, used] : mem) EXPECT_LE(used, nodes[name]->memory_bytes) << name;
  for (const auto& [key, used] : milli)
    EXPECT_LE(used, 1000) << key.first << " device " << key.second;
}

class PropertyTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(PropertyTest, CapacityNeverExceededAndPlansAreByteIdentical) {
  Snapshot s = RandomCluster(GetParam());
  for (const char* scores : {"binpack", "fragmentation", "spread"}) {
    Json conf = {{"actions", "enqueue, allocate, preempt, reclaim, backfill"},
                 {"order", Json::array({"priority"})},
                 {"filters", Json::array({"predicates"})},
                 {"scores", Json::array({scores, "topology"})}};
    auto engine = Engine::Create(*ParseEngineConfig(conf));
    ASSERT_TRUE(engine.ok());
    Rng r1(7), r2(7);
    Plan a = (*engine)->Cycle(s, 100, r1);
    Plan b = (*engine)->Cycle(s, 100, r2);
    EXPECT_EQ(PlanToJson(a).dump(), PlanToJson(b).dump()) << scores;
    ExpectWithinCapacity(s, a);
    ExpectExclusiveNodesAlone(s, a);
    // Every pending job has exactly one decision; every placed job has its gang minimum.
    std::map<std::string, int32_t> bound;
    for (const auto& bd : a.bindings) bound[bd.job]++;
    size_t pending = 0;
    for (const Job& j : s.jobs) pending += j.RunningTasks() < j.TaskCount();
    EXPECT_EQ(a.decisions.size(), pending);
    for (const auto& d : a.decisions) {
      const Job* job = nullptr;
      for (const Job& j : s.jobs)
        if (j.id == d.job) job = &j;
      ASSERT_NE(job, nullptr);
      if (d.outcome == Outcome::kPlaced) {
        EXPECT_GE(bound[d.job] + job->RunningTasks(), job->GangMinimum()) << d.job;
      } else {
        EXPECT_EQ(bound[d.job], 0) << d.job << " has bindings but is " << OutcomeName(d.outcome);
        ASSERT_NE(d.reason, nullptr) << d.job;
        EXPECT_FALSE(d.reason->code.empty()) << d.job;
        EXPECT_FALSE(d.reason->message.empty()) << d.job;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, PropertyTest, ::testing::Range<uint64_t>(1, 41));

// ---- incremental host API ----

TEST(ClusterState, CycleOnStateEqualsCycleOnSnapshotAndLeavesStateUnchanged) {
  for (uint64_t seed = 1; seed <= 10; ++seed) {
    Snapshot s = RandomCluster(seed);
    auto engine = Engine::Create(DefaultEngineConfig());
    ASSERT_TRUE(engine.ok());
    auto state = ClusterState::FromSnapshot(s);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    const std::string before = SnapshotToJson((*state)->ToSnapshot()).dump();
    Rng r1(3), r2(3);
    Plan from_snapshot = (*engine)->Cycle(s, 50, r1);
    Plan from_state = (*engine)->Cycle(**state, 50, r2);
    EXPECT_EQ(PlanToJson(from_snapshot).dump(), PlanToJson(from_state).dump()) << "seed " << seed;
    EXPECT_EQ(before, SnapshotToJson((*state)->ToSnapshot()).dump())
        << "the cycle changed the state";
  }
}

TEST(ClusterState, DeltasEqualRebuildingFromSnapshot) {
  // Run three cycles: apply each plan to the kept state, and also rebuild a snapshot with
  // the same bindings; the next plans must be equal.
  Snapshot s = RandomCluster(99);
  auto engine = Engine::Create(DefaultEngineConfig());
  ASSERT_TRUE(engine.ok());
  auto state = ClusterState::FromSnapshot(s);
  ASSERT_TRUE(state.ok());
  for (int cycle = 0; cycle < 3; ++cycle) {
    Rng r1(cycle), r2(cycle);
    Snapshot rebuilt = (*state)->ToSnapshot();
    Plan inc = (*engine)->Cycle(**state, 100 * cycle, r1);
    Plan full = (*engine)->Cycle(rebuilt, 100 * cycle, r2);
    ASSERT_EQ(PlanToJson(inc).dump(), PlanToJson(full).dump()) << "cycle " << cycle;
    Status st = (*state)->ApplyPlan(inc);
    ASSERT_TRUE(st.ok()) << st.ToString();
    // Finish one running job per cycle, as a host would.
    for (const Job& j : (*state)->ToSnapshot().jobs)
      if (j.RunningTasks() > 0) {
        ASSERT_TRUE((*state)->RemoveJob(j.id).ok());
        break;
      }
  }
}

TEST(ClusterState, KeptFilterAndScoreResultsNeverChangeAPlan) {
  // A kept state remembers filter verdicts and scores per (shape, node class) across cycles
  // (PlacementMemo). Alternate engines (each with its own plugins and typical workload), add
  // a node (class ids are then reused) and finish jobs; every plan must equal the plan of a
  // fresh state rebuilt from the same snapshot, which remembers nothing.
  std::vector<std::unique_ptr<Engine>> engines;
  auto add = [&](const EngineConfig& c) {
    auto e = Engine::Create(c);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engines.push_back(std::move(*e));
  };
  for (const char* scores : {"binpack", "fragmentation", "spread"}) {
    Json conf = {{"actions", "enqueue, allocate"},
                 {"order", Json::array({"priority"})},
                 {"filters", Json::array({"predicates"})},
                 {"scores", Json::array({scores, "topology"})}};
    add(*ParseEngineConfig(conf));
  }
  EngineConfig configured = DefaultEngineConfig();
  TaskRequest one_gpu;
  one_gpu.cpu_milli = 1000;
  one_gpu.gpu.kind = GpuRequestKind::kWhole;
  one_gpu.gpu.count = 1;
  configured.typical_requests = {{one_gpu, 3}};
  add(configured);
  add(DefaultEngineConfig());
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Snapshot s = RandomCluster(seed);
    auto state = ClusterState::FromSnapshot(s);
    ASSERT_TRUE(state.ok());
    for (int cycle = 0; cycle < 10; ++cycle) {
      const Engine& engine = *engines[(cycle / 2 + seed) % engines.size()];  // two cycles each
      Rng r1(cycle), r2(cycle);
      Snapshot rebuilt = (*state)->ToSnapshot();
      Plan kept = engine.Cycle(**state, 100 * cycle, r1);
      Plan fresh = engine.Cycle(rebuilt, 100 * cycle, r2);
      ASSERT_EQ(PlanToJson(kept).dump(), PlanToJson(fresh).dump())
          << "seed " << seed << " cycle " << cycle;
      ExpectWithinCapacity(rebuilt, kept);
      ExpectExclusiveNodesAlone(rebuilt, kept);
      ASSERT_TRUE((*state)->ApplyPlan(kept).ok());
      if (cycle == 4) {
        Node extra = s.nodes.front();
        extra.name = "zz-added";
        ASSERT_TRUE((*state)->AddNode(extra).ok());
      }
      for (const Job& j : (*state)->ToSnapshot().jobs)
        if (cycle % 3 == 2 && j.RunningTasks() > 0 && j.id.size() % 2 == 0) {
          ASSERT_TRUE((*state)->RemoveJob(j.id).ok());
        }
    }
  }
}

TEST(ClusterState, LabelsNoJobNamesDoNotSplitClassesButStillFilterWhenNamed) {
  // Node classes ignore the labels no job names (a unique hostname would otherwise make a
  // class per node). A job that names one later must still see it: on a kept state as on a
  // fresh one, its selector, required and preferred affinity hold.
  SyntheticSpec spec;
  spec.nodes = 8;
  spec.gpus_per_node = 2;
  spec.jobs = 0;
  Snapshot s = SyntheticSnapshot(spec);
  // Each job below names a key of its own; in a class of idle nodes, the lowest (node 0)
  // matches none of them.
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    s.nodes[i].labels["kubernetes.io/hostname"] = s.nodes[i].name;
    s.nodes[i].labels["zone"] = i == 5 || i == 6 ? "b" : "a";
    s.nodes[i].labels["rack"] = i == 7 ? "r2" : "r1";
  }
  Json conf = {{"actions", "enqueue, allocate"},
               {"filters", Json::array({"predicates"})},
               {"scores", Json::array({"nodeaffinity"})}};
  auto engine = Engine::Create(*ParseEngineConfig(conf));
  ASSERT_TRUE(engine.ok());
  auto state = ClusterState::FromSnapshot(s);
  ASSERT_TRUE(state.ok());
  auto one_gpu_job = [&](const std::string& id) {
    Job j;
    j.id = id;
    j.groups.push_back({});
    j.groups[0].request.cpu_milli = 1000;
    j.groups[0].request.gpu.kind = GpuRequestKind::kWhole;
    j.groups[0].request.gpu.count = 1;
    j.allocations.assign(1, std::nullopt);
    return j;
  };
  std::vector<Job> named;
  named.push_back(one_gpu_job("zz-preferred"));
  named.back().placement.affinity.preferred.push_back(
      {100, {{{"zone", NodeSelectorRequirement::Op::kIn, {"b"}}}}});
  named.push_back(one_gpu_job("zz-selector"));
  named.back().placement.node_selector["rack"] = "r2";
  named.push_back(one_gpu_job("zz-required"));
  named.back().placement.affinity.required.push_back(
      {{{"kubernetes.io/hostname", NodeSelectorRequirement::Op::kIn, {s.nodes[2].name}}}});
  const std::map<std::string, std::set<std::string>> allowed = {
      {"zz-preferred", {s.nodes[5].name, s.nodes[6].name}},
      {"zz-selector", {s.nodes[7].name}},
      {"zz-required", {s.nodes[2].name}}};
  int cycle = 0;
  for (const Job& j : named) {
    Rng r0(cycle);
    ASSERT_TRUE((*state)->ApplyPlan((*engine)->Cycle(**state, 10 * cycle, r0)).ok());
    ASSERT_TRUE((*state)->AddJob(j).ok());
    Rng r1(cycle), r2(cycle);
    Snapshot rebuilt = (*state)->ToSnapshot();
    Plan kept = (*engine)->Cycle(**state, 10 * cycle + 5, r1);
    Plan fresh = (*engine)->Cycle(rebuilt, 10 * cycle + 5, r2);
    ASSERT_EQ(PlanToJson(kept).dump(), PlanToJson(fresh).dump()) << j.id;
    bool bound = false;
    for (const Binding& b : kept.bindings) {
      if (b.job != j.id) continue;
      bound = true;
      EXPECT_TRUE(allowed.at(j.id).count(b.allocation.node)) << j.id << " on " << b.allocation.node;
    }
    EXPECT_TRUE(bound) << j.id;
    ++cycle;
  }
}

TEST(ClusterState, RejectsWhatItCannotHold) {
  auto st = std::make_unique<ClusterState>();
  Node n;
  n.name = "a";
  n.cpu_milli = 1000;
  n.memory_bytes = 1 << 20;
  ASSERT_TRUE(st->AddNode(n).ok());
  EXPECT_EQ(st->AddNode(n).code(), StatusCode::kAlreadyExists);
  Job j;
  j.id = "x";
  j.queue = "nope";
  j.groups.emplace_back();
  j.allocations.assign(1, std::nullopt);
  Status s = st->AddJob(j);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("unknown queue \"nope\""), std::string::npos);
  j.queue = "default";
  ASSERT_TRUE(st->AddJob(j).ok());
  EXPECT_EQ(st->pending_count(), 1u);
  TaskAllocation a;
  a.node = "ghost";
  EXPECT_EQ(st->Bind("x", 0, a, 0).code(), StatusCode::kNotFound);
  a.node = "a";
  ASSERT_TRUE(st->Bind("x", 0, a, 5).ok());
  EXPECT_EQ(st->pending_count(), 0u);
  EXPECT_EQ(st->FindJob("x")->start_time, 5);
  ASSERT_TRUE(st->RemoveNode("a").ok());
  EXPECT_EQ(st->pending_count(), 1u);  // its task lost the node
}

// An exclusive job is charged each node whole while it holds it: every CPU and healthy GPU,
// and the memory its tasks ask for (as Slurm allocates --exclusive jobs); the charge goes
// with its last task there, and a cycle's trials leave it as it was.
TEST(ClusterState, AnExclusiveJobIsChargedItsNodesWhole) {
  auto st = std::make_unique<ClusterState>();
  Node n;
  n.name = "a";
  n.cpu_milli = 32000;
  n.memory_bytes = 256LL << 30;
  n.devices.resize(4);
  for (Device& d : n.devices) d.memory_bytes = 80LL << 30;
  n.devices[3].healthy = false;  // 3 healthy GPUs
  ASSERT_TRUE(st->AddNode(n).ok());
  Job j;
  j.id = "x";
  j.exclusive = true;
  j.groups.push_back({"w", 2, {}, {}});
  j.groups[0].request.cpu_milli = 1000;
  j.groups[0].request.memory_bytes = 1LL << 30;
  j.groups[0].request.gpu.kind = GpuRequestKind::kWhole;
  j.groups[0].request.gpu.count = 1;
  j.allocations.assign(2, std::nullopt);
  ASSERT_TRUE(st->AddJob(j).ok());
  const ResourceVector& used = st->impl().queues[st->impl().QueueOf("default")].allocated;
  auto task = [](int32_t device) {
    TaskAllocation a;
    a.node = "a";
    a.cpu_milli = 1000;
    a.memory_bytes = 1LL << 30;
    a.devices = {{device, 1000, 0, -1}};
    return a;
  };
  ASSERT_TRUE(st->Bind("x", 0, task(0), 1).ok());
  EXPECT_EQ(used, (ResourceVector{32000, 1LL << 30, 3000}));  // the node, and 1 GiB
  ASSERT_TRUE(st->Bind("x", 1, task(1), 1).ok());
  EXPECT_EQ(used, (ResourceVector{32000, 2LL << 30, 3000}));  // its second task: memory only
  EXPECT_EQ(st->FindNode("a")->exclusive_tasks, 2);
  // A cycle (whose evictions and trials go through the same undo log) changes nothing.
  auto engine = Engine::Create(DefaultEngineConfig());
  ASSERT_TRUE(engine.ok());
  Rng rng(1);
  (void)(*engine)->Cycle(*st, 5, rng);
  EXPECT_EQ(used, (ResourceVector{32000, 2LL << 30, 3000}));
  ASSERT_TRUE(st->Release("x", 0).ok());
  EXPECT_EQ(used, (ResourceVector{32000, 1LL << 30, 3000}));
  ASSERT_TRUE(st->Release("x", 1).ok());
  EXPECT_EQ(used, ResourceVector{});
  EXPECT_EQ(st->FindNode("a")->exclusive_tasks, 0);
}

// The state keeps its pending jobs in a list it updates lazily (binds leave it alone;
// additions wait unsorted until the next cycle). Whatever happened between cycles, a cycle
// decides for exactly the jobs with a waiting task, in id order.
TEST(ClusterState, ACycleSeesExactlyThePendingJobsInIdOrder) {
  auto st = std::make_unique<ClusterState>();
  for (const char* name : {"n1", "n2"}) {
    Node n;
    n.name = name;
    n.cpu_milli = 1000;
    n.memory_bytes = 1 << 30;
    ASSERT_TRUE(st->AddNode(n).ok());
  }
  auto add = [&](const std::string& id, int32_t tasks) {
    Job j;
    j.id = id;
    j.groups.emplace_back();
    j.groups[0].replicas = tasks;
    j.groups[0].request.cpu_milli = 1000;  // a whole node: nothing fits until one is free
    j.allocations.assign(tasks, std::nullopt);
    ASSERT_TRUE(st->AddJob(j).ok()) << id;
  };
  auto bind = [&](const std::string& id, int32_t task, const char* node) {
    TaskAllocation a;
    a.node = node;
    ASSERT_TRUE(st->Bind(id, task, a, 0).ok()) << id;
  };
  auto engine = Engine::Create(DefaultEngineConfig());
  ASSERT_TRUE(engine.ok());
  Rng rng(1);
  auto decided = [&] {
    std::vector<std::string> ids;
    for (const auto& d : (*engine)->Cycle(*st, 0, rng).decisions) ids.push_back(d.job);
    return ids;
  };
  using Ids = std::vector<std::string>;
  for (const char* id : {"m", "c", "x", "a", "k"}) add(id, id[0] == 'k' ? 2 : 1);
  bind("c", 0, "n1");  // placed before any cycle
  EXPECT_EQ(decided(), (Ids{"a", "k", "m", "x"}));
  bind("k", 0, "n2");  // one of its two tasks: still pending
  ASSERT_TRUE(st->RemoveJob("x").ok());
  add("b", 1);  // added after the list was sorted
  add("z", 1);
  ASSERT_TRUE(st->RemoveJob("z").ok());  // gone before any cycle saw it
  EXPECT_EQ(decided(), (Ids{"a", "b", "k", "m"}));
  ASSERT_TRUE(st->Release("c", 0).ok());  // waiting again
  ASSERT_TRUE(st->RemoveJob("a").ok());
  add("a", 1);  // the same id again
  EXPECT_EQ(decided(), (Ids{"a", "b", "c", "k", "m"}));
  ASSERT_TRUE(st->RemoveNode("n2").ok());  // k's task loses its node: k stays listed once
  ASSERT_TRUE(st->RemoveJob("m").ok());
  EXPECT_EQ(decided(), (Ids{"a", "b", "c", "k"}));
  EXPECT_EQ(st->pending_count(), 4u);
}

// A snapshot whose queue parents loop (the server refuses them; an old store or another
// host may still hold one) must not hang the cycle: the loop is cut and jobs still place.
TEST(Engine, QueueParentLoopsDoNotHangTheCycle) {
  auto doc = ParseYaml(R"(
nodes: [{name: a, cpu: 4, memory: 8Gi}]
queues:
  - {name: self, parent: self}
  - {name: qa, parent: qb}
  - {name: qb, parent: qa}
  - {name: leaf, parent: qa}
jobs:
  - {id: j1, queue: self, tasks: [{resources: {cpu: 1}}]}
  - {id: j2, queue: qb, tasks: [{resources: {cpu: 1}}]}
  - {id: j3, queue: leaf, tasks: [{resources: {cpu: 1}}]}
)");
  ASSERT_TRUE(doc.ok());
  auto s = SnapshotFromJson(*doc);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto engine = Engine::Create(DefaultEngineConfig());
  ASSERT_TRUE(engine.ok());
  Rng rng(1);
  Plan p = (*engine)->Cycle(*s, 0, rng);
  ASSERT_EQ(p.decisions.size(), 3u);
  for (const auto& d : p.decisions) EXPECT_EQ(d.outcome, Outcome::kPlaced) << d.job;
  auto st = ClusterState::FromSnapshot(*s);
  ASSERT_TRUE(st.ok());
  EXPECT_EQ((*engine)->Cycle(**st, 0, rng).bindings.size(), 3u);
}

// The Philly thrash, small (tests/scenarios/reclaim-leaves-victim-queue-its-guarantee):
// cycles as a host runs them, each plan applied (evicted tasks exit at once). An eviction
// made for b3 must lead to b3 being placed, not to the victim's queue taking the capacity
// back and reclaim evicting again every cycle.
TEST(Engine, ReclaimEvictsOnceAndThePreemptorIsPlaced) {
  auto doc = LoadYamlFile(
      SourceDir() + "/tests/scenarios/reclaim-leaves-victim-queue-its-guarantee/cluster.yaml");
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const int64_t start = (*doc)["now"].get<int64_t>();
  doc->erase("now");
  auto s = SnapshotFromJson(*doc);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto state = ClusterState::FromSnapshot(*s);
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  auto engine = Engine::Create(DefaultEngineConfig());
  ASSERT_TRUE(engine.ok());
  Rng rng(1);
  std::vector<std::string> evicted;
  int64_t placed_at = -1;
  for (int cycle = 0; cycle < 6; ++cycle) {
    const int64_t now = start + 60 * cycle;
    Plan plan = (*engine)->Cycle(**state, now, rng);
    for (const Eviction& e : plan.evictions) evicted.push_back(e.job);
    for (const Binding& b : plan.bindings)
      if (b.job == "b3" && placed_at < 0) placed_at = now;
    ASSERT_TRUE((*state)->ApplyPlan(plan).ok());
  }
  EXPECT_EQ(evicted, std::vector<std::string>{"c1"});
  EXPECT_EQ(placed_at, start + 60) << "b3 should run in the cycle after its victim exits";
  for (const char* id : {"a1", "a2", "b3"}) {
    auto j = (*state)->FindJob(id);
    ASSERT_TRUE(j.has_value()) << id;
    EXPECT_EQ(j->RunningTasks(), 1) << id;
  }
}

// Queues under a capped parent (tests/scenarios/reclaim-within-capped-parent), at random:
// org, guaranteed and capped at L GPUs, over 2 or 3 children whose guarantees split L and
// who may each borrow up to L, beside an uncapped queue; 1-GPU jobs of random priorities
// arrive over the first cycles, and each plan is applied as a host would (evicted tasks
// exit at once), on nodes with GPUs to spare. No cycle takes a queue above its limit; once
// arrivals stop and the cycles settle, nothing is evicted any more, and no child below its
// guarantee has a job waiting while a sibling is above its own (reclaim took it back).
TEST(Engine, QueuesUnderACappedParentGetTheirGuaranteesBack) {
  auto engine = Engine::Create(DefaultEngineConfig());
  ASSERT_TRUE(engine.ok());
  constexpr int64_t kGi = 1LL << 30;
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    const int64_t cap = 4 + static_cast<int64_t>(rng.Below(9));  // org's guarantee and limit
    const int children = 2 + static_cast<int>(rng.Below(2));
    Snapshot s;
    for (int i = 0; i < 4; ++i) {
      Node n;
      n.name = "n" + std::to_string(i);
      n.cpu_milli = 64000;
      n.memory_bytes = 512 * kGi;
      for (int32_t d = 0; d < 8; ++d) {
        Device dev;
        dev.index = d;
        dev.model = "H100-80GB";
        dev.memory_bytes = 80 * kGi;
        n.devices.push_back(dev);
      }
      s.nodes.push_back(std::move(n));
    }
    auto queue = [](std::string name, std::string parent, int64_t guarantee,
                    std::optional<int64_t> limit) {
      Queue q;
      q.name = std::move(name);
      q.parent = std::move(parent);
      q.guarantee.gpu_milli = guarantee * 1000;
      if (limit) q.limit = ResourceVector{.gpu_milli = *limit * 1000};
      return q;
    };
    s.queues.push_back(queue("org", "", cap, cap));
    std::vector<std::string> kids;
    for (int c = 0; c < children; ++c) {
      kids.push_back("org-" + std::to_string(c));
      const int64_t g = c + 1 < children ? cap / children : cap - (children - 1) * (cap / children);
      s.queues.push_back(queue(kids.back(), "org", g, cap));
    }
    s.queues.push_back(queue("other", "", 0, std::nullopt));
    auto state = ClusterState::FromSnapshot(s);
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    ClusterState& st = **state;
    auto gpus = [&](const std::string& q) {
      return st.impl().queues[st.impl().QueueOf(q)].allocated.gpu_milli / 1000;
    };
    auto guarantee = [&](const std::string& q) {
      return st.impl().queues[st.impl().QueueOf(q)].q.guarantee.gpu_milli / 1000;
    };
    std::map<std::string, std::string> queue_of;  // job -> queue
    int next = 0;
    Rng cycle_rng(1);
    Plan plan;
    for (int cycle = 0; cycle < 14; ++cycle) {
      const int64_t now = 1000 + 60 * cycle;
      const int arrivals = cycle < 6 ? 1 + static_cast<int>(rng.Below(6)) : 0;
      for (int a = 0; a < arrivals; ++a) {
        Job j;
        j.id = "j" + std::to_string(next++);
        const uint64_t pick = rng.Below(kids.size() + 1);
        j.queue = pick < kids.size() ? kids[pick] : "other";
        j.priority = static_cast<int32_t>(rng.Below(3));
        j.submit_time = now;
        TaskGroup grp;
        grp.request.cpu_milli = 1000;
        grp.request.memory_bytes = kGi;
        grp.request.gpu.kind = GpuRequestKind::kWhole;
        grp.request.gpu.count = 1;
        j.groups.push_back(grp);
        j.allocations.assign(1, std::nullopt);
        queue_of[j.id] = j.queue;
        ASSERT_TRUE(st.AddJob(j).ok());
      }
      plan = (*engine)->Cycle(st, now, cycle_rng);
      // What runs (victims too, until they exit) and what the plan binds, within the limits.
      std::map<std::string, int64_t> bound;
      for (const Binding& b : plan.bindings) {
        const std::string& q = queue_of[b.job];
        ++bound[q];
        if (q != "other") ++bound["org"];
      }
      for (const std::string& q : kids)
        EXPECT_LE(gpus(q) + bound[q], cap) << q << " cycle " << cycle;
      EXPECT_LE(gpus("org") + bound["org"], cap) << "cycle " << cycle;
      ASSERT_TRUE(st.ApplyPlan(plan).ok());
    }
    EXPECT_TRUE(plan.evictions.empty()) << "still evicting after the arrivals stopped";
    std::set<std::string> waiting;  // queues with a job that does not run
    for (const auto& [id, q] : queue_of)
      if (st.FindJob(id)->RunningTasks() == 0) waiting.insert(q);
    for (const std::string& c : kids) {
      if (!waiting.count(c) || gpus(c) + 1 > guarantee(c)) continue;
      EXPECT_EQ(gpus("org"), cap) << c << " waits below its guarantee while org has room";
      for (const std::string& sib : kids)
        EXPECT_LE(gpus(sib), guarantee(sib))
            << c << " (" << gpus(c) << " of " << guarantee(c) << " guaranteed) waits while " << sib
            << " holds " << gpus(sib) << " of " << guarantee(sib);
    }
  }
}

TEST(Engine, UnknownQueueIsAnErrorDecision) {
  auto doc = ParseYaml(R"(
nodes: [{name: a, cpu: 4, memory: 8Gi}]
jobs: [{id: j, queue: missing, tasks: [{resources: {cpu: 1}}]}]
)");
  ASSERT_TRUE(doc.ok());
  auto s = SnapshotFromJson(*doc);
  ASSERT_TRUE(s.ok());
  auto engine = Engine::Create(DefaultEngineConfig());
  Rng rng(1);
  Plan p = (*engine)->Cycle(*s, 0, rng);
  ASSERT_EQ(p.decisions.size(), 1u);
  EXPECT_EQ(p.decisions[0].outcome, Outcome::kError);
  ASSERT_NE(p.decisions[0].reason, nullptr);
  EXPECT_EQ(p.decisions[0].reason->code, "UnknownQueue");
}

}  // namespace
}  // namespace tessera
