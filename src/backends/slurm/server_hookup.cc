#include "backends/slurm/server_hookup.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "backends/slurm/sbatch.h"
#include "backends/slurm/slurm_pool.h"
#include "model/codec.h"
#include "server/control_plane.h"
#include "spec/spec.h"

namespace tessera::slurm {
namespace {

const server::Principal& System() {
  static const server::Principal p{"system:slurm-pool", server::Role::kAdmin, {"*"}};
  return p;
}

// An allocation's placement as the control plane shows it (AllocView) -> TaskAllocation,
// through the model codec (it reads placements inside a job).
StatusOr<TaskAllocation> PlacementFromJson(const Json& place, int32_t task) {
  Json p = place;
  p["task"] = task;
  Json fake = {{"id", "x"},
               {"tasks", Json::array({{{"replicas", task + 1}}})},
               {"running", Json::array({p})}};
  auto job = JobFromJson(fake, "placement");
  if (!job.ok()) return job.status();
  if (!job->allocations[task]) return Internal("placement of task " + std::to_string(task));
  return *job->allocations[task];
}

// How a task's end in Slurm reaches the control plane's lifecycle: the agent protocol's
// state, and for an eviction the reason its event gives (empty: the agent's own words).
struct Outcome {
  const char* state;
  const char* reason = "";
};

Outcome OutcomeOf(AllocationPhase p, const std::string& slurm_state) {
  switch (p) {
    case AllocationPhase::kRunning:
      return {"running"};
    case AllocationPhase::kSucceeded:
      return {"succeeded"};
    case AllocationPhase::kFailed:
      // A failed node is not the task's failure: an eviction (onEviction), as Slurm itself
      // requeues such a job unless --no-requeue (which Tessera passes, to decide itself).
      if (slurm_state == "NODE_FAIL") return {"killed", "NodeFailed"};
      return {"failed"};
    case AllocationPhase::kLost:
      // Its outcome is unknown (purged from Slurm while the server was away): not the task's
      // failure, and no exit code; an eviction (onEviction), as a Tessera node that is lost.
      return {"killed", "LostInSlurm"};
    case AllocationPhase::kKilled:
      // Pending in Slurm too long (SlurmServerBackend's pending_timeout): cancelled there by
      // Tessera to be placed again (an eviction).
      if (slurm_state == "PENDING") return {"killed", "StuckInSlurm"};
      // Cancelled by Tessera because some of its Slurm job's tasks stopped: placed again.
      if (slurm_state == "PARTSTOP") return {"killed", "PartlyStoppedInSlurm"};
      // sbatch refused it (a partition's access rules changed since discovery): placed again.
      if (slurm_state == "REFUSED") return {"killed", "RefusedBySlurm"};
      // CANCELLED that Tessera did not ask for ends the job (HeartbeatAll cancels it first);
      // should that cancel not happen, the event still says what Slurm did.
      if (slurm_state == "CANCELLED") return {"killed", "CancelledInSlurm"};
      if (slurm_state == "PREEMPTED") return {"killed", "PreemptedBySlurm"};
      return {"killed", "KilledBySlurm"};
    case AllocationPhase::kPending:
      break;
  }
  return {""};
}

}  // namespace

// The control plane's Backend for the pool: records, then hands over to the adapter.
class SlurmPoolHookup::Backend final : public server::Backend {
 public:
  explicit Backend(SlurmPoolHookup& h) : h_(h) {}
  std::string Kind() const override { return "slurm"; }
  void Launch(const server::Dispatch& d) override {
    h_.OnLaunch(d);
    h_.adapter_->Launch(d);
  }
  void Stop(const std::string& allocation, int64_t grace) override {
    h_.OnStop(allocation);
    h_.adapter_->Stop(allocation, grace);
  }
  // The file the adapter told Slurm to write (a pure function of the job: safe under the
  // control plane's lock).
  StatusOr<std::string> LogFile(const spec::JobSpec& job, const server::Dispatch& d,
                                const std::string& stream) const override {
    const HookupOptions& o = h_.options_;
    if (o.logs_dir.empty())
      return FailedPrecondition("slurm pool " + o.pool +
                                " keeps no task output (the server runs without a Slurm "
                                "logs directory)");
    OutputFiles f =
        JobOutputFiles(o.logs_dir, d.job, d.attempt, JobInfoFromSpec(job, d.job).script);
    const std::string& path = stream == "stderr" ? f.stderr_path : f.stdout_path;
    if (path.empty())
      return FailedPrecondition("job " + d.job + " runs on Slurm with its script's own " +
                                (stream == "stderr"
                                     ? "error file (#SBATCH -e, or -o, which takes stderr too)"
                                     : "output file (#SBATCH -o)") +
                                ": Slurm writes it there, where tessera logs does not read");
    return path;
  }
  // From the pool's last discovery, without calling Slurm (safe under the control plane's
  // lock). Only a script's own #SBATCH -A/-q (and --slurm-sbatch-arg) name an account or QOS.
  std::map<std::string, std::string> RefusingNodes(const std::string& job_id,
                                                   const spec::JobSpec& job) const override {
    return h_.pool_->RefusingNodes(job_id,
                                   job.templates.empty() ? "" : job.templates.front().script);
  }

