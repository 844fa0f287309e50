// `tessera bench cycle`: the engine's headline figure on a synthetic cluster, as JSON.
// Single-threaded. The headline "cycle" is the full Engine::Cycle(snapshot): building the
// ClusterState from the snapshot, enqueue + allocate over every pending job, and the plan.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <memory>

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
  int32_t queues = 1;
  uint64_t seed = 1;
  bool json = false;
};

int64_t PeakRssBytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

int64_t MinorFaults() {  // page faults served without I/O: first touches of fresh memory
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
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
  } else if (o.policy != "default") {
    std::cerr << "bench cycle: --policy: unknown \"" << o.policy
              << "\" (binpack, fgd, spread, default)\n";
    return 2;
  }
  // `default` is the server's own configuration: every action, queue order by DRF and
  // guarantees, las, fragmentation (docs/engine.md).
  auto config = o.policy == "default" ? StatusOr<EngineConfig>(DefaultEngineConfig())
                                      : ParseEngineConfig(conf);
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
  spec.queues = o.queues;
  Snapshot snap = SyntheticSnapshot(spec);

  // What is timed, in this order (the first run is in a fresh process: a cold heap, every
  // page touched for the first time, the worst case):
  //  1. the full cycle, exactly what the server calls: Engine::Cycle(snapshot), i.e. the
  //     ClusterState build from the snapshot, every configured action, and the plan;
  //  2. the same full cycle again (a warm heap: a long-running server's steady state);
  //  3. the state build alone, then the incremental cycle on that kept state (the
  //     simulator's path: Cycle(state), which also undoes its changes at the end).
  struct Timed {
    double wall = 0, cpu = 0;
    int64_t faults = 0;  // minor page faults (in this VM each costs ~1.75 us)
  };
  auto timed = [](auto&& fn) {
    const double c0 = CpuSeconds();
    const int64_t f0 = MinorFaults();
    const auto t0 = Clock::now();
    fn();
    return Timed{std::chrono::duration<double>(Clock::now() - t0).count(), CpuSeconds() - c0,
                 MinorFaults() - f0};
  };
  Plan plan;
  const Timed full = timed([&] {
    Rng rng(o.seed);
    plan = (*engine)->Cycle(snap, 0, rng);
  });
  size_t warm_placements = 0;
  const Timed warm = timed([&] {
    Rng rng(o.seed);
    warm_placements = (*engine)->Cycle(snap, 0, rng).bindings.size();
  });
  std::unique_ptr<ClusterState> state;
  const Timed build = timed([&] {
    auto st = ClusterState::FromSnapshot(snap);
    if (st.ok()) state = std::move(*st);
  });
  if (state == nullptr) {
    std::cerr << "bench cycle: the synthetic snapshot did not build a state\n";
    return 1;
  }
  size_t incremental_placements = 0;
  const Timed incremental = timed([&] {
    Rng rng(o.seed);
    incremental_placements = (*engine)->Cycle(*state, 0, rng).bindings.size();
  });
  if (warm_placements != plan.bindings.size() || incremental_placements != plan.bindings.size()) {
    std::cerr << "bench cycle: repeated cycles disagree (" << plan.bindings.size() << ", "
              << warm_placements << ", " << incremental_placements << " placements)\n";
    return 1;
  }

  int64_t gpu_milli = 0;
  for (const auto& b : plan.bindings) gpu_milli += b.allocation.GpuMilli();
  int64_t placed_jobs = 0;
  for (const auto& d : plan.decisions) placed_jobs += d.outcome == Outcome::kPlaced;
  const int64_t capacity = static_cast<int64_t>(o.nodes) * o.gpus_per_node * 1000;
  const double placements = static_cast<double>(plan.bindings.size());
  auto rate = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  Json out = {{"nodes", o.nodes},
              {"gpus_per_node", o.gpus_per_node},
              {"jobs", o.jobs},
              {"policy", o.policy},
              {"queues", o.queues},
              {"seed", o.seed},
              {"cycle", "Engine::Cycle(snapshot): state build + enqueue + allocate + plan"},
              {"placements", plan.bindings.size()},
              {"jobs_placed", placed_jobs},
              {"jobs_decided", plan.decisions.size()},
              {"cycle_seconds", full.wall},
              {"cycle_cpu_seconds", full.cpu},
              {"cycle_page_faults", full.faults},
              {"placements_per_second", rate(placements, full.wall)},
              {"placements_per_cpu_second", rate(placements, full.cpu)},
              {"decisions_per_second", rate(static_cast<double>(plan.decisions.size()), full.wall)},
              {"warm_cycle_seconds", warm.wall},
              {"warm_cycle_cpu_seconds", warm.cpu},
              {"warm_cycle_page_faults", warm.faults},
              {"warm_placements_per_second", rate(placements, warm.wall)},
              {"state_build_seconds", build.wall},
              {"state_build_cpu_seconds", build.cpu},
              {"incremental_cycle_seconds", incremental.wall},
              {"incremental_cycle_cpu_seconds", incremental.cpu},
              {"gpu_allocated_percent", capacity > 0 ? 100.0 * gpu_milli / capacity : 0.0},
              {"peak_rss_bytes", PeakRssBytes()},
              {"threads", 1}};
  if (o.json) {
    std::cout << out.dump() << "\n";
  } else {
    std::printf(
        "%d nodes x %d GPUs, %d jobs, policy %s: %zu placements; full cycle (state build + "
        "actions + plan) %.3f s wall, %.3f s CPU = %.0f placements/s; warm %.3f s; state build "
        "%.3f s; incremental cycle %.3f s; GPU allocated %.1f%%; peak RSS %.0f MiB\n",
        o.nodes, o.gpus_per_node, o.jobs, o.policy.c_str(), plan.bindings.size(), full.wall,
        full.cpu, rate(placements, full.wall), warm.wall, build.wall, incremental.wall,
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
  cycle->add_option("--policy", opts->policy, "binpack | fgd | spread | default");
  cycle->add_option("--queues", opts->queues, "queues with equal guarantees (1: none)")
      ->check(CLI::Range(1, 1000));
  cycle->add_option("--seed", opts->seed, "workload seed")->check(kSeed);
  cycle->add_flag("--json", opts->json, "print one JSON object");
  cycle->callback([opts] { SetExitCode(RunCycleBench(*opts)); });
}

}  // namespace tessera::cli
