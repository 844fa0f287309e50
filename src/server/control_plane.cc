#include "server/control_plane.h"

#include <strings.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/hostlist.h"
#include "model/eviction.h"
#include "model/labels.h"

namespace tessera::server {
namespace {

std::string Pad(int64_t n, int width) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%0*lld", width, static_cast<long long>(n));
  return buf;
}
std::string AllocId(int64_t n) { return "a-" + Pad(n, 12); }

int64_t WallSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Json EventToJson(const Event& e) {
  return {{"seq", e.seq},       {"time", e.time},     {"type", e.type},
          {"reason", e.reason}, {"object", e.object}, {"message", e.message}};
}
Event EventFromJson(const Json& j) {
  Event e;
  e.seq = j.value("seq", int64_t{0});
  e.time = j.value("time", int64_t{0});
  e.type = j.value("type", "");
  e.reason = j.value("reason", "");
  e.object = j.value("object", "");
  e.message = j.value("message", "");
  return e;
}

// An agent's default lease (agent.h): without an answer for this many heartbeat intervals
// it stops its tasks itself.
constexpr int64_t kAgentLeaseHeartbeats = 10;
}  // namespace

int64_t RunsOnUnattended(int64_t heartbeat_seconds, int64_t lease_seconds, int64_t grace_seconds) {
  const int64_t lease =
      lease_seconds >= 0 ? lease_seconds : heartbeat_seconds * kAgentLeaseHeartbeats;
  return lease > 0 ? lease + heartbeat_seconds + grace_seconds : 0;
}

namespace {

// Tasks an agent's node runs at most unless it registers its own maxTasks (kubelet's maxPods).
constexpr int32_t kDefaultMaxTasksPerNode = 110;

const char* kJobStates[] = {"Pending",   "Scheduled", "Running",  "Terminating",
                            "Succeeded", "Failed",    "Cancelled"};
const char* kAllocStates[] = {"Assigned",  "Running", "Stopping", "Lost",
                              "Succeeded", "Failed",  "Killed"};

std::string Join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

}  // namespace

const char* JobStateName(JobState s) { return kJobStates[static_cast<int>(s)]; }
std::optional<JobState> ParseJobState(const std::string& s) {
  for (int i = 0; i < 7; ++i)
    if (s == kJobStates[i]) return static_cast<JobState>(i);
  return std::nullopt;
}
bool IsTerminal(JobState s) {
  return s == JobState::kSucceeded || s == JobState::kFailed || s == JobState::kCancelled;
}
// Idempotency keys are each caller's own (as Stripe's are per account): another token's key
// neither replays nor blocks this one's. ("" for no key; names and keys hold no newline.)
static std::string ScopedKey(const std::string& principal, const std::string& key) {
  return key.empty() ? "" : principal + "\n" + key;
}

// A task of the job's current attempt that has finished for good: it exited 0, and the job
// is not a service (whose replicas never finish: one that exits is placed again).
static bool FinishedForGood(const JobRecord& j, const Allocation& a) {
  return a.attempt == j.attempt && a.state == AllocState::kSucceeded && !j.spec.service;
}
const char* AllocStateName(AllocState s) { return kAllocStates[static_cast<int>(s)]; }
static std::optional<AllocState> ParseAllocState(const std::string& s) {
  for (int i = 0; i < 7; ++i)
    if (s == kAllocStates[i]) return static_cast<AllocState>(i);
  return std::nullopt;
}

int HttpStatusFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return 200;
    case StatusCode::kInvalidArgument:
      return 400;
    case StatusCode::kUnauthenticated:
      return 401;
    case StatusCode::kPermissionDenied:
      return 403;
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return 409;
    case StatusCode::kResourceExhausted:
      return 413;
    case StatusCode::kUnavailable:
      return 503;
    case StatusCode::kInternal:
      return 500;
  }
  return 500;
}

Json ErrorJson(const Status& s) {
  return {{"error",
           {{"code", StatusCodeName(s.code())},
            {"message", s.message()},
            {"retryable", s.retryable()}}}};
}

// ---- construction and loading ----

ControlPlane::ControlPlane(std::unique_ptr<store::Store> store, std::unique_ptr<Engine> engine,
                           ControlPlaneOptions options)
    : store_(std::move(store)), engine_(std::move(engine)), options_(std::move(options)) {
  if (!options_.clock) options_.clock = WallSeconds;
  default_backend_ = std::make_shared<AgentBackend>();
}

ControlPlane::~ControlPlane() {
  {
    std::lock_guard<std::mutex> l(loop_mu_);
    stopping_ = true;
  }
  loop_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  if (options_.on_stop) options_.on_stop();
}

StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Open(std::unique_ptr<store::Store> store,
                                                           std::unique_ptr<Engine> engine,
                                                           ControlPlaneOptions options) {
  std::unique_ptr<ControlPlane> cp(
      new ControlPlane(std::move(store), std::move(engine), std::move(options)));
  TESSERA_RETURN_IF_ERROR(cp->Load());
  (void)cp->CompactEvents(true);
  (void)cp->CompactFinishedJobs();
  if (cp->options_.run_scheduler) cp->loop_ = std::thread([p = cp.get()] { p->Loop(); });
  return cp;
}

Status ControlPlane::Load() {
  std::lock_guard<std::mutex> l(mu_);
  // In pages: a distributed store answers one request per page, not one of every event.
  constexpr size_t kPage = 5000;
  auto each = [&](const std::string& prefix, auto fn) -> Status {
    std::string after;
    for (;;) {
      auto kvs = store_->Range(prefix, after, kPage);
      if (!kvs.ok()) return kvs.status();
      for (const auto& kv : *kvs) {
        Json j;
        try {
          j = Json::parse(kv.value);
        } catch (const std::exception& e) {
          return Internal("store key " + kv.key + ": corrupt JSON: " + e.what());
        }
        Status st = fn(kv.key, j);
        if (!st.ok()) return st.WithContext("store key " + kv.key);
      }
      if (kvs->size() < kPage) return Status::Ok();
      after = kvs->back().key;
    }
  };
  TESSERA_RETURN_IF_ERROR(each("pcs/", [&](const std::string&, const Json& j) -> Status {
    auto pc = PriorityClassFromJson(j, "");
    if (!pc.ok()) return pc.status();
    priority_classes_[pc->name] = *pc;
    return Status::Ok();
  }));
  TESSERA_RETURN_IF_ERROR(each("queues/", [&](const std::string&, const Json& j) -> Status {
    auto q = QueueFromJson(j, "");
    if (!q.ok()) return q.status();
    queues_[q->name] = *q;
    return Status::Ok();
  }));
  {
    std::vector<Queue> tree;
    for (const auto& [name, q] : queues_) tree.push_back(q);
    for (const std::string& v : QueueGuaranteeViolations(tree))
      std::fprintf(stderr,
                   "tessera server: warning: stored queues: %s; reclaim cannot honour it (apply "
                   "smaller guarantees)\n",
                   v.c_str());
  }
  TESSERA_RETURN_IF_ERROR(each("tokens/", [&](const std::string&, const Json& j) -> Status {
    auto e = TokenRegistry::FromJson(j, "");
    if (!e.ok()) return e.status();
    if (!tokens_.HasName(e->principal.name)) tokens_.Add(*e);
    return Status::Ok();
  }));
  int64_t now = Now();
  TESSERA_RETURN_IF_ERROR(each("nodes/", [&](const std::string&, const Json& j) -> Status {
    NodeRecord n;
    auto node = NodeFromJson(j.at("node"), "node");
    if (!node.ok()) return node.status();
    n.node = *node;
    n.node.labels[kHostnameLabel] = n.node.name;  // stored before the server set it
    n.epoch = j.value("epoch", int64_t{0});
    n.boot_id = j.value("bootId", "");
    n.instance_id = j.value("instanceId", "");
    n.lease_seconds = j.value("leaseSeconds", int64_t{-1});
    n.cordoned = j.value("cordoned", false);
    n.logs_url = j.value("logsUrl", "");
    n.agent_version = j.value("agentVersion", "");
    n.last_heartbeat = now;  // agents get a full grace period after a server restart
    nodes_[n.node.name] = n;
    return Status::Ok();
  }));
  std::vector<std::pair<int64_t, std::string>> keyed;  // jobs submitted with a key, by seq
  TESSERA_RETURN_IF_ERROR(each("jobs/", [&](const std::string&, const Json& j) -> Status {
    JobRecord r;
    auto spec = spec::JobSpecFromJson(j.at("spec"), "spec");
    if (!spec.ok()) return spec.status();
    r.spec = std::move(*spec);
    auto st = ParseJobState(j.value("state", "Pending"));
    if (!st) return Internal("bad job state");
    r.state = *st;
    r.after_termination =
        ParseJobState(j.value("afterTermination", "Pending")).value_or(JobState::kPending);
    r.attempt = j.value("attempt", 1);
    r.task_restarts = j.value("taskRestarts", 0);
    r.evicted_restarts = j.value("evictedRestarts", 0);
    r.idempotency_key = j.value("idempotencyKey", "");
    r.idempotency_digest = j.value("idempotencyDigest", "");
    r.user = j.value("user", "");
    r.seq = j.value("seq", int64_t{0});
    r.created_at = j.value("createdAt", int64_t{0});
    r.started_at = j.value("startedAt", int64_t{-1});
    r.finished_at = j.value("finishedAt", int64_t{-1});
    r.queued_at = j.value("queuedAt", r.created_at);
    // Records written before these fields existed: an active attempt started when the job did.
    r.run_started_at = j.value(
        "runStartedAt", r.state == JobState::kPending || IsTerminal(r.state) ? -1 : r.started_at);
    r.attained_gpu_milli_seconds = j.value("attainedGpuMilliSeconds", int64_t{0});
    r.attempt_started_at = j.value("attemptStartedAt", int64_t{-1});
    r.backoff.failures_in_a_row = j.value("failuresInARow", 0);
    r.backoff.until = j.value("backoffUntil", int64_t{0});
    for (const auto& t : j.value("taskBackoff", Json::array()))
      r.task_backoff[t.value("task", 0)] = {t.value("failuresInARow", 0),
                                            t.value("until", int64_t{0})};
    r.fenced_until = j.value("fencedUntil", int64_t{0});
    r.fenced_node = j.value("fencedNode", "");
    r.held_by = j.value("heldBy", "");
    r.message = j.value("message", "");
    next_job_seq_ = std::max(next_job_seq_, r.seq + 1);
    std::string id = r.id();
    if (!r.idempotency_key.empty()) keyed.emplace_back(r.seq, id);
    jobs_.emplace(id, std::move(r));
    return Status::Ok();
  }));
  std::sort(keyed.begin(), keyed.end());
  for (const auto& [seq, id] : keyed) {
    const JobRecord& j = jobs_.at(id);
    idempotency_[ScopedKey(j.user, j.idempotency_key)].push_back(id);
  }
  // Array membership is stored with each element (its spec); elements in index order.
  for (const auto& [id, j] : jobs_) IndexJob(j);
  for (auto& [array, ids] : arrays_)
    std::sort(ids.begin(), ids.end(), [&](const std::string& a, const std::string& b) {
      return jobs_.at(a).spec.array->index < jobs_.at(b).spec.array->index;
    });
  TESSERA_RETURN_IF_ERROR(each("allocs/", [&](const std::string& key, const Json& j) -> Status {
    Allocation a;
    a.id = key.substr(7);
    a.job = j.at("job").get<std::string>();
    a.task = j.at("task").get<int32_t>();
    a.attempt = j.value("attempt", 1);
    Json place = j.at("placement");
    place["task"] = a.task;
    // The model codec reads placements inside a job; reuse it through a one-task job.
    Json fake = {{"id", "x"},
                 {"tasks", Json::array({{{"replicas", a.task + 1}}})},
                 {"running", Json::array({place})}};
    auto fj = JobFromJson(fake, "placement");
    if (!fj.ok()) return fj.status();
    a.placement = *fj->allocations[a.task];
    auto st = ParseAllocState(j.value("state", "Assigned"));
    if (!st) return Internal("bad allocation state");
    a.state = *st;
    a.grace_period_seconds = j.value("gracePeriodSeconds", int64_t{30});
    a.created_at = j.value("createdAt", int64_t{0});
    a.finished_at = j.value("finishedAt", int64_t{0});
    a.exit_code = j.value("exitCode", 0);
    a.message = j.value("message", "");
    a.command = j.value("command", std::vector<std::string>{});
    a.script = j.value("script", "");
    a.env = j.value("env", std::map<std::string, std::string>{});
    a.working_dir = j.value("workingDir", "");
    a.stdout_file = j.value("stdoutFile", "");
    a.stderr_file = j.value("stderrFile", "");
    a.cpu_limit_milli = j.value("cpuLimitMilli", int64_t{0});
    a.memory_limit_bytes = j.value("memoryLimitBytes", int64_t{0});
    if (j.contains("securityContext")) {
      auto run_as = RunAsFromJson(j["securityContext"], "securityContext");
      if (!run_as.ok()) return run_as.status();
      a.run_as = std::move(*run_as);
    }
    if (const auto r = j.find("runAs"); r != j.end()) a.ran_as = RanAsFromJson(*r);
    auto it = jobs_.find(a.job);
    if (it != jobs_.end()) it->second.allocations.push_back(a.id);
    int64_t n = std::strtoll(a.id.c_str() + 2, nullptr, 10);
    next_alloc_ = std::max(next_alloc_, n + 1);
    KeepAllocation(std::move(a));
    return Status::Ok();
  }));
  TESSERA_RETURN_IF_ERROR(each("events/", [&](const std::string&, const Json& j) -> Status {
    Event e = EventFromJson(j);
    next_event_seq_ = std::max(next_event_seq_, e.seq + 1);
    if (e.object.rfind("job/", 0) == 0) {
      auto it = jobs_.find(e.object.substr(4));
      if (it != jobs_.end()) {
        it->second.events.push_back(e.seq);
        // An unchanged verdict writes no FailedScheduling event, across a restart too (else
        // every pending job writes its verdict again): the dedupe is the job's latest such
        // event, unless a binding or a requeue came after it (as in ApplyPlan and
        // MaybeFinishTermination). Events come in sequence order.
        if (e.reason == "FailedScheduling") {
          it->second.last_failed_scheduling = e.message;
          it->second.last_failed_scheduling_at = e.time;
        } else if (e.reason == "Scheduled" || e.reason == "Requeued")
          it->second.last_failed_scheduling.clear();
      }
    }
    events_[e.seq] = std::move(e);
    return Status::Ok();
  }));
  // Numbers are never reused, even after the newest records were deleted (compactions).
  for (auto [key, next] :
       {std::pair{"counters/events", &next_event_seq_}, std::pair{"counters/jobs", &next_job_seq_},
        std::pair{"counters/allocs", &next_alloc_}}) {
    auto c = store_->Get(key);
    if (!c.ok()) return c.status();
    if (c->has_value())
      *next = std::max<int64_t>(*next, std::strtoll((*c)->value.c_str(), nullptr, 10));
  }
  TESSERA_RETURN_IF_ERROR(each("audit/", [&](const std::string&, const Json& j) -> Status {
    AuditRecord a;
    a.seq = j.value("seq", int64_t{0});
    a.time = j.value("time", int64_t{0});
    a.principal = j.value("principal", "");
    a.action = j.value("action", "");
    a.object = j.value("object", "");
    a.result = j.value("result", "");
    a.count = j.value("count", int64_t{1});
    a.last_time = j.value("lastTime", a.time);
    next_audit_seq_ = std::max(next_audit_seq_, a.seq + 1);
    audit_[a.seq] = a;
    return Status::Ok();
  }));
  return Status::Ok();
}

// ---- records -> store ----

store::Op ControlPlane::JobOp(const JobRecord& j) const {
  Json o = Json::object();
  o["spec"] = spec::JobSpecToJson(j.spec);
  o["state"] = JobStateName(j.state);
  if (j.state == JobState::kTerminating) o["afterTermination"] = JobStateName(j.after_termination);
  o["attempt"] = j.attempt;
  if (j.task_restarts) o["taskRestarts"] = j.task_restarts;
  if (j.evicted_restarts) o["evictedRestarts"] = j.evicted_restarts;
  if (!j.idempotency_key.empty()) o["idempotencyKey"] = j.idempotency_key;
  if (!j.idempotency_digest.empty()) o["idempotencyDigest"] = j.idempotency_digest;
  o["user"] = j.user;
  o["seq"] = j.seq;
  o["createdAt"] = j.created_at;
  o["startedAt"] = j.started_at;
  o["finishedAt"] = j.finished_at;
  if (j.queued_at != j.created_at) o["queuedAt"] = j.queued_at;
  if (j.run_started_at >= 0) o["runStartedAt"] = j.run_started_at;
  if (j.attained_gpu_milli_seconds) o["attainedGpuMilliSeconds"] = j.attained_gpu_milli_seconds;
  if (j.attempt_started_at >= 0) o["attemptStartedAt"] = j.attempt_started_at;
  if (j.backoff.failures_in_a_row) o["failuresInARow"] = j.backoff.failures_in_a_row;
  if (j.backoff.until) o["backoffUntil"] = j.backoff.until;
  for (const auto& [task, c] : j.task_backoff)
    o["taskBackoff"].push_back(
        {{"task", task}, {"failuresInARow", c.failures_in_a_row}, {"until", c.until}});
  if (j.fenced_until) {
    o["fencedUntil"] = j.fenced_until;
    o["fencedNode"] = j.fenced_node;
  }
  if (!j.held_by.empty()) o["heldBy"] = j.held_by;
  if (!j.message.empty()) o["message"] = j.message;
  return store::Op::Put("jobs/" + j.id(), o.dump());
}

Json ControlPlane::AllocView(const Allocation& a) const {
  Json placement = JobToJson([&] {
    Job tmp;
    tmp.id = "x";
    tmp.groups.push_back(TaskGroup{"", a.task + 1, {}, {}});
    tmp.allocations.assign(a.task + 1, std::nullopt);
    tmp.allocations[a.task] = a.placement;
    return tmp;
  }())["running"][0];
  placement.erase("task");
  Json o = Json::object();
  o["id"] = a.id;
  o["job"] = a.job;
  o["task"] = a.task;
  o["attempt"] = a.attempt;
  o["state"] = AllocStateName(a.state);
  o["placement"] = placement;
  o["gracePeriodSeconds"] = a.grace_period_seconds;
  o["createdAt"] = a.created_at;
  if (a.finished_at) o["finishedAt"] = a.finished_at;
  if (a.exit_code) o["exitCode"] = a.exit_code;
  if (!a.message.empty()) o["message"] = a.message;
  o["command"] = a.command;
  if (!a.script.empty()) o["script"] = a.script;
  o["env"] = a.env;
  if (!a.working_dir.empty()) o["workingDir"] = a.working_dir;
  if (!a.stdout_file.empty()) o["stdoutFile"] = a.stdout_file;
  if (!a.stderr_file.empty()) o["stderrFile"] = a.stderr_file;
  if (a.cpu_limit_milli > 0) o["cpuLimitMilli"] = a.cpu_limit_milli;
  if (a.memory_limit_bytes > 0) o["memoryLimitBytes"] = a.memory_limit_bytes;
  if (!a.run_as.empty()) o["securityContext"] = RunAsToJson(a.run_as);
  if (a.ran_as.known()) o["runAs"] = RanAsToJson(a.ran_as);
  return o;
}

store::Op ControlPlane::AllocOp(const Allocation& a) const {
  return store::Op::Put("allocs/" + a.id, AllocView(a).dump());
}

store::Op ControlPlane::NodeOp(const NodeRecord& n) const {
  Json o = {{"node", NodeToJson(n.node)}, {"epoch", n.epoch},
            {"bootId", n.boot_id},        {"instanceId", n.instance_id},
            {"logsUrl", n.logs_url},      {"agentVersion", n.agent_version}};
  if (n.cordoned) o["cordoned"] = true;
  if (n.lease_seconds >= 0) o["leaseSeconds"] = n.lease_seconds;
  return store::Op::Put("nodes/" + n.node.name, o.dump());
}

Event& ControlPlane::AddEvent(std::vector<store::Op>& ops, const std::string& type,
                              const std::string& reason, const std::string& object,
                              const std::string& message) {
  Event e{next_event_seq_++, Now(), type, reason, object, message};
  ops.push_back(store::Op::Put("events/" + Pad(e.seq, 16), EventToJson(e).dump()));
  int64_t seq = e.seq;
  Event& stored = events_[seq] = std::move(e);
  if (object.rfind("job/", 0) == 0) {
    auto it = jobs_.find(object.substr(4));
    if (it != jobs_.end()) {
      it->second.events.push_back(seq);
      TrimJobEvents(ops, it->second);
    }
  }
  return stored;
}

size_t ControlPlane::ExcessEvents(const JobRecord& j) const {
  const size_t max = options_.max_events_per_job;
  return max == 0 || j.events.size() <= max ? 0 : j.events.size() - max;
}

void ControlPlane::DropOldestEvents(std::vector<store::Op>& ops, JobRecord& j, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    events_.erase(j.events[i]);
    ops.push_back(store::Op::Delete("events/" + Pad(j.events[i], 16)));
  }
  j.events.erase(j.events.begin(), j.events.begin() + static_cast<ptrdiff_t>(n));
}

void ControlPlane::TrimJobEvents(std::vector<store::Op>& ops, JobRecord& j) {
  const size_t drop = ExcessEvents(j);
  if (drop == 0) return;
  DropOldestEvents(ops, j, drop);
  ops.push_back(EventSeqOp());
}

store::Op ControlPlane::EventSeqOp() const {
  // Sequence numbers are never reused, even when the newest events were dropped.
  return store::Op::Put("counters/events", std::to_string(next_event_seq_));
}

size_t ControlPlane::WriteBudget(size_t want) const {
  const size_t max = store_->MaxWritesPerTxn();
  return max == 0 ? want : std::min(want, max);
}

Status ControlPlane::ShedEventsToFit(JobRecord& j) {
  // The record, its allocations, FinishDeletes' three counters and an audit record go in one
  // transaction.
  const size_t max = WriteBudget(std::numeric_limits<size_t>::max());
  const size_t fixed = 1 + j.allocations.size() + 4;
  while (fixed < max && j.events.size() > max - fixed) {
    std::vector<store::Op> ops;
    // (One write of the transaction is the event counter.)
    DropOldestEvents(ops, j, std::min(j.events.size() - (max - fixed), max - 1));
    ops.push_back(EventSeqOp());
    TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  }
  return Status::Ok();
}