 private:
  SlurmPoolHookup& h_;
};

// A PoolBackend that journals every submission in the server's store before it happens,
// so that a restarted server can tell "never submitted" from "submitted, then lost".
class SlurmPoolHookup::JournalingPool final : public PoolBackend {
 public:
  JournalingPool(std::shared_ptr<SlurmPool> inner, store::Store& store, std::string prefix)
      : inner_(std::move(inner)), store_(store), prefix_(std::move(prefix)) {}

  const std::string& pool() const override { return inner_->pool(); }
  StatusOr<std::vector<Node>> Discover() override { return inner_->Discover(); }
  StatusOr<ReconcileReport> Reconcile(const std::vector<DesiredAllocation>& d) override {
    return inner_->Reconcile(d);
  }
  StatusOr<std::string> Dispatch(const DispatchRequest& r) override {
    std::string key = prefix_ + r.allocation;
    // Which of the attempt's tasks this Slurm job runs: a task launched after the first
    // sbatch (a Deployment scaled up) has a Slurm job of its own.
    Json tasks = Json::array();
    for (const Binding& b : r.bindings) tasks.push_back(b.task);
    auto had = store_.Get(key);
    if (!had.ok()) return had.status();
    if (!had->has_value()) {
      // Durable before sbatch runs: after a crash the allocation is known to be "maybe
      // submitted" and is never submitted twice.
      auto w = store_.Write({store::Op::Put(key, Json{{"job", r.job}, {"tasks", tasks}}.dump())});
      if (!w.ok()) return w.status().WithContext("journal " + key);
    }
    auto id = inner_->Dispatch(r);
    if (id.ok()) {
      (void)store_.Write({store::Op::Put(
          key, Json{{"job", r.job}, {"tasks", tasks}, {"externalId", *id}}.dump())});
    }
    return id;
  }
  StatusOr<std::vector<AllocationStatus>> Poll() override {
    auto st = inner_->Poll();
    if (!st.ok()) return st;
    std::vector<store::Op> done;
    std::set<std::string> listed;
    for (const AllocationStatus& s : *st) {
      if (!IsTerminal(s.phase)) continue;
      listed.insert(s.allocation);
      if (forgotten_.insert(s.allocation).second)
        done.push_back(store::Op::Delete(prefix_ + s.allocation));
    }
    std::erase_if(forgotten_, [&](const std::string& a) { return !listed.contains(a); });
    // The end is reported before this write is durable; a crash in between at worst
    // reports a finished job as lost (its policy decides), never runs it twice.
    if (!done.empty()) (void)store_.Write(std::move(done));
    return st;
  }
  Status Cancel(const std::string& allocation) override { return inner_->Cancel(allocation); }

