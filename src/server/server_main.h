// RunServer: what `tessera server` does, as a library function (tests and benchmarks reuse it).
//
// Opens the store under data_dir, loads the engine config, restores every record, applies
// the bootstrap documents (queues, priority classes), makes sure an admin and an agent
// token exist (written to <data_dir>/admin.token and agent.token, mode 0600, when the
// server generated them), serves the API, writes <data_dir>/server.url, and runs until
// SIGINT/SIGTERM. Not thread-safe; one per process.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera::server {

struct ServerFlags {
  std::string data_dir = "data";
  std::string listen = "127.0.0.1:8080";
  std::string engine_config;  // optional
  std::string bootstrap_dir;  // "" = examples/seed when it exists
  std::string auth_config;    // optional
  bool local_agent = false;
  bool agent_logs_any_host = false;  // ApiOptions::agent_logs_any_host
  bool synchronous_full = true;
  uint64_t seed = 1;
  // Event retention (docs/lifecycle.md); 0 = no bound.
  int64_t max_events_per_job = 200;
  int64_t max_events = 500000;
  int64_t event_ttl_seconds = 14 * 24 * 3600;
  int64_t finished_job_ttl_seconds = 7 * 24 * 3600;
};

Status RunServer(const ServerFlags& flags);

}  // namespace tessera::server