size_t ControlPlane::CompactEvents(bool per_job) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<store::Op> ops;
  // Bounded work per call (one store transaction, with the event counter); the next cycle
  // goes on.
  const size_t budget = std::max<size_t>(WriteBudget(20000), 2) - 1;
  if (per_job)
    for (auto& [id, j] : jobs_) {
      if (ops.size() >= budget) break;
      DropOldestEvents(ops, j, std::min(ExcessEvents(j), budget - ops.size()));
    }
  const int64_t cutoff = Now() - options_.event_ttl_seconds;
  while (!events_.empty() && ops.size() < budget) {
    auto it = events_.begin();
    bool over = options_.max_events > 0 && events_.size() > options_.max_events;
    bool expired = options_.event_ttl_seconds > 0 && it->second.time < cutoff;
    if (!over && !expired) break;
    const Event& e = it->second;
    if (e.object.rfind("job/", 0) == 0) {
      auto j = jobs_.find(e.object.substr(4));
      // The globally oldest event is the oldest of its job.
      if (j != jobs_.end() && !j->second.events.empty() && j->second.events.front() == e.seq)
        j->second.events.erase(j->second.events.begin());
    }
    ops.push_back(store::Op::Delete("events/" + Pad(e.seq, 16)));
    events_.erase(it);
  }
  size_t dropped = 0;
  for (const auto& op : ops) dropped += op.kind == store::Op::Kind::kDelete;
  if (!ops.empty()) ops.push_back(EventSeqOp());
  (void)Commit(std::move(ops));
  return dropped;
}

size_t ControlPlane::CompactFinishedJobs() {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t now = Now();
  std::vector<store::Op> ops;
  std::vector<std::string> gone;
  std::optional<Dependents> waited;
  // Bounded work per call (one store transaction); the next cycle goes on.
  const size_t budget = std::max<size_t>(WriteBudget(20000), 4) - 3;  // FinishDeletes' counters
  for (auto it = jobs_.begin(); it != jobs_.end() && ops.size() < budget; ++it) {
    JobRecord& j = it->second;
    if (!IsTerminal(j.state) || j.finished_at < 0) continue;
    std::optional<int64_t> ttl = j.spec.ttl_seconds_after_finished;  // 0: at once
    if (!ttl && options_.finished_job_ttl_seconds > 0) ttl = options_.finished_job_ttl_seconds;
    if (!ttl || now - j.finished_at < *ttl) continue;
    // A task still stopping (its node unreachable) keeps the job until the task is gone.
    if (StillHolding(j) != nullptr) continue;
    if (!waited) waited = WaitedOn();
    if (waited->count({j.id(), j.seq})) continue;  // until its dependents are placed
    if (ops.size() + 1 + j.allocations.size() + j.events.size() > budget) {
      if (!ops.empty()) break;  // what is gathered goes first
      if (!ShedEventsToFit(j).ok()) return 0;
    }
    DeleteJobOps(j, ops);
    gone.push_back(it->first);
  }
  if (gone.empty()) return 0;
  FinishDeletes(ops);
  if (!Commit(std::move(ops)).ok()) return 0;  // kept; the next call tries again
  for (const std::string& id : gone) ForgetJob(id);
  return gone.size();
}

void ControlPlane::DeleteJobOps(const JobRecord& j, std::vector<store::Op>& ops) const {
  ops.push_back(store::Op::Delete("jobs/" + j.id()));
  for (const auto& id : j.allocations) ops.push_back(store::Op::Delete("allocs/" + id));
  for (int64_t seq : j.events) ops.push_back(store::Op::Delete("events/" + Pad(seq, 16)));
}

void ControlPlane::FinishDeletes(std::vector<store::Op>& ops) const {
  ops.push_back(EventSeqOp());
  // Deleting the newest jobs must not let a restart hand out their numbers again (agents'
  // task folders and Slurm tags are named by allocation id).
  ops.push_back(store::Op::Put("counters/jobs", std::to_string(next_job_seq_)));
  ops.push_back(store::Op::Put("counters/allocs", std::to_string(next_alloc_)));
}

void ControlPlane::KeepAllocation(Allocation a) {
  allocations_by_node_[a.placement.node].insert(a.id);
  const std::string id = a.id;
  allocations_[id] = std::move(a);
}

void ControlPlane::ForgetAllocation(const std::string& id) {
  auto it = allocations_.find(id);
  if (it == allocations_.end()) return;
  auto n = allocations_by_node_.find(it->second.placement.node);
  if (n != allocations_by_node_.end() && n->second.erase(id) && n->second.empty())
    allocations_by_node_.erase(n);
  allocations_.erase(it);
}

std::vector<Allocation*> ControlPlane::AllocationsOn(const std::string& node) {
  std::vector<Allocation*> on;
  auto n = allocations_by_node_.find(node);
  if (n == allocations_by_node_.end()) return on;
  on.reserve(n->second.size());
  for (const std::string& id : n->second) on.push_back(&allocations_.at(id));
  return on;
}

void ControlPlane::ForgetJob(const std::string& id) {
  JobRecord& j = jobs_.at(id);
  with_dependencies_.erase(id);
  for (const auto& a : j.allocations) ForgetAllocation(a);
  for (int64_t seq : j.events) events_.erase(seq);
  // The key answers for the submission's other jobs while any is kept.
  if (auto k = idempotency_.find(ScopedKey(j.user, j.idempotency_key)); k != idempotency_.end()) {
    std::erase(k->second, id);
    if (k->second.empty()) idempotency_.erase(k);
  }
  if (const auto& a = j.spec.array; a) {
    std::vector<std::string>& ids = arrays_[a->job_id];
    std::erase(ids, id);
    if (ids.empty()) {
      arrays_.erase(a->job_id);
      array_names_[a->name].erase(a->job_id);
      if (array_names_[a->name].empty()) array_names_.erase(a->name);
    }
  }
  jobs_.erase(id);
}

StatusOr<Json> ControlPlane::DeleteJob(const Principal& p, const std::string& given) {
  if (p.role == Role::kAgent) return PermissionDenied("agent tokens may not delete jobs");
  std::string id = given;
  {
    std::lock_guard<std::mutex> l(mu_);
    id = ByJobId(given);
    auto found = VisibleJob(p, id, given);
    if (!found.ok()) return found.status();
    JobRecord& j = **found;
    if (IsTerminal(j.state)) {
      if (const Allocation* a = StillHolding(j))
        return FailedPrecondition("job \"" + id + "\" has a task still stopping on node " +
                                  a->placement.node + "; it can be deleted once the task is gone");
      const auto waited = WaitedOn();
      if (auto w = waited.find({id, j.seq}); w != waited.end())
        return FailedPrecondition("job \"" + id + "\" is kept while jobs that depend on it wait: " +
                                  Join(w->second, ", ") +
                                  " (--dependency); it can be deleted once they have been "
                                  "scheduled or have ended");
      Json out = {{"name", id}, {"state", JobStateName(j.state)}, {"deleted", true}};
      TESSERA_RETURN_IF_ERROR(ShedEventsToFit(j));  // (and its audit record: below)
      std::vector<store::Op> ops;
      DeleteJobOps(j, ops);
      FinishDeletes(ops);
      AddAudit(ops, p, "delete", "job/" + id, "ok");
      TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
      ForgetJob(id);
      return out;
    }
  }
  return Cancel(p, id);  // unfinished: cancelled first (a second delete removes it)
}

namespace {

// An audit record as stored and listed; `count` and `lastTime` only for merged denials.
Json AuditJson(const AuditRecord& a) {
  Json j = {{"seq", a.seq},       {"time", a.time},     {"principal", a.principal},
            {"action", a.action}, {"object", a.object}, {"result", a.result}};
  if (a.count > 1) j["count"] = a.count, j["lastTime"] = a.last_time;
  return j;
}

// `s` cut to at most `most` bytes (on a UTF-8 boundary) and marked so, with its length.
std::string Clipped(const std::string& s, size_t most) {
  if (s.size() <= most) return s;
  size_t cut = most;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "...(cut; " + std::to_string(s.size()) + " bytes)";
}

}  // namespace

store::Op ControlPlane::AuditOp(const AuditRecord& a) const {
  return store::Op::Put("audit/" + Pad(a.seq, 16),
                        AuditJson(a).dump(-1, ' ', false, Json::error_handler_t::replace));
}

int64_t ControlPlane::AddAudit(std::vector<store::Op>& ops, const Principal& p,
                               const std::string& action, const std::string& object,
                               const std::string& result) {
  AuditRecord a{next_audit_seq_++, Now(), p.name, action, object, result};
  a.last_time = a.time;
  ops.push_back(AuditOp(a));
  const int64_t seq = a.seq;
  audit_[seq] = std::move(a);
  return seq;
}

void ControlPlane::AuditDenied(const Principal& p, const std::string& action,
                               const std::string& object, const std::string& why) {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t now = Now();
  std::vector<store::Op> ops;
  // Windows that ended: their last repeats are stored, and they are forgotten.
  std::erase_if(open_denials_, [&](const auto& e) {
    if (e.second.until > now) return false;
    auto a = audit_.find(e.second.seq);
    if (a != audit_.end() && a->second.count != e.second.written_count)
      ops.push_back(AuditOp(a->second));
    return true;
  });
  std::string obj = Clipped(object, kMaxAuditObject);
  auto key = std::make_tuple(p.name, action, obj);
  if (!open_denials_.count(key)) {
    size_t objects = 0;  // this principal's open records
    for (auto it = open_denials_.lower_bound({p.name, "", ""});
         it != open_denials_.end() && std::get<0>(it->first) == p.name; ++it)
      ++objects;
    if (objects >= kMaxDenialsPerWindow) key = {p.name, action, "(other objects)"};
  }
  auto open = open_denials_.find(key);
  auto record = open == open_denials_.end() ? audit_.end() : audit_.find(open->second.seq);
  if (record != audit_.end()) {
    AuditRecord& a = record->second;
    ++a.count;
    a.last_time = now;
    if (now > open->second.written_at) {  // at most once a second
      ops.push_back(AuditOp(a));
      open->second.written_at = now;
      open->second.written_count = a.count;
    }
  } else {
    const int64_t seq =
        AddAudit(ops, p, action, std::get<2>(key), "denied: " + Clipped(why, kMaxAuditObject * 2));
    open_denials_[key] = {seq, now + kDenialWindowSeconds, now, 1};
  }
  (void)Commit(std::move(ops));
}

Status ControlPlane::Commit(std::vector<store::Op> ops) {
  // What the change tells backends (sbatch, scancel) goes out once it is stored, never for
  // a change the store refused.
  std::vector<std::function<void()>> effects;
  effects.swap(after_commit_);
  auto run = [&effects] {
    for (auto& f : effects) f();
  };
  if (ops.empty()) {
    run();
    return Status::Ok();
  }
  if (frozen_) return Unavailable(kReadOnly);
  auto r = store_->Write(std::move(ops));
  NoteStoreResult(r.status());
  if (r.ok()) run();
  if (!r.ok()) {
    // Memory already holds the change; the store does not. Nothing of it was acknowledged or
    // dispatched, and nothing more will be (frozen()): a restart reloads the durable truth.
    store_health_.read_only = true;
    frozen_ = true;
    if (options_.on_store_error) options_.on_store_error(r.status(), true);
    std::fprintf(stderr,
                 "tessera server: store write failed: %s (a full disk or an unwritable data "
                 "dir?); the server is now READ-ONLY: it answers reads, its agents keep their "
                 "tasks running, it schedules and changes nothing; make the data dir writable, "
                 "then restart it (it reloads what is durable)\n",
                 r.status().ToString().c_str());
    return Unavailable("not stored: " + r.status().message() +
                       "; the server is read-only until restarted");
  }
  return Status::Ok();
}

Status ControlPlane::AddToken(const Principal& by, TokenEntry e) {
  if (!by.IsAdmin()) return PermissionDenied("only an admin may create tokens");
  std::lock_guard<std::mutex> l(mu_);
  if (tokens_.HasName(e.principal.name))
    return AlreadyExists("token \"" + e.principal.name + "\" already exists");
  for (const auto& q : e.principal.queues)
    if (q != "*" && queues_.count(q) == 0)
      return InvalidArgument("queues: unknown queue \"" + q + "\"");
  // (Checked here, not when tokens are read: stored agent tokens of earlier versions have "*".)
  if (e.principal.role == Role::kAgent && !e.principal.queues.empty())
    return InvalidArgument(
        "queues: an agent token has no queues (it speaks the agent protocol only)");
  std::vector<store::Op> ops;
  ops.push_back(store::Op::Put("tokens/" + e.principal.name, TokenRegistry::ToJson(e).dump()));
  AddAudit(ops, by, "create-token", "token/" + e.principal.name, "ok");
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  tokens_.Add(std::move(e));
  return Status::Ok();
}

StatusOr<Json> ControlPlane::ListTokens(const Principal& p) const {
  if (!p.IsAdmin()) return PermissionDenied("only an admin may list tokens");
  Json items = Json::array();
  for (const TokenEntry& e : tokens_.List()) {
    Json j = TokenRegistry::ToJson(e);
    j.erase("sha256");
    items.push_back(std::move(j));
  }
  return Json{{"items", items}};
}

Status ControlPlane::Delete(const Principal& p, const std::string& kind, const std::string& name) {
  if (!p.IsAdmin()) return PermissionDenied("only an admin may delete a " + kind);
  std::lock_guard<std::mutex> l(mu_);
  // The first job (by name) that `uses` says needs the object and that is unfinished or
  // still holds devices (a task stopping on an unreachable node), else a submission being
  // stored that would need it ("a submission in flight").
  auto needed_by = [&](auto uses) -> std::string {
    for (const auto& [id, j] : jobs_) {
      if (!uses(j.spec.job.queue, j.spec.job.priority_class)) continue;
      if (!IsTerminal(j.state) || StillHolding(j) != nullptr) return id;
    }
    for (const auto& [queue, pc] : inflight_)
      if (uses(queue, pc)) return "a submission in flight";
    return "";
  };
  auto refuse = [&](const std::string& why) {
    return FailedPrecondition(kind + " \"" + name + "\" " + why);
  };
  static const char* kDeclared =
      "is declared in the --bootstrap folder, applied at every start: remove it there";
  std::string key;
  if (kind == "queue") {
    if (queues_.count(name) == 0) return NotFound("queue \"" + name + "\" not found");
    for (const auto& [child, q] : queues_)
      if (q.parent == name)
        return refuse("is the parent of queue \"" + child + "\": delete or move that first");
    if (declared_.count("queue/" + name)) return refuse(kDeclared);
    std::string job =
        needed_by([&](const std::string& queue, const std::string&) { return queue == name; });
    if (!job.empty())
      return refuse("has unfinished jobs (job \"" + job + "\"): cancel them or let them end");
    key = "queues/" + name;
  } else if (kind == "priorityclass") {
    if (priority_classes_.count(name) == 0)
      return NotFound("priorityclass \"" + name + "\" not found");
    if (declared_.count("priorityclass/" + name)) return refuse(kDeclared);
    for (const auto& [qname, q] : queues_)
      if (std::find(q.priority_classes.begin(), q.priority_classes.end(), name) !=
          q.priority_classes.end())
        return refuse("is allowed by queue \"" + qname +
                      "\" (its priorityClasses): change the queue first");
    const std::string fallback = DefaultPriorityClass();
    std::string job = needed_by([&](const std::string&, const std::string& pc) {
      return (pc.empty() ? fallback : pc) == name;
    });
    if (!job.empty())
      return refuse("is the priority of unfinished jobs (job \"" + job +
                    "\"): they would drop to priority 0");
    key = "pcs/" + name;
  } else if (kind == "token") {
    auto e = tokens_.Find(name);
    if (!e) return NotFound("token \"" + name + "\" not found");
    if (e->origin == "config")
      return refuse(
          "comes from the --auth-config file: remove it there (it would return at "
          "the next start)");
    if (e->principal.role == Role::kAdmin) {
      int admins = 0;
      for (const TokenEntry& t : tokens_.List()) admins += t.principal.role == Role::kAdmin;
      if (admins == 1) return refuse("is the last admin token: create another admin first");
    }
    key = "tokens/" + name;
  } else {
    return InvalidArgument("kind: expected queue, priorityclass or token, got \"" + kind + "\"");
  }
  std::vector<store::Op> ops;
  ops.push_back(store::Op::Delete(key));
  AddAudit(ops, p, "delete", kind + "/" + name, "ok");
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  if (kind == "queue") queues_.erase(name);
  if (kind == "priorityclass") priority_classes_.erase(name);
  if (kind == "token") tokens_.Remove(name);
  return Status::Ok();
}

// ---- views ----

bool ControlPlane::Visible(const Principal& p, const JobRecord& j) const {
  return p.MayUseQueue(j.spec.job.queue);
}

StatusOr<JobRecord*> ControlPlane::VisibleJob(const Principal& p, const std::string& id,
                                              const std::string& given) {
  auto it = jobs_.find(id);
  if (it == jobs_.end() || !Visible(p, it->second))
    return NotFound("job \"" + given + "\" not found");
  return &it->second;
}

const std::vector<std::string>* ControlPlane::AllowedPriorityClasses(
    const std::string& queue) const {
  auto q = queues_.find(queue);
  if (q == queues_.end()) return nullptr;
  if (!q->second.priority_classes.empty()) return &q->second.priority_classes;
  for (const std::string& a : QueueAncestors(queues_, queue))
    if (!queues_.at(a).priority_classes.empty()) return &queues_.at(a).priority_classes;
  return nullptr;
}

std::string ControlPlane::DefaultPriorityClass() const {
  for (const auto& [name, pc] : priority_classes_)
    if (pc.global_default) return name;
  return "";
}

int32_t ControlPlane::PriorityOf(const JobRecord& j) const {
  std::string pc =
      j.spec.job.priority_class.empty() ? DefaultPriorityClass() : j.spec.job.priority_class;
  auto it = priority_classes_.find(pc);
  return it == priority_classes_.end() ? 0 : it->second.value;
}

namespace {

// What a job's view shows as runStartedAt: when its current attempt was bound (-1 while
// pending), and for a finished job when its last attempt was (-1: never). The record keeps -1
// once the attempt has ended: the engine and the GPU-time accounting see no current attempt.
int64_t LastRunStartedAt(const JobRecord& j, const std::map<std::string, Allocation>& allocs) {
  if (!IsTerminal(j.state) || j.run_started_at >= 0) return j.run_started_at;
  int64_t bound = -1;  // the attempt's first binding (tasks restarted alone are bound later)
  for (const auto& id : j.allocations) {
    const Allocation& a = allocs.at(id);
    if (a.attempt == j.attempt && (bound < 0 || a.created_at < bound)) bound = a.created_at;
  }
  return bound;
}

}  // namespace

// A job named by sbatch's number (digits only, as SLURM_JOB_ID): that number, else -1.
static int64_t JobNumber(const std::string& id) {
  const bool digits = !id.empty() && id.find_first_not_of("0123456789") == std::string::npos;
  return digits && id.size() < 19 ? std::stoll(id) : -1;
}

enum class DependencyState { kWaiting, kSatisfied, kNever };

// Where dependency `d` stands, given the jobs it names: one job, or every job of an array,
// which Slurm judges as a whole by its highest exit code (afterok: every job succeeded;
// afternotok: all ended, one failed). None: the one job was deleted before this was checked
// (a job waited for is kept until its dependents are placed: WaitedOn), so it ended, with an
// outcome no longer known.
static DependencyState StateOf(const spec::Dependency& d, const std::vector<const JobRecord*>& on) {
  using C = spec::Dependency::Condition;
  bool all_started = true, all_ended = true, any_failed = false;
  for (const JobRecord* j : on) {
    const bool ended = IsTerminal(j->state);
    all_started = all_started && (ended || j->started_at >= 0);
    all_ended = all_ended && ended;
    any_failed = any_failed || (ended && j->state != JobState::kSucceeded);
  }
  const bool known = !on.empty();
  switch (d.condition) {
    case C::kAfter:
      return all_started ? DependencyState::kSatisfied : DependencyState::kWaiting;
    case C::kAfterAny:
      return all_ended ? DependencyState::kSatisfied : DependencyState::kWaiting;
    case C::kAfterOk:
      if (any_failed || !known) return DependencyState::kNever;
      return all_ended ? DependencyState::kSatisfied : DependencyState::kWaiting;
    case C::kAfterNotOk:
      if (!all_ended) return DependencyState::kWaiting;
      return any_failed ? DependencyState::kSatisfied : DependencyState::kNever;
  }
  return DependencyState::kWaiting;
}

// "prep to succeed (afterok)", "every job of array sweep to succeed (afterok)": what a
// dependency waits for, in words.
static std::string Awaited(const spec::Dependency& d) {
  using C = spec::Dependency::Condition;
  const std::string what = d.array ? "every job of array " + d.job : d.job;
  const std::string condition =
      std::string(" (") + spec::DependencyConditionName(d.condition) + ")";
  if (d.condition == C::kAfterNotOk && d.array)
    return "array " + d.job + " to end with a job failed" + condition;
  return what +
         (d.condition == C::kAfter      ? " to start"
          : d.condition == C::kAfterAny ? " to end"
          : d.condition == C::kAfterOk  ? " to succeed"
                                        : " to fail") +
         condition;
}

std::vector<const JobRecord*> ControlPlane::DependedOn(const spec::Dependency& d) const {
  std::vector<const JobRecord*> out;
  if (d.array) {
    if (auto a = arrays_.find(d.seq); a != arrays_.end())
      for (const std::string& e : a->second) out.push_back(&jobs_.at(e));
  } else if (auto it = jobs_.find(d.job); it != jobs_.end() && it->second.seq == d.seq) {
    out.push_back(&it->second);
  }
  return out;
}

ControlPlane::DependencyWait ControlPlane::WaitingOn(const JobRecord& j) const {
  DependencyWait wait;
  if (!j.allocations.empty() || IsTerminal(j.state)) return wait;
  for (const spec::Dependency& d : j.spec.dependencies) {
    std::vector<const JobRecord*> on = DependedOn(d);
    const DependencyState state = StateOf(d, on);
    const bool never = state == DependencyState::kNever;
    // The first that can never be satisfied, else the first still waiting.
    if (state == DependencyState::kSatisfied || (wait.on && (wait.never || !never))) continue;
    wait = {&d, std::move(on), never};
  }
  return wait;
}

std::string ControlPlane::DependencyWords(const DependencyWait& w) const {
  const spec::Dependency& d = *w.on;
  const std::string condition = spec::DependencyConditionName(d.condition);
  if (!w.never) {
    if (!d.array)
      return "waits for " + Awaited(d) + "; " + d.job + " is " + JobStateName(w.jobs[0]->state);
    const bool after = d.condition == spec::Dependency::Condition::kAfter;
    int64_t done = 0;
    for (const JobRecord* e : w.jobs) done += IsTerminal(e->state) || (after && e->started_at >= 0);
    return "waits for " + Awaited(d) + "; " + std::to_string(done) + " of its " +
           std::to_string(w.jobs.size()) + " jobs " + (after ? "started" : "ended");
  }
  std::string why;
  if (!d.array) {
    why = "job " + d.job + " ended " +
          (w.jobs.empty() ? std::string("and was deleted") : JobStateName(w.jobs[0]->state));
  } else if (d.condition == spec::Dependency::Condition::kAfterOk) {
    for (const JobRecord* e : w.jobs)
      if (IsTerminal(e->state) && e->state != JobState::kSucceeded && why.empty())
        why = "job " + e->id() + " of array " + d.job + " ended " + JobStateName(e->state);
  } else {
    why = "every job of array " + d.job + " succeeded";
  }
  return why + ": " + condition + " can never be satisfied";
}

