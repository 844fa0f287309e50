#include "sim/replay.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <set>
#include <tuple>

#include "engine/cluster_state.h"

namespace tessera::sim {
namespace {

struct Live {
  int64_t service = 0;  // seconds of progress so far
  int64_t held = 0;     // seconds it held its GPUs in earlier runs (progress and restarts)
  int64_t run_start = -1;
  int64_t overhead = 0;     // restart seconds due at the start of the current run
  uint64_t generation = 0;  // bumped on eviction: stale completion events are ignored
  int64_t alloc_milli = 0;
  int32_t queue = 0;
  int64_t total_milli = 0;  // GPU milli of the whole job
  bool running = false;
  bool in_state = false;
};

struct Event {
  int64_t time;
  int kind;  // 0 completion, 1 cycle
  int64_t seq;
  size_t job;
  uint64_t generation;
  bool operator>(const Event& o) const {
    return std::tie(time, kind, seq) > std::tie(o.time, o.kind, o.seq);
  }
};

Job MakeJob(const TraceJob& t, const std::string& queue, const ReplayOptions& o) {
  Job j;
  j.id = t.id;
  j.queue = queue;
  j.submit_time = t.submit;
  TaskGroup g;
  g.name = "task";
  g.replicas = t.tasks;
  TaskRequest& r = g.request;
  const int64_t gpus = t.gpus_per_task;
  r.cpu_milli = t.cpu_milli > 0 ? t.cpu_milli : gpus * o.cpu_milli_per_gpu;
  r.memory_bytes = (t.memory_mib > 0 ? t.memory_mib : gpus * o.memory_mib_per_gpu) * 1024 * 1024;
  if (gpus == 1 && t.gpu_milli < 1000) {
    r.gpu.kind = GpuRequestKind::kFraction;
    r.gpu.count = 1;
    r.gpu.milli = t.gpu_milli;
  } else if (gpus > 0) {
    r.gpu.kind = GpuRequestKind::kWhole;
    r.gpu.count = t.gpus_per_task;
  }
  r.gpu.models = t.models;
  j.groups.push_back(std::move(g));
  j.min_available = t.tasks;   // a gang: all tasks or none
  j.grace_period_seconds = 0;  // the simulator applies evictions at once
  if (o.oracle_runtimes) j.runtime_estimate_seconds = t.duration;
  j.allocations.resize(t.tasks);
  return j;
}

// The jobs a replay runs, as indexes into the trace: in submit order (stable: the trace's
// order on ties), the first max_jobs of them.
std::vector<size_t> ReplayOrder(const std::vector<TraceJob>& trace, const ReplayOptions& options) {
  std::vector<size_t> order(trace.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return trace[a].submit < trace[b].submit; });
  if (options.max_jobs > 0 && static_cast<int64_t>(order.size()) > options.max_jobs)
    order.resize(options.max_jobs);
  return order;
}

int64_t JobMilli(const TraceJob& t) {
  int64_t per =
      t.gpus_per_task == 1 && t.gpu_milli < 1000 ? t.gpu_milli : 1000 * int64_t{t.gpus_per_task};
  return per * t.tasks;
}

}  // namespace

std::vector<std::string> ImplicitQueues(const Snapshot& cluster, const std::vector<TraceJob>& jobs,
                                        const ReplayOptions& options) {
  std::set<std::string> seen;
  for (const Queue& q : cluster.queues) seen.insert(q.name);
  std::vector<std::string> out;
  for (size_t i : ReplayOrder(jobs, options)) {
    const std::string q = options.single_queue ? "default" : jobs[i].queue;
    if (seen.insert(q).second) out.push_back(q);
  }
  return out;
}

