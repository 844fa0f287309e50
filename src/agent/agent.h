// Agent: one node's agent. Registers the node's inventory with the server, heartbeats its
// tasks' states and GPU samples, and makes the node run exactly the allocations that each
// heartbeat answer lists (docs/agent-protocol.md): it starts the missing ones and stops
// (SIGTERM, grace, SIGKILL) every process whose allocation id is not listed. It also serves
// its tasks' stdout/stderr at logsUrl for the server to proxy.
//
// Fencing: allocation ids are never reused, so a stale agent that comes back kills what the
// server moved elsewhere. While it cannot reach the server it keeps its tasks running for
// `lease_seconds` (default 10 heartbeats, 20 s: past a routine server restart, short of
// the 15 after which the server marks the node NotReady), then stops them itself, so that a
// partitioned node does not keep running a task the server may have started on another
// node. Tasks the agent stops on its own are reported `killed`: evictions, not failures.
//
// Thread-safe: Start() runs the loop and the logs server in threads; Stop() joins them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "agent/executor.h"
#include "agent/nvml.h"
#include "common/rng.h"
#include "common/status.h"
#include "common/tls.h"
#include "model/codec.h"
#include "model/node.h"

namespace httplib {
class Server;
}

namespace tessera::agent {

inline constexpr char kAgentVersion[] = "0.1.0";

struct AgentOptions {
  std::string server_url;          // "http://127.0.0.1:8080"
  std::string token;               // bearer token for /v1/agents/*
  TlsClientOptions server_tls;     // how an https:// server_url's certificate is checked
  Node node;                       // inventory: from an inventory file or DiscoverHostNode()
  std::string work_dir;            // task folders and logs; survives agent restarts
  std::string boot_id;             // random per agent process start (NewBootId)
  std::shared_ptr<NvmlGpus> nvml;  // null: devices are virtual; samples are derived from tasks
  std::string logs_host = "127.0.0.1";
  int logs_port = 0;           // 0: any free port
  std::string logs_advertise;  // URL given to the server; "" = http(s)://<logs_host>:<port>
  TlsServerFiles logs_tls;     // the logs endpoint serves HTTPS only when given
  // Bearer token the logs endpoint requires; "" = none. The agent gives it to the server
  // (`logsToken` in its registration and heartbeats), whose logs proxy sends it.
  std::string logs_token;
  int64_t lease_seconds = -1;                   // -1: 10 heartbeat intervals; 0: never self-fence
  std::string cgroup_parent;                    // see ExecutorOptions
  std::string cgroup_mount;                     // see ExecutorOptions ("" = this machine's)
  std::string srun_program;                     // see ExecutorOptions
  int64_t task_retention_seconds = 24 * 3600;   // see ExecutorOptions
  int64_t max_finished_tasks = 1000;            // see ExecutorOptions
  IdentityPolicy identity;                      // see ExecutorOptions
  std::function<int64_t()> wall_clock;          // seconds since the epoch; default: system clock
  std::function<void(const std::string&)> log;  // default: stderr
};

// 16 random hex characters.
std::string NewBootId(Rng& rng);

class Agent {
 public:
  static StatusOr<std::unique_ptr<Agent>> Create(AgentOptions options);
  ~Agent();  // Stop(false)

  // Adopts tasks from an earlier run in the work dir, then starts the logs server and loop.
  Status Start();
  // Ends the loop and the logs server. With stop_tasks, also stops every task (SIGTERM,
  // grace, SIGKILL) and waits for them; without, tasks keep running for the next agent.
  void Stop(bool stop_tasks);

  // Observers, for tests and the CLI.
  int64_t epoch() const { return epoch_.load(); }
  int64_t registrations() const { return registrations_.load(); }
  int64_t heartbeats_ok() const { return heartbeats_ok_.load(); }
  std::string logs_url() const;
  std::string last_error() const;
  Executor& executor() { return *executor_; }
  const Node& node() const { return opt_.node; }
  // The JSON bodies the agent sends (public for tests and `--discover`).
  Json RegisterBody() const;
  Json HeartbeatBody(const std::vector<TaskStatus>& tasks);
  static Json TasksJson(const std::vector<TaskStatus>& tasks);  // the "tasks" list of both

 private:
  explicit Agent(AgentOptions options);
  void Loop();
  Status Register();
  Status Heartbeat();
  Status Reconcile(const Json& answer, const std::vector<TaskStatus>& sent);
  void Log(const std::string& msg) const;
  void SetError(const std::string& e);
  Status StartLogsServer();

  AgentOptions opt_;
  // This work dir's id (<work dir>/agent-id, made once): the same across restarts of the
  // agent that owns these tasks, different for a second agent claiming the node's name.
  std::string instance_id_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<httplib::Server> logs_server_;
  std::thread logs_thread_, loop_thread_, fence_thread_;
  // The lease, on its own thread (FenceLoop): a heartbeat call blocked on a frozen server
  // (connect, write and read timeouts: up to 12 s) must not delay the self-fencing past the
  // time the server waits before it runs the tasks elsewhere.
  std::atomic<int64_t> last_ok_ms_{0};  // steady clock, of the last answered heartbeat
  std::atomic<bool> fenced_{false};
  std::atomic<bool> holding_{
      false};  // the server answered "hold" (read-only after a store failure)
  void FenceLoop();
  int64_t LeaseMillis() const;  // 0: no lease (--lease-seconds 0)
  // Marks the lease kept in LeaseFile(), which the task monitors read (ExecutorOptions).
  void TouchLease() const;
  std::string LeaseFile() const { return opt_.work_dir + "/lease"; }
  int logs_port_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool running_ = false;
  std::string last_error_;
  std::string last_sent_signature_;
  std::set<std::string> reported_final_;  // ended tasks whose state the server has acknowledged

  std::atomic<int64_t> epoch_{0};
  std::atomic<bool> registered_{false};
  std::atomic<int64_t> registrations_{0};
  std::atomic<int64_t> heartbeats_ok_{0};
  std::atomic<int64_t> heartbeat_ms_{2000};
};

}  // namespace tessera::agent