int64_t ControlPlane::EligibleSince(const JobRecord& j) const {
  int64_t since = j.queued_at;
  for (const spec::Dependency& d : j.spec.dependencies) {
    const std::vector<const JobRecord*> on = DependedOn(d);
    if (StateOf(d, on) != DependencyState::kSatisfied) continue;
    const bool after = d.condition == spec::Dependency::Condition::kAfter;
    for (const JobRecord* e : on)
      since = std::max(since, after && e->started_at >= 0 ? e->started_at : e->finished_at);
  }
  return since;
}

const char* ControlPlane::HeldBack(const JobRecord& j, int64_t now,
                                   const std::set<std::string>& throttled) const {
  if (const char* why = HeldBack(j, now); *why) return why;
  return throttled.count(j.id()) ? "JobArrayTaskLimit" : "";
}

const char* ControlPlane::HeldBack(const JobRecord& j, int64_t now) const {
  if (j.state != JobState::kPending) return "";
  if (j.spec.job.TaskCount() == 0) return "ScaledToZero";  // a Deployment scaled to 0
  if (!j.held_by.empty()) return "Held";
  if (DependencyWait w = WaitingOn(j); w.on)
    return w.never ? "DependencyNeverSatisfied" : "Dependency";
  if (j.backoff.until > now) return "BackOff";
  if (j.fenced_until > now) return "NodeLost";
  return "";
}

ControlPlane::Dependents ControlPlane::WaitedOn() const {
  Dependents out;
  for (const std::string& id : with_dependencies_) {
    const JobRecord& j = jobs_.at(id);
    if (!j.allocations.empty() || IsTerminal(j.state)) continue;
    for (const spec::Dependency& d : j.spec.dependencies)
      for (const JobRecord* on : DependedOn(d)) {
        auto& dependents = out[{on->id(), on->seq}];
        if (dependents.empty() || dependents.back() != id) dependents.push_back(id);
      }
  }
  return out;
}

Json ControlPlane::JobView(const JobRecord& j, bool describe,
                           const std::set<std::string>* limited) const {
  const Job& job = j.spec.job;
  Json o = Json::object();
  o["name"] = j.id();
  o["queue"] = job.queue;
  o["priorityClass"] = job.priority_class.empty() ? DefaultPriorityClass() : job.priority_class;
  o["priority"] = PriorityOf(j);
  o["state"] = JobStateName(j.state);
  if (j.state == JobState::kTerminating) o["afterTermination"] = JobStateName(j.after_termination);
  o["attempt"] = j.attempt;
  // kubectl's RESTARTS: runs after the first, of the job (attempts) and of tasks alone.
  o["taskRestarts"] = j.task_restarts;
  o["restarts"] = j.attempt - 1 + j.task_restarts;
  o["user"] = j.user;
  o["source"] = j.spec.source;
  // sbatch's %j and SLURM_JOB_ID on Tessera's own nodes: how a user maps an output file
  // named after it back to the job.
  if (j.spec.source == "sbatch") o["slurmJobId"] = j.seq;
  if (const auto& a = j.spec.array)
    o["array"] = {{"name", a->name},
                  {"jobId", a->job_id},
                  {"index", a->index},
                  {"count", a->count},
                  {"throttle", a->throttle}};
  o["service"] = j.spec.service;
  if (j.spec.time_limit_seconds) {
    o["timeLimitSeconds"] = *j.spec.time_limit_seconds;
    o["timeLimitFrom"] = j.spec.time_limit_whole_job ? "firstStart" : "attemptStart";
  }
  o["createdAt"] = j.created_at;
  o["startedAt"] = j.started_at;
  o["finishedAt"] = j.finished_at;
  o["runStartedAt"] = LastRunStartedAt(j, allocations_);
  o["attainedGpuSeconds"] = j.attained_gpu_milli_seconds / 1000;
  o["tasks"] = job.TaskCount();
  o["minAvailable"] = job.GangMinimum();
  o["exclusive"] = job.exclusive;
  std::string gpus;
  int64_t whole = 0;
  for (const auto& g : job.groups) {
    const GpuRequest& r = g.request.gpu;
    if (r.kind == GpuRequestKind::kWhole)
      whole += int64_t{r.count} * g.replicas;
    else if (r.kind == GpuRequestKind::kMig)
      gpus +=
          (gpus.empty() ? "" : "+") + std::to_string(r.count * g.replicas) + "x" + r.mig_profile;
    else if (r.kind == GpuRequestKind::kFraction)
      gpus += (gpus.empty() ? "" : "+") + std::to_string(g.replicas) + "x" +
              std::to_string(r.milli) + "m";
  }
  if (whole > 0 || gpus.empty()) gpus = std::to_string(whole) + (gpus.empty() ? "" : "+" + gpus);
  o["gpus"] = gpus;
  std::set<std::string> nodes;
  for (const auto& id : j.allocations) {
    const Allocation& a = allocations_.at(id);
    if (a.attempt == j.attempt && a.Live()) nodes.insert(a.placement.node);
  }
  o["runningTasks"] = RunningTasks(j);
  o["nodes"] = std::vector<std::string>(nodes.begin(), nodes.end());
  if (!j.message.empty()) o["message"] = j.message;
  for (const spec::Dependency& d : j.spec.dependencies) {
    // Placed once, its dependencies held (the jobs named may be gone since).
    const DependencyState state =
        j.allocations.empty() ? StateOf(d, DependedOn(d)) : DependencyState::kSatisfied;
    Json x = {{"condition", spec::DependencyConditionName(d.condition)},
              {"job", d.job},
              {"state", state == DependencyState::kSatisfied ? "Satisfied"
                        : state == DependencyState::kNever   ? "NeverSatisfied"
                                                             : "Waiting"}};
    if (d.array) x["array"] = true;  // every job of the array, as a whole
    o["dependencies"].push_back(std::move(x));
  }
  // A running job's tasks restarted alone: the first of them to be placed again. The
  // pending reason of a running job is that of its tasks still to place.
  const bool active = j.state == JobState::kRunning || j.state == JobState::kScheduled;
  const std::pair<const int32_t, CrashLoop>* next_task = nullptr;
  if (active)
    for (const auto& e : j.task_backoff)
      if (e.second.until > Now() && (!next_task || e.second.until < next_task->second.until))
        next_task = &e;
  auto back_off = [&](const CrashLoop& c, const std::string& who) {
    o["backoffUntil"] = c.until;
    o["pendingReason"] = {
        {"code", "BackOff"},
        {"message", who + "restarting after " + std::to_string(c.failures_in_a_row) +
                        " failure(s) in a row: next try in " + std::to_string(c.until - Now()) +
                        " s"}};
  };
  if (next_task) {
    back_off(next_task->second, "task " + std::to_string(next_task->first) + " ");
  } else if (job.TaskCount() == 0 && (j.state == JobState::kPending || active)) {
    o["pendingReason"] = {{"code", "ScaledToZero"},
                          {"message", "scaled to 0 replicas: nothing runs until `tessera scale " +
                                          j.id() + " --replicas N`"}};
  } else if (const std::string held = HeldBack(j, Now()); held == "Held") {
    o["pendingReason"] = {{"code", "Held"},
                          {"message", "held by " + j.held_by + ": `tessera release " + j.id() +
                                          "` lets it be scheduled"}};
  } else if (held == "Dependency" || held == "DependencyNeverSatisfied") {
    const DependencyWait w = WaitingOn(j);
    o["pendingReason"] = {
        {"code", held},
        {"message", DependencyWords(w) +
                        (w.never ? "; `tessera cancel " + j.id() + "` removes this job" : "")}};
  } else if (held == "BackOff") {
    back_off(j.backoff, "");
  } else if (held == "NodeLost") {
    o["pendingReason"] = {
        {"code", "NodeLost"},
        {"message", "node " + j.fenced_node + " stopped answering; its agent stops the job's " +
                        "tasks there itself (lease, then grace period): restarting in " +
                        std::to_string(j.fenced_until - Now()) + " s, so that none runs twice"}};
  } else if (j.state == JobState::kPending && j.spec.array && j.spec.array->throttle > 0 &&
             (limited ? limited->count(j.id())
                      : ArrayTaskLimited(Now(), j.spec.array->job_id).count(j.id()))) {
    const spec::ArrayElement& a = *j.spec.array;
    o["pendingReason"] = {
        {"code", "JobArrayTaskLimit"},
        {"message", "array " + a.name + " runs at most " + std::to_string(a.throttle) +
                        " of its jobs at once (" + a.name + "%" + std::to_string(a.throttle) +
                        "); this one starts when one of them ends"}};
  } else if ((j.state == JobState::kPending || active) && !j.pending.code.empty()) {
    Json pr = {{"code", j.pending.code}, {"message", j.pending.message}};
    if (!j.pending.resource.empty()) pr["resource"] = j.pending.resource;
    if (!j.pending.rejected_nodes.empty()) pr["rejectedNodes"] = j.pending.rejected_nodes;
    if (j.infeasible) pr["infeasible"] = true;  // no waiting will help
    o["pendingReason"] = pr;
  } else if (j.state == JobState::kScheduled) {
    // Bound, and queued by a pool that schedules on its own (Slurm): why it waits there.
    for (const auto& id : j.allocations) {
      const Allocation& a = allocations_.at(id);
      if (a.attempt != j.attempt || a.state != AllocState::kAssigned || a.message.empty()) continue;
      o["pendingReason"] = {{"code", "WaitingInPool"},
                            {"message", "task " + std::to_string(a.task) + " waits on " +
                                            a.placement.node + ": " + a.message}};
      break;
    }
  }
  if (describe) {
    o["labels"] = j.spec.labels;
    o["restartPolicy"] = spec::RestartPolicyToJson(j.spec.restart);
    o["spec"] = spec::JobSpecToJson(j.spec);
    Json allocs = Json::array();
    for (const auto& id : j.allocations) allocs.push_back(AllocView(allocations_.at(id)));
    o["allocations"] = allocs;
    Json ev = Json::array();
    for (int64_t s : j.events) {
      auto it = events_.find(s);
      if (it != events_.end()) ev.push_back(EventToJson(it->second));
    }
    o["events"] = ev;
  }
  return o;
}

// ---- user API ----

StatusOr<std::vector<Json>> ControlPlane::Submit(const Principal& p, const std::string& body,
                                                 const std::string& idempotency_key,
                                                 bool* replayed) {
  if (p.role == Role::kAgent) return PermissionDenied("agent tokens may not submit jobs");
  if (frozen_) return Unavailable(kReadOnly);
  if (replayed) *replayed = false;
  const std::string& key = idempotency_key;
  if (key.size() > 255 || std::any_of(key.begin(), key.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e;
      }))
    return InvalidArgument("Idempotency-Key: at most 255 printable ASCII characters");
  // Tell the store's group commit that a transaction is being prepared (store.h).
  struct Announcement {
    store::Store* s;
    bool pending = true;
    ~Announcement() {
      if (pending) s->Withdraw();
    }
  } announcement{store_.get()};
  store_->Announce();
  const std::string digest = key.empty() ? "" : Sha256Hex(body);
  const std::string scoped = ScopedKey(p.name, key);
  if (!key.empty()) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = idempotency_.find(scoped);
    if (it != idempotency_.end()) {
      // A retry of a submission that was stored: answer as the first time, create nothing.
      // The same key with another body is a different submission that would be lost.
      std::vector<Json> out;
      for (const auto& id : it->second) {
        auto j = jobs_.find(id);
        if (j == jobs_.end() || !Visible(p, j->second))
          return AlreadyExists("Idempotency-Key: already used for another submission");
        if (!j->second.idempotency_digest.empty() && j->second.idempotency_digest != digest)
          return AlreadyExists("Idempotency-Key: already used for a different document (job " + id +
                               "); a new submission needs a new key");
        out.push_back(JobView(j->second, false));
      }
      if (replayed) *replayed = true;
      return out;
    }
    if (reserved_keys_.count(scoped))
      return Unavailable(
          "Idempotency-Key: the first submission with this key is still being "
          "stored; retry");
  }
  auto docs = spec::ParseDocuments(body);
  if (!docs.ok()) return docs.status();
  for (size_t i = 0; i < docs->size(); ++i)
    if ((*docs)[i].kind != spec::Document::Kind::kJob) {
      std::string ctx = docs->size() > 1 ? "document[" + std::to_string(i) + "]: " : "";
      const bool queue = (*docs)[i].kind == spec::Document::Kind::kQueue;
      return InvalidArgument(ctx + "kind: " + (queue ? "a Queue" : "a PriorityClass") +
                             " is not a job: create it with `tessera apply -f FILE` (POST " +
                             (queue ? "/v1/queues" : "/v1/priorityclasses") + ")");
    }
  std::vector<JobRecord> records;
  std::vector<std::string> array_names;  // the submission's arrays, reserved while stored
  std::vector<Event> events;
  std::vector<int64_t> audited;  // seqs of the audit records, dropped if the store refuses
  std::vector<store::Op> ops;
  std::future<StatusOr<store::TxnResult>> done;
  {
    std::lock_guard<std::mutex> l(mu_);
    // Checked again under the lock that reserves the key: a concurrent twin either finished
    // (the retry replays it) or is in flight.
    if (!key.empty() && (idempotency_.count(scoped) || reserved_keys_.count(scoped)))
      return Unavailable(
          "Idempotency-Key: the first submission with this key is still being "
          "stored; retry");
    std::set<std::string> seen;
    // An array (sbatch --array) is one job per index, all stored together or none: the
    // submission's jobs, each with its document's error context and the number it will get.
    std::vector<std::pair<std::string, spec::JobSpec>> specs;
    std::set<std::string> arrays_named;
    std::map<std::string, spec::Dependency> resolved;  // per document and dependency as given
    int64_t seq = next_job_seq_;
    // The name of a document that gives none: job-<its number>, with a suffix where a user
    // already chose that name (as Kubernetes' generateName: never a refusal for a name the
    // submitter did not choose).
    auto generated_name = [&](int64_t n) {
      const std::string base = "job-" + Pad(n, 6);
      std::string name = base;
      for (int k = 2; jobs_.count(name) || reserved_ids_.count(name) || array_names_.count(name) ||
                      arrays_named.count(name) || seen.count(name);
           ++k)
        name = base + "-" + std::to_string(k);
      return name;
    };
    for (size_t i = 0; i < docs->size(); ++i) {
      std::string ctx = docs->size() > 1 ? "document[" + std::to_string(i) + "]: " : "";
      spec::JobSpec& s = (*docs)[i].job;
      if (s.array_indices.empty()) {
        specs.emplace_back(ctx, std::move(s));
        ++seq;
        continue;
      }
      const std::string name = s.job.id.empty() ? generated_name(seq) : s.job.id;
      // One array per name while any of its jobs is kept: `tessera cancel NAME`, a throttle
      // and a dependency on NAME each mean one array.
      if (TakenUnseen(p, name))
        return AlreadyExists(ctx + s.origin.name + TakenUnseenMessage(name));
      if (array_names_.count(name))
        return AlreadyExists(ctx + s.origin.name + ": job array \"" + name +
                             "\" already exists; its name is free once its jobs are deleted "
                             "(`tessera delete job " +
                             name + "_<index>`)");
      if (jobs_.count(name) || reserved_ids_.count(name) || arrays_named.count(name))
        return AlreadyExists(ctx + s.origin.name + ": job \"" + name +
                             "\" exists; an array may not have a job's name (`tessera cancel " +
                             name + "` cancels every job of the array)");
      auto elements = spec::ArrayElements(s, name, seq);
      if (!elements.ok()) return InvalidArgument(ctx + elements.status().message());
      arrays_named.insert(name);
      seq += static_cast<int64_t>(elements->size());
      for (spec::JobSpec& e : *elements) specs.emplace_back(ctx, std::move(e));
    }
    for (auto& [ctx, s] : specs) {
      auto q = queues_.find(s.job.queue);
      if (q == queues_.end()) {
        std::vector<std::string> known;
        for (const auto& [name, qq] : queues_) known.push_back(name);
        return InvalidArgument(ctx + s.origin.queue + ": unknown queue \"" + s.job.queue +
                               "\" (known: " + Join(known, ", ") + ")");
      }
      if (!q->second.open)
        return FailedPrecondition(ctx + s.origin.queue + ": queue \"" + s.job.queue +
                                  "\" is closed");
      // As Volcano: jobs go to leaf queues; a parent queue only divides among its children.
      std::vector<std::string> children;
      for (const auto& [name, qq] : queues_)
        if (qq.parent == s.job.queue) children.push_back(name);
      if (!children.empty())
        return InvalidArgument(ctx + s.origin.queue + ": queue \"" + s.job.queue +
                               "\" has child queues (" + Join(children, ", ") +
                               "); jobs go to a leaf queue");
      if (!p.MayUseQueue(s.job.queue)) {
        return PermissionDenied(ctx + "token \"" + p.name + "\" may not submit to queue \"" +
                                s.job.queue + "\"");
      }
      if (const std::vector<std::string>* allowed = AllowedPriorityClasses(s.job.queue)) {
        const std::string pc =
            s.job.priority_class.empty() ? DefaultPriorityClass() : s.job.priority_class;
        if (std::find(allowed->begin(), allowed->end(), pc) == allowed->end())
          return PermissionDenied(
              ctx + s.origin.priority_class + ": priority class \"" + pc +
              "\" is not allowed in queue \"" + s.job.queue +
              "\" (allowed: " + Join(*allowed, ", ") + ")" +
              (s.job.priority_class.empty() ? "; give one of them (the default is not)" : ""));
      }
      if (!s.job.priority_class.empty() && priority_classes_.count(s.job.priority_class) == 0) {
        std::vector<std::string> known;
        for (const auto& [name, pc] : priority_classes_) known.push_back(name);
        return InvalidArgument(ctx + s.origin.priority_class + ": unknown priority class \"" +
                               s.job.priority_class + "\" (known: " + Join(known, ", ") + ")");
      }
      // As Kubernetes' Priority admission: the global default is resolved once, at submit,
      // and kept with the job; a later change of default leaves accepted jobs as they were.
      if (s.job.priority_class.empty()) s.job.priority_class = DefaultPriorityClass();
      JobRecord r;
      r.seq = next_job_seq_++;
      if (s.job.id.empty()) s.job.id = generated_name(r.seq);
      // Names are one namespace for all queues; of a job the submitter may not see, only that
      // its name is taken (not its state, nor that it is an array).
      if (TakenUnseen(p, s.job.id))
        return AlreadyExists(ctx + s.origin.name + TakenUnseenMessage(s.job.id));
      if (array_names_.count(s.job.id) || arrays_named.count(s.job.id))
        return AlreadyExists(ctx + s.origin.name + ": job array \"" + s.job.id +
                             "\" exists (its jobs are " + s.job.id +
                             "_<index>); a job may not have an array's name");
      if (auto old = jobs_.find(s.job.id); old != jobs_.end())
        return AlreadyExists(
            ctx + s.origin.name + ": job \"" + s.job.id + "\" already exists (" +
            JobStateName(old->second.state) + "); `tessera delete job " + s.job.id + "` " +
            (IsTerminal(old->second.state) ? "removes it and frees the name"
                                           : "cancels it, and removes it once it has ended"));
      if (reserved_ids_.count(s.job.id) || seen.count(s.job.id))
        return AlreadyExists(ctx + s.origin.name + ": job \"" + s.job.id + "\" already exists");
      seen.insert(s.job.id);
      // By sbatch job id (digits), else by name; an array by its name or its job id (%A), as
      // a whole, and one job of it as Slurm writes it (JOBID_INDEX).
      for (spec::Dependency& d : s.dependencies) {
        const std::string given = d.job;
        // An array's jobs share their document's dependencies: resolved once (a number is
        // looked for among every job).
        const std::string key =
            ctx + s.origin.dependency + "\n" + spec::DependencyConditionName(d.condition) + given;
        if (auto known = resolved.find(key); known != resolved.end()) {
          d = known->second;
          continue;
        }
        const auto never = [&](const std::string& ended) {
          return FailedPrecondition(ctx + s.origin.dependency + ": " + ended + ": " +
                                    spec::DependencyConditionName(d.condition) +
                                    " can never be satisfied");
        };
        int64_t array = arrays_.count(JobNumber(d.job)) ? JobNumber(d.job) : -1;
        if (auto n = array_names_.find(d.job);
            array < 0 && n != array_names_.end() && !n->second.empty() && !jobs_.count(d.job))
          array = *n->second.rbegin();
        if (array >= 0 && Visible(p, jobs_.at(arrays_.at(array).front()))) {
          d = {d.condition, jobs_.at(arrays_.at(array).front()).spec.array->name, array, true};
          if (StateOf(d, DependedOn(d)) == DependencyState::kNever)
            return never("array " + d.job + " ended so that");
          resolved[key] = d;
          continue;
        }
        if (const size_t us = d.job.find('_'); us != std::string::npos) {
          auto a = arrays_.find(JobNumber(d.job.substr(0, us)));
          const int64_t index = JobNumber(d.job.substr(us + 1));
          for (size_t e = 0; a != arrays_.end() && index >= 0 && e < a->second.size(); ++e)
            if (jobs_.at(a->second[e]).spec.array->index == index) d.job = a->second[e];
        }
        // A job of this submission given before it, or one the submitter may see.
        const int64_t id_seq = JobNumber(d.job);
        const JobRecord* on = nullptr;
        for (const JobRecord& earlier : records)
          if (earlier.seq == id_seq || (!on && earlier.id() == d.job)) on = &earlier;
        if (on == nullptr && id_seq >= 0) on = JobBySeq(id_seq);
        if (on == nullptr)
          if (auto it = jobs_.find(d.job); it != jobs_.end()) on = &it->second;
        if (on == nullptr || !Visible(p, *on))
          return InvalidArgument(ctx + s.origin.dependency + ": no job \"" + given +
                                 "\" (a job depended on must exist, or come earlier in the "
                                 "same submission)");
        d.job = on->id();
        d.seq = on->seq;
        if (StateOf(d, {on}) == DependencyState::kNever)
          return never("job \"" + d.job + "\" ended " + JobStateName(on->state));
        resolved[key] = d;
      }
      r.created_at = Now();
      r.queued_at = r.created_at;
      s.job.submit_time = r.created_at;
      r.user = p.name;
      if (s.held) r.held_by = p.name;
      r.idempotency_key = key;
      if (!key.empty()) r.idempotency_digest = digest;
      r.spec = std::move(s);
      ops.push_back(JobOp(r));
      Event e{
          next_event_seq_++,
          r.created_at,
          "Normal",
          "Submitted",
          "job/" + r.id(),
          "accepted " + r.spec.source + " into queue " + r.spec.job.queue + " by " + p.name +
              (r.held_by.empty() ? "" : ", held (`tessera release " + r.id() + "` lets it run)")};
      for (const spec::Dependency& d : r.spec.dependencies)
        e.message += ", waits for " + Awaited(d);
      ops.push_back(store::Op::Put("events/" + Pad(e.seq, 16), EventToJson(e).dump()));
      r.events.push_back(e.seq);
      events.push_back(std::move(e));
      records.push_back(std::move(r));
    }
    // (Read-only may have begun while the documents were read: checked again under the lock.)
    if (frozen_) return Unavailable(kReadOnly);
    // Audited once every document passed (a refused one refuses them all).
    for (const auto& r : records)
      audited.push_back(AddAudit(ops, p, "submit", "job/" + r.id(), "ok"));
    if (!key.empty()) reserved_keys_.insert(scoped);
    // An array's name too: a concurrent array or job of that name is refused meanwhile.
    array_names.assign(arrays_named.begin(), arrays_named.end());
    for (const std::string& name : array_names) reserved_ids_.insert(name);
    for (const auto& r : records) {
      reserved_ids_.insert(r.id());
      inflight_.insert({r.spec.job.queue, r.spec.job.priority_class});
    }
    for (const Event& e : events) events_in_flight_.insert(e.seq);
    audit_in_flight_.insert(audited.begin(), audited.end());
    // Queued under the lock: commit order = id/sequence order.
    done = store_->TxnAsyncAnnounced({}, std::move(ops));
    announcement.pending = false;
  }
  // A write the store drops unanswered (a broken promise at shutdown) is a failed one: the
  // reservations below are released either way, or the names would stay taken and the event
  // and audit listings stop below these numbers until a restart.
  StatusOr<store::TxnResult> result = Unavailable("the store dropped the write");
  try {
    result = done.get();
  } catch (const std::exception& e) {
    result = Unavailable(std::string("the store dropped the write: ") + e.what());
  }
  std::vector<Json> out;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const std::string& name : array_names) reserved_ids_.erase(name);
    for (const Event& e : events) events_in_flight_.erase(e.seq);
    for (int64_t seq : audited) audit_in_flight_.erase(seq);
    for (auto& r : records) {
      reserved_ids_.erase(r.id());
      inflight_.erase(inflight_.find({r.spec.job.queue, r.spec.job.priority_class}));
    }
    if (!key.empty()) {
      reserved_keys_.erase(scoped);
      if (result.ok())
        for (auto& r : records) idempotency_[scoped].push_back(r.id());
    }
    NoteStoreResult(result.status());
    if (!result.ok()) {
      for (int64_t seq : audited) audit_.erase(seq);
      std::fprintf(stderr, "tessera server: a submission was refused (503): the store failed: %s\n",
                   result.status().ToString().c_str());
      if (options_.on_store_error) options_.on_store_error(result.status(), false);
      return Unavailable("not stored, try again: " + result.status().message());
    }
    for (auto& e : events) events_[e.seq] = std::move(e);
    for (auto& r : records) {
      std::string id = r.id();
      auto& stored = jobs_.emplace(id, std::move(r)).first->second;
      IndexJob(stored);
      out.push_back(JobView(stored, false));
    }
  }
  Kick();
  return out;
}

