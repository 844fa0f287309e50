// ApiServer: the REST/JSON API over a ControlPlane (docs/api.md; OpenAPI at /openapi.json).
//
// Loopback by default. Every /v1 route needs `Authorization: Bearer <token>`; errors are
// JSON {"error": {"code", "message", "retryable"}} with 4xx/5xx statuses; bodies over
// max_body_bytes get 413 before they are read. Start() binds (port 0 = any free port) and
// serves on its own threads until Stop(). Thread-safe.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "common/tls.h"
#include "server/control_plane.h"

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace tessera::server {

struct ApiOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  size_t max_body_bytes = 4 << 20;
  int threads = 64;
  // GET /v1/jobs/{id}/logs?follow=true answers at once when there are new bytes or the task
  // ended, else after waiting this long for either (long poll).
  int64_t logs_follow_wait_ms = 10000;
  // Take any logsUrl from agents, not only one naming the address they connect from
  // (logs_url.h): for agents that serve logs on another network, or behind NAT.
  bool agent_logs_any_host = false;
  // HTTPS only when given (docs/security.md); url() then says https://.
  TlsServerFiles tls;
  // How the logs proxy checks agents whose logsUrl is https:// (--agent-cacert).
  TlsClientOptions agent_tls;
};

// A request path's route pattern for metrics: "/v1/jobs/{name}/logs" for /v1/jobs/x/logs;
// "other" for a path no route serves (a scan of random paths must not add series).
std::string RouteTemplate(const std::string& path);

class ApiServer {
 public:
  ApiServer(ControlPlane& cp, ApiOptions options);
  ~ApiServer();
  Status Start();  // binds and starts serving
  void Stop();
  int port() const { return port_; }
  std::string url() const {
    return (options_.tls.enabled() ? "https://" : "http://") + options_.host + ":" +
           std::to_string(port_);
  }

 private:
  void Routes();
  ControlPlane& cp_;
  ApiOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> stopping_{false};  // ends long polls early
  // Long polls waiting now: each holds one of the server's threads (see the logs route).
  std::atomic<int> following_{0};
  // (logsUrl, peer) pairs that passed CheckLogsUrlNamesPeer: every heartbeat carries the URL,
  // and a host name is not resolved again for each.
  std::mutex logs_urls_mu_;
  std::set<std::pair<std::string, std::string>> logs_urls_ok_;
  Status CheckAgentLogsUrl(const httplib::Request& req, const Json& body);
};

// The OpenAPI 3 document served at /openapi.json.
const std::string& OpenApiJson();

}  // namespace tessera::server
