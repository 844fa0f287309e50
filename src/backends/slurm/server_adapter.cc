#include "backends/slurm/server_adapter.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "backends/slurm/sbatch.h"

namespace tessera::slurm {

bool PlacingAgainMayHelp(const std::string& slurm_reason) {
  // Slurm's reasons (squeue(1), "JOB REASON CODES") that are about nodes or the queue; the
  // rest are limits, dependencies or times that move with the job.
  static const char* const kAboutNodes[] = {
      "Resources", "Priority", "ReqNodeNotAvail", "NodeDown", "Nodes_required", "PartitionDown",
      "PartitionInactive", "Reservation", "BadConstraints",
      // A partition that refuses the job's account or QOS (its rules, not a limit): another
      // partition, on other nodes, may take it.
      "AccountNotAllowed", "QOSNotAllowed"};
  for (const char* p : kAboutNodes)
    if (slurm_reason.rfind(p, 0) == 0) return true;
  return false;
}

JobInfo JobInfoFromSpec(const spec::JobSpec& spec, const std::string& job) {
  JobInfo info;
  info.tasks = spec.job.TaskCount();
  info.exclusive = spec.job.exclusive;
  info.restart_on_eviction = spec.restart.on_eviction != spec::FailureAction::kFailJob;
  if (spec.templates.empty()) return info;
  const spec::TaskTemplate& t = spec.templates.front();
  info.working_dir = t.working_dir;
  info.env = t.env;
  if (!t.script.empty()) {
    info.script = t.script;
    info.time_limit_seconds = spec.job.runtime_estimate_seconds;
    auto get = [&](const char* k) -> int64_t {
      auto it = t.env.find(k);
      return it == t.env.end() ? 0 : std::atoll(it->second.c_str());
    };
    int64_t ntasks = get("SLURM_NTASKS"), nnodes = get("SLURM_NNODES");
    if (ntasks > 0 && nnodes > 0 && ntasks % nnodes == 0) {
      info.processes_per_task = static_cast<int32_t>(ntasks / nnodes);
    }
    // Slurm sets these itself, from what it was told.
    info.env.erase("SLURM_NTASKS");
    info.env.erase("SLURM_NNODES");
    // Given to sbatch as --output/--error (over the script's own lines): Slurm would name
    // the job tessera-<job> in %x, and an array element's %A and %a its own.
    const std::string name = spec.array ? spec.array->name : job;
    if (!t.stdout_file.empty())
      info.stdout_file = spec::ExpandForSlurm(t.stdout_file, name, spec.array);
    if (t.stderr_file != t.stdout_file)
      info.stderr_file = spec::ExpandForSlurm(t.stderr_file, name, spec.array);
  } else {
    // A Kubernetes container's $(VAR) references, to its own env: Slurm sets the rest.
    info.command = t.command;
    info.env = spec::TaskEnvironment(t, {}, &info.command);
  }
  return info;
}

SlurmServerBackend::SlurmServerBackend(std::shared_ptr<PoolBackend> pool, Lookup lookup, Sink sink,
                                       ServerAdapterOptions options)
    : pool_(std::move(pool)),
      lookup_(std::move(lookup)),
      sink_(std::move(sink)),
      options_(options),
      paused_(options.start_paused) {
  if (options_.poll.count() > 0) worker_ = std::thread([this] { Loop(); });
}

SlurmServerBackend::~SlurmServerBackend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::string SlurmServerBackend::NewGangLocked(const std::string& job, int32_t attempt) {
  char seq[24];
  std::snprintf(seq, sizeof seq, "%012lld", static_cast<long long>(next_gang_++));
  std::string key = job + "#" + std::to_string(attempt) + "#" + seq;
  Gang& g = gangs_[key];
  g.job = job;
  g.attempt = attempt;
  return key;
}

int32_t SlurmServerBackend::LiveTasksLocked(const std::string& job, int32_t attempt) const {
  int32_t n = 0;
  for (const auto& [key, g] : gangs_) {
    if (g.job != job || g.attempt != attempt) continue;
    for (const auto& [t, d] : g.tasks) n += g.stopped.contains(d.allocation) ? 0 : 1;
  }
  return n;
}

void SlurmServerBackend::Launch(const server::Dispatch& d) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gang_of_.contains(d.allocation)) return;  // (launched already)
    // The attempt's gang still gathering, if any: once an sbatch was tried for a gang, its
    // tasks are Slurm's job's, and a task launched later (a Deployment scaled up, a replica
    // replaced alone) is a Slurm job of its own.
    std::string key;
    for (const auto& [k, g] : gangs_) {
      if (g.open && g.job == d.job && g.attempt == d.attempt) key = k;
    }
    if (key.empty()) key = NewGangLocked(d.job, d.attempt);
    Gang& g = gangs_[key];
    g.tasks[d.task] = d;
    g.last_launch = std::chrono::steady_clock::now();
    gang_of_[d.allocation] = key;
  }
  cv_.notify_all();
}