void ControlPlane::NoteStoreResult(const Status& s) {
  if (s.ok()) {
    if (!store_health_.read_only) store_health_.error.clear();  // read-only until restarted
    return;
  }
  store_health_.error = s.message();
  store_health_.failed_at = Now();
  store_health_.failures += 1;
}

void ControlPlane::NoteEvictions(const std::string& reason, int64_t tasks) {
  if (tasks > 0 && options_.on_evictions) options_.on_evictions(reason, tasks);
}

std::string ControlPlane::ReadOnlyWhy() const {
  return std::string(kReadOnly) + " (" + store_health_.error + ")";
}

Json ControlPlane::HoldAnswer() const {
  return Json{{"hold", true}, {"message", ReadOnlyWhy() + ": keep tasks as they are"}};
}

ControlPlane::StoreHealth ControlPlane::store_health() const {
  std::lock_guard<std::mutex> l(mu_);
  StoreHealth h = store_health_;
  if (!h.error.empty()) h.seconds_ago = std::max<int64_t>(0, Now() - h.failed_at);
  return h;
}

const JobRecord* ControlPlane::JobBySeq(int64_t seq) const {
  for (const auto& [name, j] : jobs_)
    if (j.seq == seq) return &j;
  return nullptr;
}

bool ControlPlane::TakenUnseen(const Principal& p, const std::string& name) const {
  if (auto j = jobs_.find(name); j != jobs_.end()) return !Visible(p, j->second);
  auto a = array_names_.find(name);
  return a != array_names_.end() && !a->second.empty() &&
         !Visible(p, jobs_.at(arrays_.at(*a->second.begin()).front()));
}

std::string ControlPlane::TakenUnseenMessage(const std::string& name) {
  return ": the name \"" + name + "\" is taken by a job in a queue you cannot see; choose another";
}

std::string ControlPlane::ByJobId(const std::string& id, bool whole_array) const {
  const int64_t number = JobNumber(id);
  if (jobs_.count(id) || array_names_.count(id) || number < 0) return id;
  if (auto a = arrays_.find(number); whole_array && a != arrays_.end())
    return jobs_.at(a->second.front()).spec.array->name;  // the array, as scancel takes it
  const JobRecord* j = JobBySeq(number);
  return j ? j->id() : id;
}

StatusOr<Json> ControlPlane::GetJob(const Principal& p, const std::string& given, bool describe) {
  std::lock_guard<std::mutex> l(mu_);
  auto found = VisibleJob(p, ByJobId(given), given);
  if (!found.ok()) return found.status();
  return JobView(**found, describe);
}

StatusOr<Json> ControlPlane::ListJobs(const Principal& p, const ListOptions& o) {
  if (p.role == Role::kAgent)
    return PermissionDenied("agent tokens speak the agent protocol only; they may not list jobs");
  std::optional<JobState> want;
  if (!o.state.empty()) {
    // A filter, unlike a stored state, may be written in any case (`--state running`).
    for (int i = 0; i < 7 && !want; ++i)
      if (strcasecmp(o.state.c_str(), kJobStates[i]) == 0) want = static_cast<JobState>(i);
    if (!want)
      return InvalidArgument(
          "state: unknown \"" + o.state +
          "\" (Pending, Scheduled, Running, Terminating, Succeeded, Failed, Cancelled)");
  }
  if (o.limit == 0 || o.limit > 10000) return InvalidArgument("limit: must be 1..10000");
  std::lock_guard<std::mutex> l(mu_);
  Json items = Json::array();
  std::string last;
  bool more = false;
  const std::set<std::string> limited = ArrayTaskLimited(Now());  // once for the page
  for (auto it = o.start_after.empty() ? jobs_.begin() : jobs_.upper_bound(o.start_after);
       it != jobs_.end(); ++it) {
    const JobRecord& j = it->second;
    if (!Visible(p, j)) continue;
    if (!o.queue.empty() && j.spec.job.queue != o.queue) continue;
    if (want && j.state != *want) continue;
    if (!o.user.empty() && j.user != o.user) continue;
    if (items.size() == o.limit) {
      more = true;
      break;
    }
    items.push_back(JobView(j, false, &limited));
    last = it->first;
  }
  Json out = {{"items", items}};
  if (more) out["continue"] = last;
  return out;
}

void ControlPlane::CancelOps(std::vector<store::Op>& ops, const Principal& p, JobRecord& j) {
  if (j.state == JobState::kTerminating) {
    j.after_termination = JobState::kCancelled;
    ops.push_back(JobOp(j));
  } else {
    Terminate(ops, j, JobState::kCancelled, "Cancelling", "cancelled by " + p.name);
  }
  AddAudit(ops, p, "cancel", "job/" + j.id(), "ok");
}

StatusOr<Json> ControlPlane::Cancel(const Principal& p, const std::string& given) {
  if (p.role == Role::kAgent) return PermissionDenied("agent tokens may not cancel jobs");
  std::lock_guard<std::mutex> l(mu_);
  const std::string id = ByJobId(given, true);
  auto it = jobs_.find(id);
  if (std::vector<JobRecord*> all = VisibleArray(p, id); it == jobs_.end() && !all.empty()) {
    // A job array as a whole, as `scancel JOBID` of an array: every unfinished element, at once.
    std::vector<JobRecord*> elements;
    for (JobRecord* j : all)
      if (!IsTerminal(j->state)) elements.push_back(j);
    if (elements.empty())
      return FailedPrecondition("job array \"" + id + "\": every job of it already finished");
    std::vector<store::Op> ops;
    for (JobRecord* j : elements) CancelOps(ops, p, *j);
    TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
    Json items = Json::array();
    for (const JobRecord* j : elements) items.push_back(JobView(*j, false));
    Kick();
    return Json{{"name", id}, {"items", items}};
  }
  auto found = VisibleJob(p, id, given);
  if (!found.ok()) return found.status();
  JobRecord& j = **found;
  if (IsTerminal(j.state))
    return FailedPrecondition("job \"" + id + "\" already finished (" +
                              std::string(JobStateName(j.state)) + "); `tessera delete job " + id +
                              "` removes it and frees its name");
  std::vector<store::Op> ops;
  CancelOps(ops, p, j);
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  Json v = JobView(j, false);
  Kick();
  return v;
}

std::vector<JobRecord*> ControlPlane::VisibleArray(const Principal& p, const std::string& name) {
  std::vector<JobRecord*> out;
  if (auto named = array_names_.find(name); named != array_names_.end())
    for (int64_t array : named->second)
      for (const std::string& e : arrays_.at(array))
        if (JobRecord& j = jobs_.at(e); Visible(p, j)) out.push_back(&j);
  return out;
}

void ControlPlane::IndexJob(const JobRecord& j) {
  if (!j.spec.dependencies.empty()) with_dependencies_.insert(j.id());
  if (!j.spec.array) return;
  arrays_[j.spec.array->job_id].push_back(j.id());
  array_names_[j.spec.array->name].insert(j.spec.array->job_id);
}

std::set<std::string> ControlPlane::ArrayTaskLimited(int64_t now, int64_t array) const {
  std::set<std::string> out;
  for (auto it = array ? arrays_.find(array) : arrays_.begin();
       it != arrays_.end() && (!array || it->first == array); ++it) {
    const int32_t limit = jobs_.at(it->second.front()).spec.array->throttle;
    if (limit <= 0) continue;
    int32_t taken = 0;  // elements that run, then those the engine may place
    for (const std::string& id : it->second) {
      const JobState st = jobs_.at(id).state;
      if (st == JobState::kScheduled || st == JobState::kRunning || st == JobState::kTerminating)
        ++taken;
    }
    for (const std::string& id : it->second) {
      const JobRecord& e = jobs_.at(id);
      if (e.state != JobState::kPending || *HeldBack(e, now)) continue;
      if (taken < limit)
        ++taken;
      else
        out.insert(id);
    }
  }
  return out;
}

StatusOr<Json> ControlPlane::Hold(const Principal& p, const std::string& given, bool hold) {
  const char* verb = hold ? "hold" : "release";
  if (p.role == Role::kAgent)
    return PermissionDenied(std::string("agent tokens may not ") + verb + " jobs");
  std::lock_guard<std::mutex> l(mu_);
  const std::string id = ByJobId(given, true);
  auto it = jobs_.find(id);
  std::vector<store::Op> ops;
  // Records `j` held (by p) or released, with its event and audit.
  auto change = [&](JobRecord& j) {
    const std::string before = j.held_by;
    j.held_by = hold ? p.name : "";
    // Its wait (queue-wait figures) counts from its release: the hold was the user's choice.
    if (!hold) j.queued_at = std::max(j.queued_at, Now());
    ops.push_back(JobOp(j));
    AddEvent(ops, "Normal", hold ? "Held" : "Released", "job/" + j.id(),
             hold ? "held by " + p.name + ": not scheduled until `tessera release " + j.id() + "`"
                  : "released by " + p.name + " (held by " + before + ")");
    AddAudit(ops, p, verb, "job/" + j.id(), "ok");
  };
  if (std::vector<JobRecord*> all = VisibleArray(p, id); it == jobs_.end() && !all.empty()) {
    // A job array as a whole (scontrol hold/release of an array): its pending elements not
    // held yet / its held ones.
    Json items = Json::array();
    std::vector<JobRecord*> changed;
    for (JobRecord* j : all)
      if (j->state == JobState::kPending && j->held_by.empty() == hold) changed.push_back(j);
    if (changed.empty())
      return FailedPrecondition(
          "job array \"" + id +
          "\": " + (hold ? "no job of it is pending and not held" : "no job of it is held"));
    for (JobRecord* j : changed) change(*j);
    TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
    for (const JobRecord* j : changed) items.push_back(JobView(*j, false));
    if (!hold) Kick();
    return Json{{"name", id}, {"items", items}};
  }
  auto found = VisibleJob(p, id, given);
  if (!found.ok()) return found.status();
  JobRecord& j = **found;
  if (hold && j.state != JobState::kPending)
    return FailedPrecondition(
        "job \"" + id + "\" is " + JobStateName(j.state) + ": only a pending job can be held" +
        (IsTerminal(j.state) ? std::string() : " (`tessera cancel " + id + "` stops it)"));
  if (!hold && (j.held_by.empty() || j.state != JobState::kPending))
    return FailedPrecondition("job \"" + id + "\" is not held");
  if (hold && !j.held_by.empty()) return JobView(j, false);  // held already: nothing to do
  change(j);
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  Json v = JobView(j, false);
  if (!hold) Kick();
  return v;
}

StatusOr<Json> ControlPlane::Scale(const Principal& p, const std::string& given, int64_t replicas) {
  if (p.role == Role::kAgent) return PermissionDenied("agent tokens may not scale jobs");
  if (replicas < 0 || replicas > spec::kMaxTasksPerJob)
    return InvalidArgument("replicas: must be 0.." + std::to_string(spec::kMaxTasksPerJob) +
                           " (the tasks a job may have), got " + std::to_string(replicas));
  std::lock_guard<std::mutex> l(mu_);
  const std::string id = ByJobId(given);
  auto found = VisibleJob(p, id, given);
  if (!found.ok()) return found.status();
  JobRecord& j = **found;
  Job& job = j.spec.job;
  // A Deployment is one task group of independent replicas; a gang's size is part of what
  // its program was written for, so only Deployments scale (as kubectl scale).
  if (j.spec.source != "apps/v1 Deployment" || job.groups.size() != 1)
    return InvalidArgument("job \"" + id + "\" is not a Deployment (submitted as " + j.spec.source +
                           "): only a Deployment (apps/v1) scales");
  if (IsTerminal(j.state))
    return FailedPrecondition("job \"" + id + "\" already finished (" + JobStateName(j.state) +
                              "): submit it again to run it");
  if (j.state == JobState::kTerminating && IsTerminal(j.after_termination))
    return FailedPrecondition("job \"" + id + "\" is being stopped (" +
                              JobStateName(j.after_termination) + ")");
  const int32_t from = job.TaskCount(), to = static_cast<int32_t>(replicas);
  if (to == from) return JobView(j, false);  // nothing to do
  job.groups[0].replicas = to;
  std::vector<store::Op> ops;
  std::vector<std::string> stopped;
  for (const auto& aid : j.allocations) {
    Allocation& a = allocations_.at(aid);
    if (a.task < to || (a.state != AllocState::kAssigned && a.state != AllocState::kRunning))
      continue;
    a.message = "scaled down to " + std::to_string(to) + " replica(s) by " + p.name;
    StopAllocation(ops, a);
    stopped.push_back(std::to_string(a.task));
  }
  // A replica scaled away does not come back after its back-off; one scaled up again later is
  // a new replica, placed at once.
  std::erase_if(j.task_backoff, [&](const auto& e) { return e.first >= to; });
  j.pending = {};  // the next cycle says what the replicas it has now wait for, if any
  j.infeasible = false;
  ops.push_back(JobOp(j));
  AddEvent(ops, "Normal", "Scaled", "job/" + id,
           "scaled from " + std::to_string(from) + " to " + std::to_string(to) + " replicas by " +
               p.name + (stopped.empty() ? "" : "; stopping replica(s) " + Join(stopped, ", ")));
  AddAudit(ops, p, "scale", "job/" + id, "ok");
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  Json v = JobView(j, false);
  Kick();
  return v;
}

StatusOr<Json> ControlPlane::ListEvents(const Principal& p, const std::string& job, int64_t after,
                                        size_t limit, const std::string& given,
                                        const std::string& type) {
  if (limit == 0 || limit > 10000) return InvalidArgument("limit: must be 1..10000");
  if (!type.empty() && type != "Normal" && type != "Warning")
    return InvalidArgument("type: \"" + type + "\" is not an event type (Normal, Warning)");
  // KIND/NAME as kubectl takes it: the kind in any case, singular or plural (Node/x, nodes/x).
  std::string object;
  if (!given.empty()) {
    const size_t slash = given.find('/');
    std::string kind = given.substr(0, slash);
    for (char& c : kind) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (kind.ends_with("s")) kind.pop_back();
    if (slash == std::string::npos || slash + 1 == given.size() ||
        (kind != "job" && kind != "node"))
      return InvalidArgument("object: \"" + given +
                             "\": expected KIND/NAME, KIND job or node (node/gpu-node-1, job/x)");
    object = kind + given.substr(slash);
  }
  // One job's events are indexed with it; kubectl's --for job/x is the same.
  const std::string of_job = !job.empty()                   ? job
                             : object.rfind("job/", 0) == 0 ? object.substr(4)
                                                            : "";
  std::lock_guard<std::mutex> l(mu_);
  Json items = Json::array();
  auto wanted = [&](const Event& e) {
    if (!type.empty() && e.type != type) return false;
    if (!object.empty() && e.object != object) return false;
    if (e.object.rfind("job/", 0) != 0) return true;
    auto it = jobs_.find(e.object.substr(4));
    return it != jobs_.end() && Visible(p, it->second);
  };
  const int64_t below = PublishedBelow(events_in_flight_);
  if (!of_job.empty()) {
    auto found = VisibleJob(p, of_job, of_job);
    if (!found.ok()) return found.status();
    for (int64_t s : (*found)->events)
      if (const Event& e = events_.at(s);
          s > after && s < below && items.size() < limit && wanted(e))
        items.push_back(EventToJson(e));
  } else {
    for (auto it = events_.upper_bound(after);
         it != events_.end() && it->first < below && items.size() < limit; ++it)
      if (wanted(it->second)) items.push_back(EventToJson(it->second));
  }
  int64_t next = items.empty() ? after : items.back()["seq"].get<int64_t>();
  return Json{{"items", items}, {"next", next}};
}

int64_t ControlPlane::ChargedGpuMilli(const Job& job,
                                      const std::vector<const TaskAllocation*>& placed) const {
  int64_t milli = 0;
  std::set<std::string> whole;  // nodes charged whole
  for (const TaskAllocation* a : placed) {
    auto n = nodes_.find(a->node);
    milli += n == nodes_.end() ? a->GpuMilli()
                               : ChargeOf(*a, n->second.node, job.exclusive,
                                          job.exclusive && whole.insert(n->first).second)
                                     .gpu_milli;
  }
  return milli;
}

Json ControlPlane::ListQueues(const Principal& p) {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, std::array<int64_t, 4>>
      stats;  // pending, running, gpu milli in use, jobs total
  for (const auto& [id, j] : jobs_) {
    auto& s = stats[j.spec.job.queue];
    if (j.state == JobState::kPending) s[0]++;
    if (j.state == JobState::kRunning || j.state == JobState::kScheduled) s[1]++;
    s[3]++;
  }
  std::map<std::string, std::vector<const TaskAllocation*>> held;  // by job
  for (const auto& [id, a] : allocations_)
    if (a.HoldsDevices() && !WrittenOff(a)) held[a.job].push_back(&a.placement);
  const std::vector<Binding> kept = KeptInBackoff();  // as the scheduler counts them
  for (const Binding& b : kept) held[b.job].push_back(&b.allocation);
  for (const auto& [job, allocs] : held) {
    auto j = jobs_.find(job);
    if (j == jobs_.end()) continue;
    stats[j->second.spec.job.queue][2] += ChargedGpuMilli(j->second.spec.job, allocs);
  }
  // A parent queue's figures include its children's, as the engine counts a parent's use
  // against its limit (jobs are in leaf queues only).
  std::map<std::string, std::array<int64_t, 4>> leaf = stats;
  for (const auto& [name, s] : leaf)
    for (const std::string& ancestor : QueueAncestors(queues_, name)) {
      auto& up = stats[ancestor];
      for (size_t i = 0; i < up.size(); ++i) up[i] += s[i];
    }
  Json items = Json::array();
  for (const auto& [name, q] : queues_) {
    Json o = QueueToJson(q);
    auto s = stats[name];
    o["pendingJobs"] = s[0];
    o["runningJobs"] = s[1];
    o["gpuMilliInUse"] = s[2];
    o["jobs"] = s[3];
    o["member"] = p.MayUseQueue(name);
    items.push_back(o);
  }
  return {{"items", items}};
}

Json ControlPlane::ListPriorityClasses() {
  std::lock_guard<std::mutex> l(mu_);
  Json items = Json::array();
  for (const auto& [name, pc] : priority_classes_)
    items.push_back({{"name", name},
                     {"value", pc.value},
                     {"preemptionPolicy", pc.preempt_lower ? "PreemptLowerPriority" : "Never"},
                     {"globalDefault", pc.global_default}});
  return {{"items", items}};
}

Json ControlPlane::ListNodes(const Principal& p, bool with_allocations) {
  std::lock_guard<std::mutex> l(mu_);
  // What holds each node's devices, without the command and environment (secrets live
  // there; describe shows them to whoever may see the job). Another queue's allocation is
  // shown as capacity in use only: where, which task, in what state; named fields kept, so
  // that a field added to allocations later is not shown to other tenants by default.
  auto view = [&](const Allocation& a) {
    Json o = AllocView(a);
    for (const char* k : {"command", "script", "env", "workingDir", "stdoutFile", "stderrFile"})
      o.erase(k);
    auto j = jobs_.find(a.job);
    if (j != jobs_.end() && Visible(p, j->second)) return o;
    Json capacity = Json::object();
    for (const char* k : {"task", "state", "placement"}) capacity[k] = o[k];
    return capacity;
  };
  std::map<std::string, std::vector<const Allocation*>> by_node;
  for (const auto& [id, a] : allocations_)
    if (a.HoldsDevices()) by_node[a.placement.node].push_back(&a);
  // Devices a task restarting alone keeps during its back-off are in use, as the scheduler
  // counts them: shown as its last allocation, state "BackingOff".
  std::map<std::string, std::vector<std::pair<const Binding*, const Allocation*>>> kept_on;
  const std::vector<Binding> kept = KeptInBackoff();
  for (const Binding& b : kept) {
    kept_on[b.allocation.node].push_back({&b, LatestAllocation(jobs_.at(b.job), b.task)});
  }
  Json items = Json::array();
  for (const auto& [name, n] : nodes_) {
    Json o = NodeToJson(n.node);
    if (n.cordoned) o["unschedulable"] = true;
    o["ready"] = n.node.ready;
    o["epoch"] = n.epoch;
    // Not the restart's stand-in: nobody has heard from the node since then.
    if (n.heard_since_start) o["lastHeartbeat"] = n.last_heartbeat;
    o["agentVersion"] = n.agent_version;
    // In use as queues are charged: a node an exclusive job holds is taken whole.
    int64_t used = 0;
    Json allocs = Json::array();
    std::map<std::string, std::vector<const TaskAllocation*>> by_job;
    for (const Allocation* a : by_node[name]) {
      by_job[a->job].push_back(&a->placement);
      if (with_allocations) allocs.push_back(view(*a));
    }
    for (const auto& [b, last] : kept_on[name]) {
      by_job[b->job].push_back(&b->allocation);
      if (!with_allocations || last == nullptr) continue;
      Json o = view(*last);
      o["state"] = "BackingOff";
      allocs.push_back(o);
    }
    static const tessera::Job kShared;
    for (const auto& [job, held] : by_job) {
      auto j = jobs_.find(job);
      const tessera::Job& spec = j != jobs_.end() ? j->second.spec.job : kShared;
      // What its tasks occupy (a node never reads over capacity): an exclusive job the
      // whole node, a fraction its compute, not the memory share it is charged.
      if (spec.exclusive) {
        used += ChargedGpuMilli(spec, held);
      } else {
        for (const TaskAllocation* a : held) used += a->GpuMilli();
      }
    }
    o["gpus"] = static_cast<int64_t>(n.node.devices.size());
    o["gpuMilliInUse"] = used;
    o["virtual"] = std::any_of(n.node.devices.begin(), n.node.devices.end(),
                               [](const Device& d) { return d.is_virtual; });
    if (with_allocations) o["allocations"] = allocs;
    items.push_back(o);
  }
  return {{"items", items}};
}

