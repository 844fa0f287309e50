// Data-driven scenarios: every folder in tests/scenarios/ holds cluster.yaml (a snapshot in
// model/codec shape plus optional `config:` and `now:`) and expected.yaml (the parts of the
// plan to check). Adding a regression test = adding a folder. The expected.yaml shape:
//
//   bindings:          # the plan's bindings, exactly (any order); omit to not check
//     - {job: a, task: 0, node: n1, devices: [0, 1], migInstances: [2]}
//   evictions:         # exactly (any order); omit to not check
//     - {job: v, task: 0, reason: Preempted, preemptor: p, gracePeriodSeconds: 30,
//        message: "exact text"}   # messages checked when any eviction gives one
//   reservations:      # exactly; earliestStart optional
//     - {job: big, nodes: [n1], earliestStart: 100}
//   decisions:         # only the jobs listed
//     - {job: x, outcome: Unschedulable, code: Insufficient, resource: nvidia.com/gpu,
//        message: "exact text", messageContains: "part", rejectedNodes: {"Insufficient cpu": 2}}
#include <algorithm>
#include <filesystem>
#include <set>

#include <gtest/gtest.h>

#include "engine/cluster_state.h"
#include "engine/engine.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path ScenarioRoot() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return fs::path(src ? src : ".") / "tests" / "scenarios";
}

