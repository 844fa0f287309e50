#include "backends/slurm/slurm_pool.h"

#include <algorithm>

#include "backends/slurm/job_state.h"

namespace tessera::slurm {

SlurmPool::SlurmPool(std::shared_ptr<CommandRunner> runner, SlurmPoolOptions options)
    : runner_(std::move(runner)), cli_(*runner_), options_(std::move(options)) {
  // sbatch picks partitions among the served ones only.
  options_.sbatch.partitions = options_.discovery.partitions;
  if (!options_.sbatch.submitter) options_.sbatch.submitter = CurrentSubmitter();
}

std::map<std::string, std::string> SlurmPool::RefusingNodes(const std::string& job_id,
                                                            const std::string& script) const {
  {
    // Most clusters restrict no partition: no script to read for every pending job.
    std::lock_guard<std::mutex> lock(access_mu_);
    if (!access_restricted_) return {};
    if (auto it = identities_.find(job_id); it != identities_.end())
      return RefusingLocked(it->second);
  }
  const SlurmIdentity who = JobIdentity(script, options_.sbatch);
  const std::pair<std::string, std::string> account_qos{who.account, who.qos};
  std::lock_guard<std::mutex> lock(access_mu_);
  // Bounded: a server that has seen many jobs forgets them all and reads again who is asked.
  if (identities_.size() >= kRememberedJobs) identities_.clear();
  identities_.emplace(job_id, account_qos);
  return RefusingLocked(account_qos);
}

std::map<std::string, std::string> SlurmPool::RefusingLocked(
    const std::pair<std::string, std::string>& account_qos) const {
  auto [it, added] = refusing_.try_emplace(account_qos);
  if (added) {
    SlurmIdentity who{account_qos.first, account_qos.second, *options_.sbatch.submitter};
    it->second = slurm::RefusingNodes(who, access_inventory_, access_partitions_,
                                      options_.sbatch.partitions);
  }
  return it->second;
}

size_t SlurmPool::remembered_jobs() const {
  std::lock_guard<std::mutex> lock(access_mu_);
  return identities_.size();
}

size_t SlurmPool::tracked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

SlurmPool::Submissions SlurmPool::GroupTagged(const std::vector<SlurmJob>& jobs) {
  Submissions out;
  for (const SlurmJob& j : jobs) {
    auto tag = ParseTag(j.comment);
    if (!tag) continue;
    int64_t key = j.het_job_id != 0 ? j.het_job_id : j.job_id;
    out[tag->allocation][key].push_back(j);
  }
  return out;
}

Status SlurmPool::RefreshInventoryLocked() {
  auto nodes = cli_.Nodes();
  if (!nodes.ok()) return nodes.status();
  auto parts = cli_.Partitions();
  if (!parts.ok()) return parts.status();
  partitions_.clear();
  for (SlurmPartition& p : *parts) {
    std::string name = p.name;
    partitions_[name] = std::move(p);
  }
  inventory_.clear();
  for (SlurmNode& n : *nodes) {
    std::string name = n.name;
    inventory_[name] = std::move(n);
  }
  std::lock_guard<std::mutex> access(access_mu_);
  access_inventory_ = inventory_;
  access_partitions_ = partitions_;
  access_restricted_ = std::any_of(partitions_.begin(), partitions_.end(), [](const auto& p) {
    const SlurmPartition& s = p.second;
    return s.allow_accounts || s.allow_groups || s.allow_qos || !s.deny_accounts.empty() ||
           !s.deny_qos.empty();
  });
  refusing_.clear();
  return Status::Ok();
}

StatusOr<std::vector<Node>> SlurmPool::Discover() {
  std::lock_guard<std::mutex> lock(mu_);
  TESSERA_RETURN_IF_ERROR(RefreshInventoryLocked());
  std::map<std::string, NodeUsage> own;
  for (const auto& [alloc, r] : records_) {
    if (r.last.phase != AllocationPhase::kRunning) continue;
    for (const auto& [node, u] : r.usage) own[node] += u;
  }
  std::vector<SlurmNode> nodes;
  for (const auto& [name, n] : inventory_) nodes.push_back(n);
  return NodesFromSlurm(nodes, options_.discovery, own, partitions_);
}

void SlurmPool::NameFailedNodesLocked(AllocationStatus& st) {
  if (st.state != "NODE_FAIL") return;
  // The job does not say which of its nodes failed; sinfo does (a fresh look: the node
  // went down just now). Without an answer the message stays Slurm's own.
  if (!RefreshInventoryLocked().ok()) return;
  std::vector<std::string> failed;
  for (const std::string& n : st.nodes) {
    auto it = inventory_.find(n);
    if (it == inventory_.end()) {
      failed.push_back(n + " (gone from sinfo)");
    } else if (!SlurmNodeReady(it->second)) {
      std::string state = it->second.state;
      for (const std::string& f : it->second.state_flags) state += "+" + f;
      failed.push_back(n + " (" + state + ")");
    }
  }
  if (failed.empty()) return;
  std::string names;
  for (const std::string& f : failed) names += (names.empty() ? "" : ", ") + f;
  st.message = (failed.size() == 1 ? "node " : "nodes ") + names + " failed: " + st.message;
}

std::map<std::string, NodeUsage> SlurmPool::UsageOfLocked(const DispatchRequest& request) {
  auto usage = SlurmUsage(request, inventory_);
  return usage.ok() ? *usage : std::map<std::string, NodeUsage>{};
}

StatusOr<std::string> SlurmPool::Dispatch(const DispatchRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = records_.find(request.allocation); it != records_.end()) {
    return ExternalId(it->second.slurm_id);
  }
  if (uncertain_.contains(request.allocation)) {
    // The last sbatch for it may have created a job whose id we never read: look first.
    auto jobs = cli_.Jobs();
    if (!jobs.ok()) return jobs.status();
    Submissions subs = GroupTagged(*jobs);
    if (auto s = subs.find(request.allocation); s != subs.end()) {
      const auto& [id, comps] = *s->second.begin();
      Record r{request.job, id, {}, StatusFromSlurm(comps)};
      if (inventory_.empty()) (void)RefreshInventoryLocked();
      r.usage = UsageOfLocked(request);
      records_[request.allocation] = std::move(r);
      uncertain_.erase(request.allocation);
      return ExternalId(id);
    }
    uncertain_.erase(request.allocation);
  }
  bool known = !inventory_.empty() && !partitions_.empty();
  for (const Binding& b : request.bindings) known = known && inventory_.contains(b.allocation.node);
  if (!known) TESSERA_RETURN_IF_ERROR(RefreshInventoryLocked());