  struct Entry {
    std::string external_id;  // "" while the sbatch answer was never recorded
    // The task indexes its Slurm job runs; nullopt (written before they were recorded): all
    // of the attempt's tasks.
    std::optional<std::set<int32_t>> tasks;
  };
  // By allocation (the Slurm job's tag).
  StatusOr<std::map<std::string, Entry>> Journaled() {
    auto kvs = store_.Range(prefix_);
    if (!kvs.ok()) return kvs.status();
    std::map<std::string, Entry> out;
    for (const auto& kv : *kvs) {
      Entry e;
      try {
        Json j = Json::parse(kv.value);
        e.external_id = j.value("externalId", "");
        if (j.contains("tasks") && j["tasks"].is_array()) {
          e.tasks.emplace();
          for (const auto& t : j["tasks"])
            if (t.is_number_integer()) e.tasks->insert(t.get<int32_t>());
        }
      } catch (const std::exception&) {
      }
      out[kv.key.substr(prefix_.size())] = std::move(e);
    }
    return out;
  }

 private:
  std::shared_ptr<SlurmPool> inner_;
  store::Store& store_;
  std::string prefix_;
  std::set<std::string> forgotten_;  // ended and deleted from the journal (Poll's thread only)
};

SlurmPoolHookup::SlurmPoolHookup(server::ControlPlane& cp, HookupOptions options)
    : cp_(cp), options_(std::move(options)) {}

StatusOr<std::unique_ptr<SlurmPoolHookup>> SlurmPoolHookup::Start(server::ControlPlane& cp,
                                                                  HookupOptions options) {
  if (options.pool.empty() || options.pool.find('/') != std::string::npos)
    return InvalidArgument("slurm pool name: must be non-empty without '/'");
  std::unique_ptr<SlurmPoolHookup> h(new SlurmPoolHookup(cp, std::move(options)));
  HookupOptions& o = h->options_;
  if (!o.logs_dir.empty()) {
    // Slurm expands '%' patterns in --output and resolves relative paths against the job's
    // working directory: the directory must be taken literally, and absolute.
    if (o.logs_dir.find_first_of("%\\") != std::string::npos)
      return InvalidArgument("slurm logs directory \"" + o.logs_dir +
                             "\": must not contain '%' or '\\' (Slurm would expand them)");
    std::error_code ec;
    std::filesystem::path dir = std::filesystem::absolute(o.logs_dir, ec);
    if (!ec) std::filesystem::create_directories(dir, ec);
    if (ec)
      return FailedPrecondition("slurm logs directory \"" + o.logs_dir +
                                "\": cannot create it: " + ec.message());
    o.logs_dir = dir.lexically_normal().string();
    while (o.logs_dir.size() > 1 && o.logs_dir.back() == '/') o.logs_dir.pop_back();
  }
  if (!o.runner) o.runner = std::make_shared<SubprocessRunner>(o.env);
  SlurmPoolOptions po;
  po.discovery.pool = o.pool;
  po.discovery.partitions = o.partitions;
  po.discovery.gpu_models = o.gpu_models;
  po.sbatch.extra_args = o.sbatch_args;
  h->pool_ = std::make_shared<SlurmPool>(o.runner, po);

  // Fail early on a Slurm that cannot work at all; an unreachable controller is retried.
  auto first = h->pool_->Discover();
  if (!first.ok() && !first.status().retryable())
    return first.status().WithContext("slurm pool " + o.pool);
  if (!first.ok())
    std::fprintf(stderr, "tessera server: slurm pool %s: %s (retrying)\n", o.pool.c_str(),
                 first.status().ToString().c_str());

  h->journal_ = std::make_shared<JournalingPool>(h->pool_, cp.store(), "slurm/" + o.pool + "/");
  SlurmPoolHookup* self = h.get();
  ServerAdapterOptions ao;
  ao.poll = o.poll;
  ao.start_paused = true;  // nothing reaches Slurm before Reconcile()
  ao.logs_dir = o.logs_dir;
  ao.pending_timeout = o.pending_timeout;
  h->adapter_ = std::make_shared<SlurmServerBackend>(
      h->journal_,
      [self](const std::string& job) -> std::optional<JobInfo> {
        auto view = self->cp_.GetJob(System(), job, true);
        if (!view.ok() || !view->contains("spec")) return std::nullopt;
        auto spec = spec::JobSpecFromJson((*view)["spec"], "spec");
        if (!spec.ok()) return std::nullopt;
        return JobInfoFromSpec(*spec, job);
      },
      [self](const TaskReport& r) { self->OnReport(r); }, ao);

  // Nodes the server already knows (a restart): keep heartbeating them from the start, so
  // that they stay Ready while Slurm is reconciled. The tasks the server was stopping are
  // reported running meanwhile (an unreported one counts as gone): their Slurm jobs may
  // still run, and their GPUs are free only once Slurm confirms the cancel.
  const Json known = cp.ListNodes(System(), true);  // (a temporary would die before the loop)
  for (const auto& n : known["items"]) {
    if (n.value("pool", "") != o.pool) continue;
    h->nodes_[n.value("name", "")].epoch = n.value("epoch", int64_t{-1});
    for (const auto& a : n["allocations"]) {
      if (a.value("state", "") != "Stopping") continue;
      const std::string id = a.value("id", "");
      TaskState& t = h->tasks_[id];
      t.node = n.value("name", "");
      t.job = a.value("job", "");
      t.stop_requested = true;
      h->stopped_.insert(id);
    }
  }
  cp.RegisterBackend(o.pool, std::make_shared<Backend>(*h));
  h->report_ = std::thread([self] { self->ReportLoop(); });
  h->sync_ = std::thread([self] { self->SyncLoop(); });
  return h;
}

SlurmPoolHookup::~SlurmPoolHookup() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (sync_.joinable()) sync_.join();
  if (report_.joinable()) report_.join();
  adapter_.reset();  // joins the adapter's worker
}