StatusOr<Json> ControlPlane::CordonNode(const Principal& p, const std::string& name, bool cordon) {
  if (!p.IsAdmin()) return PermissionDenied("only an admin may cordon or uncordon a node");
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return NotFound("node \"" + name + "\" not found");
  NodeRecord& n = it->second;
  std::vector<store::Op> ops;
  const bool changed = n.cordoned != cordon;
  if (changed) {
    n.cordoned = cordon;
    ops.push_back(NodeOp(n));
    AddEvent(ops, "Normal", cordon ? "NodeCordoned" : "NodeUncordoned", "node/" + name,
             (cordon ? "no new tasks (cordoned by " : "schedulable again (uncordoned by ") +
                 p.name + ")");
    AddAudit(ops, p, cordon ? "cordon" : "uncordon", "node/" + name, "ok");
  }
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  Kick();
  // `changed`: false when it already was (kubectl says "already cordoned").
  return Json{
      {"name", name}, {"unschedulable", n.cordoned || n.node.unschedulable}, {"changed", changed}};
}

StatusOr<Json> ControlPlane::DrainNode(const Principal& p, const std::string& name) {
  if (!p.IsAdmin()) return PermissionDenied("only an admin may drain a node");
  auto c = CordonNode(p, name, true);
  if (!c.ok()) return c.status();
  std::lock_guard<std::mutex> l(mu_);
  std::set<std::string> affected;
  int64_t tasks = 0;
  for (const Allocation* a : AllocationsOn(name))  // (a replica scaled away stops already)
    if (a->Live() && !ScaledAway(*a)) affected.insert(a->job), ++tasks;
  std::vector<store::Op> ops;
  Json evicted = Json::array();
  for (const auto& jid : affected) {
    auto j = jobs_.find(jid);
    if (j == jobs_.end()) continue;
    OnTaskLoss(ops, j->second, true, "Drained", "node " + name + " is being drained by " + p.name);
    evicted.push_back(jid);
  }
  if (!affected.empty()) AddAudit(ops, p, "drain", "node/" + name, "ok");
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  NoteEvictions("Drained", tasks);
  Kick();
  return Json{
      {"name", name}, {"unschedulable", true}, {"changed", (*c)["changed"]}, {"evicted", evicted}};
}

StatusOr<Json> ControlPlane::DeleteNode(const Principal& p, const std::string& name) {
  if (!p.IsAdmin()) return PermissionDenied("only an admin may delete a node");
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(name);
  if (it == nodes_.end()) return NotFound("node \"" + name + "\" not found");
  if (it->second.node.ready)
    return FailedPrecondition("node " + name +
                              " is Ready (its agent heartbeats): drain it and stop its agent "
                              "first; a node is deleted once it is NotReady");
  // Its agent is gone: what it ran is presumed stopped (a returning agent kills what it
  // holds, as no allocation of it is desired any more).
  std::vector<store::Op> ops;
  std::set<std::string> affected;
  int64_t released = 0;
  for (Allocation* each : AllocationsOn(name)) {
    Allocation& a = *each;
    if (!a.HoldsDevices()) continue;
    a.state = AllocState::kKilled;
    a.finished_at = Now();
    a.message = "node " + name + " deleted by " + p.name;
    ops.push_back(AllocOp(a));
    affected.insert(a.job);
    ++released;
  }
  for (const auto& jid : affected) {
    auto j = jobs_.find(jid);
    if (j != jobs_.end()) MaybeFinishTermination(ops, j->second);
  }
  ops.push_back(store::Op::Delete("nodes/" + name));
  AddEvent(ops, "Normal", "NodeDeleted", "node/" + name,
           "deleted by " + p.name + "; " + std::to_string(released) +
               " task(s) it held were written off");
  AddAudit(ops, p, "delete", "node/" + name, "ok");
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  nodes_.erase(it);
  Kick();
  return Json{{"name", name}, {"deleted", true}, {"released", released}};
}

Json ControlPlane::ListPools() {
  std::lock_guard<std::mutex> l(mu_);
  std::map<std::string, std::array<int64_t, 4>> pools;  // nodes, ready, gpus, down
  for (const auto& [name, n] : nodes_) {
    auto& p = pools[n.node.pool];
    p[0]++;
    if (n.node.ready) p[1]++;
    p[2] += static_cast<int64_t>(n.node.devices.size());
    if (n.node.labels.count("pool.down")) p[3]++;  // down in the pool's own system (Slurm)
  }
  Json items = Json::array();
  for (const auto& [name, p] : pools) {
    auto b = backends_.find(name);
    items.push_back({{"name", name},
                     {"backend", (b == backends_.end() ? default_backend_ : b->second)->Kind()},
                     {"nodes", p[0]},
                     {"readyNodes", p[1]},
                     {"downNodes", p[3]},
                     {"gpus", p[2]}});
  }
  return {{"items", items}};
}

StatusOr<Json> ControlPlane::ListAudit(const Principal& p, int64_t after, size_t limit) {
  if (!p.IsAdmin()) return PermissionDenied("only an admin may read the audit log");
  if (limit == 0 || limit > 10000) return InvalidArgument("limit: must be 1..10000");
  std::lock_guard<std::mutex> l(mu_);
  Json items = Json::array();
  const int64_t below = PublishedBelow(audit_in_flight_);
  for (auto it = audit_.upper_bound(after);
       it != audit_.end() && it->first < below && items.size() < limit; ++it) {
    items.push_back(AuditJson(it->second));
  }
  // As events: where the next page begins (pass it as `after`), and whether there is one.
  int64_t next = items.empty() ? after : items.back()["seq"].get<int64_t>();
  return Json{{"items", items}, {"next", next}, {"more", audit_.upper_bound(next) != audit_.end()}};
}

StatusOr<std::vector<Json>> ControlPlane::Apply(const Principal& p, const std::string& body,
                                                bool bootstrap) {
  if (!p.IsAdmin()) return PermissionDenied("only an admin may create queues and priority classes");
  auto docs = spec::ParseDocuments(body);
  if (!docs.ok()) return docs.status();
  std::lock_guard<std::mutex> l(mu_);
  std::vector<store::Op> ops;
  std::vector<Json> out;
  std::map<std::string, Queue> queues = queues_;
  std::map<std::string, PriorityClass> pcs = priority_classes_;
  std::vector<std::string> applied;  // audited once every check has passed
  // The --bootstrap folder is applied at every start: a change made here would be undone by
  // the next one, without a word.
  auto declared = [&](size_t doc, const std::string& key) -> Status {
    if (bootstrap || !declared_.count(key)) return Status::Ok();
    return FailedPrecondition(
        (docs->size() > 1 ? "document[" + std::to_string(doc) + "]: " : std::string()) +
        key.substr(0, key.find('/')) + " \"" + key.substr(key.find('/') + 1) +
        "\" is declared in the --bootstrap folder, applied at every start: change it there (a "
        "change applied here would be undone at the next start)");
  };
  // What apply did to each object, as `kubectl apply` says it.
  auto report = [&out](const char* kind, const std::string& name, bool existed, bool same) {
    out.push_back({{"kind", kind},
                   {"name", name},
                   {"action", !existed ? "created"
                              : same   ? "unchanged"
                                       : "configured"}});
  };
  for (size_t i = 0; i < docs->size(); ++i) {
    const spec::Document& d = (*docs)[i];
    if (d.kind == spec::Document::Kind::kQueue) {
      const Queue& q = d.queue;
      // (A bootstrap that fails stops the server's start, so this needs no undo.)
      if (bootstrap) declared_.insert("queue/" + q.name);
      auto old = queues.find(q.name);
      const bool same =
          old != queues.end() && QueueToJson(old->second).dump() == QueueToJson(q).dump();
      report("Queue", q.name, old != queues.end(), same);
      if (same) continue;
      TESSERA_RETURN_IF_ERROR(declared(i, "queue/" + q.name));
      queues[q.name] = q;
      ops.push_back(store::Op::Put("queues/" + q.name, QueueToJson(q).dump()));
      applied.push_back("queue/" + q.name);
    } else if (d.kind == spec::Document::Kind::kPriorityClass) {
      const PriorityClass& pc = d.priority_class;
      Json j = {{"name", pc.name},
                {"value", pc.value},
                {"preemptionPolicy", pc.preempt_lower ? "PreemptLowerPriority" : "Never"},
                {"globalDefault", pc.global_default}};
      if (bootstrap) declared_.insert("priorityclass/" + pc.name);
      auto old = pcs.find(pc.name);
      const bool same = old != pcs.end() && old->second.value == pc.value &&
                        old->second.preempt_lower == pc.preempt_lower &&
                        old->second.global_default == pc.global_default;
      report("PriorityClass", pc.name, old != pcs.end(), same);
      if (same) continue;
      TESSERA_RETURN_IF_ERROR(declared(i, "priorityclass/" + pc.name));
      pcs[pc.name] = pc;
      ops.push_back(store::Op::Put("pcs/" + pc.name, j.dump()));
      applied.push_back("priorityclass/" + pc.name);
    } else if (!bootstrap) {
      // Named as ParseDocuments names a document's errors; nothing of the text is applied.
      return InvalidArgument(
          (docs->size() > 1 ? "document[" + std::to_string(i) + "]: " : std::string()) +
          "kind: a job (" + d.job.source +
          (d.job.job.id.empty() ? std::string() : " \"" + d.job.job.id + "\"") +
          ") is submitted with `tessera submit` (POST /v1/jobs); apply takes Queue and "
          "PriorityClass documents and applied nothing of this text");
    }
  }
  {
    std::vector<Queue> before, after;
    for (const auto& [name, q] : queues_) before.push_back(q);
    for (const auto& [name, q] : queues) after.push_back(q);
    // A parent chain that comes back to the queue: no tree (and no end to a walk up it).
    TESSERA_RETURN_IF_ERROR(CheckQueueParents(after, "spec.parent"));
    // Refused: what this apply makes the tree promise that it cannot. (A tree stored by an
    // earlier version may already break the rule: that is logged at start, and does not
    // stop other applies.)
    const auto old_violations = QueueGuaranteeViolations(before);
    for (const std::string& v : QueueGuaranteeViolations(after))
      if (std::find(old_violations.begin(), old_violations.end(), v) == old_violations.end())
        return InvalidArgument(v);
  }
  // A queue that becomes a parent must hold no unfinished job (jobs go to leaf queues).
  std::map<std::string, std::string> new_parents;  // parent -> a new child
  for (const auto& [name, q] : queues)
    if (!q.parent.empty()) {
      bool had_children = false;
      for (const auto& [n, old] : queues_) had_children |= old.parent == q.parent;
      if (!had_children) new_parents.emplace(q.parent, name);
    }
  if (!new_parents.empty()) {
    for (const auto& [id, j] : jobs_) {
      auto it = new_parents.find(j.spec.job.queue);
      if (it == new_parents.end() || IsTerminal(j.state)) continue;
      return FailedPrecondition("queue " + it->second + ": spec.parent: queue \"" + it->first +
                                "\" holds unfinished jobs (" + id +
                                " is one); a parent queue takes no jobs: let them finish or "
                                "cancel them first");
    }
    // Checked as a leaf under this lock, then stored without it: it will hold that job.
    for (const auto& [queue, pc] : inflight_)
      if (auto it = new_parents.find(queue); it != new_parents.end())
        return FailedPrecondition("queue " + it->second + ": spec.parent: queue \"" + it->first +
                                  "\" is taking a submission that is being stored; a parent "
                                  "queue takes no jobs");
  }
  // One global default at most, as Kubernetes: with two, which one a job gets is a guess.
  const PriorityClass* global = nullptr;
  for (const auto& [name, pc] : pcs) {
    if (!pc.global_default) continue;
    if (global != nullptr) {
      const bool second_is_new =
          priority_classes_.count(name) == 0 || !priority_classes_.at(name).global_default;
      const std::string& added = second_is_new ? name : global->name;
      const std::string& kept = second_is_new ? global->name : name;
      return InvalidArgument("priorityclass " + added + ": globalDefault: \"" + kept +
                             "\" is the global default already (only one may be; set its "
                             "globalDefault to false first)");
    }
    global = &pc;
  }
  // A queue's allowed priority classes exist (a typo would refuse every job of the queue).
  for (const auto& [name, q] : queues)
    for (const std::string& pc : q.priority_classes)
      if (!pcs.count(pc)) {
        std::vector<std::string> known;
        for (const auto& [k, v] : pcs) known.push_back(k);
        return InvalidArgument("queue " + name + ": priorityClasses: unknown priority class \"" +
                               pc + "\" (known: " + Join(known, ", ") + ")");
      }
  for (const std::string& object : applied) AddAudit(ops, p, "apply", object, "ok");
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  queues_ = std::move(queues);
  priority_classes_ = std::move(pcs);
  return out;
}

StatusOr<ControlPlane::LogsSource> ControlPlane::LogsSourceOf(const Principal& p,
                                                              const std::string& given,
                                                              int32_t task,
                                                              const std::string& allocation,
                                                              const std::string& stream) {
  std::lock_guard<std::mutex> l(mu_);
  const std::string id = ByJobId(given);
  auto found = VisibleJob(p, id, given);
  if (!found.ok()) return found.status();
  const JobRecord& j = **found;
  if (task < 0 || task >= j.spec.job.TaskCount())
    return InvalidArgument("task: job \"" + id + "\" has " +
                           std::to_string(j.spec.job.TaskCount()) + " task(s)");
  const Allocation* a = nullptr;
  for (const auto& aid : j.allocations) {
    const Allocation& x = allocations_.at(aid);
    if (x.task == task && (allocation.empty() || x.id == allocation)) a = &x;
  }
  LogsSource out;
  if (a == nullptr) {
    if (!allocation.empty())
      return NotFound("allocation \"" + allocation + "\" is not job \"" + id + "\" task " +
                      std::to_string(task));
    out.ended = IsTerminal(j.state);  // finished (cancelled) before it was ever placed
    return out;
  }
  out.placed = true;
  out.allocation = a->id;
  out.ended = !a->Live();
  auto n = nodes_.find(a->placement.node);
  if (n != nodes_.end()) {
    // A pool whose nodes run no agent may name a file the server reads (Slurm).
    if (auto b = backends_.find(n->second.node.pool); b != backends_.end()) {
      auto file = b->second->LogFile(
          j.spec, Dispatch{a->id, a->job, a->task, a->attempt, a->placement}, stream);
      if (!file.ok()) return file.status();
      if (!file->empty()) {
        out.file = *file;
        return out;
      }
    }
  }
  if (n == nodes_.end() || n->second.logs_url.empty())
    return Unavailable("node " + a->placement.node + " serves no logs");
  out.url = n->second.logs_url;
  out.token = n->second.logs_token;
  out.agent_unheard = !n->second.heard_since_start;
  return out;
}

// ---- lifecycle ----

void ControlPlane::StopAllocation(std::vector<store::Op>& ops, Allocation& a) {
  a.state = AllocState::kStopping;
  ops.push_back(AllocOp(a));
  auto b =
      backends_.find(nodes_.count(a.placement.node) ? nodes_.at(a.placement.node).node.pool : "");
  std::shared_ptr<Backend> be = b == backends_.end() ? default_backend_ : b->second;
  after_commit_.push_back([be, id = a.id, grace = a.grace_period_seconds] { be->Stop(id, grace); });
}

void ControlPlane::Terminate(std::vector<store::Op>& ops, JobRecord& j, JobState next,
                             const std::string& reason, const std::string& message) {
  bool any = false;
  for (const auto& id : j.allocations) {
    Allocation& a = allocations_.at(id);
    if (a.state == AllocState::kAssigned || a.state == AllocState::kRunning) {
      a.message = message;  // why, for the allocation's view (the agent knows only that)
      StopAllocation(ops, a);
    }
    if (a.Live()) any = true;
  }
  j.state = JobState::kTerminating;
  j.after_termination = next;
  j.message = message;
  // Not over while a task written off with a silent node may still run there.
  if (next != JobState::kPending && FenceHolds(j))
    j.message += "; a task on node " + j.fenced_node + ", which stopped answering, may run " +
                 "until its agent stops it (lease and grace period): ending in " +
                 std::to_string(j.fenced_until - Now()) + " s at the latest";
  // A failed task is worth a warning also when the job restarts (docs/lifecycle.md).
  const bool warn =
      next == JobState::kCancelled || next == JobState::kFailed || reason == "TaskFailed";
  AddEvent(ops, warn ? "Warning" : "Normal", reason, "job/" + j.id(), j.message);
  if (any || !MaybeFinishTermination(ops, j)) ops.push_back(JobOp(j));
}

bool ControlPlane::ScaledAway(const Allocation& a) const {
  auto j = jobs_.find(a.job);
  return j != jobs_.end() && a.task >= j->second.spec.job.TaskCount();
}

int32_t ControlPlane::RunningTasks(const JobRecord& j) const {
  int32_t running = 0;
  for (const auto& id : j.allocations)
    if (const Allocation& a = allocations_.at(id);
        a.attempt == j.attempt && a.state == AllocState::kRunning)
      ++running;
  return running;
}

const Allocation* ControlPlane::StillHolding(const JobRecord& j) const {
  for (const auto& id : j.allocations)
    if (const Allocation& a = allocations_.at(id); a.HoldsDevices()) return &a;
  return nullptr;
}

bool ControlPlane::FenceHolds(const JobRecord& j) const {
  if (j.fenced_until <= Now()) return false;
  for (const auto& id : j.allocations)
    if (allocations_.at(id).state == AllocState::kLost) return true;
  return false;
}

bool ControlPlane::WrittenOff(const Allocation& a) const {
  if (a.state != AllocState::kLost) return false;
  if (auto n = nodes_.find(a.placement.node); n != nodes_.end() && n->second.node.ready)
    return false;
  auto j = jobs_.find(a.job);
  return j == jobs_.end() || !FenceHolds(j->second);
}

// The attempt's GPU time joins the service of the earlier ones: a requeued job keeps its
// place in least-attained-service order. Each allocation of the attempt (RestartTask adds
// one per restart) counts its devices' milli for as long as it held them, from its binding
// to the end of its termination (now for one still holding them, e.g. lost with its node),
// a fraction of a device as it is charged (DeviceCharge); an exclusive job counts each node
// whole while any of its tasks held it.
int64_t ControlPlane::AttemptService(const JobRecord& j, int64_t now) const {
  if (j.run_started_at < 0) return 0;
  int64_t milli_seconds = 0;
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> exclusive;  // node: spans
  for (const auto& id : j.allocations) {
    const Allocation& a = allocations_.at(id);
    if (a.attempt != j.attempt) continue;
    const int64_t from = std::max(a.created_at, j.run_started_at);
    const int64_t to = a.HoldsDevices() || a.finished_at <= 0 ? now : std::min(a.finished_at, now);
    if (to <= from) continue;
    auto n = nodes_.find(a.placement.node);
    if (j.spec.job.exclusive && n != nodes_.end())
      exclusive[a.placement.node].push_back({from, to});
    else  // (a fraction of a device: its charge, DeviceCharge, as for queues)
      milli_seconds +=
          (to - from) * (n == nodes_.end()
                             ? a.placement.GpuMilli()
                             : ChargeOf(a.placement, n->second.node, false, false).gpu_milli);
  }
  for (auto& [node, spans] : exclusive) {
    std::sort(spans.begin(), spans.end());
    int64_t held = 0, covered = spans.front().first;  // the spans' union
    for (const auto& [from, to] : spans) {
      held += std::max<int64_t>(0, to - std::max(from, covered));
      covered = std::max(covered, to);
    }
    milli_seconds += held * HealthyGpuMilli(nodes_.at(node).node);
  }
  return milli_seconds;
}

void ControlPlane::EndAttempt(JobRecord& j) {
  if (j.run_started_at < 0) return;
  j.attained_gpu_milli_seconds += AttemptService(j, Now());
  j.run_started_at = -1;
  j.attempt_started_at = -1;
}

bool ControlPlane::MaybeFinishTermination(std::vector<store::Op>& ops, JobRecord& j) {
  if (j.state != JobState::kTerminating) return false;
  for (const auto& id : j.allocations)
    if (allocations_.at(id).Live()) return false;
  JobState next = j.after_termination;
  if (next != JobState::kPending && FenceHolds(j)) return false;
  EndAttempt(j);
  j.task_backoff.clear();  // a new attempt places every task at once
  if (next == JobState::kPending) {
    j.attempt += 1;
    j.state = JobState::kPending;
    j.queued_at = Now();
    j.pending = {};
    j.infeasible = false;
    j.last_failed_scheduling.clear();
    AddEvent(ops, "Normal", "Requeued", "job/" + j.id(),
             "attempt " + std::to_string(j.attempt) + " is pending");
  } else {
    j.state = next;
    j.finished_at = Now();
    const char* reason = next == JobState::kSucceeded ? "Completed"
                         : next == JobState::kFailed  ? "Failed"
                                                      : "Cancelled";
    AddEvent(ops, next == JobState::kSucceeded ? "Normal" : "Warning", reason, "job/" + j.id(),
             j.message);
  }
  ops.push_back(JobOp(j));
  return true;
}