StatusOr<ReplayResult> RunReplay(const Snapshot& cluster, const std::vector<TraceJob>& trace,
                                 const EngineConfig& config, const ReplayOptions& options) {
  auto engine_or = Engine::Create(config);
  if (!engine_or.ok()) return engine_or.status();
  std::unique_ptr<Engine> engine = std::move(*engine_or);
  Snapshot base = cluster;
  base.jobs.clear();
  auto state_or = ClusterState::FromSnapshot(base);
  if (!state_or.ok()) return state_or.status();
  ClusterState& state = **state_or;
  Rng rng(options.seed);

  ReplayResult res;
  for (const Node& n : base.nodes)
    for (const Device& d : n.devices)
      if (!d.mig_enabled()) res.total_gpu_milli += 1000;

  const std::vector<size_t> order = ReplayOrder(trace, options);

  // Queues: the cluster's, plus any the trace names (weight 1, no guarantee).
  std::map<std::string, int32_t> queue_ids;
  for (const std::string& q : ImplicitQueues(cluster, trace, options)) {
    Queue nq;
    nq.name = q;
    TESSERA_RETURN_IF_ERROR(state.UpsertQueue(nq));
    base.queues.push_back(nq);
    ++res.created_queues;
  }
  std::sort(base.queues.begin(), base.queues.end(),
            [](const Queue& a, const Queue& b) { return a.name < b.name; });
  for (const Queue& q : base.queues) {
    queue_ids[q.name] = static_cast<int32_t>(res.queues.size());
    QueueRecord r;
    r.name = q.name;
    r.guarantee_gpu_milli = q.guarantee.gpu_milli;
    r.weight = q.weight;
    res.queues.push_back(r);
  }
  std::vector<int64_t> queue_alloc(res.queues.size(), 0);

  std::vector<Live> live(trace.size());
  res.jobs.resize(order.size());
  std::vector<size_t> record_of(trace.size(), 0);
  for (size_t k = 0; k < order.size(); ++k) {
    const TraceJob& t = trace[order[k]];
    JobRecord& r = res.jobs[k];
    r.id = t.id;
    r.queue = options.single_queue ? "default" : t.queue;
    r.submit = t.submit;
    r.duration = t.duration;
    r.gpu_milli = JobMilli(t);
    r.outcome = "unfinished";
    record_of[order[k]] = k;
    live[order[k]].queue = queue_ids[r.queue];
    live[order[k]].total_milli = JobMilli(t);
    QueueRecord& q = res.queues[live[order[k]].queue];
    q.jobs++;
    q.demand_gpu_milli_seconds += JobMilli(t) * t.duration;
  }
  std::map<std::string, size_t> index_of;
  for (size_t i : order) index_of[trace[i].id] = i;

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  int64_t seq = 0;
  int64_t pending = 0, running = 0, allocated = 0;
  std::vector<SeriesPoint> steps;
  int64_t last_t = order.empty() ? 0 : trace[order.front()].submit;
  res.first_submit = last_t;

  auto advance = [&](int64_t t) {
    if (t > last_t) {
      for (size_t q = 0; q < queue_alloc.size(); ++q)
        res.queues[q].used_gpu_milli_seconds += queue_alloc[q] * (t - last_t);
      last_t = t;
    }
  };
  auto record_step = [&](int64_t t) {
    SeriesPoint p{t, allocated, pending, running};
    if (!steps.empty() && steps.back().time == t)
      steps.back() = p;
    else
      steps.push_back(p);
  };
  // The job's current run ends at t (completion or eviction): progress after its restart
  // time, GPU time held, and the restart time it spent (cut short by an early eviction).
  auto end_run = [&](Live& L, int64_t t) {
    const int64_t ran = t - L.run_start;
    L.service += std::max<int64_t>(0, ran - L.overhead);
    L.held += ran;
    res.restart_gpu_milli_seconds += std::min(ran, L.overhead) * L.total_milli;
    L.running = false;
    --running;
  };
  auto finish_job = [&](size_t i, int64_t t) -> Status {
    Live& L = live[i];
    TESSERA_RETURN_IF_ERROR(state.RemoveJob(trace[i].id));
    L.in_state = false;
    end_run(L, t);
    allocated -= L.alloc_milli;
    queue_alloc[L.queue] -= L.alloc_milli;
    L.alloc_milli = 0;
    JobRecord& r = res.jobs[record_of[i]];
    r.finish = t;
    r.pending = (t - r.submit) - L.held;
    r.outcome = "finished";
    res.last_finish = std::max(res.last_finish, t);
    return Status::Ok();
  };

  // One cycle at t; `evicted` says whether its plan evicted a running task.
  auto run_cycle = [&](int64_t t, bool& evicted_any) -> Status {
    Plan plan = engine->Cycle(state, t, rng);
    ++res.cycles;
    // ClusterState::ApplyPlan, tolerating a plan that evicts the same task twice (preempt
    // and reclaim may both pick it): each running task is released once.
    std::set<std::pair<std::string, int32_t>> released;
    std::set<std::string> evicted;
    for (const Eviction& e : plan.evictions) {
      if (!released.insert({e.job, e.task}).second) continue;
      const std::optional<Job> j = state.FindJob(e.job);
      if (!j || e.task < 0 || e.task >= static_cast<int32_t>(j->allocations.size()) ||
          !j->allocations[e.task]) {
        ++res.stale_evictions;
        continue;
      }
      TESSERA_RETURN_IF_ERROR(state.Release(e.job, e.task));
      evicted.insert(e.job);
    }
    for (const Binding& b : plan.bindings)
      TESSERA_RETURN_IF_ERROR(state.Bind(b.job, b.task, b.allocation, t));
    // Evictions (of tasks that really ran): the whole job goes back to pending, keeping its
    // service (checkpointed).
    for (const std::string& id : evicted) {
      auto it = index_of.find(id);
      if (it == index_of.end()) return Internal("plan evicts unknown job " + id);
      size_t i = it->second;
      Live& L = live[i];
      std::optional<Job> j = state.FindJob(id);
      if (!j) return Internal("evicted job " + id + " is not in the state");
      Job again_job = std::move(*j);
      if (L.running) {
        end_run(L, t);
        ++pending;
      }
      ++L.generation;
      allocated -= L.alloc_milli;
      queue_alloc[L.queue] -= L.alloc_milli;
      L.alloc_milli = 0;
      res.jobs[record_of[i]].preemptions++;
      ++res.preemptions;
      // Re-admit as pending (releasing any task the plan left bound) with the service it
      // attained (the GPU time it held, restarts included), which is what
      // least-attained-service orders by.
      TESSERA_RETURN_IF_ERROR(state.RemoveJob(id));
      for (auto& a : again_job.allocations) a.reset();
      again_job.start_time = -1;  // the next run starts when it is bound again
      again_job.attained_gpu_milli_seconds = L.held * L.total_milli;
      TESSERA_RETURN_IF_ERROR(state.AddJob(again_job));
    }
    // Bindings: account the devices; a job whose whole gang runs has started.
    std::map<std::string, int64_t> bound;
    for (const Binding& b : plan.bindings) bound[b.job] += b.allocation.GpuMilli();
    res.bindings += static_cast<int64_t>(plan.bindings.size());
    for (const auto& [id, milli] : bound) {
      auto it = index_of.find(id);
      if (it == index_of.end()) return Internal("plan binds unknown job " + id);
      size_t i = it->second;
      Live& L = live[i];
      L.alloc_milli += milli;
      allocated += milli;
      queue_alloc[L.queue] += milli;
      const std::optional<Job> j = state.FindJob(id);
      if (j && !L.running && j->RunningTasks() >= j->GangMinimum()) {
        JobRecord& r = res.jobs[record_of[i]];
        L.running = true;
        L.run_start = t;
        L.overhead = r.start >= 0 ? options.restart_cost_seconds : 0;  // it ran before
        --pending;
        ++running;
        if (r.start < 0) r.start = t;
        events.push({t + L.overhead + std::max<int64_t>(0, trace[i].duration - L.service), 0, seq++,
                     i, L.generation});
      }
    }
    for (const JobDecision& d : plan.decisions) {
      if (d.outcome != Outcome::kInfeasible && d.outcome != Outcome::kError) continue;
      auto it = index_of.find(d.job);
      if (it == index_of.end()) continue;
      Live& L = live[it->second];
      if (L.running || !L.in_state) continue;
      TESSERA_RETURN_IF_ERROR(state.RemoveJob(d.job));
      L.in_state = false;
      --pending;
      // Dropped: no demand of its queue (its share figures are over the jobs that can run).
      res.queues[L.queue].demand_gpu_milli_seconds -= L.total_milli * trace[it->second].duration;
      JobRecord& r = res.jobs[record_of[it->second]];
      r.outcome = d.outcome == Outcome::kInfeasible ? "infeasible" : "error";
      if (d.reason) r.why = d.reason->message;
    }
    evicted_any = !evicted.empty();
    return Status::Ok();
  };

  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  size_t next = 0;
  int64_t next_cycle_at = std::numeric_limits<int64_t>::min();
  bool dirty = false, cycle_scheduled = false;
  while (true) {
    int64_t t = kNever;
    if (next < order.size()) t = trace[order[next]].submit;
    if (!events.empty()) t = std::min(t, events.top().time);
    if (t == kNever) break;
    advance(t);
    while (!events.empty() && events.top().time == t && events.top().kind == 0) {
      Event e = events.top();
      events.pop();
      if (e.generation != live[e.job].generation || !live[e.job].running) continue;
      TESSERA_RETURN_IF_ERROR(finish_job(e.job, t));
      dirty = true;
    }
    while (next < order.size() && trace[order[next]].submit == t) {
      size_t i = order[next++];
      const std::string& q = res.jobs[record_of[i]].queue;
      TESSERA_RETURN_IF_ERROR(state.AddJob(MakeJob(trace[i], q, options)));
      live[i].in_state = true;
      ++pending;
      dirty = true;
    }
    while (!events.empty() && events.top().time == t && events.top().kind == 1) {
      events.pop();
      cycle_scheduled = false;
    }
    if (dirty && pending > 0 && t >= next_cycle_at) {
      bool evicted = false;
      TESSERA_RETURN_IF_ERROR(run_cycle(t, evicted));
      // As the server: its loop runs a cycle as soon as evicted tasks have exited (here at
      // once, grace period 0), so the capacity they free goes to the waiting work now, not
      // one period later. One follow-up: if it evicts again, that waits for the period (an
      // engine that kept evicting would otherwise cycle without end at one instant).
      if (evicted && pending > 0) TESSERA_RETURN_IF_ERROR(run_cycle(t, evicted));
      next_cycle_at = t + std::max<int64_t>(1, options.cycle_interval);
      // And periodically while work waits, as the server's loop does: a policy whose order
      // moves with time (least attained service, its starvation guard, aging, reservations)
      // may decide differently one period later with no arrival or completion in between.
      dirty = pending > 0;
    }
    if (pending == 0) dirty = false;
    if (dirty && !cycle_scheduled) {
      events.push({std::max(next_cycle_at, t + 1), 1, seq++, 0, 0});
      cycle_scheduled = true;
    }
    record_step(t);
  }

  // Evenly spaced samples of the step functions, from the first submission to the last event.
  if (!steps.empty()) {
    const int64_t t0 = steps.front().time, t1 = steps.back().time;
    const int64_t n = std::max<int64_t>(2, options.series_points);
    size_t k = 0;
    for (int64_t s = 0; s < n; ++s) {
      int64_t ts = t0 + (t1 - t0) * s / (n - 1);
      while (k + 1 < steps.size() && steps[k + 1].time <= ts) ++k;
      SeriesPoint p = steps[k];
      p.time = ts;
      res.series.push_back(p);
    }
  }
  for (size_t k = 0; k < res.jobs.size(); ++k) {
    const JobRecord& r = res.jobs[k];
    if (r.outcome == "infeasible" || r.outcome == "error") continue;  // as in Summarise
    QueueRecord& q = res.queues[queue_ids[r.queue]];
    int64_t wait = r.start >= 0 ? r.start - r.submit
                                : (res.last_finish > r.submit ? res.last_finish - r.submit : 0);
    q.max_wait = std::max(q.max_wait, wait);
    q.max_pending = std::max(q.max_pending, r.pending);
  }
  return res;
}