bool SlurmPoolHookup::WaitReconciled(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return reconciled_; });
}

SlurmPoolHookup::Counts SlurmPoolHookup::counts() {
  std::lock_guard<std::mutex> l(mu_);
  return counts_;
}

void SlurmPoolHookup::OnLaunch(const server::Dispatch& d) {
  std::lock_guard<std::mutex> l(mu_);
  TaskState& t = tasks_[d.allocation];
  t.node = d.placement.node;
  t.job = d.job;
}

void SlurmPoolHookup::OnStop(const std::string& allocation) {
  std::lock_guard<std::mutex> l(mu_);
  stopped_.insert(allocation);
  if (auto it = tasks_.find(allocation); it != tasks_.end()) it->second.stop_requested = true;
}

void SlurmPoolHookup::OnReport(const TaskReport& r) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tasks_.find(r.allocation);
    if (it == tasks_.end()) return;  // not ours (any more)
    it->second.phase = r.phase;
    it->second.exit_code = r.exit_code;
    it->second.message = r.external_id.empty() ? r.message
                         : r.message.empty()   ? r.external_id
                                               : r.external_id + ": " + r.message;
    it->second.slurm_state = r.state;
    it->second.stopped_by_tessera = it->second.stopped_by_tessera || r.stopped_by_tessera;
    if (!r.external_id.empty()) it->second.external_id = r.external_id;
    report_now_ = true;  // (a pending task's reason too: the job shows it)
  }
  cv_.notify_all();
}