void ControlPlane::OnTaskLoss(std::vector<store::Op>& ops, JobRecord& j, bool eviction,
                              const std::string& reason, const std::string& message, int32_t task,
                              std::optional<int32_t> exit_code) {
  if (j.state == JobState::kTerminating) {
    MaybeFinishTermination(ops, j);
    return;
  }
  if (IsTerminal(j.state) || j.state == JobState::kPending) return;
  // The failed task's group may have its own policy (Volcano tasks[].policies).
  const spec::RestartPolicy& policy = j.spec.RestartFor(task);
  spec::FailureAction action = eviction ? policy.on_eviction : policy.OnFailure(exit_code);
  // An eviction takes the gang as a whole (the engine evicts jobs, not tasks), except a
  // service's replica lost with its node (CheckNodes).
  if (eviction && task >= 0 && j.spec.service)
    action = spec::FailureAction::kRestartTask;
  else if (action == spec::FailureAction::kRestartTask && (eviction || task < 0))
    action = spec::FailureAction::kRestartJob;
  int32_t max = j.spec.restart.max_retries;
  int32_t retries = j.attempt - 1 - j.evicted_restarts + j.task_restarts;
  bool retries_left = eviction || max < 0 || retries < max;
  // A failure restart waits (crash-loop back-off); an eviction restarts at once.
  std::string wait;
  if (!eviction && retries_left && action != spec::FailureAction::kFailJob) {
    // How long what failed had run: the attempt, or for a task restarted alone (the attempt
    // goes on) that task's latest allocation.
    int64_t ran_since = j.run_started_at;
    if (action == spec::FailureAction::kRestartTask)
      for (const auto& id : j.allocations) {
        const Allocation& a = allocations_.at(id);
        if (a.attempt == j.attempt && a.task == task) ran_since = std::max(ran_since, a.created_at);
      }
    CrashLoop& c = action == spec::FailureAction::kRestartTask ? j.task_backoff[task] : j.backoff;
    const int64_t wait_seconds = BackOff(c, ran_since);
    if (wait_seconds > 0)
      wait = ", in " + std::to_string(wait_seconds) + " s (failure " +
             std::to_string(c.failures_in_a_row) + " in a row)";
  }
  if (action == spec::FailureAction::kRestartTask && retries_left) {
    // Volcano RestartTask: the failed task alone goes back to the engine (the job's snapshot
    // misses that one placement, so the next cycle places it); the rest keeps running.
    j.task_restarts += 1;
    if (eviction) j.evicted_restarts += 1;  // not a retry
    AddEvent(ops, "Warning", reason, "job/" + j.id(),
             message + "; restarting task " + std::to_string(task) + " alone" +
                 (eviction ? ""
                           : " (retry " + std::to_string(retries + 1) +
                                 (max < 0 ? "" : " of " + std::to_string(max)) + ")") +
                 wait);
    ops.push_back(JobOp(j));
    return;
  }
  if (action == spec::FailureAction::kRestartJob && retries_left) {
    if (eviction) j.evicted_restarts += 1;  // the next attempt is not a retry
    Terminate(
        ops, j, JobState::kPending, reason,
        message + "; restarting the job (attempt " + std::to_string(j.attempt + 1) + ")" + wait);
  } else {
    std::string why = action != spec::FailureAction::kFailJob
                          ? message + "; retry limit " + std::to_string(max) + " reached"
                          : message;
    Terminate(ops, j, JobState::kFailed, reason, why);
  }
}

int64_t ControlPlane::BackOff(CrashLoop& c, int64_t ran_since) {
  const int64_t now = Now();
  if (ran_since >= 0 && now - ran_since >= options_.restart_backoff_reset_seconds)
    c.failures_in_a_row = 0;  // it ran a good while: this failure is not a crash loop
  c.failures_in_a_row += 1;
  if (options_.restart_backoff_seconds <= 0) return 0;
  int64_t wait = options_.restart_backoff_seconds;
  for (int32_t i = 1; i < c.failures_in_a_row && wait < options_.restart_backoff_max_seconds; ++i)
    wait *= 2;
  wait = std::min(wait, options_.restart_backoff_max_seconds);
  c.until = now + wait;
  return wait;
}

void ControlPlane::OnTaskSucceeded(std::vector<store::Op>& ops, JobRecord& j, int32_t task) {
  if (j.state == JobState::kTerminating) {
    MaybeFinishTermination(ops, j);
    return;
  }
  if (IsTerminal(j.state)) return;
  if (j.spec.service) {
    OnTaskLoss(ops, j, false, "TaskFailed", "service replica " + std::to_string(task) + " exited",
               task);
    return;
  }
  std::set<int32_t> succeeded;
  std::map<int32_t, const Allocation*> latest;  // per task, this attempt
  bool live = false;
  for (const auto& id : j.allocations) {
    const Allocation& a = allocations_.at(id);
    if (a.attempt != j.attempt) continue;
    if (a.state == AllocState::kSucceeded) succeeded.insert(a.task);
    if (a.Live()) live = true;
    latest[a.task] = &a;
  }
  // A task whose latest allocation failed is waiting for its RestartTask placement.
  for (const auto& [t, a] : latest)
    if (a->state == AllocState::kFailed || a->state == AllocState::kKilled) live = true;
  // Volcano's TaskCompleted: every pod of the task group succeeded (not just this one).
  int32_t begin = 0, end = 0;
  std::string group;
  for (const TaskGroup& g : j.spec.job.groups) {
    end = begin + g.replicas;
    group = g.name;
    if (task < end) break;
    begin = end;
  }
  bool group_done = true;
  for (int32_t t = begin; t < end && group_done; ++t) group_done = succeeded.count(t) > 0;
  if (j.spec.RestartFor(task).complete_on_task_completed && group_done && live) {
    Terminate(ops, j, JobState::kSucceeded, "Completing",
              "task " + group + " completed: all " + std::to_string(end - begin) +
                  " of its pods succeeded (CompleteJob policy)");
    return;
  }
  // Every task succeeded; or none is running or waiting to restart and every task ran in
  // this attempt (a task never placed yet, of a job only partly placed, is still to run).
  const bool all_ran = static_cast<int32_t>(latest.size()) == j.spec.job.TaskCount();
  if (static_cast<int32_t>(succeeded.size()) == j.spec.job.TaskCount() ||
      (!live && !succeeded.empty() && all_ran)) {
    EndAttempt(j);
    j.state = JobState::kSucceeded;
    j.finished_at = Now();
    j.message = std::to_string(succeeded.size()) + " task(s) succeeded";
    AddEvent(ops, "Normal", "Completed", "job/" + j.id(), j.message);
    ops.push_back(JobOp(j));
  }
}

// ---- agents ----

namespace {

// Which devices (milli of each, MIG instances) allocations hold: where a placement still fits.
struct DeviceUse {
  std::map<std::pair<std::string, int32_t>, int64_t> milli;
  std::set<std::tuple<std::string, int32_t, int32_t>> mig;
  void Add(const TaskAllocation& a) {
    for (const auto& d : a.devices) {
      milli[{a.node, d.device}] += d.milli;
      if (d.mig_instance >= 0) mig.insert({a.node, d.device, d.mig_instance});
    }
  }
  bool Fits(const TaskAllocation& a) const {
    for (const auto& d : a.devices) {
      auto m = milli.find({a.node, d.device});
      if ((m != milli.end() ? m->second : 0) + d.milli > 1000) return false;
      if (d.mig_instance >= 0 && mig.count({a.node, d.device, d.mig_instance})) return false;
    }
    return true;
  }
};

// An agent token bound to nodes (`nodes` at creation) speaks for those alone.
Status CheckSpeaksFor(const Principal& p, const std::string& node) {
  if (p.role != Role::kAgent || p.MaySpeakFor(node)) return Status::Ok();
  return PermissionDenied("token \"" + p.name + "\" is bound to node(s) " +
                          JoinHostlist({p.nodes.begin(), p.nodes.end()}) +
                          " and may not speak for node \"" + node + "\"");
}

}  // namespace

StatusOr<Json> ControlPlane::RegisterAgent(const Principal& p, const Json& body) {
  if (p.role != Role::kAgent && !p.IsAdmin())
    return PermissionDenied("only agent or admin tokens may register nodes");
  ObjectReader r(body, "");
  const Json* nj = r.Get("node");
  if (nj == nullptr) return InvalidArgument("node: required");
  auto node = NodeFromJson(*nj, "node");
  if (!node.ok()) return node.status();
  std::string version, boot;
  TESSERA_RETURN_IF_ERROR(r.String("agentVersion", version));
  TESSERA_RETURN_IF_ERROR(r.String("bootId", boot, true));
  std::string logs_url, logs_token, instance;
  TESSERA_RETURN_IF_ERROR(r.String("logsUrl", logs_url));
  TESSERA_RETURN_IF_ERROR(r.String("logsToken", logs_token));
  TESSERA_RETURN_IF_ERROR(r.String("instanceId", instance));
  int64_t lease = -1;  // absent: the agent's default (10 heartbeats)
  TESSERA_RETURN_IF_ERROR(r.Int("leaseSeconds", lease));
  // The tasks the agent holds, adopted from its previous process included (agent-protocol.md).
  std::set<std::string> held;
  if (const Json* tasks = r.Get("tasks")) {
    if (!tasks->is_array()) return InvalidArgument("tasks: must be a list");
    for (size_t i = 0; i < tasks->size(); ++i) {
      const Json& t = (*tasks)[i];
      if (!t.is_object() || !t.contains("allocation") || !t["allocation"].is_string())
        return InvalidArgument("tasks[" + std::to_string(i) + "].allocation: required string");
      held.insert(t["allocation"].get<std::string>());
    }
  }
  TESSERA_RETURN_IF_ERROR(r.Finish());
  // As the agent's flags are checked: a name or label reaches hostlists, MASTER_ADDR,
  // selectors, tables and metric labels. (A pool run by another system, Slurm, registers
  // as an admin and labels its nodes with that system's own words: states, reasons.)
  if (std::string why = NodeNameProblem(node->name); !why.empty())
    return InvalidArgument("node.name: \"" + node->name + "\": " + why);
  TESSERA_RETURN_IF_ERROR(CheckSpeaksFor(p, node->name));
  if (p.role == Role::kAgent) {
    for (const auto& [k, v] : node->labels) {
      if (std::string why = LabelKeyProblem(k); !why.empty())
        return InvalidArgument("node.labels: key \"" + k + "\": " + why);
      if (std::string why = LabelValueProblem(v); !why.empty())
        return InvalidArgument("node.labels[" + k + "]: \"" + v + "\": " + why);
    }
    for (const Taint& t : node->taints) {
      if (std::string why = LabelKeyProblem(t.key); !why.empty())
        return InvalidArgument("node.taints: key \"" + t.key + "\": " + why);
      if (std::string why = LabelValueProblem(t.value); !why.empty())
        return InvalidArgument("node.taints[" + t.key + "]: value \"" + t.value + "\": " + why);
    }
  }
  if (std::string why = LabelValueProblem(node->pool); !why.empty() || node->pool.empty())
    return InvalidArgument("node.pool: \"" + node->pool +
                           "\": " + (why.empty() ? "must not be empty" : why));
  // An agent runs one monitor and process group per task: as many as a job of 10 m-CPU
  // tasks could ask would swamp it (and its heartbeats). kubelet's default maxPods.
  if (p.role == Role::kAgent && node->max_tasks == 0) node->max_tasks = kDefaultMaxTasksPerNode;
  // Whatever the node's source (an agent, NVML or an inventory; a pool's discovery), as
  // kubelet does: a selector on it pins a job to the node.
  node->labels[kHostnameLabel] = node->name;
  std::lock_guard<std::mutex> l(mu_);
  // Read-only (a store write failed): nothing is registered, but a known node's agent is told
  // to hold, so that one restarted meanwhile keeps its tasks (and its lease) as they are.
  if (frozen_) {
    auto known = nodes_.find(node->name);
    if (known == nodes_.end())
      return Unavailable(ReadOnlyWhy() + "; node " + node->name + " cannot register now");
    Json hold = HoldAnswer();
    hold["node"] = node->name;
    hold["epoch"] = known->second.epoch;
    hold["heartbeatSeconds"] = options_.heartbeat_seconds;
    return hold;
  }
  // An agent's node in a pool that another system runs would get that system's dispatches
  // (a Slurm pool's sbatch) for a machine it does not know (`tessera agent --pool`).
  if (p.role == Role::kAgent) {
    auto b = backends_.find(node->pool);
    if (b != backends_.end() && b->second->Kind() != default_backend_->Kind())
      return FailedPrecondition("node.pool: \"" + node->pool + "\" is run by the " +
                                b->second->Kind() +
                                " backend, not by node agents: give the agent's node a pool "
                                "of its own (tessera agent --pool)");
  }
  std::vector<store::Op> ops;
  auto it = nodes_.find(node->name);
  bool fresh = it == nodes_.end();
  // A second agent under the same node name (a cloned VM, a host name collision) while the
  // first still heartbeats would take the node over back and forth, and both would run the
  // node's tasks. The agent that owns the node's work dir (same id) may always come back.
  // Refused until the agent has been silent for an agent's default lease (10 heartbeats),
  // after which a live one has stopped its tasks itself: not merely after a stall of a few
  // seconds. (A node that rebooted and lost its work dir waits as long.)
  // An agent with another work dir cannot know the previous agent's tasks either (a wiped
  // or moved work dir): their monitors stop them once that agent's lease lapses, after their
  // grace period; until then their devices are not free, so it waits as a lost node's work
  // does (lease, a heartbeat, the longest grace period of its tasks there).
  if (!fresh && !instance.empty() && !it->second.instance_id.empty() &&
      instance != it->second.instance_id) {
    const NodeRecord& old = it->second;
    const int64_t hb = options_.heartbeat_seconds;
    int64_t grace = 0;
    for (const Allocation* a : AllocationsOn(node->name))
      if (a->HoldsDevices()) grace = std::max(grace, a->grace_period_seconds);
    const int64_t runs_on = RunsOnUnattended(hb, old.lease_seconds, grace);
    const int64_t until = old.last_heartbeat + std::max(hb * kAgentLeaseHeartbeats, runs_on);
    if (Now() <= until)
      return FailedPrecondition(
          "node " + node->name + " is served by another live agent (work dir id " +
          old.instance_id + ", last heartbeat " + std::to_string(Now() - old.last_heartbeat) +
          " s ago; this agent's is " + instance +
          "): two agents with one node name? Give this one its own --node. (If this node's "
          "work dir was replaced, its earlier tasks may still run: it may register in " +
          std::to_string(until - Now() + 1) + " s" +
          (runs_on > 0 ? ", once they have surely stopped.)"
                       : "; its agent kept no lease, so stop them yourself.)"));
  }
  NodeRecord& n = nodes_[node->name];
  bool new_boot = fresh || n.boot_id != boot;
  bool was_ready = !fresh && n.node.ready;
  n.node = *node;
  n.node.ready = true;
  n.agent_version = version;
  if (!instance.empty()) n.instance_id = instance;
  if (!logs_url.empty()) n.logs_url = logs_url;
  n.logs_token = logs_token;  // an agent started without one serves its logs without one
  n.lease_seconds = lease;
  n.last_heartbeat = Now();
  n.heard_since_start = true;
  if (new_boot) {
    n.epoch += 1;
    n.boot_id = boot;
    // Processes of the previous agent are gone with it, except those the new agent adopted:
    // they keep their allocation (the first heartbeat reports how each is doing, and one that
    // ended while no agent watched goes through the job's policy there).
    std::set<std::string> affected;
    int64_t adopted = 0, killed = 0;
    for (Allocation* each : AllocationsOn(n.node.name)) {
      Allocation& a = *each;
      const std::string& id = a.id;
      if (!a.HoldsDevices() || a.state == AllocState::kAssigned) continue;
      if (held.count(id)) {
        // (A task already written off with its NotReady node is not adopted: it is no longer
        // wanted, and the agent stops it.)
        if (a.Live()) ++adopted;
        continue;
      }
      if (a.Live()) ++killed;
      bool was_running = a.state == AllocState::kRunning;
      a.state = AllocState::kKilled;
      a.finished_at = Now();
      a.message = "agent restarted (new boot id)";
      ops.push_back(AllocOp(a));
      // (A replica scaled away was being stopped: its end is no loss to its job.)
      if ((was_running || jobs_.count(a.job)) && !ScaledAway(a)) affected.insert(a.job);
    }
    for (const auto& jid : affected) {
      auto j = jobs_.find(jid);
      if (j != jobs_.end())
        OnTaskLoss(ops, j->second, true, "NodeRestarted",
                   "node " + n.node.name + " restarted its agent");
    }
    NoteEvictions("NodeRestarted", killed);
    if (adopted > 0)
      AddEvent(ops, "Normal", "TasksAdopted", "node/" + n.node.name,
               "the restarted agent adopted " + std::to_string(adopted) +
                   " task(s) of its previous process");
  }
  ops.push_back(NodeOp(n));
  if (fresh || new_boot || !was_ready)
    AddEvent(ops, "Normal", "NodeRegistered", "node/" + n.node.name,
             "epoch " + std::to_string(n.epoch) + ", " + std::to_string(n.node.devices.size()) +
                 " GPU(s)" +
                 (std::any_of(n.node.devices.begin(), n.node.devices.end(),
                              [](const Device& d) { return d.is_virtual; })
                      ? " (virtual)"
                      : ""));
  // A node the cluster did not have is capacity jobs will be sent to (and their
  // environments): who added it is audited.
  if (fresh) AddAudit(ops, p, "register", "node/" + n.node.name, "ok");
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  Kick();
  return Json{
      {"node", n.node.name}, {"epoch", n.epoch}, {"heartbeatSeconds", options_.heartbeat_seconds}};
}

