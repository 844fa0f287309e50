#include "metrics/cluster_metrics.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "model/eviction.h"

namespace tessera::metrics {
namespace {

// Registration of the fixed families cannot fail unless a name below is wrong: a bug that
// every test run would show at once, so it stops the process with the reason.
template <typename T>
T* Must(StatusOr<T*> r) {
  if (!r.ok()) {
    std::fprintf(stderr, "tessera metrics: %s\n", r.status().ToString().c_str());
    std::abort();
  }
  return *r;
}

// Seconds: from a second to two days (queue waits are long-tailed).
std::vector<double> QueueWaitBounds() {
  return {1, 5, 15, 30, 60, 300, 900, 1800, 3600, 7200, 21600, 43200, 86400, 172800};
}
// Seconds: from 100 microseconds to 10 s.
std::vector<double> CycleBounds() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
}

double Gpus(int64_t milli) { return static_cast<double>(milli) / 1000.0; }
double Cores(int64_t milli) { return static_cast<double>(milli) / 1000.0; }

// Adds `cost` (micro-currency x seconds / hour) and `gpu` (milli-GPU-seconds) with the
// remainders carried from before.
void Accrue(QueueAccrual& q, __int128 cost, __int128 gpu) {
  cost += q.cost_carry;
  q.cost_micros += static_cast<int64_t>(cost / 3600);
  q.cost_carry = static_cast<int64_t>(cost % 3600);
  gpu += q.gpu_carry;
  q.gpu_seconds += static_cast<int64_t>(gpu / 1000);
  q.gpu_carry = static_cast<int64_t>(gpu % 1000);
}

}  // namespace

