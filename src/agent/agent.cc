#include "agent/agent.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <httplib.h>

#include "common/file_chunk.h"
#include "common/int_param.h"
#include "common/listen_socket.h"

namespace tessera::agent {

namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t SteadyMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             SteadyClock::now().time_since_epoch())
      .count();
}

// Which tasks are in which state: a change is worth an early heartbeat.
std::string Signature(const std::vector<TaskStatus>& tasks) {
  std::string s;
  for (const auto& t : tasks)
    s += t.allocation + ":" + TaskStateName(t.state) + (t.stopping ? "!" : "") + ";";
  return s;
}

StatusOr<TaskSpec> SpecFromJson(const Json& a, const std::string& path) {
  TaskSpec spec;
  if (!a.is_object()) return InvalidArgument(path + ": must be an object");
  // Lenient on purpose: fields a newer server adds are ignored, not fatal.
  auto str = [&](const char* k, std::string& out, bool required) -> Status {
    if (!a.contains(k))
      return required ? InvalidArgument(path + "." + k + ": required") : Status::Ok();
    if (!a[k].is_string()) return InvalidArgument(path + "." + k + ": must be a string");
    out = a[k].get<std::string>();
    return Status::Ok();
  };
  auto integer = [&](const char* k, auto& out) -> Status {
    if (!a.contains(k)) return Status::Ok();
    if (!a[k].is_number_integer()) return InvalidArgument(path + "." + k + ": must be an integer");
    out = a[k].get<std::remove_reference_t<decltype(out)>>();
    return Status::Ok();
  };
  TESSERA_RETURN_IF_ERROR(str("allocation", spec.allocation, true));
  if (!ValidAllocationId(spec.allocation))
    return InvalidArgument(path + ".allocation: \"" + spec.allocation + "\" is not a valid id");
  TESSERA_RETURN_IF_ERROR(str("job", spec.job, false));
  TESSERA_RETURN_IF_ERROR(str("script", spec.script, false));
  TESSERA_RETURN_IF_ERROR(str("workingDir", spec.working_dir, false));
  TESSERA_RETURN_IF_ERROR(str("stdoutFile", spec.stdout_file, false));
  TESSERA_RETURN_IF_ERROR(str("stderrFile", spec.stderr_file, false));
  TESSERA_RETURN_IF_ERROR(integer("task", spec.task));
  TESSERA_RETURN_IF_ERROR(integer("attempt", spec.attempt));
  TESSERA_RETURN_IF_ERROR(integer("gracePeriodSeconds", spec.grace_period_seconds));
  // An empty command fails that task when it starts ("command: empty"), not the answer:
  // refusing a whole answer stops the heartbeats, and the lease then stops every task here.
  if (a.contains("command") && !a["command"].is_array())
    return InvalidArgument(path + ".command: must be a list of strings");
  for (size_t i = 0; a.contains("command") && i < a["command"].size(); ++i) {
    if (!a["command"][i].is_string())
      return InvalidArgument(path + ".command[" + std::to_string(i) + "]: must be a string");
    spec.command.push_back(a["command"][i].get<std::string>());
  }
  if (a.contains("env")) {
    if (!a["env"].is_object()) return InvalidArgument(path + ".env: must be an object");
    for (const auto& [k, v] : a["env"].items()) {
      if (!v.is_string()) return InvalidArgument(path + ".env." + k + ": must be a string");
      spec.env[k] = v.get<std::string>();
    }
  }
  // Who the task runs as. One the agent cannot read fails that task (never runs it as the
  // agent's own user instead), and not the answer, as an empty command.
  if (a.contains("securityContext")) {
    auto run_as = RunAsFromJson(a["securityContext"], path + ".securityContext");
    if (run_as.ok())
      spec.run_as = std::move(*run_as);
    else
      spec.unreadable = run_as.status().message();
  }
  TESSERA_RETURN_IF_ERROR(str("submitter", spec.submitter, false));
  if (a.contains("cpu")) {
    auto m = JsonMilli(a["cpu"], path + ".cpu");
    if (!m.ok()) return m.status();
    spec.cpu_milli = *m;
  }
  if (a.contains("memory")) {
    auto b = JsonBytes(a["memory"], path + ".memory");
    if (!b.ok()) return b.status();
    spec.memory_bytes = *b;
  }
  if (a.contains("devices")) {
    if (!a["devices"].is_array()) return InvalidArgument(path + ".devices: must be a list");
    for (size_t i = 0; i < a["devices"].size(); ++i) {
      const Json& d = a["devices"][i];
      const std::string p = path + ".devices[" + std::to_string(i) + "]";
      if (!d.is_object() || !d.contains("device") || !d["device"].is_number_integer())
        return InvalidArgument(p + ".device: required integer");
      DeviceAssignment da;
      da.device = d["device"].get<int32_t>();
      if (d.contains("milli") && d["milli"].is_number_integer())
        da.milli = d["milli"].get<int32_t>();
      if (d.contains("migInstance") && d["migInstance"].is_number_integer())
        da.mig_instance = d["migInstance"].get<int32_t>();
      if (d.contains("memory")) {
        auto b = JsonBytes(d["memory"], p + ".memory");
        if (!b.ok()) return b.status();
        da.memory_bytes = *b;
      }
      spec.devices.push_back(da);
    }
  }
  return spec;
}

