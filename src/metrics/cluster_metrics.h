// ClusterMetrics: turns what the server knows (nodes and devices, queues, jobs, plans) into
// Prometheus metrics: DCGM-exporter names for devices, tessera_* for the rest.
//
// The server (or the simulator) owns one ClusterMetrics and calls
//   Update(view)             after each cycle and before each scrape: gauges are recomputed
//                            from the view, and the cost counters accrue for the time since
//                            the last update;
//   ObserveCycle(plan, secs) after each engine cycle: cycle latency, bindings, evictions;
//   ObserveJobStart(...)     for each attempt of a job bound: the queue-wait histogram (a
//                            fact from whoever binds, not inferred from views: an attempt
//                            may start and end between two of them);
//   RenderText()             for GET /metrics.
// Time comes in through the view (`now`, seconds); nothing here reads a clock. The library
// knows nothing of the server: ClusterView is plain data. Every name it can export is
// listed, with HELP and TYPE, in every scrape. Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "metrics/registry.h"
#include "model/snapshot.h"

namespace tessera::metrics {

// One job as the server's lifecycle sees it (finished jobs too, while the server keeps them).
struct JobStatus {
  std::string id;
  std::string queue;
  std::string state;           // "pending", "running", "succeeded", "failed", "cancelled", ...
  std::string pending_reason;  // PendingReason::code while pending ("Insufficient", ...)
  int64_t submit_time = 0;     // seconds
  int64_t pending_since = -1;  // when it last became pending (requeue); -1: submit_time
  // A service (Deployment): the replicas it asks (0 once scaled to zero) and those running;
  // 0 for other jobs.
  bool service = false;
  int32_t service_replicas = 0, service_running = 0;
};

struct ClusterView {
  int64_t now = 0;                     // seconds, the server's clock
  const Snapshot* snapshot = nullptr;  // nodes with device samples, queues, live jobs
  const Plan* plan = nullptr;          // the last plan, for pending reasons; may be null
  // The lifecycle of every job. A job of the snapshot that is missing here is taken as
  // running when it has running tasks and pending otherwise.
  std::vector<JobStatus> jobs;
  // Every state a job can be in: each queue exports tessera_jobs for each, at 0 when no job is
  // in it (a series that vanishes reads as "no data", not 0). "pending" and "running", the
  // states derived from a snapshot, are always exported.
  std::vector<std::string> job_states;
};

// What the cost counters have accrued in one queue: whole units, and the remainders that
// make many short steps add up to one long one.
struct QueueAccrual {
  int64_t cost_micros = 0;  // micro-currency
  int64_t cost_carry = 0;   // and micro-currency-seconds per hour below one (< 3600)
  int64_t gpu_seconds = 0;
  int64_t gpu_carry = 0;  // and milli-GPU-seconds below one GPU-second (< 1000)
  friend bool operator==(const QueueAccrual&, const QueueAccrual&) = default;
};

// The cost counters of every queue, accrued up to `to` (seconds, the views' clock): what a
// server keeps durable, so that a restart neither zeroes them nor loses the time it was down.
struct Accrual {
  int64_t to = 0;
  std::map<std::string, QueueAccrual> queues;
  friend bool operator==(const Accrual&, const Accrual&) = default;
};

class ClusterMetrics {
 public:
  ClusterMetrics();
  ClusterMetrics(const ClusterMetrics&) = delete;
  ClusterMetrics& operator=(const ClusterMetrics&) = delete;

  void Update(const ClusterView& view);
  void ObserveCycle(const Plan& plan, double seconds);
  // An attempt of a job in `queue` was bound at `bound_at`, having waited since `queued_at`
  // (its submission, or its requeue): one tessera_job_queue_wait_seconds observation.
  void ObserveJobStart(const std::string& queue, int64_t queued_at, int64_t bound_at);
  // A store commit failed and the server refused a request for it.
  void ObserveStoreFailure(bool read_only);
  // Tasks the server evicted itself (drain, node loss...): tessera_scheduling_evictions_total.
  void ObserveEvictions(const std::string& reason, int64_t tasks);
  // One API request answered: `route` is its pattern ("/v1/jobs/{name}", never the name
  // itself, so the series stay few), `code` its HTTP status; `seconds` < 0: not timed.
  void ObserveHttpRequest(const std::string& route, const std::string& method, int code,
                          double seconds);

