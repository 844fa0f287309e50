// LocalAgents: the in-process agents of the embedded default (`tessera server --local-agent`).
//
// Starts one Agent per node of an inventory (the built-in seed inventory by default: 2 nodes
// x 8 virtual A100-80GB) in threads of this process, each against the same server URL and
// token, with its own work dir <work_dir>/<node> and logs port. Each logs endpoint requires
// a bearer token of its own, random unless given, which the agent gives the server (as a
// `tessera agent --logs-token` does): only the server's logs proxy reads task output, not any
// local user who finds the port. Stop() ends them cleanly. Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "common/status.h"

namespace tessera::agent {

struct LocalAgentsOptions {
  std::string server_url;  // e.g. "http://127.0.0.1:8080"
  std::string token;
  TlsClientOptions server_tls;             // AgentOptions::server_tls
  std::string inventory = "seed-minimal";  // "seed-minimal" (built in) or a file path
  std::string work_dir = "data/agents";
  uint64_t seed = 0;  // boot ids; 0 = from std::random_device
  int64_t lease_seconds = -1;
  std::string srun_program;  // see ExecutorOptions
  // The logs endpoints' bearer token (AgentOptions::logs_token); "" = a random one per agent.
  std::string logs_token;
  std::function<void(const std::string&)> log;
};

class LocalAgents {
 public:
  static StatusOr<std::unique_ptr<LocalAgents>> Start(const LocalAgentsOptions& options);
  ~LocalAgents();  // Stop(true)
  // With stop_tasks, every task is stopped (SIGTERM, grace, SIGKILL) before returning.
  void Stop(bool stop_tasks = true);
  std::vector<std::string> nodes() const;
  Agent* agent(const std::string& node);  // nullptr if unknown

 private:
  std::vector<std::unique_ptr<Agent>> agents_;
};

}  // namespace tessera::agent