ClusterMetrics::ClusterMetrics() {
  const std::array<std::string, 7> dev = {"gpu",      "UUID", "device", "modelName",
                                          "Hostname", "node", "virtual"};
  Registry& r = registry_;
  gpu_util_ = Must(r.AddGauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", dev));
  fb_used_ = Must(r.AddGauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", dev));
  fb_free_ = Must(r.AddGauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", dev));
  power_ = Must(r.AddGauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", dev));
  gpu_allocated_ = Must(r.AddGauge(
      "tessera_gpu_allocated_ratio",
      "Share of one device's compute allocated to tasks (1 = whole device, MIG counts slices).",
      std::array<std::string, 3>{"node", "gpu", "UUID"}));
  mig_instances_ = Must(r.AddGauge(
      "tessera_gpu_mig_instances", "MIG instances configured on a device, by profile and use.",
      std::array<std::string, 4>{"node", "gpu", "profile", "allocated"}));

  const std::array<std::string, 2> np = {"node", "pool"};
  node_ready_ = Must(
      r.AddGauge("tessera_node_ready", "1 while the node's agent heartbeats arrive, else 0.", np));
  node_schedulable_ = Must(r.AddGauge("tessera_node_schedulable",
                                      "1 unless the node is cordoned or drained, else 0.", np));
  node_capacity_gpus_ =
      Must(r.AddGauge("tessera_node_capacity_gpus", "GPU devices on the node.", np));
  node_allocated_gpus_ = Must(r.AddGauge("tessera_node_allocated_gpus",
                                         "GPUs allocated on the node (fractions count).", np));
  node_capacity_cpu_ =
      Must(r.AddGauge("tessera_node_capacity_cpu_cores", "Allocatable CPU cores.", np));
  node_allocated_cpu_ =
      Must(r.AddGauge("tessera_node_allocated_cpu_cores", "CPU cores allocated to tasks.", np));
  node_capacity_memory_ =
      Must(r.AddGauge("tessera_node_capacity_memory_bytes", "Allocatable memory.", np));
  node_allocated_memory_ =
      Must(r.AddGauge("tessera_node_allocated_memory_bytes", "Memory allocated to tasks.", np));
  allocated_gpus_ = Must(r.AddGauge("tessera_allocated_gpus", "GPUs allocated, by node and queue.",
                                    std::array<std::string, 2>{"node", "queue"}));

  const std::array<std::string, 1> q = {"queue"};
  queue_allocated_gpus_ = Must(r.AddGauge(
      "tessera_queue_allocated_gpus",
      "GPUs allocated to the queue's own jobs (jobs run in leaf queues: a parent's is 0).", q));
  queue_subtree_allocated_gpus_ = Must(r.AddGauge(
      "tessera_queue_subtree_allocated_gpus",
      "GPUs allocated to the jobs of the queue and its descendants: what its limit caps.", q));
  queue_allocated_cpu_ = Must(r.AddGauge("tessera_queue_allocated_cpu_cores",
                                         "CPU cores allocated to the queue's jobs.", q));
  queue_allocated_memory_ = Must(r.AddGauge("tessera_queue_allocated_memory_bytes",
                                            "Memory allocated to the queue's jobs.", q));
  queue_guarantee_gpus_ =
      Must(r.AddGauge("tessera_queue_guarantee_gpus", "GPUs guaranteed to the queue.", q));
  queue_guarantee_cpu_ = Must(
      r.AddGauge("tessera_queue_guarantee_cpu_cores", "CPU cores guaranteed to the queue.", q));
  queue_guarantee_memory_ = Must(
      r.AddGauge("tessera_queue_guarantee_memory_bytes", "Memory guaranteed to the queue.", q));
  queue_limit_gpus_ =
      Must(r.AddGauge("tessera_queue_limit_gpus", "The queue's GPU limit (absent: no limit).", q));
  queue_limit_cpu_ = Must(r.AddGauge("tessera_queue_limit_cpu_cores",
                                     "The queue's CPU limit in cores (absent: no limit).", q));
  queue_limit_memory_ = Must(r.AddGauge("tessera_queue_limit_memory_bytes",
                                        "The queue's memory limit (absent: no limit).", q));
  queue_weight_ = Must(r.AddGauge("tessera_queue_weight", "The queue's fair-share weight.", q));
  queue_cost_per_hour_ = Must(r.AddGauge(
      "tessera_queue_cost_per_hour",
      "What the queue's current GPU allocations cost per hour (node GPU-hour price x GPUs).", q));
  queue_cost_total_ = Must(r.AddCounter(
      "tessera_queue_cost_total",
      "Cost accrued by the queue's GPU allocations (GPU-hour price x GPU-hours), in the "
      "currency of the node prices.",
      q));
  queue_gpu_seconds_total_ = Must(r.AddCounter("tessera_queue_gpu_seconds_total",
                                               "GPU-seconds allocated to the queue's jobs.", q));

  jobs_ = Must(r.AddGauge("tessera_jobs", "Jobs by queue and lifecycle state.",
                          std::array<std::string, 2>{"queue", "state"}));
  pending_jobs_ =
      Must(r.AddGauge("tessera_pending_jobs", "Pending jobs by queue and the engine's reason.",
                      std::array<std::string, 2>{"queue", "reason"}));
  // As kube-state-metrics' kube_deployment_spec_replicas / ..._status_replicas_available.
  service_replicas_ = Must(r.AddGauge("tessera_service_replicas",
                                      "Replicas an unfinished service (Deployment) asks for.",
                                      std::array<std::string, 2>{"queue", "service"}));
  service_running_ = Must(r.AddGauge("tessera_service_replicas_running",
                                     "Replicas of an unfinished service that run.",
                                     std::array<std::string, 2>{"queue", "service"}));
  oldest_pending_ = Must(r.AddGauge(
      "tessera_queue_oldest_pending_job_age_seconds",
      "How long the queue's longest-waiting job has been eligible and pending (0 when none is; "
      "held jobs and jobs waiting on a dependency or their array's throttle do not count).",
      q));
  queue_wait_ =
      Must(r.AddHistogram("tessera_job_queue_wait_seconds",
                          "Time from (re)queueing to start, per job start.", q, QueueWaitBounds()));

  cycle_duration_ = Must(r.AddHistogram("tessera_scheduling_cycle_duration_seconds",
                                        "Wall time of one engine cycle.",
                                        std::array<std::string, 0>{}, CycleBounds()));
  bindings_total_ =
      Must(r.AddCounter("tessera_scheduling_bindings_total", "Task bindings decided by the engine.",
                        std::array<std::string, 0>{}));
  evictions_total_ = Must(
      r.AddCounter("tessera_scheduling_evictions_total",
                   "Task evictions by reason: the engine's (Preempted, Reclaimed), a drain "
                   "(Drained), a node lost (NodeLost) or whose agent restarted "
                   "(NodeRestarted), tasks stopped by their agent (Evicted) or ended by a pool "
                   "(NodeFailed, PreemptedBySlurm, KilledBySlurm, CancelledInSlurm, "
                   "LostInSlurm, StuckInSlurm, RefusedBySlurm, PartlyStoppedInSlurm).",
                   std::array<std::string, 1>{"reason"}));
  // Every reason's series exists before its first eviction (increase() sees the first one).
  for (std::string_view reason : kTesseraEvictionReasons)
    evictions_total_->Add({std::string(reason)}, 0);
  for (std::string_view reason : kPoolEvictionReasons)
    evictions_total_->Add({std::string(reason)}, 0);
  store_failures_total_ = Must(r.AddCounter(
      "tessera_store_commit_failures_total",
      "Store commits that failed and made the server refuse a request (a full disk, an "
      "unwritable data dir).",
      std::array<std::string, 0>{}));
  store_failures_total_->Add({}, 0);  // the series exists before the first failure
  read_only_ = Must(r.AddGauge("tessera_server_read_only",
                               "1 once a failed store write made the server read-only until "
                               "restarted (docs/lifecycle.md), else 0.",
                               std::array<std::string, 0>{}));
  read_only_->Set({}, 0);
  http_requests_total_ =
      Must(r.AddCounter("tessera_http_requests_total",
                        "API requests answered, by route pattern, method and HTTP status code.",
                        std::array<std::string, 3>{"route", "method", "code"}));
  http_request_duration_ = Must(r.AddHistogram(
      "tessera_http_request_duration_seconds",
      "Time to answer an API request (a logs follow long-polls), by route pattern and method.",
      std::array<std::string, 2>{"route", "method"}, CycleBounds()));
  build_info_ = Must(r.AddGauge("tessera_build_info", "Always 1; the version is a label.",
                                std::array<std::string, 1>{"version"}));
  build_info_->Set({"0.1.0"}, 1);
}

std::vector<std::string> ClusterMetrics::ExportedNames() {
  ClusterMetrics m;
  std::vector<std::string> names;
  for (const MetricFamily& f : m.registry_.Collect()) names.push_back(f.name);
  return names;
}

void ClusterMetrics::ObserveCycle(const Plan& plan, double seconds) {
  std::lock_guard lock(mu_);
  cycle_duration_->Observe({}, seconds);
  bindings_total_->Add({}, static_cast<double>(plan.bindings.size()));
  for (const Eviction& e : plan.evictions) evictions_total_->Add({e.reason}, 1);
}

void ClusterMetrics::ObserveJobStart(const std::string& queue, int64_t queued_at,
                                     int64_t bound_at) {
  std::lock_guard lock(mu_);
  queue_wait_->Observe({queue}, static_cast<double>(std::max<int64_t>(0, bound_at - queued_at)));
}

void ClusterMetrics::ObserveStoreFailure(bool read_only) {
  store_failures_total_->Add({}, 1);
  if (read_only) read_only_->Set({}, 1);
}

void ClusterMetrics::ObserveHttpRequest(const std::string& route, const std::string& method,
                                        int code, double seconds) {
  static constexpr std::string_view kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE"};
  const std::string m =
      std::find(std::begin(kMethods), std::end(kMethods), method) != std::end(kMethods) ? method
                                                                                        : "other";
  http_requests_total_->Add({route, m, std::to_string(code)}, 1);
  if (seconds >= 0) http_request_duration_->Observe({route, m}, seconds);
}

void ClusterMetrics::ObserveEvictions(const std::string& reason, int64_t tasks) {
  evictions_total_->Add({reason}, static_cast<double>(tasks));
}

void ClusterMetrics::RestoreAccrual(const Accrual& a, int64_t most_gap_seconds) {
  std::lock_guard lock(mu_);
  most_gap_ = most_gap_seconds;
  started_ = true;
  last_now_ = a.to;
  accrued_ = a.queues;
  persisted_ = a;
  cost_rate_micros_per_hour_.clear();
  gpu_milli_.clear();
  backfill_ = true;
}

void ClusterMetrics::PersistAccrualWith(std::function<bool(const Accrual&)> persist,
                                        int64_t every_seconds) {
  std::lock_guard lock(mu_);
  persist_ = std::move(persist);
  persist_every_ = every_seconds;
}

bool ClusterMetrics::FlushAccrual() {
  std::lock_guard lock(mu_);
  return Persist(last_now_);
}

bool ClusterMetrics::Persist(int64_t to) {
  if (!persist_) return false;
  persist_tried_ = to;
  Accrual a{to, accrued_};
  if (!persist_(a)) return false;
  persisted_ = std::move(a);
  return true;
}

void ClusterMetrics::Update(const ClusterView& view) {
  std::lock_guard lock(mu_);
  if (!started_) {
    started_ = true;
    last_now_ = view.now;
  }
  // Cost accrues for [last update, now) at the allocation seen at the last update.
  AccrueCost(view);

  static const Snapshot kEmpty;
  const Snapshot& s = view.snapshot ? *view.snapshot : kEmpty;

  // Usage by node, by queue, by (node, queue), by (node, device).
  std::map<std::string, ResourceVector> node_use, queue_use;
  std::map<LabelValues<2>, int64_t> node_queue_gpu;
  std::map<std::pair<std::string, int32_t>, int64_t> device_milli;
  std::map<std::pair<std::string, int32_t>, std::set<int32_t>> mig_taken;
  std::map<std::string, int64_t> queue_cost_rate;  // micro-currency per hour
  std::map<std::string, const Node*> node_by_name;
  for (const Node& n : s.nodes) node_by_name[n.name] = &n;
  // An exclusive job is charged each of its nodes whole, once (the engine's charge, what
  // `get queues` shows): its placeholders "<job>#<allocation>" are one job.
  std::set<std::pair<std::string_view, std::string_view>> whole;
  std::map<std::string, std::pair<__int128, __int128>> gap;  // restored: cost, GPU since then
  for (const Job& j : s.jobs) {
    const std::string_view job = std::string_view(j.id).substr(0, j.id.find('#'));
    for (const auto& a : j.allocations) {
      if (!a || a->idle) continue;  // a finished task's place holds nothing, as `get queues`
      for (const DeviceAssignment& d : a->devices) {
        device_milli[{a->node, d.device}] += d.milli;
        if (d.mig_instance >= 0) mig_taken[{a->node, d.device}].insert(d.mig_instance);
      }
      auto node = node_by_name.find(a->node);
      const ResourceVector charge =
          node != node_by_name.end()
              ? ChargeOf(*a, *node->second, j.exclusive,
                         j.exclusive && whole.emplace(job, node->first).second)
              : AllocationVector(*a);
      // A node holds what its tasks occupy: a fraction charged by its memory share
      // (DeviceCharge) occupies its compute, so that the node never reads over capacity.
      const ResourceVector occupied = j.exclusive ? charge : AllocationVector(*a);
      node_use[a->node] += occupied;
      queue_use[j.queue] += charge;
      node_queue_gpu[{a->node, j.queue}] += occupied.gpu_milli;
      const int64_t rate = node != node_by_name.end()
                               ? charge.gpu_milli * node->second->cost_micros_per_gpu_hour / 1000
                               : 0;
      queue_cost_rate[j.queue] += rate;
      if (const int64_t dt = std::min(view.now - std::max(last_now_, j.start_time), most_gap_);
          backfill_ && dt > 0) {
        gap[j.queue].first += static_cast<__int128>(rate) * dt;
        gap[j.queue].second += static_cast<__int128>(charge.gpu_milli) * dt;
      }
    }
  }

  for (const auto& [queue, g] : gap) Accrue(accrued_[queue], g.first, g.second);
  // Durable counters show what is stored; after a restart's gap, store it at once. Nothing
  // new accrued means nothing was held since: an idle cluster writes nothing.
  if (persist_ && accrued_ != persisted_.queues &&
      (backfill_ || !persist_tried_ || view.now - *persist_tried_ >= persist_every_))
    Persist(view.now);
  backfill_ = false;
  const std::map<std::string, QueueAccrual>& shown = persist_ ? persisted_.queues : accrued_;

  // Devices and nodes.
  std::map<LabelValues<7>, double> util, used, free_mib, power;
  std::map<LabelValues<3>, double> allocated;
  std::map<LabelValues<4>, double> mig;
  std::map<LabelValues<2>, double> ready, schedulable, cap_gpu, alloc_gpu, cap_cpu, alloc_cpu,
      cap_mem, alloc_mem;
  for (const Node& n : s.nodes) {
    const LabelValues<2> np = {n.name, n.pool};
    const ResourceVector& u = node_use[n.name];
    ready[np] = n.ready ? 1 : 0;
    schedulable[np] = n.unschedulable ? 0 : 1;
    cap_gpu[np] = static_cast<double>(n.devices.size());
    alloc_gpu[np] = Gpus(u.gpu_milli);
    cap_cpu[np] = Cores(n.cpu_milli);
    alloc_cpu[np] = Cores(u.cpu_milli);
    cap_mem[np] = static_cast<double>(n.memory_bytes);
    alloc_mem[np] = static_cast<double>(u.memory_bytes);
    for (const Device& d : n.devices) {
      const std::string gpu = std::to_string(d.index);
      allocated[{n.name, gpu, d.uuid}] = Gpus(device_milli[{n.name, d.index}]);
      const std::set<int32_t>& taken = mig_taken[{n.name, d.index}];
      std::map<std::string, std::pair<int, int>> by_profile;  // profile -> (free, allocated)
      for (size_t i = 0; i < d.mig.size(); ++i) {
        auto& c = by_profile[d.mig[i].profile];
        (taken.count(static_cast<int32_t>(i)) ? c.second : c.first)++;
      }
      for (const auto& [profile, c] : by_profile) {
        mig[{n.name, gpu, profile, "false"}] = c.first;
        mig[{n.name, gpu, profile, "true"}] = c.second;
      }
      // A silent agent's last sample is stale: show no device sample for a NotReady node,
      // as dcgm-exporter on a dead machine would show none.
      if (!n.ready) continue;
      const LabelValues<7> l = {
          gpu, d.uuid, "nvidia" + gpu, d.model, n.name, n.name, d.is_virtual ? "true" : "false"};
      util[l] = d.util_percent;
      used[l] = static_cast<double>(d.memory_used_bytes / (1024 * 1024));
      free_mib[l] = static_cast<double>(std::max<int64_t>(0, d.memory_bytes - d.memory_used_bytes) /
                                        (1024 * 1024));
      power[l] = static_cast<double>(d.power_milliwatts) / 1000.0;
    }
  }
  gpu_util_->Replace(std::move(util));
  fb_used_->Replace(std::move(used));
  fb_free_->Replace(std::move(free_mib));
  power_->Replace(std::move(power));
  gpu_allocated_->Replace(std::move(allocated));
  mig_instances_->Replace(std::move(mig));
  node_ready_->Replace(std::move(ready));
  node_schedulable_->Replace(std::move(schedulable));
  node_capacity_gpus_->Replace(std::move(cap_gpu));
  node_allocated_gpus_->Replace(std::move(alloc_gpu));
  node_capacity_cpu_->Replace(std::move(cap_cpu));
  node_allocated_cpu_->Replace(std::move(alloc_cpu));
  node_capacity_memory_->Replace(std::move(cap_mem));
  node_allocated_memory_->Replace(std::move(alloc_mem));
  std::map<LabelValues<2>, double> nq;
  for (const auto& [k, milli] : node_queue_gpu) nq[k] = Gpus(milli);
  allocated_gpus_->Replace(std::move(nq));

  // Queues: every configured queue, plus any queue a job names.
  std::set<std::string> queue_names;
  for (const Queue& q : s.queues) queue_names.insert(q.name);
  for (const Job& j : s.jobs) queue_names.insert(j.queue);
  for (const JobStatus& j : view.jobs) queue_names.insert(j.queue);
  std::map<LabelValues<1>, double> qa_gpu, qa_cpu, qa_mem, qg_gpu, qg_cpu, qg_mem, ql_gpu, ql_cpu,
      ql_mem, weight, cost_rate;
  for (const std::string& name : queue_names) {
    const ResourceVector& u = queue_use[name];
    qa_gpu[{name}] = Gpus(u.gpu_milli);
    qa_cpu[{name}] = Cores(u.cpu_milli);
    qa_mem[{name}] = static_cast<double>(u.memory_bytes);
    cost_rate[{name}] = static_cast<double>(queue_cost_rate[name]) / 1e6;
    gpu_milli_[name] = u.gpu_milli;
    cost_rate_micros_per_hour_[name] = queue_cost_rate[name];
    auto total = shown.find(name);
    const QueueAccrual q = total != shown.end() ? total->second : QueueAccrual{};
    queue_cost_total_->Reach({name}, static_cast<double>(q.cost_micros) / 1e6);
    queue_gpu_seconds_total_->Reach({name}, static_cast<double>(q.gpu_seconds));
  }
  for (const Queue& q : s.queues) {
    qg_gpu[{q.name}] = Gpus(q.guarantee.gpu_milli);
    qg_cpu[{q.name}] = Cores(q.guarantee.cpu_milli);
    qg_mem[{q.name}] = static_cast<double>(q.guarantee.memory_bytes);
    weight[{q.name}] = q.weight;
    // A limit names only what it caps (0: that resource is not capped): absent, as the
    // HELP says, so that an alert comparing use with it does not fire.
    if (q.limit && q.limit->gpu_milli > 0) ql_gpu[{q.name}] = Gpus(q.limit->gpu_milli);
    if (q.limit && q.limit->cpu_milli > 0) ql_cpu[{q.name}] = Cores(q.limit->cpu_milli);
    if (q.limit && q.limit->memory_bytes > 0)
      ql_mem[{q.name}] = static_cast<double>(q.limit->memory_bytes);
  }
  // A queue's subtree: its own jobs' GPUs, added to every ancestor.
  std::map<std::string, Queue> by_name;
  for (const Queue& q : s.queues) by_name[q.name] = q;
  std::map<LabelValues<1>, double> qs_gpu;
  for (const std::string& name : queue_names) {
    const double gpus = Gpus(queue_use[name].gpu_milli);
    qs_gpu[{name}] += gpus;
    for (const std::string& ancestor : QueueAncestors(by_name, name)) qs_gpu[{ancestor}] += gpus;
  }
  queue_subtree_allocated_gpus_->Replace(std::move(qs_gpu));
  queue_allocated_gpus_->Replace(std::move(qa_gpu));
  queue_allocated_cpu_->Replace(std::move(qa_cpu));
  queue_allocated_memory_->Replace(std::move(qa_mem));
  queue_guarantee_gpus_->Replace(std::move(qg_gpu));
  queue_guarantee_cpu_->Replace(std::move(qg_cpu));
  queue_guarantee_memory_->Replace(std::move(qg_mem));
  queue_limit_gpus_->Replace(std::move(ql_gpu));
  queue_limit_cpu_->Replace(std::move(ql_cpu));
  queue_limit_memory_->Replace(std::move(ql_mem));
  queue_weight_->Replace(std::move(weight));
  queue_cost_per_hour_->Replace(std::move(cost_rate));

  // Jobs: lifecycle states from the server, the rest derived from the snapshot. This runs
  // after every cycle over every live job, so it avoids copies (views into the snapshot and
  // plan, hash lookups that never decide an output order) and counts in integers.
  std::unordered_map<std::string_view, std::string_view> plan_reason;
  if (view.plan) {
    plan_reason.reserve(view.plan->decisions.size());
    for (const JobDecision& d : view.plan->decisions) {
      // A job that can never fit the cluster as it is says so (as `get jobs` does), apart
      // from those that wait: an SRE alerts on never-runnable work.
      if (d.outcome == Outcome::kInfeasible)
        plan_reason.emplace(d.job, "Infeasible");
      else if (d.outcome != Outcome::kPlaced)
        plan_reason.emplace(d.job, d.reason != nullptr ? std::string_view(d.reason->code) : "");
    }
  }
  struct QueueJobs {
    std::map<std::string, int64_t, std::less<>> states, reasons;
    int64_t oldest = 0;
  };
  std::map<std::string, QueueJobs, std::less<>> per_queue;
  for (const std::string& name : queue_names) {
    QueueJobs& q = per_queue[name];
    q.states["pending"] = 0;
    q.states["running"] = 0;
    for (const std::string& state : view.job_states) q.states[state] = 0;
  }
  auto count = [&](std::string_view id, std::string_view queue, std::string_view state,
                   std::string_view reason, int64_t queued_at) {
    auto q = per_queue.find(queue);
    if (q == per_queue.end()) q = per_queue.emplace(std::string(queue), QueueJobs{}).first;
    auto st = q->second.states.find(state);
    if (st == q->second.states.end()) st = q->second.states.emplace(std::string(state), 0).first;
    st->second++;
    if (state == "pending") {
      if (reason.empty()) {
        auto it = plan_reason.find(id);
        reason = it != plan_reason.end() && !it->second.empty() ? it->second : "NotYetScheduled";
      }
      auto r = q->second.reasons.find(reason);
      if (r == q->second.reasons.end()) r = q->second.reasons.emplace(std::string(reason), 0).first;
      r->second++;
      // Waits the user chose (a hold, a dependency, an array's throttle) are not the
      // scheduler's: they would page whoever watches how long jobs wait for resources.
      static constexpr std::string_view kChosen[] = {
          "Held", "Dependency", "DependencyNeverSatisfied", "JobArrayTaskLimit", "ScaledToZero"};
      if (std::find(std::begin(kChosen), std::end(kChosen), reason) == std::end(kChosen))
        q->second.oldest = std::max(q->second.oldest, view.now - queued_at);
    }
  };
  std::unordered_set<std::string_view> known;
  known.reserve(view.jobs.size());
  std::map<LabelValues<2>, double> replicas, replicas_running;
  for (const JobStatus& j : view.jobs) {
    known.insert(j.id);
    if (j.service) {
      replicas[{j.queue, j.id}] = j.service_replicas;
      replicas_running[{j.queue, j.id}] = j.service_running;
    }
    count(j.id, j.queue, j.state, j.pending_reason,
          j.pending_since >= 0 ? j.pending_since : j.submit_time);
  }
  // The server models the allocations a job in transition still holds as placeholders
  // "<job>#<allocation>" (beside the job itself when it is pending again): one job, whose
  // state is the job's own when it is there, else running.
  std::set<std::string, std::less<>> placeholders;
  std::unordered_set<std::string_view> plain;
  if (std::any_of(s.jobs.begin(), s.jobs.end(),
                  [](const Job& j) { return j.id.find('#') != std::string::npos; })) {
    for (const Job& j : s.jobs) {
      if (j.id.find('#') == std::string::npos) plain.insert(j.id);
    }
  }
  for (const Job& j : s.jobs) {
    std::string_view id = j.id;
    if (const size_t hash = id.find('#'); hash != std::string_view::npos) {
      id = id.substr(0, hash);
      if (plain.count(id) || !placeholders.emplace(id).second) continue;
    }
    if (!known.empty() && known.count(id)) continue;
    count(id, j.queue, j.RunningTasks() > 0 ? "running" : "pending", "", j.submit_time);
  }
  std::map<LabelValues<2>, double> by_state, by_reason;
  std::map<LabelValues<1>, double> oldest;
  std::erase_if(reasons_seen_, [&](const auto& kv) { return !per_queue.count(kv.first); });
  for (auto& [queue, q] : per_queue) {
    auto& seen = reasons_seen_[queue];
    for (const std::string& reason : seen) q.reasons.try_emplace(reason, 0);
    for (const auto& [reason, n] : q.reasons) seen.insert(reason);
    for (const auto& [state, n] : q.states) by_state[{queue, state}] = static_cast<double>(n);
    for (const auto& [reason, n] : q.reasons) by_reason[{queue, reason}] = static_cast<double>(n);
    oldest[{queue}] = static_cast<double>(std::max<int64_t>(0, q.oldest));
  }
  jobs_->Replace(std::move(by_state));
  service_replicas_->Replace(std::move(replicas));
  service_running_->Replace(std::move(replicas_running));
  pending_jobs_->Replace(std::move(by_reason));
  oldest_pending_->Replace(std::move(oldest));
  last_now_ = view.now;
}

void ClusterMetrics::AccrueCost(const ClusterView& view) {
  const int64_t dt = view.now - last_now_;
  if (dt <= 0) return;
  // Integer accounting: micro-currency and milli-GPU-seconds, remainders carried forward so
  // that many short updates sum to the same total as one long one.
  for (const auto& [queue, rate] : cost_rate_micros_per_hour_) {
    auto milli = gpu_milli_.find(queue);
    Accrue(accrued_[queue], static_cast<__int128>(rate) * dt,
           static_cast<__int128>(milli != gpu_milli_.end() ? milli->second : 0) * dt);
  }
}

}  // namespace tessera::metrics