// What the agent's tasks run as, said once at start (docs/agent.md, "Task identity").
std::string IdentityNotice(const IdentityPolicy& p) {
  const bool root = ::geteuid() == 0;
  std::string s = "tasks run as ";
  if (p.run_as_submitter)
    s += "their submitters' Unix accounts (--run-as-submitter); a securityContext may name "
         "only the submitter's own ids" +
         std::string(p.allowed_uids.empty() && p.allowed_gids.empty()
                         ? ""
                         : " and those --allow-run-as-uids/--allow-run-as-gids list");
  else
    s += "this agent's own user (uid " + std::to_string(::geteuid()) +
         ") unless their securityContext names a runAsUser";
  if (!root) return s + "; not root: a task asking for another user fails";
  if (!p.allow_root_tasks)
    return s + (p.run_as_submitter ? "; none runs as root (uid 0) or with its group (gid 0)"
                                   : "; that is root, and no task runs as root "
                                     "(--allow-root-tasks=false): only tasks that name a "
                                     "runAsUser other than 0 run here");
  if (p.run_as_submitter) return s + "; tasks may run as root (--allow-root-tasks)";
  return s +
         "; that is root: every task of every tenant runs as root here (use "
         "--run-as-submitter, or give jobs a runAsUser, and --allow-root-tasks=false on "
         "shared nodes)";
}

// The logs endpoint reads at most this much per request (docs/agent.md).
constexpr int64_t kLogChunkDefault = int64_t{1} << 20;
constexpr int64_t kLogChunkMax = int64_t{8} << 20;

// An error of the logs endpoint: {"error": why}, as the server's logs proxy reads it.
void RefuseLogs(httplib::Response& res, int status, const std::string& why) {
  res.status = status;
  res.set_content(Json{{"error", why}}.dump(-1, ' ', false, Json::error_handler_t::replace),
                  "application/json");
}

std::unique_ptr<httplib::Client> MakeClient(const std::string& url, const std::string& token,
                                            const TlsClientOptions& tls) {
  auto c = std::make_unique<httplib::Client>(url);
  ApplyTls(*c, tls);
  c->set_connection_timeout(2, 0);
  c->set_read_timeout(5, 0);
  c->set_write_timeout(5, 0);
  if (!token.empty()) c->set_bearer_token_auth(token.c_str());
  return c;
}

}  // namespace

std::string NewBootId(Rng& rng) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  uint64_t v = rng.Next();
  for (int i = 0; i < 16; ++i, v >>= 4) s += kHex[v & 15];
  return s;
}

Agent::Agent(AgentOptions options) : opt_(std::move(options)) {}

StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  if (options.server_url.empty())
    return InvalidArgument("server: required (e.g. http://127.0.0.1:8080)");
  if (options.node.name.empty()) return InvalidArgument("node.name: required");
  if (options.work_dir.empty()) return InvalidArgument("work dir: required");
  if (options.boot_id.empty()) return InvalidArgument("boot id: required (NewBootId)");
  if (!options.wall_clock) {
    options.wall_clock = [] {
      return std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  if (!options.log) {
    options.log = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  }
  // mkdir -p of the work dir
  for (size_t pos = 1; pos != std::string::npos; pos = options.work_dir.find('/', pos + 1))
    ::mkdir(options.work_dir.substr(0, pos).c_str(), 0755);
  ::mkdir(options.work_dir.c_str(), 0755);
  std::unique_ptr<Agent> a(new Agent(std::move(options)));
  {
    const std::string path = a->opt_.work_dir + "/agent-id";
    std::ifstream in(path);
    std::getline(in, a->instance_id_);
    if (a->instance_id_.empty()) {
      a->instance_id_ = a->opt_.boot_id;  // random; kept from now on
      std::ofstream out(path, std::ios::trunc);
      out << a->instance_id_ << "\n";
      if (!out) return Unavailable("cannot write " + path + " (is the work dir writable?)");
    }
  }
  ExecutorOptions eo;
  eo.work_dir = a->opt_.work_dir;
  eo.node = a->opt_.node;
  eo.wall_clock = a->opt_.wall_clock;
  eo.cgroup_parent = a->opt_.cgroup_parent;
  eo.cgroup_mount = a->opt_.cgroup_mount;
  eo.srun_program = a->opt_.srun_program;
  eo.task_retention_seconds = a->opt_.task_retention_seconds;
  eo.max_finished_tasks = a->opt_.max_finished_tasks;
  eo.identity = a->opt_.identity;
  Agent* self = a.get();
  eo.log = [self](const std::string& m) { self->Log(m); };
  eo.lease_file = a->LeaseFile();
  eo.lease_seconds = [self] { return (self->LeaseMillis() + 999) / 1000; };
  a->executor_ = std::make_unique<Executor>(std::move(eo));
  return a;
}

Agent::~Agent() { Stop(false); }

void Agent::Log(const std::string& msg) const { opt_.log("agent " + opt_.node.name + ": " + msg); }

void Agent::SetError(const std::string& e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (e != last_error_ && !e.empty()) Log(e);
  last_error_ = e;
}

std::string Agent::last_error() const {
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
  return last_error_;
}

std::string Agent::logs_url() const {
  if (!opt_.logs_advertise.empty()) return opt_.logs_advertise;
  std::string host = opt_.logs_host == "0.0.0.0" ? "127.0.0.1" : opt_.logs_host;
  return (opt_.logs_tls.enabled() ? "https://" : "http://") + host + ":" +
         std::to_string(logs_port_);
}

Status Agent::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (running_) return FailedPrecondition("agent " + opt_.node.name + ": already started");
  }
  TESSERA_RETURN_IF_ERROR(executor_->Recover());
  for (const auto& t : executor_->Statuses())
    Log("adopted allocation " + t.allocation + " (" + TaskStateName(t.state) +
        ") from an earlier agent run");
  TESSERA_RETURN_IF_ERROR(StartLogsServer());
  Log("cgroup limits " + executor_->cgroup_status());
  Log(IdentityNotice(opt_.identity));
  std::lock_guard<std::mutex> lock(mu_);
  stop_ = false;
  running_ = true;
  last_ok_ms_ = SteadyMillis();
  TouchLease();  // adopted tasks' monitors wait on it
  fenced_ = false;
  loop_thread_ = std::thread([this] { Loop(); });
  fence_thread_ = std::thread([this] { FenceLoop(); });
  return Status::Ok();
}

void Agent::Stop(bool stop_tasks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (loop_thread_.joinable()) loop_thread_.join();
  if (fence_thread_.joinable()) fence_thread_.join();
  if (stop_tasks && executor_) {
    executor_->StopAll("agent shutting down");
    executor_->WaitAll(executor_->MaxGraceSeconds() * 1000 + 5000);
  }
  if (logs_server_) logs_server_->stop();
  if (logs_thread_.joinable()) logs_thread_.join();
  logs_server_.reset();
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
}