int64_t Percentile(std::vector<int64_t> v, int q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  // Nearest rank: the smallest value with at least q % of the values at or below it.
  size_t rank = static_cast<size_t>((static_cast<int64_t>(v.size()) * q + 99) / 100);
  if (rank == 0) rank = 1;
  return v[std::min(rank, v.size()) - 1];
}

ReplaySummary Summarise(const ReplayResult& r) {
  ReplaySummary s;
  std::vector<int64_t> jct, wait, pending;
  s.jobs = static_cast<int64_t>(r.jobs.size());
  for (const JobRecord& j : r.jobs) {
    if (j.outcome == "finished") {
      ++s.finished;
      jct.push_back(j.finish - j.submit);
      pending.push_back(j.pending);
    } else if (j.outcome == "infeasible" || j.outcome == "error") {
      ++s.infeasible;
      continue;
    } else {
      ++s.unfinished;
    }
    if (j.start >= 0)
      wait.push_back(j.start - j.submit);
    else
      wait.push_back(std::max<int64_t>(0, r.last_finish - j.submit));  // still waiting at the end
  }
  auto avg = [](const std::vector<int64_t>& v) {
    if (v.empty()) return 0.0;
    long double t = 0;
    for (int64_t x : v) t += x;
    return static_cast<double>(t / v.size());
  };
  s.avg_jct = avg(jct);
  s.avg_wait = avg(wait);
  s.p50_jct = Percentile(jct, 50);
  s.p95_jct = Percentile(jct, 95);
  s.p99_jct = Percentile(jct, 99);
  s.p50_wait = Percentile(wait, 50);
  s.p95_wait = Percentile(wait, 95);
  s.p99_wait = Percentile(wait, 99);
  s.max_wait = wait.empty() ? 0 : *std::max_element(wait.begin(), wait.end());
  s.p99_pending = Percentile(pending, 99);
  s.max_pending = pending.empty() ? 0 : *std::max_element(pending.begin(), pending.end());
  s.makespan = r.last_finish > r.first_submit ? r.last_finish - r.first_submit : 0;
  s.preemptions = r.preemptions;
  s.restart_gpu_hours = static_cast<double>(r.restart_gpu_milli_seconds) / 3.6e6;
  int64_t used = 0;
  for (const QueueRecord& q : r.queues) used += q.used_gpu_milli_seconds;
  if (s.makespan > 0 && r.total_gpu_milli > 0)
    s.avg_gpu_utilisation_percent =
        100.0 * static_cast<double>(used) /
        (static_cast<double>(r.total_gpu_milli) * static_cast<double>(s.makespan));
  return s;
}

