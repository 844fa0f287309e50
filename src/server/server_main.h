// RunServer: what `tessera server` does, as a library function (tests and benchmarks reuse it).
//
// Opens the store (SQLite under data_dir, or etcd: then it first waits to lead), loads the engine
// config, restores every record, applies the bootstrap documents (queues, priority classes), makes
// sure an admin and an agent token exist (written to <data_dir>/admin.token and agent.token, mode
// 0600, when the server generated them), serves the API, writes <data_dir>/server.url, and runs
// until SIGINT/SIGTERM. Not thread-safe; one per process.
#pragma once

#include <string>

#include "common/status.h"
#include "common/tls.h"

namespace tessera::server {

struct ServerFlags {
  std::string data_dir = "data";
  // "" = SQLite in data_dir; "etcd://HOST:PORT[,HOST:PORT...]" = etcd, several servers of
  // which one leads (docs/store.md); "etcd+https://..." the same over HTTPS. The tokens and
  // server.url files stay in data_dir.
  std::string store;
  std::string etcd_prefix = "/tessera/";
  int64_t etcd_lease_seconds = 10;
  // What the etcd allows (its --max-txn-ops, --max-request-bytes); see docs/store.md.
  int64_t etcd_max_txn_ops = 128;
  int64_t etcd_max_request_bytes = 1536 * 1024;
  // etcd+https://: the CA of etcd's certificate ("" = the system's), and a client certificate
  // and key for an etcd run with --client-cert-auth (docs/store.md, TLS).
  std::string etcd_cacert, etcd_cert, etcd_key;
  std::string listen = "127.0.0.1:8080";
  std::string engine_config;  // optional
  std::string bootstrap_dir;  // "" = examples/seed when it exists
  std::string auth_config;    // optional
  bool local_agent = false;
  bool agent_logs_any_host = false;  // ApiOptions::agent_logs_any_host
  // HTTPS (docs/security.md): the API's certificate and key, and the CA file the logs proxy
  // trusts for agents serving https:// ("" = the system's CAs).
  TlsServerFiles tls;
  std::string agent_cacert;
  bool synchronous_full = true;
  uint64_t seed = 1;
  // Event retention (docs/lifecycle.md); 0 = no bound.
  int64_t max_events_per_job = 200;
  int64_t max_events = 500000;
  int64_t event_ttl_seconds = 14 * 24 * 3600;
  int64_t finished_job_ttl_seconds = 7 * 24 * 3600;
};

// The exit status of a server whose etcd store stopped leading (EX_TEMPFAIL): restart it,
// it comes back as a standby.
inline constexpr int kExitLostLeadership = 75;

Status RunServer(const ServerFlags& flags);

}  // namespace tessera::server