Status Agent::StartLogsServer() {
  auto server = NewHttpServer(opt_.logs_tls);
  if (!server.ok()) return server.status().WithContext("logs server");
  logs_server_ = std::move(*server);
  const std::string token = opt_.logs_token;
  Executor* ex = executor_.get();
  auto authorised = [token](const httplib::Request& req, httplib::Response& res) {
    if (token.empty() || req.get_header_value("Authorization") == "Bearer " + token) return true;
    RefuseLogs(res, 401, "missing or wrong bearer token");
    return false;
  };
  logs_server_->Get(R"(/v1/logs/([^/]+))", [ex, authorised](const httplib::Request& req,
                                                            httplib::Response& res) {
    if (!authorised(req, res)) return;
    const std::string alloc = req.matches[1];
    const std::string stream = req.has_param("stream") ? req.get_param_value("stream") : "stdout";
    if (ex->LogPath(alloc, stream).empty())
      return RefuseLogs(res, 400, "bad allocation id or stream (stdout|stderr)");
    // Refused, not clamped: a negative or garbled value is the caller's bug, better said than
    // answered with bytes from somewhere else. A limit past 8 MiB is read as 8 MiB.
    auto param = [&req](const char* name, int64_t def) -> StatusOr<int64_t> {
      if (!req.has_param(name)) return def;
      return ParseIntParam(name, req.get_param_value(name), 0, INT64_MAX);
    };
    auto offset = param("offset", 0);
    if (!offset.ok()) return RefuseLogs(res, 400, offset.status().message());
    auto limit = param("limit", kLogChunkDefault);
    if (!limit.ok()) return RefuseLogs(res, 400, limit.status().message());
    auto chunk = ex->ReadLog(alloc, stream, *offset, std::min(*limit, kLogChunkMax));
    if (!chunk.ok()) {
      if (chunk.status().code() == StatusCode::kPermissionDenied)
        return RefuseLogs(res, 403, chunk.status().message());
      // Removed by the retention: gone for good, and the caller is told why (410).
      if (std::string notice = ex->RemovalNotice(alloc); !notice.empty())
        return RefuseLogs(res, 410, notice);
      return RefuseLogs(res, 404, "no logs for allocation " + alloc);
    }
    const int64_t from = std::min(*offset, chunk->size);
    const int64_t size = chunk->size;
    std::string& body = chunk->data;
    std::string state = "unknown";
    for (const auto& t : ex->Statuses()) {
      if (t.allocation == alloc) state = TaskStateName(t.state);
    }
    res.set_header("X-Tessera-Log-Size", std::to_string(size));
    const std::string next = std::to_string(from + static_cast<int64_t>(body.size()));
    res.set_header("X-Next-Offset", next);
    res.set_header("X-Tessera-Next-Offset", next);
    res.set_header("X-Tessera-Task-State", state);
    res.set_content(body, "text/plain; charset=utf-8");
  });
  logs_server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  logs_server_->set_socket_options(ReuseAddressOnly);  // a second agent must fail to bind
  int port =
      opt_.logs_port == 0
          ? logs_server_->bind_to_any_port(opt_.logs_host)
          : (logs_server_->bind_to_port(opt_.logs_host, opt_.logs_port) ? opt_.logs_port : -1);
  if (port <= 0)
    return Unavailable("logs server: cannot listen on " + opt_.logs_host + ":" +
                       std::to_string(opt_.logs_port));
  logs_port_ = port;
  logs_thread_ = std::thread([this] { logs_server_->listen_after_bind(); });
  // httplib ignores a stop() that comes before its loop runs (Stop would then hang).
  for (int i = 0; i < 5000 && !logs_server_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return Status::Ok();
}

Json Agent::RegisterBody() const {
  Json body = Json::object();
  body["node"] = NodeToJson(opt_.node);
  body["agentVersion"] = kAgentVersion;
  body["bootId"] = opt_.boot_id;
  body["instanceId"] = instance_id_;
  body["logsUrl"] = logs_url();
  // The bearer token the logs endpoint requires, for the server's logs proxy to send.
  if (!opt_.logs_token.empty()) body["logsToken"] = opt_.logs_token;
  // The server waits this long (and the tasks' grace) before running a lost node's work
  // elsewhere; absent, it assumes the default of 10 heartbeats.
  if (opt_.lease_seconds >= 0) body["leaseSeconds"] = opt_.lease_seconds;
  // The tasks this agent holds, adopted from an earlier agent process included: the server
  // keeps those allocations instead of writing them off with the old boot id.
  body["tasks"] = TasksJson(executor_->Statuses());
  return body;
}

Json Agent::TasksJson(const std::vector<TaskStatus>& tasks) {
  Json ts = Json::array();
  for (const auto& t : tasks) {
    ts.push_back({{"allocation", t.allocation},
                  {"state", TaskStateName(t.state)},
                  {"exitCode", t.exit_code},
                  {"pid", t.pid},
                  {"startedAt", t.started_at},
                  {"finishedAt", t.finished_at},
                  {"message", t.message}});
    if (t.ran_as.known()) ts.back()["runAs"] = RanAsToJson(t.ran_as);
  }
  return ts;
}

Json Agent::HeartbeatBody(const std::vector<TaskStatus>& tasks) {
  Json body = Json::object();
  body["epoch"] = epoch_.load();
  Json devices = Json::array();
  const auto& devs = opt_.node.devices;
  if (opt_.nvml) {
    for (const auto& s : opt_.nvml->Sample()) {
      Json d = {{"index", s.index},
                {"utilPercent", s.util_percent},
                {"memoryUsed", s.memory_used_bytes},
                {"powerMilliwatts", s.power_milliwatts},
                {"healthy", s.healthy}};
      if (!s.health_message.empty()) d["healthMessage"] = s.health_message;
      devices.push_back(d);
    }
  } else {
    // Virtual GPUs have no counters: report what the running tasks were given, marked virtual.
    std::vector<int64_t> milli(devs.size(), 0), mem(devs.size(), 0);
    for (const auto& t : tasks) {
      if (t.state != TaskState::kRunning) continue;
      for (const auto& a : t.devices) {
        if (a.device < 0 || a.device >= static_cast<int32_t>(devs.size())) continue;
        milli[a.device] += a.milli;
        mem[a.device] += a.memory_bytes > 0 ? a.memory_bytes
                         : a.milli >= 1000  ? devs[a.device].memory_bytes
                                            : 0;
      }
    }
    for (size_t i = 0; i < devs.size(); ++i) {
      devices.push_back({{"index", devs[i].index},
                         {"utilPercent", std::min<int64_t>(100, milli[i] / 10)},
                         {"memoryUsed", std::min(mem[i], devs[i].memory_bytes)},
                         {"powerMilliwatts", 0},
                         {"healthy", devs[i].healthy},
                         {"virtual", true}});
    }
  }
  body["devices"] = devices;
  body["tasks"] = TasksJson(tasks);
  body["logsUrl"] = logs_url();
  // Again on every heartbeat: a restarted server keeps no token (it stores none) and hears
  // no registration from an agent whose epoch it still has.
  if (!opt_.logs_token.empty()) body["logsToken"] = opt_.logs_token;
  return body;
}

Status Agent::Register() {
  auto cli = MakeClient(opt_.server_url, opt_.token, opt_.server_tls);
  auto res = cli->Post("/v1/agents/register", RegisterBody().dump(), "application/json");
  if (!res)
    return Unavailable("register: cannot reach " + opt_.server_url + ": " +
                       DescribeHttpError(*cli, res.error(), opt_.server_url, opt_.server_tls));
  if (res->status != 200 && res->status != 201)
    return Status(
        res->status == 401 || res->status == 403 ? StatusCode::kUnauthenticated
                                                 : StatusCode::kUnavailable,
        "register: HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300));
  Json ans = Json::parse(res->body, nullptr, false);
  if (ans.is_discarded() || !ans.is_object() || !ans.contains("epoch") ||
      !ans["epoch"].is_number_integer())
    return Unavailable("register: answer lacks an integer epoch: " + res->body.substr(0, 300));
  epoch_ = ans["epoch"].get<int64_t>();
  if (ans.contains("heartbeatSeconds") && ans["heartbeatSeconds"].is_number_integer() &&
      ans["heartbeatSeconds"].get<int64_t>() > 0)
    heartbeat_ms_ = ans["heartbeatSeconds"].get<int64_t>() * 1000;
  if (ans.value("hold", false)) {
    // A read-only server (its store failed) cannot register us now; it is there, so the
    // lease holds and tasks stay as they are. Registered for real once it is restarted.
    if (!holding_.exchange(true)) Log("server says hold: " + ans.value("message", ""));
    return Status::Ok();
  }
  registered_ = true;
  ++registrations_;
  Log("registered with " + opt_.server_url + " (epoch " + std::to_string(epoch_.load()) + ", " +
      std::to_string(opt_.node.devices.size()) + " GPUs" +
      (!opt_.node.devices.empty() && opt_.node.devices[0].is_virtual ? ", virtual" : "") + ")");
  return Status::Ok();
}

Status Agent::Heartbeat() {
  const std::vector<TaskStatus> tasks = executor_->Statuses();
  Json body = HeartbeatBody(tasks);
  auto cli = MakeClient(opt_.server_url, opt_.token, opt_.server_tls);
  std::string name;
  for (unsigned char c : opt_.node.name) {  // percent-encode the path segment
    static const char kHex[] = "0123456789ABCDEF";
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      name += static_cast<char>(c);
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  const std::string path = "/v1/agents/" + name + "/heartbeat";
  auto res = cli->Post(path.c_str(), body.dump(), "application/json");
  if (!res)
    return Unavailable("heartbeat: cannot reach " + opt_.server_url + ": " +
                       DescribeHttpError(*cli, res.error(), opt_.server_url, opt_.server_tls));
  if (res->status == 409 || res->status == 404) {
    registered_ = false;  // stale epoch, or a server that forgot us: register again
    return Unavailable("heartbeat: HTTP " + std::to_string(res->status) + ", registering again");
  }
  if (res->status != 200)
    return Status(
        res->status == 401 || res->status == 403 ? StatusCode::kUnauthenticated
                                                 : StatusCode::kUnavailable,
        "heartbeat: HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 300));
  Json ans = Json::parse(res->body, nullptr, false);
  if (ans.is_discarded() || !ans.is_object())
    return Unavailable("heartbeat: answer is not a JSON object");
  // The server answered: the lease is renewed before any task of this answer starts. (An
  // agent that had waited past its lease to register started tasks on a stale lease file,
  // and their monitors, or the fence thread, stopped them at once.)
  last_ok_ms_ = SteadyMillis();
  TouchLease();
  if (ans.value("hold", false)) {
    // The server cannot store anything now (its store failed): it is there, so the lease is
    // kept; tasks stay as they are and their reports are sent again later.
    if (!holding_.exchange(true)) Log("server says hold: " + ans.value("message", ""));
  } else {
    if (holding_.exchange(false)) Log("server no longer says hold");
    TESSERA_RETURN_IF_ERROR(Reconcile(ans, tasks));
  }
  ++heartbeats_ok_;
  std::lock_guard<std::mutex> lock(mu_);
  last_sent_signature_ = Signature(tasks);
  return Status::Ok();
}

Status Agent::Reconcile(const Json& ans, const std::vector<TaskStatus>& sent) {
  if (!ans.contains("allocations") || !ans["allocations"].is_array())
    return Unavailable("heartbeat answer: allocations: required list");
  // Parse everything first: a malformed answer must not make us kill what it failed to list.
  std::map<std::string, TaskSpec> desired;
  for (size_t i = 0; i < ans["allocations"].size(); ++i) {
    auto spec = SpecFromJson(ans["allocations"][i], "allocations[" + std::to_string(i) + "]");
    if (!spec.ok()) return spec.status().WithContext("heartbeat answer");
    desired[spec->allocation] = std::move(*spec);
  }
  if (ans.contains("heartbeatSeconds") && ans["heartbeatSeconds"].is_number_integer() &&
      ans["heartbeatSeconds"].get<int64_t>() > 0)
    heartbeat_ms_ = ans["heartbeatSeconds"].get<int64_t>() * 1000;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& t : sent) {
      if (t.state != TaskState::kRunning) reported_final_.insert(t.allocation);
    }
  }
  for (const auto& t : executor_->Statuses()) {
    if (desired.count(t.allocation)) continue;
    if (t.state == TaskState::kRunning) {
      if (!t.stopping) {
        Log("stopping allocation " + t.allocation + " (job " + t.job + " task " +
            std::to_string(t.task) + "): not in the server's desired state");
        executor_->Stop(t.allocation, "stopped: allocation no longer assigned to this node");
      }
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (reported_final_.count(t.allocation)) {
        executor_->Forget(t.allocation);
        reported_final_.erase(t.allocation);
      }
    }
  }
  // A task still exiting (SIGTERM sent, grace running) holds its job and its GPUs: a new
  // allocation of the same job or on one of those GPUs waits for it, so that a restarted
  // gang never overlaps its previous attempt and no GPU is shared by accident.
  std::set<std::string> exiting_jobs;
  std::set<int32_t> exiting_devices;
  for (const auto& t : executor_->Statuses()) {
    if (t.state != TaskState::kRunning || !t.stopping) continue;
    exiting_jobs.insert(t.job);
    for (const auto& d : t.devices) exiting_devices.insert(d.device);
  }
  for (const auto& [id, spec] : desired) {
    if (executor_->Has(id)) continue;
    bool wait = exiting_jobs.count(spec.job) > 0;
    for (const auto& d : spec.devices) wait = wait || exiting_devices.count(d.device) > 0;
    if (wait) {
      Log("allocation " + id + " waits for a stopping task of job " + spec.job + " or on its GPUs");
      continue;
    }
    Log("starting allocation " + id + " (job " + spec.job + " task " + std::to_string(spec.task) +
        ")");
    Status s = executor_->Start(spec);
    if (!s.ok()) Log("allocation " + id + ": " + s.ToString());
  }
  // The folders of finished tasks go after the retention, never one this answer lists.
  std::set<std::string> listed;
  for (const auto& [id, spec] : desired) listed.insert(id);
  const std::vector<std::string> removed = executor_->RemoveOldTaskFolders(listed);
  if (!removed.empty())
    Log("removed the folders of " + std::to_string(removed.size()) +
        " finished task(s) past their retention, the oldest " + removed.front());
  return Status::Ok();
}

void Agent::Loop() {
  auto next_call = SteadyClock::now();
  int64_t backoff_ms = 200;
  bool last_call_ok = false;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) break;
    }
    executor_->Poll();
    const auto now = SteadyClock::now();
    bool changed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      changed = last_call_ok && Signature(executor_->Statuses()) != last_sent_signature_;
    }
    if (now >= next_call || changed) {
      Status s = Status::Ok();
      if (!registered_) s = Register();
      if (s.ok()) s = Heartbeat();
      if (!s.ok() && !registered_ && s.code() == StatusCode::kUnavailable &&
          s.message().find("registering again") != std::string::npos) {
        s = Register();  // 409/404: once more right away
        if (s.ok()) s = Heartbeat();
      }
      last_call_ok = s.ok();
      if (s.ok()) {
        if (fenced_.exchange(false)) Log("server reachable again");
        SetError("");
        last_ok_ms_ = SteadyMillis();
        TouchLease();
        backoff_ms = 200;
        next_call = SteadyClock::now() + std::chrono::milliseconds(heartbeat_ms_.load());
      } else {
        SetError(s.message());
        next_call = SteadyClock::now() +
                    std::chrono::milliseconds(std::min(backoff_ms, heartbeat_ms_.load()));
        backoff_ms = std::min<int64_t>(backoff_ms * 2, 5000);
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; });
  }
}

