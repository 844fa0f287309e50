// Dynamic replay (`tessera sim replay`): jobs arrive and complete on a virtual clock and the
// engine (any configuration) decides everything in between.
//
// A discrete-event loop over arrivals and completions. After the events of one instant the
// host runs a cycle, at most once per `cycle_interval` seconds of virtual time (the
// scheduler's period), applies the plan to its ClusterState, starts the jobs whose gang is
// complete, and schedules their completions. As the server's loop, it also runs a cycle
// every `cycle_interval` while work waits (a time-dependent order such as least attained
// service changes with no event), and one more at once after a plan that evicted (the
// freed capacity goes to the waiting work then, not a period later). Evicted jobs go back to
// pending and keep the service they received (checkpoint/restart, as Tiresias assumes; each restart
// can cost `restart_cost_seconds` of run time that makes no progress); a job the engine calls
// infeasible is dropped and counted. The host never orders or places anything itself.
// Deterministic: events at equal times run in a fixed order (completions, then arrivals by
// trace order), and the engine's one Rng is seeded. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "engine/engine.h"
#include "model/snapshot.h"
#include "sim/traces.h"

namespace tessera::sim {

struct ReplayOptions {
  int64_t cycle_interval = 60;    // seconds between cycles while work is waiting
  uint64_t seed = 1;              // the engine's Rng
  bool oracle_runtimes = false;   // runtime_estimate_seconds = the trace's duration (SJF, backfill)
  bool single_queue = false;      // every job in queue "default" instead of its trace queue
  int64_t cpu_milli_per_gpu = 0;  // request when the trace gives no CPU (Philly, Tiresias, SWF)
  int64_t memory_mib_per_gpu = 0;  // request when the trace gives no memory
  int64_t max_jobs = 0;            // replay only the first N jobs (0 = all)
  int64_t series_points = 600;     // samples of the time series in the report
  // Seconds a preempted job spends restarting (reloading its checkpoint, warming up) each
  // time it runs again before it progresses: 0 models free checkpoint/restart, which
  // flatters the preempting policies.
  int64_t restart_cost_seconds = 0;
};

struct JobRecord {
  std::string id;
  std::string queue;
  int64_t submit = 0;
  int64_t duration = 0;
  int64_t gpu_milli = 0;  // the whole job's GPU request (a half GPU: 500)
  int64_t start = -1;     // first start; -1 never
  int64_t finish = -1;    // -1 unfinished
  int32_t preemptions = 0;
  // Seconds pending in all: the first wait and every wait after a preemption (JCT minus the
  // time it held GPUs); -1 unfinished. Starvation shows here, not in the first wait.
  int64_t pending = -1;
  std::string outcome;  // "finished", "infeasible", "unfinished"
  std::string why;      // infeasible or error: the engine's reason, in its words
};

struct QueueRecord {
  std::string name;
  int64_t guarantee_gpu_milli = 0;
  int64_t weight = 1;
  int64_t used_gpu_milli_seconds = 0;    // integral of its allocation
  int64_t demand_gpu_milli_seconds = 0;  // what its jobs asked for (duration x GPUs)
  int64_t jobs = 0;
  int64_t max_wait = 0;
  int64_t max_pending = 0;  // JobRecord::pending, finished jobs
};

struct SeriesPoint {
  int64_t time = 0;
  int64_t allocated_gpu_milli = 0;
  int64_t pending_jobs = 0;
  int64_t running_jobs = 0;
};

struct ReplayResult {
  std::vector<JobRecord> jobs;      // trace order
  std::vector<QueueRecord> queues;  // by name
  std::vector<SeriesPoint> series;  // evenly spaced samples of the step functions
  int64_t total_gpu_milli = 0;
  int64_t cycles = 0;
  int64_t preemptions = 0;
  int64_t bindings = 0;
  int64_t first_submit = 0;
  int64_t last_finish = 0;
  int64_t created_queues = 0;             // trace queues missing from the cluster file (weight 1)
  int64_t stale_evictions = 0;            // plan evictions of tasks that were not running (ignored)
  int64_t restart_gpu_milli_seconds = 0;  // GPU time held while restarting (no progress)
};

// The queues a replay creates because the trace names them and `cluster` does not define
// them (weight 1, no guarantee), in the order the trace first names them; with
// `single_queue`, "default" if undefined.
std::vector<std::string> ImplicitQueues(const Snapshot& cluster, const std::vector<TraceJob>& jobs,
                                        const ReplayOptions& options);

// Runs the jobs on the cluster (nodes, queues, priority classes of `cluster`; its jobs are
// ignored) under `config`.
StatusOr<ReplayResult> RunReplay(const Snapshot& cluster, const std::vector<TraceJob>& jobs,
                                 const EngineConfig& config, const ReplayOptions& options);

// Summary statistics of a replay, integers in seconds where possible.
struct ReplaySummary {
  int64_t jobs = 0, finished = 0, infeasible = 0, unfinished = 0;
  double avg_jct = 0, avg_wait = 0;
  int64_t p50_jct = 0, p95_jct = 0, p99_jct = 0;
  int64_t p50_wait = 0, p95_wait = 0, p99_wait = 0, max_wait = 0;
  int64_t p99_pending = 0, max_pending = 0;  // JobRecord::pending over finished jobs
  int64_t makespan = 0;
  int64_t preemptions = 0;
  double avg_gpu_utilisation_percent = 0;  // allocated GPU-time / (capacity x makespan)
  double restart_gpu_hours = 0;            // GPU time held while restarting (--restart-cost)
};
ReplaySummary Summarise(const ReplayResult& r);

// Nearest-rank percentile (q in 0..100) of integers; 0 for an empty list.
int64_t Percentile(std::vector<int64_t> values, int q);

// Named scheduler configurations for the baselines: "fifo", "sjf" (oracle runtimes),
// "las" (Tiresias-like least attained service, no runtimes), "tessera" (the default).
std::vector<std::string> ReplayBaselineNames();
StatusOr<EngineConfig> ReplayBaselineConfig(const std::string& name);
// The `las` baseline's plugin arguments (thresholds in GPU-seconds, starvation factor).
Json LasBaselineArguments();
// Whether a baseline needs oracle runtimes (SJF).
bool BaselineUsesOracle(const std::string& name);

}  // namespace tessera::sim