Json LasBaselineArguments() {
  return Json{{"thresholds", Json::array({3600, 36000})}, {"starvationFactor", 8}};
}

std::vector<std::string> ReplayBaselineNames() { return {"fifo", "sjf", "las", "tessera"}; }

bool BaselineUsesOracle(const std::string& name) { return name == "sjf"; }

StatusOr<EngineConfig> ReplayBaselineConfig(const std::string& name) {
  if (name == "tessera") return DefaultEngineConfig();
  const char* order = name == "fifo"  ? "fifo"
                      : name == "sjf" ? "sjf"
                      : name == "las" ? "las"
                                      : nullptr;
  if (order == nullptr)
    return InvalidArgument("--policy: unknown baseline \"" + name +
                           "\" (fifo, sjf, las, tessera) and not a file");
  // One global order, gangs, resource filters, binpack placement; no queue shares: the
  // textbook baselines. FIFO and SJF never preempt; LAS is Tiresias-like: discretised
  // levels of attained GPU service, preemption of higher levels, a starvation guard.
  Json order_plugin = {{"name", order}};
  Json actions = Json::array({"enqueue", "allocate"});
  if (name == "las") {
    order_plugin["arguments"] = LasBaselineArguments();
    actions.push_back("preempt");
  }
  Json doc = {
      {"actions", actions},
      {"tiers", Json::array({Json{{"plugins", Json::array({order_plugin, Json{{"name", "gang"}}})}},
                             Json{{"plugins", Json::array({Json{{"name", "predicates"}},
                                                           Json{{"name", "binpack"}}})}}})}};
  auto c = ParseEngineConfig(doc);
  if (!c.ok()) return c.status().WithContext("baseline " + name);
  return c;
}

}  // namespace tessera::sim