int64_t Agent::LeaseMillis() const {
  return opt_.lease_seconds >= 0 ? opt_.lease_seconds * 1000 : 10 * heartbeat_ms_.load();
}

void Agent::TouchLease() const {
  const std::string path = LeaseFile();
  if (::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) ::close(fd);
}

void Agent::FenceLoop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_; });
      if (stop_) break;
    }
    // Default: 10 heartbeats (20 s), past a routine server restart, and short of the 15 after
    // which the server writes the node off (it runs the tasks elsewhere only after this
    // lease, a heartbeat and their grace period).
    const int64_t lease_ms = LeaseMillis();
    const int64_t silent_ms = SteadyMillis() - last_ok_ms_.load();
    if (lease_ms > 0 && !fenced_ && silent_ms > lease_ms) {
      fenced_ = true;
      bool any = false;
      for (const auto& t : executor_->Statuses())
        any = any || (t.state == TaskState::kRunning && !t.stopping);
      if (any) {
        Log("no answer from the server for " + std::to_string(silent_ms / 1000) +
            " s: stopping every task (self-fencing; the server may run them elsewhere)");
        executor_->StopAll("stopped: agent lost contact with the server (lease expired)");
      }
    }
    // The grace period's SIGKILL is the executor's Poll: on time even while a heartbeat
    // call blocks the loop.
    if (fenced_) executor_->Poll();
  }
}

}  // namespace tessera::agent