void SlurmServerBackend::Stop(const std::string& allocation, int64_t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = gang_of_.find(allocation);
    if (it == gang_of_.end()) return;
    Gang& g = gangs_[it->second];
    if (g.stopped.empty()) g.first_stop = std::chrono::steady_clock::now();
    g.stopped.insert(allocation);
  }
  cv_.notify_all();
}

void SlurmServerBackend::Adopt(const std::vector<server::Dispatch>& tasks,
                               const std::string& slurm_allocation) {
  if (tasks.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const server::Dispatch& first = tasks.front();
    const std::string key = NewGangLocked(first.job, first.attempt);
    Gang& g = gangs_[key];
    for (const server::Dispatch& d : tasks) {
      if (auto was = gang_of_.find(d.allocation); was != gang_of_.end()) {
        // Adopted twice: the one Slurm job a task belongs to is the latest word.
        auto og = gangs_.find(was->second);
        if (og != gangs_.end()) {
          og->second.tasks.erase(d.task);
          og->second.stopped.erase(d.allocation);
          if (og->second.tasks.empty()) gangs_.erase(og);
        }
      }
      g.tasks[d.task] = d;
      gang_of_[d.allocation] = key;
    }
    g.open = false;
    g.last_launch = std::chrono::steady_clock::now();
    g.dispatched_at = g.last_launch;  // (its pending time counts from here)
    g.slurm_allocation = slurm_allocation;
  }
  cv_.notify_all();
}

void SlurmServerBackend::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

bool SlurmServerBackend::Tracks(const std::string& allocation) {
  std::lock_guard<std::mutex> lock(mu_);
  return gang_of_.contains(allocation);
}

void SlurmServerBackend::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    Step(std::chrono::steady_clock::now());
    lock.lock();
    // Wake early for new launches/stops; otherwise poll at the configured rate.
    cv_.wait_for(lock, std::min(options_.poll, options_.gather));
  }
}