void SlurmPoolHookup::SyncLoop() {
  auto next_sync = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_until(l, next_sync, [&] { return stopping_; });
      if (stopping_) return;
    }
    next_sync = std::chrono::steady_clock::now() + options_.sync;
    bool reconciled;
    {
      std::lock_guard<std::mutex> l(mu_);
      reconciled = reconciled_;
    }
    if (!reconciled) {
      Status st = Reconcile();
      if (!st.ok()) {
        std::fprintf(stderr, "tessera server: slurm pool %s: reconcile: %s (retrying)\n",
                     options_.pool.c_str(), st.ToString().c_str());
        next_sync = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        continue;
      }
    }
    Status st = SyncNodes();
    if (!st.ok())
      std::fprintf(stderr, "tessera server: slurm pool %s: discovery: %s\n", options_.pool.c_str(),
                   st.ToString().c_str());
  }
}

Status SlurmPoolHookup::Reconcile() {
  // What the server wants to exist on Slurm: the live allocations on the pool's nodes,
  // grouped by job attempt, then by Slurm job (one per sbatch, tagged with its lowest
  // task's allocation; the journal says which tasks each runs).
  struct Attempt {
    std::vector<server::Dispatch> tasks;  // by task index
    std::set<std::string> stopping;       // allocations the server was stopping
  };
  std::map<std::string, Attempt> attempts;
  const Json listed = cp_.ListNodes(System(), true);
  for (const auto& n : listed["items"]) {
    if (n.value("pool", "") != options_.pool) continue;
    for (const auto& a : n["allocations"]) {
      std::string state = a.value("state", "");
      if (state != "Assigned" && state != "Running" && state != "Stopping") continue;
      server::Dispatch d;
      d.allocation = a.value("id", "");
      d.job = a.value("job", "");
      d.task = a.value("task", 0);
      d.attempt = a.value("attempt", 1);
      auto place = PlacementFromJson(a.at("placement"), d.task);
      if (!place.ok()) return place.status().WithContext("allocation " + d.allocation);
      d.placement = *place;
      Attempt& g = attempts[d.job + "#" + std::to_string(d.attempt)];
      g.tasks.push_back(d);
      if (state == "Stopping") g.stopping.insert(d.allocation);
    }
  }
  for (auto& [key, g] : attempts)
    std::sort(g.tasks.begin(), g.tasks.end(),
              [](const server::Dispatch& a, const server::Dispatch& b) { return a.task < b.task; });
  auto journal = journal_->Journaled();
  if (!journal.ok()) return journal.status();
  // An attempt's tasks, per Slurm job: each journaled tag takes the tasks its entry names,
  // then (in allocation order) an entry that names none, written before entries named them,
  // takes all those left; "" holds the tasks no sbatch was ever tried for. (Named entries
  // first: an old entry's tag sorts before a replica added since, whose own Slurm job would
  // otherwise be adopted with no task and never cancelled.)
  using Batches = std::map<std::string, std::vector<server::Dispatch>>;
  auto split = [&](const Attempt& g, const std::set<std::string>& extra_tags) {
    std::set<std::string> tags = extra_tags;
    for (const server::Dispatch& d : g.tasks)
      if (journal->contains(d.allocation)) tags.insert(d.allocation);
    Batches out;
    std::set<int32_t> claimed;
    for (const bool named : {true, false})
      for (const std::string& tag : tags) {
        std::optional<std::set<int32_t>> only;
        if (auto j = journal->find(tag); j != journal->end()) only = j->second.tasks;
        if (only.has_value() != named) continue;
        for (const server::Dispatch& d : g.tasks) {
          if (claimed.contains(d.task) || (only && !only->contains(d.task))) continue;
          out[tag].push_back(d);
          claimed.insert(d.task);
        }
      }
    for (const server::Dispatch& d : g.tasks)
      if (!claimed.contains(d.task)) out[""].push_back(d);
    return out;
  };
  std::vector<DesiredAllocation> desired;
  for (const auto& [key, g] : attempts)
    for (const auto& [tag, tasks] : split(g, {}))
      for (const server::Dispatch& d : tasks) {
        DesiredAllocation w{d.job, d.allocation, "", {}};
        if (auto j = journal->find(d.allocation); j != journal->end())
          w.external_id = j->second.external_id;
        for (const server::Dispatch& t : tasks) w.bindings.push_back({t.job, t.task, t.placement});
        desired.push_back(std::move(w));
      }
  auto report = journal_->Reconcile(desired);
  if (!report.ok()) return report.status();
  std::set<std::string> adopted;  // tags found in Slurm
  for (const AllocationStatus& s : report->adopted) adopted.insert(s.allocation);

  Counts c;
  c.cancelled =
      static_cast<int64_t>(report->cancelled_stale.size() + report->cancelled_duplicates.size());
  std::vector<std::pair<std::vector<server::Dispatch>, std::string>> adopt;
  std::vector<server::Dispatch> launch;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, g] : attempts) {
      // (A tag found in Slurm that the journal does not hold: its tasks are all those left.)
      std::set<std::string> found;
      for (const server::Dispatch& d : g.tasks)
        if (adopted.contains(d.allocation)) found.insert(d.allocation);
      for (const server::Dispatch& d : g.tasks) {
        TaskState& t = tasks_[d.allocation];
        t.node = d.placement.node;
        t.job = d.job;
        t.stop_requested = t.stop_requested || stopped_.count(d.allocation) > 0;
      }
      for (const auto& [tag, tasks] : split(g, found)) {
        if (!tag.empty() && adopted.contains(tag)) {
          adopt.push_back({tasks, tag});  // (its stopping tasks are stopped below)
          ++c.adopted;
          continue;
        }
        // An sbatch for it was answered with a Slurm job id.
        const bool submitted = !tag.empty() && !journal->at(tag).external_id.empty();
        bool lost = false, relaunched = false;
        for (const server::Dispatch& d : tasks) {
          TaskState& t = tasks_[d.allocation];
          if (g.stopping.contains(d.allocation)) {
            // Being stopped, and no Slurm job runs it (never submitted, or over): it is gone.
            t.phase = AllocationPhase::kKilled;
            t.stop_requested = true;
            t.message = "stopped; no Slurm job runs it";
          } else if (submitted) {
            // Submitted by a previous instance, and Slurm no longer knows it.
            t.phase = AllocationPhase::kLost;
            t.message =
                "the Slurm job submitted for it before the server restarted is gone "
                "from Slurm (lost)";
            lost = true;
          } else {
            // Never submitted, or every sbatch for it went unanswered (slurmctld away: the
            // journal entry is written before each try) and squeue has no job with its tag:
            // it never reached Slurm. Dispatched now, as a fresh submission.
            launch.push_back(d);
            relaunched = true;
          }
        }
        c.lost += lost ? 1 : 0;
        c.redispatched += relaunched ? 1 : 0;
      }
    }
    c.nodes = counts_.nodes;
    counts_ = c;
  }
  for (const auto& [tasks, tag] : adopt) {
    adapter_->Adopt(tasks, tag);
    for (const server::Dispatch& d : tasks) {
      bool stopped;
      {
        std::lock_guard<std::mutex> l(mu_);
        stopped = stopped_.count(d.allocation) > 0;
      }
      if (stopped) adapter_->Stop(d.allocation, 0);
    }
  }
  for (const server::Dispatch& d : launch) adapter_->Launch(d);
  adapter_->Resume();
  std::fprintf(stderr,
               "tessera server: slurm pool %s reconciled: %lld adopted, %lld lost, %lld to "
               "dispatch, %lld stale or duplicate Slurm job(s) cancelled\n",
               options_.pool.c_str(), static_cast<long long>(c.adopted),
               static_cast<long long>(c.lost), static_cast<long long>(c.redispatched),
               static_cast<long long>(c.cancelled));
  {
    std::lock_guard<std::mutex> l(mu_);
    reconciled_ = true;
    report_now_ = true;
  }
  cv_.notify_all();
  return Status::Ok();
}