std::vector<std::string> ScenarioNames() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ScenarioRoot(), ec))
    if (e.is_directory() && fs::exists(e.path() / "cluster.yaml"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Loaded {
  Snapshot snapshot;
  EngineConfig config;
  int64_t now = 0;
};

StatusOr<Loaded> LoadScenario(const fs::path& dir) {
  auto doc = LoadYamlFile((dir / "cluster.yaml").string());
  if (!doc.ok()) return doc.status();
  Loaded l;
  l.config = DefaultEngineConfig();
  if (doc->contains("config")) {
    auto c = ParseEngineConfig((*doc)["config"]);
    if (!c.ok()) return c.status().WithContext("config");
    l.config = *c;
    doc->erase("config");
  }
  if (doc->contains("now")) {
    l.now = (*doc)["now"].get<int64_t>();
    doc->erase("now");
  }
  auto s = SnapshotFromJson(*doc);
  if (!s.ok()) return s.status();
  l.snapshot = std::move(*s);
  return l;
}

std::string BindingKey(const std::string& job, int32_t task, const std::string& node,
                       const std::vector<int32_t>& devs, const std::vector<int32_t>& migs) {
  std::string s = job + "/" + std::to_string(task) + "@" + node + " devices[";
  for (int32_t d : devs) s += std::to_string(d) + ",";
  s += "]";
  if (!migs.empty()) {
    s += " mig[";
    for (int32_t m : migs) s += std::to_string(m) + ",";
    s += "]";
  }
  return s;
}

class ScenarioTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ScenarioTest, PlanMatchesExpected) {
  fs::path dir = ScenarioRoot() / GetParam();
  auto loaded = LoadScenario(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto expected = LoadYamlFile((dir / "expected.yaml").string());
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  auto engine = Engine::Create(loaded->config);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Rng rng(1);
  Plan plan = (*engine)->Cycle(loaded->snapshot, loaded->now, rng);
  const std::string dump = PlanToJson(plan).dump(2);
  SCOPED_TRACE("plan: " + dump);

  // Determinism: a second run gives the same bytes.
  Rng rng2(1);
  EXPECT_EQ(dump, PlanToJson((*engine)->Cycle(loaded->snapshot, loaded->now, rng2)).dump(2));

  // The same plan from a state kept by a host (the simulator's path): each job added as
  // submitted, without its running state, then its running tasks bound at its start time.
  {
    const Snapshot& snap = loaded->snapshot;
    ClusterState kept;
    bool all_held = true;
    for (const Node& n : snap.nodes) ASSERT_TRUE(kept.AddNode(n).ok());
    for (const Queue& q : snap.queues) ASSERT_TRUE(kept.UpsertQueue(q).ok());
    for (const PriorityClass& pc : snap.priority_classes)
      ASSERT_TRUE(kept.UpsertPriorityClass(pc).ok());
    for (const Job& j : snap.jobs) {
      Job submitted = j;
      submitted.allocations.assign(j.TaskCount(), std::nullopt);
      submitted.start_time = -1;
      all_held &= kept.AddJob(submitted).ok();
      for (int32_t t = 0; t < static_cast<int32_t>(j.allocations.size()); ++t)
        if (j.allocations[t]) {
          ASSERT_TRUE(
              kept.Bind(j.id, t, *j.allocations[t], std::max<int64_t>(0, j.start_time)).ok());
        }
    }
    if (all_held) {  // else the snapshot's plan has error decisions the kept state cannot
      Rng rng3(1);
      EXPECT_EQ(dump, PlanToJson((*engine)->Cycle(kept, loaded->now, rng3)).dump(2))
          << "the kept state's plan differs";
    }
  }

  const Json& ex = *expected;
  if (ex.contains("bindings")) {
    std::multiset<std::string> want, got;
    bool check_migs = false;
    for (const auto& b : ex["bindings"]) {
      std::vector<int32_t> devs = b.value("devices", std::vector<int32_t>{});
      std::vector<int32_t> migs = b.value("migInstances", std::vector<int32_t>{});
      check_migs |= !migs.empty();
      want.insert(BindingKey(b.at("job"), b.at("task"), b.at("node"), devs, migs));
    }
    for (const auto& b : plan.bindings) {
      std::vector<int32_t> devs, migs;
      for (const auto& d : b.allocation.devices) {
        devs.push_back(d.device);
        if (d.mig_instance >= 0) migs.push_back(d.mig_instance);
      }
      got.insert(BindingKey(b.job, b.task, b.allocation.node, devs,
                            check_migs ? migs : std::vector<int32_t>{}));
    }
    EXPECT_EQ(want, got);
  }
  if (ex.contains("evictions")) {
    std::multiset<std::string> want, got;
    bool with_message = false;  // messages are checked when the file gives any
    for (const auto& e : ex["evictions"]) with_message |= e.contains("message");
    for (const auto& e : ex["evictions"])
      want.insert(e.at("job").get<std::string>() + "/" + std::to_string(e.at("task").get<int>()) +
                  " " + e.value("reason", "Preempted") + " by " + e.value("preemptor", "?") +
                  " grace " + std::to_string(e.value("gracePeriodSeconds", 30)) +
                  (with_message ? ": " + e.value("message", "") : ""));
    for (const auto& e : plan.evictions)
      got.insert(e.job + "/" + std::to_string(e.task) + " " + e.reason + " by " + e.preemptor +
                 " grace " + std::to_string(e.grace_period_seconds) +
                 (with_message ? ": " + e.message : ""));
    EXPECT_EQ(want, got);
  }
  if (ex.contains("reservations")) {
    ASSERT_EQ(ex["reservations"].size(), plan.reservations.size());
    for (size_t i = 0; i < plan.reservations.size(); ++i) {
      const auto& r = ex["reservations"][i];
      EXPECT_EQ(r.at("job").get<std::string>(), plan.reservations[i].job);
      EXPECT_EQ(r.at("nodes").get<std::vector<std::string>>(), plan.reservations[i].nodes);
      if (r.contains("earliestStart")) {
        EXPECT_EQ(r["earliestStart"].get<int64_t>(), plan.reservations[i].earliest_start);
      }
    }
  }
  if (ex.contains("decisions")) {
    for (const auto& d : ex["decisions"]) {
      std::string job = d.at("job");
      auto it = std::find_if(plan.decisions.begin(), plan.decisions.end(),
                             [&](const JobDecision& x) { return x.job == job; });
      ASSERT_NE(it, plan.decisions.end()) << "no decision for " << job;
      SCOPED_TRACE("job " + job);
      EXPECT_EQ(d.at("outcome").get<std::string>(), OutcomeName(it->outcome));
      const PendingReason why = it->reason != nullptr ? *it->reason : PendingReason{};
      if (d.contains("code")) {
        EXPECT_EQ(d["code"].get<std::string>(), why.code);
      }
      if (d.contains("resource")) {
        EXPECT_EQ(d["resource"].get<std::string>(), why.resource);
      }
      if (d.contains("message")) {
        EXPECT_EQ(d["message"].get<std::string>(), why.message);
      }
      if (d.contains("messageContains")) {
        EXPECT_NE(why.message.find(d["messageContains"].get<std::string>()), std::string::npos)
            << why.message;
      }
      if (d.contains("rejectedNodes")) {
        EXPECT_EQ((d["rejectedNodes"].get<std::map<std::string, int32_t>>()), why.rejected_nodes);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, ScenarioTest, ::testing::ValuesIn(ScenarioNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           std::replace_if(
                               n.begin(), n.end(), [](char c) { return !std::isalnum(c); }, '_');
                           return n;
                         });

TEST(ScenarioFolders, Present) {
  EXPECT_FALSE(ScenarioNames().empty()) << "no scenarios under " << ScenarioRoot();
}

}  // namespace
}  // namespace tessera