  // Continues the cost counters from `a` (call it before the first Update). The first Update
  // also accrues the time since a.to for the allocations its snapshot shows, those still held
  // when the server restarted, each from its job's start where that is later, and for at
  // most `most_gap_seconds`: without a server, agents stop their tasks once their lease has
  // run out (and the tasks' grace period), so a long outage held the GPUs only that long.
  void RestoreAccrual(const Accrual& a,
                      int64_t most_gap_seconds = std::numeric_limits<int64_t>::max());
  // Makes the cost counters durable: Update hands `persist` what has accrued when a restored
  // gap was filled and otherwise at most every `every_seconds` of view time, FlushAccrual at
  // once. The counters then export only what `persist` took (returned true): a restart that
  // restores it never shows them going back, which Prometheus would read as a reset. Null:
  // export what has accrued, at once.
  void PersistAccrualWith(std::function<bool(const Accrual&)> persist, int64_t every_seconds);
  // Hands `persist` what has accrued up to the last Update now; false without one or when it
  // refused.
  bool FlushAccrual();

  // The registry, for the server to add its own instruments (e.g. HTTP request counters).
  Registry& registry() { return registry_; }
  std::string RenderText() const { return registry_.RenderText(); }

  // Every metric name Tessera exports, sorted (what dashboards and alert rules may use).
  static std::vector<std::string> ExportedNames();

 private:
  void AccrueCost(const ClusterView& view);
  bool Persist(int64_t to);  // mu_ held

  Registry registry_;
  std::mutex mu_;  // serialises Update/ObserveCycle; instruments lock themselves for scrapes
  bool started_ = false;
  int64_t last_now_ = 0;
  std::map<std::string, int64_t> cost_rate_micros_per_hour_;  // per queue, at last update
  std::map<std::string, int64_t> gpu_milli_;                  // per queue, at last update
  std::map<std::string, QueueAccrual> accrued_;
  bool backfill_ = false;  // restored: the next Update fills the gap since last_now_
  int64_t most_gap_ = 0;   // ...for at most this long per allocation
  std::function<bool(const Accrual&)> persist_;
  int64_t persist_every_ = 0;
  std::optional<int64_t> persist_tried_;  // when persist_ was last called (for accrual to then)
  Accrual persisted_;                     // what the counters export while persist_ is set

  // Devices (DCGM-exporter names and units).
  GaugeVec<7>* gpu_util_;
  GaugeVec<7>* fb_used_;
  GaugeVec<7>* fb_free_;
  GaugeVec<7>* power_;
  GaugeVec<3>* gpu_allocated_;
  GaugeVec<4>* mig_instances_;
  // Nodes.
  GaugeVec<2>* node_ready_;
  GaugeVec<2>* node_schedulable_;
  GaugeVec<2>* node_capacity_gpus_;
  GaugeVec<2>* node_allocated_gpus_;
  GaugeVec<2>* node_capacity_cpu_;
  GaugeVec<2>* node_allocated_cpu_;
  GaugeVec<2>* node_capacity_memory_;
  GaugeVec<2>* node_allocated_memory_;
  GaugeVec<2>* allocated_gpus_;  // node x queue
  // Queues.
  GaugeVec<1>* queue_allocated_gpus_;
  GaugeVec<1>* queue_subtree_allocated_gpus_;  // with its descendants' (what its limit caps)
  GaugeVec<1>* queue_allocated_cpu_;
  GaugeVec<1>* queue_allocated_memory_;
  GaugeVec<1>* queue_guarantee_gpus_;
  GaugeVec<1>* queue_guarantee_cpu_;
  GaugeVec<1>* queue_guarantee_memory_;
  GaugeVec<1>* queue_limit_gpus_;
  GaugeVec<1>* queue_limit_cpu_;
  GaugeVec<1>* queue_limit_memory_;
  GaugeVec<1>* queue_weight_;
  GaugeVec<1>* queue_cost_per_hour_;
  CounterVec<1>* queue_cost_total_;
  CounterVec<1>* queue_gpu_seconds_total_;
  // Jobs.
  GaugeVec<2>* jobs_;
  GaugeVec<2>* pending_jobs_;
  GaugeVec<2>* service_replicas_;
  GaugeVec<2>* service_running_;
  // Each queue's pending reasons seen so far: they read 0 once no job waits for them, so a
  // series does not vanish (a rate or an alert over it would read "no data", not 0).
  std::map<std::string, std::set<std::string, std::less<>>, std::less<>> reasons_seen_;
  GaugeVec<1>* oldest_pending_;
  HistogramVec<1>* queue_wait_;
  // Cycles.
  HistogramVec<0>* cycle_duration_;
  CounterVec<0>* bindings_total_;
  CounterVec<0>* store_failures_total_;
  GaugeVec<0>* read_only_;
  CounterVec<3>* http_requests_total_;
  HistogramVec<2>* http_request_duration_;
  CounterVec<1>* evictions_total_;
  GaugeVec<1>* build_info_;
};

}  // namespace tessera::metrics