void SlurmPoolHookup::MarkUnreachable(const Status& why) {
  const std::string what = why.retryable() ? "slurmctld unreachable" : "discovery failing";
  const std::string down = "slurm: " + what;
  std::string detail = why.message();
  if (detail.size() > 200) detail = detail.substr(0, 200) + "...";
  std::vector<std::pair<std::string, std::string>> changed;  // name, node JSON
  bool was;
  {
    std::lock_guard<std::mutex> l(mu_);
    was = unreachable_;
    unreachable_ = true;
    for (const auto& [name, st] : nodes_) {
      // (Known only from the server's store, after a restart: left as it was stored.)
      if (st.json.empty()) continue;
      Json node = Json::parse(st.json);
      if (node.contains("labels") && node["labels"].value("pool.down", "") == down) continue;
      node["unschedulable"] = true;
      node["labels"]["pool.down"] = down;
      node["labels"]["slurm.error"] = detail;
      changed.push_back({name, node.dump()});
    }
  }
  if (!was)
    std::fprintf(stderr,
                 "tessera server: slurm pool %s: %s: its nodes take no new work until Slurm "
                 "answers\n",
                 options_.pool.c_str(), what.c_str());
  for (const auto& [name, json] : changed) {
    Status st = RegisterNode(name, json);
    if (!st.ok())
      std::fprintf(stderr, "tessera server: slurm pool %s: %s\n", options_.pool.c_str(),
                   st.ToString().c_str());
  }
}

