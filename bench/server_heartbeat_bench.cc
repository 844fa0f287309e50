// Google Benchmark: one agent heartbeat through ControlPlane::Heartbeat (the server-wide lock's
// share of it) on a large cluster: 2,000 nodes x 8 GPUs, each task of a one-GPU job, reported
// running by its node's heartbeat; with and without finished jobs' allocations, which are kept
// until their jobs' retention ends (7 days by default). Not part of the test suite; results in
// docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/control_plane.h"
#include "server/test_util.h"
#include "store/store.h"

namespace tessera::server {
namespace {

const Principal kAdmin{"admin", Role::kAdmin, {"*"}};
constexpr int kNodes = 2000;

// Places each pending job's one task on the next node, round robin, on its first free GPU.
Plan RoundRobin(const Snapshot& s, int64_t now) {
  Plan plan;
  plan.now = now;
  std::map<std::string, std::vector<bool>> used;
  for (const auto& n : s.nodes) used[n.name].assign(n.devices.size(), false);
  for (const auto& j : s.jobs)
    for (const auto& a : j.allocations)
      if (a)
        for (const auto& d : a->devices) used[a->node][d.device] = true;
  size_t next = 0;
  for (const auto& j : s.jobs) {
    if (j.RunningTasks() > 0) continue;
    for (size_t tries = 0; tries < s.nodes.size(); ++tries) {
      const Node& n = s.nodes[next];
      next = (next + 1) % s.nodes.size();
      std::vector<bool>& u = used[n.name];
      auto free = std::find(u.begin(), u.end(), false);
      if (!n.ready || free == u.end()) continue;
      *free = true;
      const auto device = static_cast<int32_t>(free - u.begin());
      plan.bindings.push_back(
          {j.id, 0, {n.name, j.GroupOfTask(0).request.cpu_milli, 0, {{device, 1000, 0, -1}}}});
      plan.decisions.push_back({j.id, Outcome::kPlaced, {}});
      break;
    }
  }
  return plan;
}

struct Cluster {
  std::string dir;
  testing::FakeClock clock;
  std::unique_ptr<ControlPlane> cp;
  std::vector<std::string> nodes;
  std::vector<int64_t> epochs;
  std::vector<Json> running;  // each node's heartbeat report: its tasks, running
};

void Check(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::abort();
}

// Submits `count` one-GPU jobs, places them, and has every node report its new tasks
// `state`; returns each node's report.
std::vector<Json> RunJobs(Cluster& c, int count, const std::string& state, int& seq) {
  constexpr int kPerBody = 1000;
  for (int done = 0; done < count; done += kPerBody) {
    std::string body;
    for (int i = done; i < std::min(count, done + kPerBody); ++i)
      body += "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: j" +
              std::to_string(seq++) +
              "}\nspec: {queue: default, tasks: [{replicas: 1, resources: {cpu: 1, memory: 1Gi, "
              "nvidia.com/gpu: 1}, command: [\"true\"]}]}\n---\n";
    Check(c.cp->Submit(kAdmin, body).status(), "submit");
  }
  Check(c.cp->RunCycle(), "cycle");
  std::vector<Json> reports(c.nodes.size());
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    auto desired = c.cp->Heartbeat(kAdmin, c.nodes[i], Json{{"epoch", c.epochs[i]}});
    Check(desired.status(), "heartbeat");
    Json tasks = Json::array();
    for (const auto& a : (*desired)["allocations"])
      tasks.push_back({{"allocation", a["allocation"]}, {"state", state}, {"exitCode", 0}});
    Check(c.cp->Heartbeat(kAdmin, c.nodes[i], Json{{"epoch", c.epochs[i]}, {"tasks", tasks}})
              .status(),
          "heartbeat");
    reports[i] = Json{{"epoch", c.epochs[i]}, {"tasks", tasks}};
  }
  return reports;
}

// One cluster per (running, finished), built once (building one takes a while).
Cluster& ClusterOf(int running, int finished) {
  static std::map<std::pair<int, int>, std::unique_ptr<Cluster>> built;
  auto& c = built[{running, finished}];
  if (c) return *c;
  c = std::make_unique<Cluster>();
  c->dir = (std::filesystem::temp_directory_path() /
            ("tessera_heartbeat_bench_" + std::to_string(running) + "_" +
             std::to_string(finished) + "_" + std::to_string(::getpid())))
               .string();
  std::filesystem::remove_all(c->dir);
  auto st = store::OpenSqliteStore(c->dir);
  Check(st.status(), "store");
  ControlPlaneOptions o;
  o.clock = c->clock.fn();
  o.run_scheduler = false;
  auto cp = ControlPlane::Open(std::move(*st), std::make_unique<testing::ScriptedEngine>(RoundRobin),
                               o);
  Check(cp.status(), "open");
  c->cp = std::move(*cp);
  Check(c->cp->Apply(kAdmin,
                     "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: "
                     "default}\n")
            .status(),
        "queue");
  for (int i = 0; i < kNodes; ++i) {
    c->nodes.push_back("node-" + std::to_string(i));
    Json doc = {{"node",
                 {{"name", c->nodes.back()},
                  {"cpu", 64},
                  {"memory", "512Gi"},
                  {"gpus", {{"model", "H100"}, {"count", 8}, {"virtual", true}}}}},
                {"agentVersion", "bench"},
                {"bootId", "boot-" + c->nodes.back()}};
    auto r = c->cp->RegisterAgent(kAdmin, doc);
    Check(r.status(), "register");
    c->epochs.push_back((*r)["epoch"].get<int64_t>());
  }
  int seq = 0;
  if (finished > 0) RunJobs(*c, finished, "succeeded", seq);
  c->running = running > 0 ? RunJobs(*c, running, "running", seq)
                           : std::vector<Json>(c->nodes.size());
  for (size_t i = 0; i < c->nodes.size(); ++i)
    if (running == 0) c->running[i] = Json{{"epoch", c->epochs[i]}, {"tasks", Json::array()}};
  return *c;
}

// Steady state: each node in turn reports its tasks still running (nothing changes).
void BM_Heartbeat(benchmark::State& st) {
  Cluster& c = ClusterOf(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  size_t i = 0;
  int64_t beats = 0;
  for (auto _ : st) {
    auto r = c.cp->Heartbeat(kAdmin, c.nodes[i], c.running[i]);
    benchmark::DoNotOptimize(r);
    i = (i + 1) % c.nodes.size();
    ++beats;
  }
  st.counters["heartbeats_per_second"] =
      benchmark::Counter(static_cast<double>(beats), benchmark::Counter::kIsRate);
}
// Args: running tasks (one-GPU jobs), finished jobs' allocations.
BENCHMARK(BM_Heartbeat)
    ->Args({0, 0})
    ->Args({16000, 0})
    ->Args({16000, 16000})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera::server