  auto cmd = BuildSbatch(request, inventory_, partitions_, options_.sbatch);
  if (!cmd.ok()) return cmd.status();
  auto id = cli_.Submit(cmd->argv, cmd->script);
  if (!id.ok()) {
    if (id.status().retryable()) uncertain_.insert(request.allocation);
    // A partition's rules changed since discovery: read them again before the job is
    // placed again (RefusingNodes) and dispatched again (ChoosePartition).
    if (IsAccessRefusal(id.status())) (void)RefreshInventoryLocked();
    return id.status().WithContext("dispatch " + request.allocation);
  }
  Record r;
  r.job = request.job;
  r.slurm_id = *id;
  r.usage = cmd->usage;
  r.last.job = request.job;
  r.last.allocation = request.allocation;
  r.last.external_id = ExternalId(*id);
  r.last.phase = AllocationPhase::kPending;
  records_[request.allocation] = std::move(r);
  return ExternalId(*id);
}

StatusOr<std::vector<AllocationStatus>> SlurmPool::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  auto jobs = cli_.Jobs();
  if (!jobs.ok()) return jobs.status();
  Submissions subs = GroupTagged(*jobs);

  std::vector<AllocationStatus> out;
  std::vector<std::string> drop;
  for (auto& [alloc, r] : records_) {
    const std::vector<SlurmJob>* comps = nullptr;
    if (auto s = subs.find(alloc); s != subs.end()) {
      if (auto c = s->second.find(r.slurm_id); c != s->second.end()) comps = &c->second;
    }
    if (comps) {
      AllocationStatus st = StatusFromSlurm(*comps);
      if (IsTerminal(r.last.phase)) {
        st.message = r.last.message;  // as first reported
      } else {
        NameFailedNodesLocked(st);
      }
      r.last = std::move(st);
      out.push_back(r.last);
      continue;
    }
    // Gone from squeue: finished more than MinJobAge ago, or purged.
    drop.push_back(alloc);
    if (IsTerminal(r.last.phase)) continue;  // its end was reported already
    auto shown = cli_.ShowJob(r.slurm_id);
    if (!shown.ok()) return shown.status();
    if (shown->has_value()) {
      AllocationStatus st = StatusFromSlurm({**shown});
      NameFailedNodesLocked(st);
      st.job = r.job;
      st.allocation = alloc;
      out.push_back(st);
      if (IsTerminal(st.phase)) continue;
      drop.pop_back();  // still alive after all; keep tracking
      r.last = st;
      continue;
    }
    AllocationStatus lost = r.last;
    lost.phase = AllocationPhase::kLost;
    lost.reason = "Vanished";
    lost.message = "Slurm job " + std::to_string(r.slurm_id) +
                   " is gone from squeue and scontrol before Tessera saw it finish";
    out.push_back(lost);
  }
  for (const std::string& a : drop) records_.erase(a);
  // Tagged jobs this instance did not submit (a previous server, before Reconcile): report
  // them too; track the live ones from now on, report a finished one once.
  std::set<std::string> still_listed;
  for (const auto& [alloc, by_id] : subs) {
    if (records_.contains(alloc) || std::find(drop.begin(), drop.end(), alloc) != drop.end()) {
      continue;
    }
    const auto& [id, comps] = *by_id.begin();
    AllocationStatus st = StatusFromSlurm(comps);
    if (!IsTerminal(st.phase)) {
      records_[alloc] = Record{st.job, id, {}, st};
    } else {
      still_listed.insert(alloc);
      if (!ended_untracked_.insert(alloc).second) continue;
    }
    out.push_back(st);
  }
  // Forget what squeue no longer lists (bounded by MinJobAge).
  std::erase_if(ended_untracked_, [&](const std::string& a) { return !still_listed.contains(a); });
  std::sort(out.begin(), out.end(), [](const AllocationStatus& a, const AllocationStatus& b) {
    return a.allocation < b.allocation;
  });
  return out;
}