Status SlurmPoolHookup::RegisterNode(const std::string& name, const std::string& json) {
  Json body = {{"node", Json::parse(json)},
               {"agentVersion", "slurm-pool/" + options_.pool},
               {"bootId", "slurm:" + options_.pool + ":" + name},
               {"logsUrl", ""}};
  auto r = cp_.RegisterAgent(System(), body);
  if (!r.ok()) return r.status().WithContext("register node " + name);
  std::lock_guard<std::mutex> l(mu_);
  NodeState& st = nodes_[name];
  st.json = json;
  st.epoch = (*r).value("epoch", int64_t{-1});
  return Status::Ok();
}

Status SlurmPoolHookup::SyncNodes() {
  auto nodes = journal_->Discover();
  if (!nodes.ok()) {
    MarkUnreachable(nodes.status());
    return nodes.status();
  }
  bool was_unreachable;
  {
    std::lock_guard<std::mutex> l(mu_);
    was_unreachable = unreachable_;
    unreachable_ = false;
  }
  if (was_unreachable)
    std::fprintf(stderr, "tessera server: slurm pool %s: Slurm answers again\n",
                 options_.pool.c_str());
  std::map<std::string, std::string> want;  // name -> NodeToJson
  for (Node& n : *nodes) {
    // A Slurm node that is down or not responding stays Ready here (it heartbeats), only
    // unschedulable, and labelled `pool.down` for `get nodes` / `get pools`: NotReady would
    // write its tasks off as lost and restart them elsewhere while Slurm may still run
    // them (a node that answers again keeps its jobs); Slurm ends them (NODE_FAIL) if not.
    if (!n.ready) {
      n.unschedulable = true;
      n.labels["pool.down"] = "slurm: " + n.labels["slurm.state"];
    }
    n.ready = true;
    want[n.name] = NodeToJson(n).dump();
  }
  std::vector<std::string> changed, gone;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [name, json] : want) {
      auto it = nodes_.find(name);
      if (it == nodes_.end() || it->second.json != json || it->second.epoch < 0)
        changed.push_back(name);
    }
    for (const auto& [name, st] : nodes_)
      if (!want.count(name)) gone.push_back(name);
    for (const auto& name : gone) nodes_.erase(name);  // stops its heartbeats: NotReady
    counts_.nodes = static_cast<int64_t>(want.size());
  }
  for (const auto& name : gone)
    std::fprintf(stderr, "tessera server: slurm pool %s: node %s is gone from Slurm\n",
                 options_.pool.c_str(), name.c_str());
  for (const auto& name : changed) TESSERA_RETURN_IF_ERROR(RegisterNode(name, want[name]));
  return Status::Ok();
}