void SlurmServerBackend::Step(std::chrono::steady_clock::time_point now) {
  // Decide under the lock, call Slurm without it (Launch/Stop must never wait on Slurm).
  struct Work {
    std::string key;
    std::string cancel;  // slurm allocation (tag) to cancel
    // The gang is not known to Slurm yet; `cancel` is the tag of its lost sbatch.
    bool uncertain = false;
  };
  std::vector<Work> work;
  std::vector<TaskReport> reported_refusals;  // sent once the lock is released
  std::vector<server::Dispatch> never_run;    // stopped before they reached Slurm
  bool any_dispatched = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (paused_) return;
    for (auto it = gangs_.begin(); it != gangs_.end();) {
      const std::string& key = it->first;
      Gang& g = it->second;
      if (now < g.not_before) {
        ++it;
        continue;
      }
      if (!g.slurm_allocation.empty()) {
        any_dispatched = true;
        // Slurm runs the gang's tasks as one job: cancelled once all of them are stopped. A
        // stop of some of them (a Deployment scaled down, an elastic job's partial eviction)
        // cancels it too, and hands the others back to be placed again: Slurm cannot end part
        // of a job, and waiting for the rest would hold the stopped ones' resources for as
        // long as the job runs. (After the gather interval: the stops of a whole cancel come
        // one by one.)
        // (Only for a job whose onEviction places it again: one that fails on an eviction
        // keeps running until the rest stop or it ends, rather than fail for a partial stop.)
        if (!g.stopped.empty() && !g.AllStopped() && g.requeue_why.empty() &&
            g.restart_on_eviction && now - g.first_stop >= options_.gather) {
          std::string stopped_tasks;
          for (const auto& [t, d] : g.tasks)
            if (g.stopped.count(d.allocation))
              stopped_tasks += (stopped_tasks.empty() ? "" : ",") + std::to_string(t);
          g.partly_stopped = true;
          g.requeue_why = "task(s) " + stopped_tasks + " stopped, and Slurm cannot end part of " +
                          g.slurm_allocation +
                          "'s Slurm job: cancelled there, its other tasks to be placed again";
        }
        if ((g.AllStopped() || !g.requeue_why.empty()) && !g.cancelled)
          work.push_back({key, g.slurm_allocation, false});
        ++it;
        continue;
      }
      if (!g.uncertain.empty()) {
        // Its sbatch answer was lost: Slurm may run it. Asked by tag, never assumed away.
        work.push_back({key, g.AllStopped() ? g.uncertain : "", true});
        ++it;
        continue;
      }
      // Never reached Slurm: a stopped task is over, the rest go on.
      for (const std::string& a : g.stopped) {
        auto t = std::find_if(g.tasks.begin(), g.tasks.end(),
                              [&](const auto& e) { return e.second.allocation == a; });
        if (t == g.tasks.end()) continue;
        never_run.push_back(t->second);
        g.tasks.erase(t);
        gang_of_.erase(a);
      }
      g.stopped.clear();
      if (g.tasks.empty()) {
        it = gangs_.erase(it);
        continue;
      }
      work.push_back({key, "", false});  // a candidate for dispatch; checked below
      ++it;
    }
  }
  for (const server::Dispatch& d : never_run) {
    sink_({d.allocation, d.job, d.task, AllocationPhase::kKilled, 0,
           "stopped before it reached Slurm", "", "", true});
  }

  for (Work& w : work) {
    if (!w.cancel.empty()) {
      Status s = pool_->Cancel(w.cancel);
      std::vector<TaskReport> over;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = gangs_.find(w.key);
        if (it == gangs_.end()) continue;
        Gang& g = it->second;
        if (!s.ok()) {
          g.not_before = now + options_.retry;
        } else if (!w.uncertain) {
          g.cancelled = true;  // its end comes with the next squeue
        } else {
          // Slurm answered: whatever its lost sbatch created is cancelled (SlurmPool::Cancel
          // looks for the tag in squeue). Only now are the tasks over.
          for (const auto& [t, d] : g.tasks) {
            over.push_back({d.allocation, d.job, d.task, AllocationPhase::kKilled, 0,
                            "stopped while its sbatch's answer was lost: whatever Slurm "
                            "job it created is cancelled",
                            "", "", true});
            gang_of_.erase(d.allocation);
          }
          gangs_.erase(it);
        }
      }
      for (const TaskReport& r : over) sink_(r);
      continue;
    }
    // Dispatch once the gang is complete, or `gather` after its last task arrived.
    std::string job;
    std::chrono::steady_clock::time_point last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = gangs_.find(w.key);
      if (it == gangs_.end()) continue;
      job = it->second.job;
      last = it->second.last_launch;
    }
    std::optional<JobInfo> info = lookup_(job);
    std::vector<server::Dispatch> tasks;
    int32_t attempt = 1;
    std::string tag;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = gangs_.find(w.key);
      if (it == gangs_.end()) continue;
      Gang& g = it->second;
      attempt = g.attempt;
      if (info && g.open) {
        // Complete: every task the job has now is launched (in this gang or an earlier one).
        bool complete = LiveTasksLocked(g.job, g.attempt) >= info->tasks;
        if (!complete && now - last < options_.gather) continue;
      }
      g.open = false;  // its tasks are fixed from here: a later Launch is a gang of its own
      for (const auto& [t, d] : g.tasks) tasks.push_back(d);
      tag = g.uncertain.empty() ? tasks.front().allocation : g.uncertain;
    }
    if (!info) {
      for (const server::Dispatch& d : tasks) {
        sink_({d.allocation, d.job, d.task, AllocationPhase::kFailed, 0,
               "job " + job + " unknown to the server", "", ""});
      }
      std::lock_guard<std::mutex> lock(mu_);
      for (const server::Dispatch& d : tasks) gang_of_.erase(d.allocation);
      gangs_.erase(w.key);
      continue;
    }
    DispatchRequest r;
    r.job = job;
    r.allocation = tag;  // never reused: a fine tag for the gang
    for (const server::Dispatch& d : tasks) r.bindings.push_back({d.job, d.task, d.placement});
    r.script = info->script;
    r.command = info->command;
    r.working_dir = info->working_dir;
    r.env = info->env;
    r.time_limit_seconds = info->time_limit_seconds;
    r.processes_per_task = info->processes_per_task;
    r.exclusive = info->exclusive;
    OutputFiles out = JobOutputFiles(options_.logs_dir, job, attempt, info->script);
    // A stream the script names itself: its file, as Slurm would expand it (array elements).
    r.stdout_path = out.stdout_path.empty() ? info->stdout_file : out.stdout_path;
    r.stderr_path = out.stderr_path.empty() ? info->stderr_file : out.stderr_path;
    r.append_output = !out.stdout_path.empty() && !out.stderr_path.empty();
    auto id = pool_->Dispatch(r);
    if (!id.ok() && id.status().retryable()) {
      // The sbatch may have created the job without our hearing of it (SlurmPool marks it
      // uncertain): the gang keeps its tasks and tag, and a stop must ask Slurm.
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = gangs_.find(w.key); it != gangs_.end()) {
        it->second.not_before = now + options_.retry;
        it->second.uncertain = r.allocation;
      }
      continue;
    }
    if (!id.ok() && IsAccessRefusal(id.status()) && info->restart_on_eviction) {
      // A partition refuses the job (its rules changed since discovery): handed back to be
      // placed again, as a job stuck in Slurm's queue is, and as often.
      std::lock_guard<std::mutex> lock(mu_);
      int& replaced = replaced_[job];
      if (replaced < options_.max_pending_replacements) {
        ++replaced;
        for (const server::Dispatch& d : tasks) {
          reported_refusals.push_back({d.allocation, d.job, d.task, AllocationPhase::kKilled, 0,
                                       id.status().message() + ": to be placed again", "",
                                       "REFUSED"});
          gang_of_.erase(d.allocation);
        }
        gangs_.erase(w.key);
        continue;
      }
    }
    if (!id.ok()) {  // Slurm refused it: every task fails with Slurm's words
      for (const server::Dispatch& d : tasks) {
        sink_({d.allocation, d.job, d.task, AllocationPhase::kFailed, 0, id.status().message(), "",
               ""});
      }
      std::lock_guard<std::mutex> lock(mu_);
      for (const server::Dispatch& d : tasks) gang_of_.erase(d.allocation);
      gangs_.erase(w.key);
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = gangs_.find(w.key); it != gangs_.end()) {
      it->second.slurm_allocation = r.allocation;
      it->second.uncertain.clear();
      it->second.dispatched_at = now;
      it->second.restart_on_eviction = info && info->restart_on_eviction;
    }
    any_dispatched = true;
  }
  for (const TaskReport& r : reported_refusals) sink_(r);
  if (!any_dispatched) return;

  auto statuses = pool_->Poll();
  if (!statuses.ok()) return;  // controller away: try again next round
  std::map<std::string, const AllocationStatus*> by_alloc;
  for (const AllocationStatus& s : *statuses) by_alloc[s.allocation] = &s;
  std::vector<TaskReport> reports;
  struct Stuck {
    std::string key, slurm_reason, why;
  };
  std::vector<Stuck> stuck;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = gangs_.begin(); it != gangs_.end();) {
      Gang& g = it->second;
      auto s = by_alloc.find(g.slurm_allocation);
      if (g.slurm_allocation.empty() || s == by_alloc.end()) {
        ++it;
        continue;
      }
      AllocationStatus st = *s->second;
      const auto pending_for = now - g.dispatched_at;
      if (st.phase == AllocationPhase::kPending && !g.stays_pending.empty())
        st.message += ": " + g.stays_pending;
      if (st.phase == AllocationPhase::kPending && g.requeue_why.empty() &&
          g.stays_pending.empty() && g.stopped.empty() && options_.pending_timeout.count() > 0 &&
          pending_for >= options_.pending_timeout && st.reason.rfind("JobHeld", 0) != 0) {
        using std::chrono::duration_cast;
        using std::chrono::seconds;
        stuck.push_back(
            {it->first, st.reason,
             st.message + " for " + std::to_string(duration_cast<seconds>(pending_for).count()) +
                 " s, past the Slurm pool's pending timeout (" +
                 std::to_string(duration_cast<seconds>(options_.pending_timeout).count()) +
                 " s): cancelled in Slurm, to be placed again"});
      }
      // Our own scancel for a requeue: the tasks not stopped go back to the server as
      // evicted, not as cancelled.
      const bool requeued =
          !g.requeue_why.empty() && !g.AllStopped() && st.phase == AllocationPhase::kKilled;
      for (const auto& [t, d] : g.tasks) {
        const bool stopped_here = g.stopped.count(d.allocation) > 0;
        AllocationStatus mine = st;
        if (requeued && !stopped_here) {
          mine.state = g.partly_stopped ? "PARTSTOP" : "PENDING";
          mine.message = g.requeue_why;
        }
        auto prev = g.reported.find(d.allocation);
        auto now_is = std::make_pair(mine.phase, mine.message);
        if (prev != g.reported.end() && prev->second == now_is) continue;  // nothing new
        g.reported[d.allocation] = now_is;
        // Ended by our own scancel: a stop Tessera asked for (of every task, or of this one).
        const bool ours = g.cancelled && (g.AllStopped() || (g.partly_stopped && stopped_here)) &&
                          IsTerminal(mine.phase);
        reports.push_back({d.allocation, d.job, d.task, mine.phase, mine.exit_code, mine.message,
                           mine.external_id, mine.state, ours});
      }
      // Started or ended for good: the next time it is stuck is a first time again.
      if (st.phase == AllocationPhase::kRunning || (IsTerminal(st.phase) && g.requeue_why.empty()))
        replaced_.erase(g.job);
      if (IsTerminal(st.phase)) {
        for (const auto& [t, d] : g.tasks) gang_of_.erase(d.allocation);
        it = gangs_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const TaskReport& r : reports) sink_(r);
  // Stuck in Slurm's queue: handed back, if the job's policy places it again (the lookup
  // may take the server's lock: called without ours).
  for (const auto& [key, slurm_reason, why] : stuck) {
    std::string job;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = gangs_.find(key);
      if (it == gangs_.end()) continue;
      job = it->second.job;
    }
    std::optional<JobInfo> info = lookup_(job);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = gangs_.find(key);
    if (it == gangs_.end()) continue;
    Gang& g = it->second;
    if (!info || !info->restart_on_eviction) {
      g.stays_pending = "its onEviction is FailJob (sbatch --no-requeue): left in Slurm's queue";
    } else if (!PlacingAgainMayHelp(slurm_reason)) {
      g.stays_pending =
          "a Slurm limit, not its nodes: left in Slurm's queue (placing it again "
          "would not lift it)";
    } else if (replaced_[g.job] >= options_.max_pending_replacements) {
      g.stays_pending = "left in Slurm's queue after " + std::to_string(replaced_[g.job]) +
                        " placements that Slurm kept pending";
    } else {
      ++replaced_[g.job];
      g.requeue_why = why;
    }
  }
}

}  // namespace tessera::slurm
