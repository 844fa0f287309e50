// slurm_bench: end-to-end jobs/s onto a real Slurm, plain sbatch vs through SlurmPool.
//
// Needs a cluster (scripts/slurm/bench.sh starts one, runs this, stops it). Three runs of
// N one-CPU jobs each, submitted one after another, then squeue polled every 100 ms until
// all have finished:
//   plain    sbatch --parsable -o /dev/null --wrap true (Slurm picks the node)
//   same     the exact argv + script SlurmPool builds, submitted by hand (-w, --mem, ...)
//   tessera  SlurmPool::Dispatch for each, SlurmPool::Poll until all are terminal
// plus Tessera's in-process cost per job (BuildSbatch + squeue parsing), without Slurm.
// Usage: slurm_bench [N=200]   (SLURM_CONF must point at the cluster)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "backends/slurm/job_state.h"
#include "backends/slurm/slurm_pool.h"

using namespace tessera;
using namespace tessera::slurm;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

DispatchRequest Request(int i, const std::string& run) {
  DispatchRequest r;
  r.job = "bench-" + run + "-" + std::to_string(i);
  r.allocation = "a-" + run + "-" + std::to_string(i);
  Binding b;
  b.job = r.job;
  b.allocation.node = "node" + std::to_string(1 + i % 4);  // the engine spreads them
  b.allocation.cpu_milli = 1000;
  b.allocation.memory_bytes = int64_t{100} << 20;
  r.bindings = {b};
  r.command = {"true"};
  r.stdout_path = "/dev/null";
  return r;
}

// Waits until no job whose comment/name starts with `prefix` is still pending/running.
void WaitAllDone(SlurmCli& cli, const std::string& name_prefix, int n) {
  for (;;) {
    auto jobs = cli.Jobs();
    if (jobs.ok()) {
      int done = 0;
      for (const SlurmJob& j : *jobs) {
        if (j.name.rfind(name_prefix, 0) == 0 && IsTerminal(PhaseOfSlurmState(j.state))) ++done;
      }
      if (done >= n) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

struct Result {
  double submit_s, total_s;
};

void Print(const char* name, int n, Result r) {
  std::printf("%-8s %4d jobs  submit %6.2f s (%6.1f jobs/s)  all done %6.2f s (%6.1f jobs/s)\n",
              name, n, r.submit_s, n / r.submit_s, r.total_s, n / r.total_s);
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 200;
  const char* conf = std::getenv("SLURM_CONF");
  if (!conf) {
    std::fprintf(stderr, "slurm_bench: set SLURM_CONF (scripts/slurm/bench.sh does)\n");
    return 2;
  }
  auto runner = std::make_shared<SubprocessRunner>(
      std::map<std::string, std::string>{{"SLURM_CONF", conf}}, std::chrono::seconds(60));
  SlurmCli cli(*runner);
  SlurmPool pool(runner, {});
  if (auto nodes = pool.Discover(); !nodes.ok()) {
    std::fprintf(stderr, "slurm_bench: %s\n", nodes.status().ToString().c_str());
    return 1;
  }
  std::map<std::string, SlurmNode> inventory;
  auto slurm_nodes = cli.Nodes();
  for (const SlurmNode& s : *slurm_nodes) inventory[s.name] = s;
  std::map<std::string, SlurmPartition> partitions;
  auto slurm_partitions = cli.Partitions();
  for (const SlurmPartition& p : *slurm_partitions) partitions[p.name] = p;

  // 1. plain sbatch
  auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto id = cli.Submit({"sbatch", "--parsable", "-J", "plain-" + std::to_string(i), "-o",
                          "/dev/null", "--mem=100", "--wrap", "true"},
                         "");
    if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().ToString().c_str()), 1;
  }
  auto t1 = Clock::now();
  WaitAllDone(cli, "plain-", n);
  Result plain{Seconds(t0, t1), Seconds(t0, Clock::now())};

  // 2. the same argv Tessera builds, by hand
  std::vector<SbatchCommand> cmds;
  for (int i = 0; i < n; ++i)
    cmds.push_back(*BuildSbatch(Request(i, "same"), inventory, partitions));
  t0 = Clock::now();
  for (const SbatchCommand& c : cmds) {
    auto id = cli.Submit(c.argv, c.script);
    if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().ToString().c_str()), 1;
  }
  t1 = Clock::now();
  WaitAllDone(cli, "tessera-bench-same-", n);
  Result same{Seconds(t0, t1), Seconds(t0, Clock::now())};

  // 3. through SlurmPool
  t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    auto id = pool.Dispatch(Request(i, "pool"));
    if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().ToString().c_str()), 1;
  }
  t1 = Clock::now();
  for (;;) {
    auto st = pool.Poll();
    int done = 0;
    if (st.ok()) {
      for (const AllocationStatus& s : *st) {
        done += s.allocation.rfind("a-pool-", 0) == 0 && IsTerminal(s.phase);
      }
    }
    if (done >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Result tess{Seconds(t0, t1), Seconds(t0, Clock::now())};

  // 4. Tessera's own CPU per job: building the sbatch call and reading squeue.
  auto squeue = runner->Run({"squeue", "--json"}, "");
  auto b0 = Clock::now();
  int reps = 2000;
  for (int i = 0; i < reps; ++i) (void)BuildSbatch(Request(i, "x"), inventory, partitions);
  double build_us = Seconds(b0, Clock::now()) * 1e6 / reps;
  auto p0 = Clock::now();
  int parse_reps = 20;
  size_t jobs_seen = 0;
  for (int i = 0; i < parse_reps; ++i) jobs_seen = ParseSqueueJson(squeue->out)->size();
  double parse_us = Seconds(p0, Clock::now()) * 1e6 / parse_reps / std::max<size_t>(1, jobs_seen);

  Print("plain", n, plain);
  Print("same", n, same);
  Print("tessera", n, tess);
  std::printf("tessera in-process: BuildSbatch %.1f us/job, squeue parse %.2f us/job (%zu jobs)\n",
              build_us, parse_us, jobs_seen);
  std::printf("overhead vs same argv: %+.1f%% (end to end)\n",
              100.0 * (tess.total_s - same.total_s) / same.total_s);
  return 0;
}