Status SlurmPool::Cancel(const std::string& allocation) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int64_t> ids;
  if (auto it = records_.find(allocation); it != records_.end()) ids.push_back(it->second.slurm_id);
  if (ids.empty() || uncertain_.contains(allocation)) {
    auto jobs = cli_.Jobs();
    if (!jobs.ok()) return jobs.status();
    Submissions subs = GroupTagged(*jobs);
    if (auto s = subs.find(allocation); s != subs.end()) {
      for (const auto& [id, comps] : s->second) ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return cli_.Cancel(ids).WithContext("cancel " + allocation);
}

StatusOr<ReconcileReport> SlurmPool::Reconcile(const std::vector<DesiredAllocation>& desired) {
  std::lock_guard<std::mutex> lock(mu_);
  auto jobs = cli_.Jobs();
  if (!jobs.ok()) return jobs.status();
  if (inventory_.empty()) (void)RefreshInventoryLocked();  // usage only; not fatal
  Submissions subs = GroupTagged(*jobs);
  std::map<std::string, const DesiredAllocation*> want;
  for (const DesiredAllocation& d : desired) want[d.allocation] = &d;

  ReconcileReport report;
  std::vector<int64_t> cancel;
  std::map<std::string, Record> records;
  for (const auto& [alloc, by_id] : subs) {
    std::vector<std::pair<int64_t, AllocationStatus>> live, all;
    for (const auto& [id, comps] : by_id) {
      AllocationStatus st = StatusFromSlurm(comps);
      all.push_back({id, st});
      if (!IsTerminal(st.phase)) live.push_back({id, st});
    }
    auto w = want.find(alloc);
    if (w == want.end()) {
      for (const auto& [id, st] : live) {
        cancel.push_back(id);
        report.cancelled_stale.push_back(ExternalId(id));
      }
      continue;
    }
    // The one to keep: the id the server knows, else the oldest live one, else the oldest.
    const DesiredAllocation& d = *w->second;
    int64_t keep = live.empty() ? all.front().first : live.front().first;
    for (const auto& [id, st] : all) {
      if (ExternalId(id) == d.external_id) keep = id;
    }
    for (const auto& [id, st] : live) {
      if (id == keep) continue;
      cancel.push_back(id);
      report.cancelled_duplicates.push_back(ExternalId(id));
    }
    const AllocationStatus& kept = std::find_if(all.begin(), all.end(), [&](const auto& p) {
                                     return p.first == keep;
                                   })->second;
    DispatchRequest usage_of;
    usage_of.job = d.job;
    usage_of.allocation = d.allocation;
    usage_of.bindings = d.bindings;
    usage_of.command = {"true"};
    records[alloc] = Record{d.job, keep, UsageOfLocked(usage_of), kept};
    report.adopted.push_back(kept);
  }
  for (const DesiredAllocation& d : desired) {
    if (!subs.contains(d.allocation)) report.missing.push_back(d);
  }
  std::sort(cancel.begin(), cancel.end());
  TESSERA_RETURN_IF_ERROR(cli_.Cancel(cancel).WithContext("reconcile"));
  records_ = std::move(records);
  uncertain_.clear();
  return report;
}

}  // namespace tessera::slurm