namespace {

// A heartbeat's fields of the wrong type, refused before anything changes (read half-way,
// one would throw after memory had changed). Unknown fields are the agent's business.
Status CheckHeartbeatTypes(const Json& body) {
  enum Kind { kNumber, kString, kBool };
  auto check = [](const Json& o, const std::string& path,
                  std::initializer_list<std::pair<const char*, Kind>> fields) -> Status {
    if (!o.is_object()) return InvalidArgument(path + ": expected an object");
    for (const auto& [name, kind] : fields) {
      auto it = o.find(name);
      if (it == o.end()) continue;
      const bool ok = kind == kNumber   ? it->is_number()
                      : kind == kString ? it->is_string()
                                        : it->is_boolean();
      if (!ok)
        return InvalidArgument(path + "." + name + ": expected " +
                               (kind == kNumber   ? "a number"
                                : kind == kString ? "a string"
                                                  : "true or false") +
                               ", got " + it->dump());
    }
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(check(body, "body", {{"epoch", kNumber}}));
  if (body.contains("devices") && body["devices"].is_array())
    for (size_t i = 0; i < body["devices"].size(); ++i)
      TESSERA_RETURN_IF_ERROR(check(body["devices"][i], "devices[" + std::to_string(i) + "]",
                                    {{"index", kNumber},
                                     {"utilPercent", kNumber},
                                     {"powerMilliwatts", kNumber},
                                     {"healthy", kBool}}));
  if (body.contains("tasks") && body["tasks"].is_array())
    for (size_t i = 0; i < body["tasks"].size(); ++i) {
      const Json& t = body["tasks"][i];
      const std::string path = "tasks[" + std::to_string(i) + "]";
      TESSERA_RETURN_IF_ERROR(check(
          t, path,
          {{"state", kString}, {"exitCode", kNumber}, {"message", kString}, {"reason", kString}}));
      if (!t.contains("runAs")) continue;
      const Json& r = t["runAs"];
      TESSERA_RETURN_IF_ERROR(
          check(r, path + ".runAs", {{"uid", kNumber}, {"gid", kNumber}, {"user", kString}}));
      for (const char* id : {"uid", "gid"})
        if (!r.contains(id) || !r[id].is_number_integer() || r[id].get<int64_t>() < 0 ||
            r[id].get<int64_t>() > std::numeric_limits<uint32_t>::max())
          return InvalidArgument(path + ".runAs." + id + ": expected a Unix id (0.." +
                                 std::to_string(std::numeric_limits<uint32_t>::max()) + "), got " +
                                 (r.contains(id) ? r[id].dump() : "nothing"));
      if (r.value("user", "").size() > 256)
        return InvalidArgument(path + ".runAs.user: longer than 256 characters");
    }
  return Status::Ok();
}

}  // namespace

StatusOr<Json> ControlPlane::Heartbeat(const Principal& p, const std::string& node_name,
                                       const Json& body) {
  if (p.role != Role::kAgent && !p.IsAdmin())
    return PermissionDenied("only agent or admin tokens may heartbeat");
  TESSERA_RETURN_IF_ERROR(CheckSpeaksFor(p, node_name));
  if (!body.is_object()) return InvalidArgument("body: expected an object");
  TESSERA_RETURN_IF_ERROR(CheckHeartbeatTypes(body));
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(node_name);
  if (it == nodes_.end()) return NotFound("node \"" + node_name + "\" is not registered");
  // Its reports are not taken (they could not be stored); the agent keeps them and its tasks
  // and sends them again to the restarted server.
  if (frozen_) return HoldAnswer();
  NodeRecord& n = it->second;
  int64_t epoch = body.value("epoch", int64_t{-1});
  if (epoch != n.epoch)
    return FailedPrecondition("stale epoch " + std::to_string(epoch) + " (current " +
                              std::to_string(n.epoch) + "): register again");
  std::vector<store::Op> ops;
  n.last_heartbeat = Now();
  n.heard_since_start = true;
  if (!n.node.ready) {
    n.node.ready = true;
    ops.push_back(NodeOp(n));
    AddEvent(ops, "Normal", "NodeReady", "node/" + n.node.name, "heartbeats resumed");
    Kick();
  }
  if (body.contains("logsUrl") && body["logsUrl"].is_string() && body["logsUrl"] != n.logs_url) {
    n.logs_url = body["logsUrl"].get<std::string>();
    ops.push_back(NodeOp(n));
  }
  if (body.contains("logsToken") && body["logsToken"].is_string())
    n.logs_token = body["logsToken"].get<std::string>();  // not stored: no NodeOp
  if (body.contains("devices") && body["devices"].is_array()) {
    for (const auto& d : body["devices"]) {
      if (!d.is_object()) continue;
      int32_t idx = d.value("index", -1);
      if (idx < 0 || idx >= static_cast<int32_t>(n.node.devices.size())) continue;
      Device& dev = n.node.devices[idx];
      dev.util_percent = d.value("utilPercent", dev.util_percent);
      if (d.contains("memoryUsed") && d["memoryUsed"].is_number_integer())
        dev.memory_used_bytes = d["memoryUsed"];
      dev.power_milliwatts = d.value("powerMilliwatts", dev.power_milliwatts);
      bool healthy = d.value("healthy", dev.healthy);
      if (healthy != dev.healthy) {
        dev.healthy = healthy;
        ops.push_back(NodeOp(n));
        AddEvent(ops, healthy ? "Normal" : "Warning", healthy ? "DeviceHealthy" : "DeviceUnhealthy",
                 "node/" + n.node.name,
                 "GPU " + std::to_string(idx) + (healthy ? " recovered" : " reported unhealthy"));
      }
    }
  }
  std::set<std::string> reported;
  std::vector<const Allocation*> ran_as_changed;
  if (body.contains("tasks") && body["tasks"].is_array()) {
    for (const auto& t : body["tasks"]) {
      if (!t.is_object() || !t.contains("allocation") || !t["allocation"].is_string()) continue;
      std::string aid = t["allocation"].get<std::string>();
      std::string state = t.value("state", "");
      auto ai = allocations_.find(aid);
      if (ai == allocations_.end() || ai->second.placement.node != node_name) continue;
      Allocation& a = ai->second;
      if (state == "running") reported.insert(aid);
      if (const auto r = t.find("runAs"); r != t.end()) {
        if (const RanAs ran = RanAsFromJson(*r); ran != a.ran_as) {
          a.ran_as = ran;
          ran_as_changed.push_back(&a);  // written below unless this heartbeat writes it anyway
        }
      }
      auto ji = jobs_.find(a.job);
      // The job has started once a task of its attempt runs, also one that was over before
      // any heartbeat saw it running (a quick task: it went from assigned to final).
      auto started = [&] {
        if (ji == jobs_.end() || ji->second.state != JobState::kScheduled ||
            ji->second.attempt != a.attempt)
          return;
        JobRecord& j = ji->second;
        j.state = JobState::kRunning;
        if (j.started_at < 0) j.started_at = Now();
        j.attempt_started_at = Now();
        ops.push_back(JobOp(j));
        AddEvent(ops, "Normal", "Started", "job/" + j.id(),
                 "task " + std::to_string(a.task) + " running on " + node_name);
      };
      if (state == "running") {
        if (a.state == AllocState::kAssigned) {
          a.state = AllocState::kRunning;
          // Why a pool kept it queued ("Slurm job 42 PENDING (Resources)") is over once it
          // runs: such a message is kept only while the allocation is Assigned.
          a.message.clear();
          ops.push_back(AllocOp(a));
          started();
        }
        continue;
      }
      if (state == "pending") {
        // Queued by a pool that schedules on its own (Slurm): why it waits there, on the
        // allocation and, when it changes, as an event of the job.
        const std::string why = t.value("message", "");
        if (a.state != AllocState::kAssigned || why.empty() || why == a.message) continue;
        a.message = why;
        ops.push_back(AllocOp(a));
        if (ji != jobs_.end() && ji->second.attempt == a.attempt)
          AddEvent(ops, "Normal", "WaitingInPool", "job/" + a.job,
                   "task " + std::to_string(a.task) + " waits on " + node_name + ": " + why);
        continue;
      }
      if (state != "succeeded" && state != "failed" && state != "killed") continue;
      if (!a.HoldsDevices()) continue;  // already final
      if (a.state == AllocState::kAssigned) started();
      bool expected_stop = a.state == AllocState::kStopping || a.state == AllocState::kLost;
      a.exit_code = t.value("exitCode", 0);
      a.finished_at = Now();
      // A stop the server asked for: its reason first, then how the task ended.
      const std::string said = t.value("message", "");
      a.message = expected_stop && !a.message.empty()
                      ? a.message + (said.empty() ? "" : "; " + said)
                      : said;
      a.state = state == "succeeded" ? AllocState::kSucceeded
                : state == "failed"  ? AllocState::kFailed
                                     : AllocState::kKilled;
      ops.push_back(AllocOp(a));
      if (ji == jobs_.end()) continue;
      JobRecord& j = ji->second;
      if (a.attempt != j.attempt) continue;
      if (expected_stop) {
        MaybeFinishTermination(ops, j);
      } else if (a.state == AllocState::kSucceeded) {
        AddEvent(ops, "Normal", "TaskSucceeded", "job/" + j.id(),
                 "task " + std::to_string(a.task) + " exited 0");
        OnTaskSucceeded(ops, j, a.task);
      } else if (state == "killed") {
        // The agent stopped it on its own (its lease ran out while the server was away, it
        // shut down with its tasks): not the task's failure. An eviction: onEviction, no
        // retry counted, no back-off. A pool that runs tasks itself (Slurm) gives its own
        // reason (a failed node) and words.
        // (From a fixed set: it names events and a metric's label; model/eviction.h.)
        std::string why = t.value("reason", "");
        if (!why.empty() && !IsPoolEvictionReason(why)) why = "Evicted";
        OnTaskLoss(ops, j, true, why.empty() ? "Evicted" : why,
                   "task " + std::to_string(a.task) +
                       (why.empty() ? " on " + node_name + " was stopped by its agent" : "") +
                       (a.message.empty() ? "" : ": " + a.message),
                   a.task);
        NoteEvictions(why.empty() ? "Evicted" : why, 1);
      } else {
        // The agent's or pool's words ("exited with code 3", "killed by SIGKILL", "Slurm job 43
        // FAILED"), with the code where they do not give it (a signal: 128 + the signal).
        const std::string code = std::to_string(a.exit_code);
        std::string how = a.message.empty() ? "exited with code " + code : a.message;
        const size_t said = how.find("code " + code);
        const size_t after = said + code.size() + 5;
        if (said == std::string::npos ||
            (after < how.size() && std::isdigit(static_cast<unsigned char>(how[after]))))
          how += " (exit code " + code + ")";
        OnTaskLoss(ops, j, false, "TaskFailed",
                   "task " + std::to_string(a.task) + " on " + node_name + " failed: " + how,
                   a.task, a.exit_code);
      }
    }
  }
  // Allocations being stopped that the agent no longer runs are gone.
  for (Allocation* each : AllocationsOn(node_name)) {
    Allocation& a = *each;
    if (reported.count(a.id)) continue;
    if (a.state != AllocState::kStopping && a.state != AllocState::kLost) continue;
    a.state = AllocState::kKilled;
    a.finished_at = Now();
    if (a.message.empty()) a.message = "stopped";
    ops.push_back(AllocOp(a));
    auto ji = jobs_.find(a.job);
    if (ji != jobs_.end()) MaybeFinishTermination(ops, ji->second);
  }
  // Identities reported without another change of their allocation: after every other
  // write of this heartbeat, once per key (etcd refuses a transaction that writes one key
  // twice).
  for (const Allocation* a : ran_as_changed)
    if (std::none_of(ops.begin(), ops.end(),
                     [&](const store::Op& op) { return op.key == "allocs/" + a->id; }))
      ops.push_back(AllocOp(*a));
  bool changed = !ops.empty();
  TESSERA_RETURN_IF_ERROR(Commit(std::move(ops)));
  if (changed) Kick();
  Json allocs = Json::array();
  for (const Allocation* each : AllocationsOn(node_name)) {
    const Allocation& a = *each;
    if (a.state != AllocState::kAssigned && a.state != AllocState::kRunning) continue;
    Json devs = Json::array();
    for (const auto& d : a.placement.devices)
      devs.push_back({{"device", d.device},
                      {"milli", d.milli},
                      {"memory", std::to_string(d.memory_bytes)},
                      {"migInstance", d.mig_instance}});
    allocs.push_back({{"allocation", a.id},
                      {"job", a.job},
                      {"task", a.task},
                      {"attempt", a.attempt},
                      {"command", a.command},
                      {"env", a.env},
                      {"devices", devs},
                      {"gracePeriodSeconds", a.grace_period_seconds}});
    if (!a.script.empty()) allocs.back()["script"] = a.script;
    // Without one the agent runs the task in its own folder, where a relative sbatch -o
    // cannot land in (or be raced for in) a directory shared with other users.
    if (!a.working_dir.empty()) allocs.back()["workingDir"] = a.working_dir;
    if (!a.stdout_file.empty()) allocs.back()["stdoutFile"] = a.stdout_file;
    if (!a.stderr_file.empty()) allocs.back()["stderrFile"] = a.stderr_file;
    // The agent's cgroup limits (cpu.max, memory.max), where the node allows them: a
    // Kubernetes limit where one was given, else what the task was scheduled by.
    const int64_t cpu = a.cpu_limit_milli > 0 ? a.cpu_limit_milli : a.placement.cpu_milli;
    const int64_t memory =
        a.memory_limit_bytes > 0 ? a.memory_limit_bytes : a.placement.memory_bytes;
    if (cpu > 0) allocs.back()["cpu"] = std::to_string(cpu) + "m";
    if (memory > 0) allocs.back()["memory"] = std::to_string(memory);
    // Who the task runs as (docs/agent.md, "Task identity"): the template's securityContext,
    // and the submitter, whose account an agent with --run-as-submitter uses otherwise.
    // Absent, as from an older server: the agent's own user.
    if (!a.run_as.empty()) allocs.back()["securityContext"] = RunAsToJson(a.run_as);
    if (auto ji = jobs_.find(a.job); ji != jobs_.end() && !ji->second.user.empty())
      allocs.back()["submitter"] = ji->second.user;
  }
  return Json{{"allocations", allocs}, {"heartbeatSeconds", options_.heartbeat_seconds}};
}

void ControlPlane::CheckTimers() {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t now = Now();
  std::vector<store::Op> ops;
  for (auto& [id, j] : jobs_) {
    // A termination held by a fence that has passed (the silent node's agent has surely
    // stopped the task by now) ends.
    if (j.state == JobState::kTerminating && j.fenced_until > 0 && j.fenced_until <= now)
      MaybeFinishTermination(ops, j);
    // Per attempt (sbatch -t): from when it first ran, as Slurm counts (time queued in a
    // pool is not charged). Whole job (batch/v1): from its first start, requeues included.
    const bool whole = j.spec.time_limit_whole_job;
    if (!j.spec.time_limit_seconds || IsTerminal(j.state) || j.state == JobState::kTerminating ||
        (j.state == JobState::kPending && !whole))
      continue;
    const int64_t since = whole ? j.started_at : j.attempt_started_at;
    const int64_t limit = *j.spec.time_limit_seconds;
    if (since < 0 || now - since < limit) continue;
    Terminate(ops, j, JobState::kFailed, "DeadlineExceeded",
              "ran " + std::to_string(now - since) + " s" +
                  (whole ? " since it first started" : "") + ", past its time limit of " +
                  std::to_string(limit) + " s: stopped, not retried");
  }
  (void)Commit(std::move(ops));
}

void ControlPlane::CheckNodes() {
  std::lock_guard<std::mutex> l(mu_);
  int64_t now = Now();
  std::vector<store::Op> ops;
  for (auto& [name, n] : nodes_) {
    if (!n.node.ready ||
        now - n.last_heartbeat <= options_.heartbeat_seconds * options_.missed_heartbeats)
      continue;
    n.node.ready = false;
    ops.push_back(NodeOp(n));
    AddEvent(ops, "Warning", "NodeNotReady", "node/" + name,
             "no heartbeat for " + std::to_string(now - n.last_heartbeat) + "s");
    // The agent stops its tasks itself once its lease has run out without an answer (counted
    // from about our last heartbeat; one interval more for the answer's way back) and their
    // grace period has passed: only then may they run elsewhere. An agent without a lease
    // (0) never stops them, and its work is placed again at once.
    std::map<std::string, int64_t> affected;  // job -> when its tasks there have surely stopped
    std::map<std::string, std::set<int32_t>> lost;  // job -> its tasks there
    for (Allocation* each : AllocationsOn(name)) {
      Allocation& a = *each;
      if (!a.Live()) continue;
      a.state = AllocState::kLost;
      a.message = "node " + name + " not ready";
      ops.push_back(AllocOp(a));
      // A replica scaled away was being stopped for good: nothing of its job to restart. (It
      // holds its devices until its agent is back and confirms it gone, or the node is
      // deleted, as any task lost.)
      if (ScaledAway(a)) continue;
      NoteEvictions("NodeLost", 1);
      lost[a.job].insert(a.task);
      int64_t& stopped = affected[a.job];
      const int64_t runs_on =
          RunsOnUnattended(options_.heartbeat_seconds, n.lease_seconds, a.grace_period_seconds);
      if (runs_on > 0) stopped = std::max(stopped, n.last_heartbeat + runs_on);
    }
    for (const auto& [jid, stopped] : affected) {
      auto j = jobs_.find(jid);
      if (j == jobs_.end()) continue;
      // A service's replicas are independent: those on the node are replaced at once, alone,
      // as a ReplicaSet replaces the pods of a lost node, while the others go on serving. (A
      // replica still running unseen there for a while does no harm that a batch task's
      // second copy, writing the same checkpoint, would.)
      if (j->second.spec.service && !IsTerminal(j->second.state) &&
          j->second.state != JobState::kTerminating) {
        for (int32_t task : lost[jid])
          OnTaskLoss(ops, j->second, true, "NodeLost", "node " + name + " stopped heartbeating",
                     task);
        continue;
      }
      if (stopped > now && stopped > j->second.fenced_until) {
        j->second.fenced_until = stopped;
        j->second.fenced_node = name;
      }
      OnTaskLoss(ops, j->second, true, "NodeLost", "node " + name + " stopped heartbeating");
      ops.push_back(JobOp(j->second));
    }
  }
  (void)Commit(std::move(ops));
}

// ---- scheduling ----

void ControlPlane::RegisterBackend(const std::string& pool, std::shared_ptr<Backend> b) {
  std::lock_guard<std::mutex> l(mu_);
  backends_[pool] = std::move(b);
}

void ControlPlane::Kick() {
  {
    std::lock_guard<std::mutex> l(loop_mu_);
    kicked_ = true;
  }
  loop_cv_.notify_one();
}

int64_t ControlPlane::cycles() const {
  std::lock_guard<std::mutex> l(const_cast<std::mutex&>(loop_mu_));
  return cycles_;
}

ControlPlane::Counts ControlPlane::counts() const {
  std::lock_guard<std::mutex> l(mu_);
  return {jobs_.size(), events_.size(), allocations_.size(), nodes_.size()};
}

void ControlPlane::Loop() {
  auto last = std::chrono::steady_clock::now() - std::chrono::hours(1);
  for (;;) {
    {
      std::unique_lock<std::mutex> l(loop_mu_);
      loop_cv_.wait_for(l, std::chrono::milliseconds(options_.cycle_period_ms),
                        [&] { return kicked_ || stopping_; });
      if (stopping_) return;
      kicked_ = false;
    }
    // Debounce: let a burst of submissions land in one cycle.
    auto since = std::chrono::steady_clock::now() - last;
    auto min = std::chrono::milliseconds(options_.cycle_min_interval_ms);
    if (since < min) std::this_thread::sleep_for(min - since);
    last = std::chrono::steady_clock::now();
    if (frozen_) continue;  // decides nothing it could not store
    CheckNodes();
    CheckTimers();
    (void)CompactEvents();
    (void)CompactFinishedJobs();
    Status st = RunCycle();
    if (!st.ok()) std::fprintf(stderr, "tessera server: cycle: %s\n", st.ToString().c_str());
  }
}

namespace {

// Keeps a job's tasks off `nodes`: hostname NotIn them, ANDed into every required node
// affinity term of the job's placement and of each group's own (one term if none).
void KeepOff(Job& job, const std::vector<std::string>& nodes) {
  const NodeSelectorRequirement off{kHostnameLabel, NodeSelectorRequirement::Op::kNotIn, nodes};
  auto add = [&](Placement& p) {
    if (p.affinity.required.empty()) p.affinity.required.emplace_back();
    for (NodeSelectorTerm& t : p.affinity.required) t.match_expressions.push_back(off);
  };
  add(job.placement);
  for (TaskGroup& g : job.groups)
    if (g.placement) add(*g.placement);
}

}  // namespace

const Allocation* ControlPlane::LatestAllocation(const JobRecord& j, int32_t task) const {
  const Allocation* last = nullptr;
  for (const auto& aid : j.allocations)
    if (const Allocation& a = allocations_.at(aid); a.attempt == j.attempt && a.task == task)
      last = &a;
  return last;
}

std::vector<Binding> ControlPlane::KeptInBackoff() const {
  // As the last cycle's snapshot counted them (kept_in_backoff_), less those restarted or
  // gone since: no snapshot is built under the lock for each listing.
  std::vector<Binding> out;
  for (const Binding& b : kept_in_backoff_) {
    auto j = jobs_.find(b.job);
    if (j == jobs_.end() || !j->second.task_backoff.count(b.task)) continue;
    const Allocation* last = LatestAllocation(j->second, b.task);
    if (last == nullptr || !last->HoldsDevices()) out.push_back(b);  // not restarted since
  }
  return out;
}

Snapshot ControlPlane::BuildSnapshot(std::map<std::string, std::string>& owner,
                                     std::vector<Binding>* in_place,
                                     std::map<std::string, std::string>* refused,
                                     std::vector<Binding>* kept) const {
  Snapshot s;
  for (const auto& [name, n] : nodes_) {
    s.nodes.push_back(n.node);
    if (n.cordoned) s.nodes.back().unschedulable = true;
  }
  for (const auto& [name, q] : queues_) s.queues.push_back(q);
  for (const auto& [name, pc] : priority_classes_) s.priority_classes.push_back(pc);
  std::map<std::string, std::vector<const Allocation*>>
      holding;     // job -> allocations holding devices
  DeviceUse used;  // by every allocation holding devices, and the reservations below
  for (const auto& [id, a] : allocations_) {
    if (!a.HoldsDevices()) continue;
    used.Add(a.placement);
    if (!WrittenOff(a)) holding[a.job].push_back(&a);
  }
  const std::set<std::string> limited = ArrayTaskLimited(Now());
  for (const auto& [id, j] : jobs_) {
    if (IsTerminal(j.state) && holding.count(id) == 0) continue;
    Job job = j.spec.job;
    // The engine's "being stopped, never evicted again" is the server's to say, for the
    // placeholders of stopping tasks below (a job stored with it from before it was refused
    // at submission would otherwise be protected from preemption for ever).
    job.terminating = false;
    job.priority = PriorityOf(j);
    job.submit_seq = j.seq;  // FIFO within a second: submission order, not the name
    if (job.priority_class.empty()) job.priority_class = DefaultPriorityClass();
    job.allocations.assign(job.TaskCount(), std::nullopt);
    // The engine sees the current attempt: when it was bound, and the service of the earlier
    // ones (las); a pending job has no start.
    job.start_time = j.run_started_at;
    job.attained_gpu_milli_seconds = j.attained_gpu_milli_seconds;
    std::vector<const Allocation*> hold =
        holding.count(id) ? holding.at(id) : std::vector<const Allocation*>{};
    // Every allocation still holding devices that the engine accounts for (and may evict)
    // but never places: a one-task placeholder.
    auto placeholder = [&](const Allocation* a) {
      Job ph;
      ph.id = id + "#" + a->id;
      ph.queue = job.queue;
      ph.priority_class = job.priority_class;
      ph.priority = job.priority;
      ph.submit_time = job.submit_time;
      ph.submit_seq = job.submit_seq;
      // (A replica scaled away has no group of its own any more: a Deployment has one.)
      TaskGroup g = a->task < job.TaskCount() ? job.GroupOfTask(a->task) : job.groups.back();
      g.replicas = 1;
      ph.groups.push_back(g);
      ph.min_available = 1;
      ph.preemptible =
          job.preemptible && a->state != AllocState::kStopping && a->state != AllocState::kLost;
      ph.terminating = a->state == AllocState::kStopping;
      // An exclusive job's tasks keep its nodes its own while they run or stop.
      ph.exclusive = job.exclusive;
      ph.grace_period_seconds = job.grace_period_seconds;
      ph.allocations = {a->placement};
      ph.start_time = j.run_started_at >= 0 ? j.run_started_at : j.created_at;
      owner[ph.id] = id;
      s.jobs.push_back(std::move(ph));
    };
    // Replicas a Deployment was scaled down from, still stopping: placeholders beside the
    // job, which the engine sees as the replicas it has now.
    std::erase_if(hold, [&](const Allocation* a) {
      if (a->task < job.TaskCount()) return false;
      placeholder(a);
      return true;
    });
    bool pending = j.state == JobState::kPending;
    if (pending) {
      // Backing off after a failure (RestartJob), or lost with a node whose agent may still
      // be stopping its tasks: nothing of it to place yet.
      if (!*HeldBack(j, Now(), limited)) {
        // Nodes whose pool would refuse it (a Slurm partition's access rules): kept off them,
        // and why goes into its pending reason. (Pools list their own nodes only.)
        std::vector<std::string> off;
        std::map<std::string, std::vector<std::string>> by_why;
        for (const auto& [pool, backend] : backends_)
          for (auto& [node, why] : backend->RefusingNodes(id, j.spec)) {
            off.push_back(node);
            by_why[why].push_back(node);
          }
        if (off.empty()) {
          s.jobs.push_back(job);
        } else {
          std::sort(off.begin(), off.end());
          Job kept = job;
          KeepOff(kept, off);
          s.jobs.push_back(std::move(kept));
          std::string words;
          for (const auto& [why, nodes] : by_why)
            words += (words.empty() ? "" : "; ") + CompressHostlist(nodes) + ": " + why;
          if (refused != nullptr) (*refused)[id] = words;
        }
      }
      if (hold.empty()) continue;
    }
    if (job.TaskCount() == 0) continue;  // scaled to zero: nothing to place or account for
    // A job exactly as the engine models it: each live task of the current attempt placed once.
    // (Its tasks restarted alone back off below; the job's own back-off is only ever pending.)
    bool exact = j.state == JobState::kScheduled || j.state == JobState::kRunning;
    for (const Allocation* a : hold) {
      // (A task being stopped, e.g. evicted alone from an elastic job: placeholders, so the
      // engine sees it terminating and places it again once it has exited.)
      if (a->attempt != j.attempt || !a->Live() || a->state == AllocState::kStopping ||
          job.allocations[a->task])
        exact = false;
      else
        job.allocations[a->task] = a->placement;
    }
    // A task restarted alone (RestartTask; a service's replica that exited) keeps the devices
    // it ran on while it backs off, and then restarts on them, as the kubelet restarts a
    // crashed container in place: a crash-looping replica does not lose its GPU to another
    // job meanwhile. (If its node is NotReady or gone, or the devices were given away, it
    // holds nothing and is placed anew once its back-off is over, as below.)
    for (const auto& [task, c] : j.task_backoff) {
      if (!exact || task >= job.TaskCount() || job.allocations[task]) continue;
      const Allocation* last = LatestAllocation(j, task);
      if (last == nullptr || last->HoldsDevices() || FinishedForGood(j, *last)) continue;
      // (Nor on a node cordoned, drained or unschedulable since: no new task goes there, so
      // it is placed anew elsewhere rather than kept waiting for a node that takes none.)
      auto n = nodes_.find(last->placement.node);
      if (n == nodes_.end() || !n->second.node.ready || n->second.cordoned ||
          n->second.node.unschedulable || !used.Fits(last->placement))
        continue;
      used.Add(last->placement);
      job.allocations[task] = last->placement;
      if (kept != nullptr) kept->push_back({id, task, last->placement});
      if (c.until <= Now() && in_place != nullptr) in_place->push_back({id, task, last->placement});
    }
    // A task that finished for good, or one restarted alone still backing off, is not to
    // place (now): the engine sees it placed, holding nothing, on the node it ran on (any
    // node, if that one is gone), so the job's other missing tasks are topped up without it.
    for (const auto& aid : j.allocations) {
      const Allocation& a = allocations_.at(aid);
      if (!exact || a.task >= job.TaskCount() || job.allocations[a.task] || a.attempt != j.attempt)
        continue;
      auto c = j.task_backoff.find(a.task);
      if (!FinishedForGood(j, a) && (c == j.task_backoff.end() || c->second.until <= Now()))
        continue;
      if (s.nodes.empty()) {
        exact = false;
        break;
      }
      TaskAllocation idle;
      idle.idle = true;
      idle.node = nodes_.count(a.placement.node) ? a.placement.node : s.nodes.front().name;
      job.allocations[a.task] = idle;
    }
    if (exact) {
      if (job.start_time < 0) job.start_time = j.created_at;
      // The engine counts a job's service (`las`) as attainedGpuMilliSeconds + (now -
      // startTime) x the GPU milli its placed tasks hold. A task evicted or restarted alone in
      // this attempt held its GPUs for another span than that: the figure sent makes up the
      // difference, so that the engine's sum is the GPU time the job held. Counting only the
      // earlier attempts, a job that lost one of four replicas fell below a service level it
      // had reached, and the replica evicted the job that had evicted it, cycle after cycle.
      // (The figure sent may be negative: a task placed again after the start held nothing
      // meanwhile.)
      std::vector<const TaskAllocation*> placed;  // idle placeholders too, as the engine
      for (const auto& a : job.allocations)       // charges them
        if (a) placed.push_back(&*a);
      const int64_t held = ChargedGpuMilli(job, placed);
      const int64_t now = Now();
      job.attained_gpu_milli_seconds += AttemptService(j, now);
      if (now > job.start_time) job.attained_gpu_milli_seconds -= (now - job.start_time) * held;
      s.jobs.push_back(std::move(job));
      continue;
    }
    // Otherwise every allocation still holding devices becomes a placeholder.
    for (const Allocation* a : hold) placeholder(a);
  }
  s.Canonicalize();
  return s;
}

Status ControlPlane::RunCycle() {
  std::map<std::string, std::string> owner;
  Snapshot snap;
  std::vector<Binding> in_place;  // tasks restarting on the devices they kept (BuildSnapshot)
  std::vector<JobSummary> summaries;
  int64_t now;
  int64_t cycle;
  {
    std::lock_guard<std::mutex> l(mu_);
    refused_.clear();
    kept_in_backoff_.clear();
    snap = BuildSnapshot(owner, &in_place, &refused_, &kept_in_backoff_);
    now = Now();
    if (options_.on_cycle) {
      summaries.reserve(jobs_.size());
      const std::set<std::string> limited = ArrayTaskLimited(now);
      for (const auto& [id, j] : jobs_) {
        summaries.push_back({id, j.spec.job.queue, j.state, j.created_at, EligibleSince(j),
                             j.run_started_at, HeldBack(j, now, limited)});
        // (One being stopped for good is not expected to serve; one restarting is.)
        const bool ending = j.state == JobState::kTerminating && IsTerminal(j.after_termination);
        if (!j.spec.service || IsTerminal(j.state) || ending) continue;
        summaries.back().service = true;
        summaries.back().service_replicas = j.spec.job.TaskCount();
        summaries.back().service_running = RunningTasks(j);
      }
    }
  }
  {
    std::lock_guard<std::mutex> l(loop_mu_);
    cycle = ++cycles_;
  }
  Rng rng(options_.seed ^ (static_cast<uint64_t>(cycle) * 0x9E3779B97F4A7C15ULL));
  const auto started = std::chrono::steady_clock::now();
  Plan plan = engine_->Cycle(snap, now, rng);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // Bound as the engine's are (checked against the devices as they are now), unless the
  // engine evicts their job: it saw them placed, so it bound nothing else there.
  for (Binding& b : in_place)
    if (std::none_of(plan.evictions.begin(), plan.evictions.end(),
                     [&](const Eviction& e) { return e.job == b.job; }))
      plan.bindings.push_back(std::move(b));
  // Observed once applied: the attempts bound are facts then (an attempt may end before the
  // next cycle, so no later snapshot would show that it started).
  std::vector<JobBound> bound;
  Status applied;
  {
    std::lock_guard<std::mutex> l(mu_);
    applied = ApplyPlan(plan, owner, options_.on_cycle ? &bound : nullptr);
  }
  if (options_.on_cycle) options_.on_cycle(snap, plan, summaries, bound, now, seconds);
  return applied;
}

std::map<std::string, std::string> ControlPlane::TaskEnv(
    const JobRecord& j, int32_t task, const TaskAllocation& a,
    const std::map<std::string, TaskAllocation>& others) const {
  std::map<std::string, std::string> env;
  int32_t g = 0;
  for (int32_t t = 0, i = 0; i < static_cast<int32_t>(j.spec.job.groups.size()); ++i) {
    t += j.spec.job.groups[i].replicas;
    if (task < t) {
      g = i;
      break;
    }
  }
  // (The caller adds the template's own env under these: spec::TaskEnvironment.)
  const std::map<std::string, std::string> no_env;
  const std::map<std::string, std::string>& spec_env =
      g < static_cast<int32_t>(j.spec.templates.size()) ? j.spec.templates[g].env : no_env;
  std::vector<std::string> visible;
  auto n = nodes_.find(a.node);
  for (const auto& d : a.devices) {
    if (d.mig_instance >= 0) {
      std::string uuid;
      if (n != nodes_.end() && d.device < static_cast<int32_t>(n->second.node.devices.size())) {
        const Device& dev = n->second.node.devices[d.device];
        if (d.mig_instance < static_cast<int32_t>(dev.mig.size()))
          uuid = dev.mig[d.mig_instance].uuid;
      }
      if (uuid.empty())
        uuid =
            "MIG-" + a.node + "-" + std::to_string(d.device) + "-" + std::to_string(d.mig_instance);
      visible.push_back(uuid);
    } else {
      visible.push_back(std::to_string(d.device));
    }
  }
  env["CUDA_VISIBLE_DEVICES"] = Join(visible, ",");
  env["NVIDIA_VISIBLE_DEVICES"] = visible.empty() ? "void" : Join(visible, ",");
  // Each placed task's node, by task: what the rendezvous, Volcano's and Slurm's variables
  // are made of.
  std::map<int32_t, std::string> node_of = {{task, a.node}};
  for (const auto& [key, other] : others) node_of[std::stoi(key)] = other.node;
  // torchrun-style rendezvous: rank 0 is the lowest-numbered placed task of the gang.
  int32_t local_rank = 0;
  for (const auto& [t, node] : node_of) local_rank += t < task && node == a.node;
  env["MASTER_ADDR"] = node_of.begin()->second;
  env["MASTER_PORT"] = std::to_string(29500 + j.seq % 1000);
  env["RANK"] = std::to_string(task);
  if (j.spec.indexed) env["JOB_COMPLETION_INDEX"] = std::to_string(task);
  env["WORLD_SIZE"] = std::to_string(j.spec.job.TaskCount());
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["TESSERA_JOB"] = j.id();
  env["TESSERA_TASK"] = std::to_string(task);
  env["TESSERA_ATTEMPT"] = std::to_string(j.attempt);
  if (j.spec.source.rfind("batch.volcano.sh", 0) == 0) {
    // Volcano's env and svc plugins: the task's index within its task group, and each
    // group's hosts (here the nodes its tasks run on, in task order: tasks on one node share
    // it, so give them distinct ports) and replicas, e.g. VC_PS_HOSTS for a TF_CONFIG.
    int32_t first = 0;
    for (size_t i = 0; i < j.spec.job.groups.size(); ++i) {
      const TaskGroup& group = j.spec.job.groups[i];
      if (static_cast<int32_t>(i) == g) {
        env["VK_TASK_INDEX"] = env["VC_TASK_INDEX"] = std::to_string(task - first);
      }
      std::string name = group.name.empty() ? "task" + std::to_string(i) : group.name;
      for (char& c : name) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
      std::vector<std::string> hosts;
      // One entry per replica, so that entry VC_TASK_INDEX is the task's own; one not placed
      // (a gang started with part of the group, a task restarted alone) is empty.
      for (int32_t t = first; t < first + group.replicas; ++t) {
        auto it = node_of.find(t);
        hosts.push_back(it != node_of.end() ? it->second : "");
      }
      env["VC_" + name + "_HOSTS"] = Join(hosts, ",");
      env["VC_" + name + "_NUM"] = std::to_string(group.replicas);
      first += group.replicas;
    }
  }
  if (j.spec.source == "sbatch") {
    // What a batch script reads from Slurm. One Tessera task per Slurm node: the script runs
    // once on each, as node `task` of the allocation.
    std::vector<std::string> nodes;
    for (const auto& [t, node] : node_of)
      if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
    env["SLURM_JOB_ID"] = std::to_string(j.seq);
    env["SLURM_JOBID"] = env["SLURM_JOB_ID"];
    env["SLURM_JOB_NAME"] = j.spec.array ? j.spec.array->name : j.id();  // an array's: -J
    env["SLURM_JOB_NODELIST"] = CompressHostlist(nodes);
    env["SLURM_NODELIST"] = env["SLURM_JOB_NODELIST"];
    env["SLURM_JOB_NUM_NODES"] = std::to_string(j.spec.job.TaskCount());
    env["SLURM_NODEID"] = std::to_string(task);
    env["SLURMD_NODENAME"] = a.node;  // scripts name their own node by it
    env["SLURM_PROCID"] = std::to_string(task);
    env["SLURM_LOCALID"] = "0";
    env["SLURM_RESTART_COUNT"] = std::to_string(j.attempt - 1);
    // What srun (agent/srun.h) and scripts read of the node's share: its Slurm tasks, each
    // one's CPUs, the node's GPUs.
    const int32_t nodes_n = std::max(1, j.spec.job.TaskCount());
    int32_t per_node = 1;
    if (auto t = spec_env.find("SLURM_NTASKS"); t != spec_env.end())
      per_node = std::max(1, std::atoi(t->second.c_str()) / nodes_n);
    env["SLURM_NTASKS_PER_NODE"] = std::to_string(per_node);
    const TaskRequest& req = j.spec.job.groups[g].request;
    env["SLURM_CPUS_PER_TASK"] =
        std::to_string(std::max<int64_t>(1, req.cpu_milli / 1000 / per_node));
    if (!a.devices.empty()) env["SLURM_GPUS_ON_NODE"] = std::to_string(a.devices.size());
  }
  return env;
}

// A pending job's verdict ("Outcome: Code: words") as a FailedScheduling event, if it is
// worth one. A new outcome or code is; new words for the same one (other node counts: a
// completion or a cordon changes every pending job's) only once its latest event is 10
// minutes old: else a busy cluster writes an event per pending job per cycle, and retention
// drops the lifecycle events people look for. The job's pendingReason always has the latest
// words.
void ControlPlane::NoteVerdict(std::vector<store::Op>& ops, JobRecord& j,
                               const std::string& message) {
  if (message == j.last_failed_scheduling) return;
  auto head = [](const std::string& m) {
    const size_t first = m.find(": ");
    return first == std::string::npos ? m : m.substr(0, m.find(": ", first + 2));
  };
  if (head(message) == head(j.last_failed_scheduling) &&
      Now() - j.last_failed_scheduling_at < kFailedSchedulingRefreshSeconds)
    return;
  j.last_failed_scheduling = message;
  j.last_failed_scheduling_at = Now();
  AddEvent(ops, "Warning", "FailedScheduling", "job/" + j.id(), message);
}

Status ControlPlane::ApplyPlan(const Plan& plan, const std::map<std::string, std::string>& owner,
                               std::vector<JobBound>* bound) {
  std::vector<store::Op> ops;
  // Device occupancy as it is NOW (state may have moved since the snapshot): the last line
  // of defence against giving one device to two tasks.
  DeviceUse used;
  for (const auto& [id, a] : allocations_)
    if (a.HoldsDevices()) used.Add(a.placement);
  std::map<std::string, std::vector<const Binding*>> by_job;
  for (const auto& b : plan.bindings) by_job[b.job].push_back(&b);
  // Arrays' throttles, computed for the arrays bound this cycle only, before their bindings.
  std::map<int64_t, std::set<std::string>> throttled;
  auto held_back = [&](const JobRecord& j) -> const char* {
    static const std::set<std::string> kNone;
    if (!j.spec.array) return HeldBack(j, plan.now, kNone);
    const int64_t array = j.spec.array->job_id;
    auto it = throttled.find(array);
    if (it == throttled.end())
      it = throttled.emplace(array, ArrayTaskLimited(plan.now, array)).first;
    return HeldBack(j, plan.now, it->second);
  };
  for (const auto& [jid, binds] : by_job) {
    auto ji = jobs_.find(jid);
    if (ji == jobs_.end()) continue;
    JobRecord& j = ji->second;
    bool pending = j.state == JobState::kPending;
    if (!pending && j.state != JobState::kScheduled && j.state != JobState::kRunning) continue;
    // Held since the snapshot the plan was made from (the engine ran outside the lock): the
    // API has answered "Held", and that stands.
    if (const char* held = pending ? held_back(j) : ""; *held) {
      std::fprintf(stderr, "tessera server: dropped bindings of %s: %s since the cycle began\n",
                   jid.c_str(), held);
      continue;
    }
    std::set<int32_t> taken;
    for (const auto& aid : j.allocations) {
      const Allocation& a = allocations_.at(aid);
      if ((a.attempt == j.attempt && a.Live()) || FinishedForGood(j, a)) taken.insert(a.task);
    }
    // Validate every binding of the job against current occupancy; all or nothing.
    DeviceUse trial = used;
    auto& milli = trial.milli;
    auto& mig = trial.mig;
    bool ok = true;
    std::string why;
    for (const Binding* b : binds) {
      auto n = nodes_.find(b->allocation.node);
      if (b->task < 0 || b->task >= j.spec.job.TaskCount() || taken.count(b->task)) {
        ok = false;
        why = "task " + std::to_string(b->task) + " is not waiting";
      } else if (n == nodes_.end() || !n->second.node.ready) {
        ok = false;
        why = "node " + b->allocation.node + " is not ready";
      } else if (n->second.cordoned || n->second.node.unschedulable) {
        // Since the snapshot: a cordon or drain has answered, or the agent said so.
        ok = false;
        why = "node " + b->allocation.node + " was made unschedulable since the cycle began";
      }
      for (const auto& d : b->allocation.devices) {
        if (!ok) break;
        if (n != nodes_.end() &&
            (d.device < 0 || d.device >= static_cast<int32_t>(n->second.node.devices.size()))) {
          ok = false;
          why = "no device " + std::to_string(d.device) + " on " + b->allocation.node;
        } else if ((milli[{b->allocation.node, d.device}] += d.milli) > 1000) {
          ok = false;
          why = "device " + b->allocation.node + "/" + std::to_string(d.device) +
                " is already allocated";
        } else if (d.mig_instance >= 0 &&
                   !mig.insert({b->allocation.node, d.device, d.mig_instance}).second) {
          ok = false;
          why = "MIG instance already allocated";
        }
      }
      taken.insert(b->task);
    }
    if (ok && pending && static_cast<int32_t>(binds.size()) < j.spec.job.GangMinimum()) {
      ok = false;
      why = "plan binds " + std::to_string(binds.size()) + " of the gang's " +
            std::to_string(j.spec.job.GangMinimum());
    }
    if (!ok) {
      std::fprintf(stderr, "tessera server: dropped bindings of %s: %s\n", jid.c_str(),
                   why.c_str());
      continue;
    }
    used = std::move(trial);
    std::map<std::string, TaskAllocation> placed;
    for (const auto& aid : j.allocations) {
      const Allocation& a = allocations_.at(aid);
      if (a.attempt == j.attempt && a.Live()) placed[std::to_string(a.task)] = a.placement;
    }
    for (const Binding* b : binds) placed[std::to_string(b->task)] = b->allocation;
    std::set<std::string> node_names;
    for (const Binding* b : binds) {
      Allocation a;
      a.id = AllocId(next_alloc_++);
      a.job = jid;
      a.task = b->task;
      a.attempt = j.attempt;
      a.placement = b->allocation;
      a.grace_period_seconds = j.spec.job.grace_period_seconds;
      a.created_at = plan.now;
      const auto& groups = j.spec.job.groups;
      int32_t g = 0;
      for (int32_t t = 0, i = 0; i < static_cast<int32_t>(groups.size()); ++i) {
        t += groups[i].replicas;
        if (b->task < t) {
          g = i;
          break;
        }
      }
      if (g < static_cast<int32_t>(j.spec.templates.size())) {
        const spec::TaskTemplate& tt = j.spec.templates[g];
        a.command = tt.command;
        a.script = tt.script;
        a.working_dir = tt.working_dir;
        a.cpu_limit_milli = tt.cpu_limit_milli;
        a.memory_limit_bytes = tt.memory_limit_bytes;
        a.run_as = tt.run_as;
        const spec::SlurmFilenameFields f{j.seq,
                                          j.spec.array ? j.spec.array->name : j.id(),
                                          a.placement.node,
                                          j.user,
                                          b->task,
                                          b->task,
                                          j.spec.array};
        if (!tt.stdout_file.empty()) a.stdout_file = spec::ExpandSlurmFilename(tt.stdout_file, f);
        if (!tt.stderr_file.empty()) a.stderr_file = spec::ExpandSlurmFilename(tt.stderr_file, f);
      }
      std::map<std::string, std::string> server_env = TaskEnv(j, b->task, b->allocation, placed);
      server_env["TESSERA_ALLOCATION"] = a.id;
      // The template's env under the server's; a Kubernetes container's $(VAR) references in
      // its env, command and args expanded against them.
      static const spec::TaskTemplate kNoTemplate;
      a.env = spec::TaskEnvironment(
          g < static_cast<int32_t>(j.spec.templates.size()) ? j.spec.templates[g] : kNoTemplate,
          std::move(server_env), &a.command);
      node_names.insert(a.placement.node);
      ops.push_back(AllocOp(a));
      j.allocations.push_back(a.id);
      auto pool = nodes_.at(a.placement.node).node.pool;
      auto be = backends_.find(pool);
      std::shared_ptr<Backend> backend = be == backends_.end() ? default_backend_ : be->second;
      after_commit_.push_back([backend, d = Dispatch{a.id, a.job, a.task, a.attempt, a.placement}] {
        backend->Launch(d);
      });
      KeepAllocation(std::move(a));
    }
    j.pending = {};  // (a running job's: its missing task is placed)
    j.infeasible = false;
    j.last_failed_scheduling.clear();
    // What ended the last attempt or task (evicted, failed) is history once it is placed
    // again: its events keep it; the job's message would read as if it still held.
    const bool had_message = !j.message.empty();
    j.message.clear();
    if (pending) {
      j.state = JobState::kScheduled;
      j.run_started_at = plan.now;
      if (bound) bound->push_back({j.spec.job.queue, EligibleSince(j), plan.now});
      ops.push_back(JobOp(j));
    } else if (had_message) {
      ops.push_back(JobOp(j));
    }
    AddEvent(ops, "Normal", "Scheduled", "job/" + jid,
             "assigned " + std::to_string(binds.size()) + " task(s) to " +
                 Join(std::vector<std::string>(node_names.begin(), node_names.end()), ", ") +
                 " (attempt " + std::to_string(j.attempt) + ")");
  }
  // Evictions: the victim stops (grace period) and follows its restart policy. An elastic
  // job keeping at least its gang minimum loses only the tasks the engine chose (it evicts
  // tasks above the minimum one by one): those stop and are placed again once they have
  // exited; the rest runs on.
  struct Victim {
    const Eviction* first = nullptr;
    std::set<std::string> allocations;  // the evicted ones
  };
  std::map<std::string, Victim> victims;
  for (const auto& e : plan.evictions) {
    auto o = owner.find(e.job);
    std::string jid = o == owner.end() ? e.job : o->second;
    Victim& v = victims[jid];
    if (v.first == nullptr) v.first = &e;
    auto ji = jobs_.find(jid);
    if (o != owner.end()) {
      v.allocations.insert(e.job.substr(e.job.find('#') + 1));  // a placeholder: job#alloc
    } else if (ji != jobs_.end()) {
      for (const auto& aid : ji->second.allocations) {
        const Allocation& a = allocations_.at(aid);
        if (a.task == e.task && a.attempt == ji->second.attempt && a.Live())
          v.allocations.insert(aid);
      }
    }
  }
  for (const auto& [jid, v] : victims) {
    auto ji = jobs_.find(jid);
    if (ji == jobs_.end()) continue;
    JobRecord& j = ji->second;
    if (j.state != JobState::kScheduled && j.state != JobState::kRunning) continue;
    const Eviction* e = v.first;
    const std::string reason = e->reason.empty() ? "Preempted" : e->reason;
    // The victim's owners see a preemptor of another queue (reclaim) by its queue only.
    auto pi = jobs_.find(e->preemptor);
    const std::string by = pi == jobs_.end() || pi->second.spec.job.queue == j.spec.job.queue
                               ? e->preemptor
                               : "a job of queue " + pi->second.spec.job.queue;
    std::string msg = e->reason + " by " + by + (e->message.empty() ? "" : ": " + e->message);
    int32_t live = 0;
    for (const auto& aid : j.allocations) {
      const Allocation& a = allocations_.at(aid);
      if (a.attempt == j.attempt && a.Live() && a.state != AllocState::kStopping) ++live;
    }
    const int32_t left = live - static_cast<int32_t>(v.allocations.size());
    if (left > 0 && left >= j.spec.job.GangMinimum()) {
      std::vector<std::string> tasks;
      for (const auto& aid : v.allocations) {
        Allocation& a = allocations_.at(aid);
        if (a.state != AllocState::kAssigned && a.state != AllocState::kRunning) continue;
        a.grace_period_seconds = e->grace_period_seconds;
        a.message = msg;
        StopAllocation(ops, a);
        tasks.push_back(std::to_string(a.task));
      }
      // Normal, as when the whole job is restarted (docs/lifecycle.md): a preemption is the
      // policy working, not a fault.
      AddEvent(ops, "Normal", reason, "job/" + j.id(),
               msg + "; task(s) " + Join(tasks, ", ") + " stopped, the job runs on with " +
                   std::to_string(left) + " (gang minimum " +
                   std::to_string(j.spec.job.GangMinimum()) + ")");
      continue;
    }
    for (const auto& aid : j.allocations) {
      Allocation& a = allocations_.at(aid);
      if (a.Live()) a.grace_period_seconds = e->grace_period_seconds;
    }
    OnTaskLoss(ops, j, true, reason, msg);
  }
  // Decisions: pending reasons, and FailedScheduling events when the reason changes.
  for (const auto& d : plan.decisions) {
    auto ji = jobs_.find(d.job);
    // A running job's decision is about its tasks still to place (restarted alone).
    if (ji == jobs_.end() || d.outcome == Outcome::kPlaced ||
        (ji->second.state != JobState::kPending && ji->second.state != JobState::kRunning &&
         ji->second.state != JobState::kScheduled))
      continue;
    JobRecord& j = ji->second;
    j.pending = d.reason != nullptr ? *d.reason : PendingReason{};
    j.infeasible = d.outcome == Outcome::kInfeasible;
    if (auto r = refused_.find(d.job); r != refused_.end())
      j.pending.message += (j.pending.message.empty() ? "" : " ") +
                           std::string("Refused by its pool on ") + r->second + ".";
    const PendingReason& why = j.pending;
    // The event's message is the dedupe key: a restart finds it in the job's events (Load).
    std::string message = std::string(OutcomeName(d.outcome)) + ": " + why.code +
                          (why.message.empty() ? "" : ": " + why.message);
    NoteVerdict(ops, j, message);
  }
  // Jobs whose dependency can never hold (the engine never sees them): said once as a
  // Warning, as a verdict is; cancelled instead if submitted with --kill-on-invalid-dep=yes,
  // as Slurm does.
  for (auto& [id, j] : jobs_) {
    if (j.state != JobState::kPending || j.spec.dependencies.empty() || !j.allocations.empty())
      continue;
    const DependencyWait w = WaitingOn(j);
    if (w.on == nullptr || !w.never) continue;
    if (j.spec.kill_on_invalid_dependency) {
      Terminate(ops, j, JobState::kCancelled, "DependencyNeverSatisfied",
                "cancelled: " + DependencyWords(w) + " (--kill-on-invalid-dep=yes)");
      continue;
    }
    const std::string message = "Waiting: DependencyNeverSatisfied: " + DependencyWords(w);
    NoteVerdict(ops, j, message);
  }
  return Commit(std::move(ops));
}

}  // namespace tessera::server
