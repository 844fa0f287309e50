// `tessera bench cycle`: the engine's headline figure on a synthetic cluster, as JSON.
// Single-threaded, one full cycle (enqueue + allocate) over every pending job.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/command.h"
#include "engine/cluster_state.h"
#include "engine/engine.h"
#include "engine/synthetic.h"

namespace tessera::cli {
namespace {

struct BenchOptions {
  int32_t nodes = 10000;
  int32_t gpus_per_node = 8;
  int32_t jobs = 100000;
  std::string policy = "binpack";
  uint64_t seed = 1;
  bool json = false;
};

int64_t PeakRssBytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

double CpuSeconds() {
  struct timespec ts {};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int RunCycleBench(const BenchOptions& o) {
  using Clock = std::chrono::steady_clock;
  Json conf = {
      {"actions", "enqueue, allocate"},
      {"tiers",
       Json::array(
           {Json{{"plugins", Json::array({Json{{"name", "priority"}}, Json{{"name", "gang"}}})}},
            Json{{"plugins", Json::array({Json{{"name", "predicates"}}})}}})}};
  Json& second = conf["tiers"][1]["plugins"];
  if (o.policy == "binpack") {
    second.push_back({{"name", "binpack"}});
  } else if (o.policy == "fgd") {
    second.push_back({{"name", "fragmentation"}});
  } else if (o.policy == "spread") {
    second.push_back({{"name", "spread"}});
  } else {
    std::cerr << "bench cycle: --policy: unknown \"" << o.policy << "\" (binpack, fgd, spread)\n";
    return 2;
  }
  auto config = ParseEngineConfig(conf);
  if (!config.ok()) {
    std::cerr << config.status().ToString() << "\n";
    return 1;
  }
  auto engine = Engine::Create(*config);
  if (!engine.ok()) {
    std::cerr << engine.status().ToString() << "\n";
    return 1;
  }
  SyntheticSpec spec;
  spec.nodes = o.nodes;
  spec.gpus_per_node = o.gpus_per_node;
  spec.jobs = o.jobs;
  spec.seed = o.seed;
  Snapshot snap = SyntheticSnapshot(spec);

  auto t0 = Clock::now();
  auto state = ClusterState::FromSnapshot(snap);
  if (!state.ok()) {
    std::cerr << state.status().ToString() << "\n";
    return 1;
  }
  auto t1 = Clock::now();
  const double cpu0 = CpuSeconds();
  Rng rng(o.seed);
  Plan plan = (*engine)->Cycle(**state, 0, rng);
  auto t2 = Clock::now();
  const double cpu_s = CpuSeconds() - cpu0;

  const double build_s = std::chrono::duration<double>(t1 - t0).count();
  const double cycle_s = std::chrono::duration<double>(t2 - t1).count();
  int64_t gpu_milli = 0;
  for (const auto& b : plan.bindings)
    for (const auto& d : b.allocation.devices) gpu_milli += d.milli;
  int64_t placed_jobs = 0;
  for (const auto& d : plan.decisions) placed_jobs += d.outcome == Outcome::kPlaced;
  const int64_t capacity = static_cast<int64_t>(o.nodes) * o.gpus_per_node * 1000;
  Json out = {{"nodes", o.nodes},
              {"gpus_per_node", o.gpus_per_node},
              {"jobs", o.jobs},
              {"policy", o.policy},
              {"seed", o.seed},
              {"placements", plan.bindings.size()},
              {"jobs_placed", placed_jobs},
              {"jobs_decided", plan.decisions.size()},
              {"cycle_seconds", cycle_s},
              {"placements_per_second", cycle_s > 0 ? plan.bindings.size() / cycle_s : 0.0},
              {"decisions_per_second", cycle_s > 0 ? plan.decisions.size() / cycle_s : 0.0},
              {"cycle_cpu_seconds", cpu_s},
              {"placements_per_cpu_second", cpu_s > 0 ? plan.bindings.size() / cpu_s : 0.0},
              {"state_build_seconds", build_s},
              {"gpu_allocated_percent", capacity > 0 ? 100.0 * gpu_milli / capacity : 0.0},
              {"peak_rss_bytes", PeakRssBytes()},
              {"threads", 1}};
  if (o.json) {
    std::cout << out.dump() << "\n";
  } else {
    std::printf(
        "%d nodes x %d GPUs, %d jobs, policy %s: %zu placements in %.3f s = %.0f placements/s "
        "(state build %.3f s, GPU allocated %.1f%%, peak RSS %.0f MiB)\n",
        o.nodes, o.gpus_per_node, o.jobs, o.policy.c_str(), plan.bindings.size(), cycle_s,
        out["placements_per_second"].get<double>(), build_s,
        out["gpu_allocated_percent"].get<double>(), PeakRssBytes() / 1048576.0);
  }
  return 0;
}

}  // namespace

void AddBenchCommands(CLI::App& app) {
  CLI::App* bench =
      app.add_subcommand("bench", "Engine benchmarks (not tests); results in docs/benchmarks.md");
  bench->require_subcommand(1);
  auto opts = std::make_shared<BenchOptions>();
  CLI::App* cycle =
      bench->add_subcommand("cycle", "One full scheduling cycle on a synthetic cluster");
  cycle->add_option("--nodes", opts->nodes, "nodes")->check(CLI::Range(1, 10000000));
  cycle->add_option("--gpus-per-node", opts->gpus_per_node, "GPUs per node")
      ->check(CLI::Range(0, 32));
  cycle->add_option("--jobs", opts->jobs, "pending single-task jobs")
      ->check(CLI::Range(0, 100000000));
  cycle->add_option("--policy", opts->policy, "binpack | fgd | spread");
  cycle->add_option("--seed", opts->seed, "workload seed");
  cycle->add_flag("--json", opts->json, "print one JSON object");
  cycle->callback([opts] { SetExitCode(RunCycleBench(*opts)); });
}

}  // namespace tessera::cli