void SlurmPoolHookup::ReportLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, options_.heartbeat, [&] { return stopping_ || report_now_; });
      if (stopping_) return;
      report_now_ = false;
    }
    HeartbeatAll();
  }
}

void SlurmPoolHookup::HeartbeatAll() {
  struct Beat {
    std::string node;
    int64_t epoch;
    Json tasks = Json::array();
    std::vector<std::string> final;  // allocations whose end this beat reports
  };
  std::vector<Beat> beats;
  std::map<std::string, std::string> cancelled;  // job -> its Slurm job, scancelled outside
  {
    std::lock_guard<std::mutex> l(mu_);
    std::map<std::string, size_t> index;
    for (const auto& [name, st] : nodes_) {
      if (st.epoch < 0) continue;
      index[name] = beats.size();
      beats.push_back({name, st.epoch, Json::array(), {}});
    }
    for (const auto& [alloc, t] : tasks_) {
      auto b = index.find(t.node);
      if (b == index.end()) continue;
      Beat& beat = beats[b->second];
      if (t.stop_requested && (!t.phase || !IsTerminal(*t.phase))) {
        // The server is stopping it: held (running) until Slurm confirms the cancel, also
        // while nothing was heard from Slurm yet (a restart) or it is still queued there.
        beat.tasks.push_back({{"allocation", alloc}, {"state", "running"}});
        continue;
      }
      if (!t.phase) continue;
      AllocationPhase p = *t.phase;
      if (p == AllocationPhase::kPending) {
        // In Slurm's queue: why it waits (Resources, ReqNodeNotAvail, ...), for the job.
        beat.tasks.push_back({{"allocation", alloc}, {"state", "pending"}, {"message", t.message}});
        continue;
      }
      Outcome o = OutcomeOf(p, t.slurm_state);
      Json r = {{"allocation", alloc}, {"state", o.state}};
      if (IsTerminal(p)) {
        r["exitCode"] = t.exit_code;
        if (!t.message.empty()) r["message"] = t.message;
        if (*o.reason) r["reason"] = o.reason;
        beat.final.push_back(alloc);
        // Cancelled in Slurm (scancel) without Tessera asking: the job ends, as a Slurm job
        // does (Slurm never requeues a cancelled job), rather than restart as an eviction.
        if (p == AllocationPhase::kKilled && t.slurm_state == "CANCELLED" && !t.stop_requested &&
            !t.stopped_by_tessera)
          cancelled.emplace(t.job, t.external_id.empty() ? "its Slurm job" : t.external_id);
      }
      beat.tasks.push_back(std::move(r));
    }
  }
  for (const auto& [job, external] : cancelled) {
    // Before the task's end is reported, so that the end finishes the cancel.
    const server::Principal by{
        "scancel of " + external + " in Slurm, outside Tessera", server::Role::kAdmin, {"*"}};
    auto st = cp_.Cancel(by, job);
    if (!st.ok())
      std::fprintf(stderr, "tessera server: slurm pool %s: job %s cancelled in Slurm: %s\n",
                   options_.pool.c_str(), job.c_str(), st.status().ToString().c_str());
  }
  for (Beat& b : beats) {
    auto r = cp_.Heartbeat(System(), b.node, Json{{"epoch", b.epoch}, {"tasks", b.tasks}});
    std::lock_guard<std::mutex> l(mu_);
    if (r.ok() && r->value("hold", false)) {
      continue;  // the server cannot store reports now (read-only): sent again later
    } else if (r.ok()) {
      for (const auto& a : b.final) {
        tasks_.erase(a);
        stopped_.erase(a);
      }
    } else if (r.status().code() == StatusCode::kFailedPrecondition ||
               r.status().code() == StatusCode::kNotFound) {
      // Stale epoch or unknown node: register it again at the next sync.
      if (auto it = nodes_.find(b.node); it != nodes_.end()) it->second.json.clear();
    }
  }
}

}  // namespace tessera::slurm
