#include "server/api.h"

#include "common/file_chunk.h"
#include "common/int_param.h"
#include "common/listen_socket.h"
#include "server/logs_url.h"
#include "server/observability_routes.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>
#include <thread>
#include <vector>

namespace tessera::server {

std::string RouteTemplate(const std::string& path) {
  static const std::set<std::string, std::less<>> kFixed = {
      "/",          "/healthz",  "/readyz",    "/metrics",           "/openapi.json",
      "/v1/jobs",   "/v1/nodes", "/v1/pools",  "/v1/queues",         "/v1/priorityclasses",
      "/v1/tokens", "/v1/audit", "/v1/events", "/v1/agents/register"};
  if (kFixed.count(path)) return path;
  if (path == "/ui" || path.starts_with("/ui/")) return "/ui";
  // /v1/<collection>/<name>[/<verb>]
  std::vector<std::string_view> parts;
  for (size_t at = 1; at <= path.size();) {
    const size_t slash = std::min(path.find('/', at), path.size());
    parts.emplace_back(path.data() + at, slash - at);
    at = slash + 1;
  }
  static const std::map<std::string_view, std::set<std::string_view>> kNamed = {
      {"jobs", {"", "cancel", "hold", "release", "scale", "describe", "logs"}},
      {"nodes", {"", "cordon", "uncordon", "drain"}},
      {"agents", {"heartbeat"}},
      {"queues", {""}},
      {"priorityclasses", {""}},
      {"tokens", {""}}};
  if (parts.size() < 3 || parts.size() > 4 || parts[0] != "v1" || parts[2].empty()) return "other";
  auto c = kNamed.find(parts[1]);
  const std::string_view verb = parts.size() == 4 ? parts[3] : "";
  if (c == kNamed.end() || !c->second.count(verb)) return "other";
  return "/v1/" + std::string(parts[1]) + "/{name}" + (verb.empty() ? "" : "/" + std::string(verb));
}

namespace {

// When the request this thread answers began (set before routing; the logger reads it).
thread_local std::chrono::steady_clock::time_point request_began;

void Reply(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

// The most one logs request returns (docs/api.md), and the most the server reads of an
// agent's answer to one: that chunk and room for an error's words.
constexpr int64_t kLogsChunk = 1 << 20;
constexpr size_t kMaxAgentLogsAnswer = kLogsChunk + (64 << 10);

// Why an agent may refuse the logs proxy for a moment after a server restart.
constexpr const char* kNoTokenYet =
    " (the server restarted and has not heard from that agent since; it gives its logs token "
    "with its next heartbeat: try again in a few seconds)";

void Fail(httplib::Response& res, const Status& s) { Reply(res, HttpStatusFor(s), ErrorJson(s)); }

// Agent calls carry JSON only: checked text (UTF-8, size), then parsed.
StatusOr<Json> AgentBody(const httplib::Request& req) {
  Status text = spec::CheckText(req.body);
  if (!text.ok()) return text;
  auto body = ParseJson(req.body);
  if (!body.ok()) return body.status().WithContext("body");
  return body;
}

// A piece of a task's output file (pools whose output the server reads itself: Slurm):
// at most 1 MiB from `offset`, as an agent serves it.
StatusOr<FileChunk> ReadOutputFile(const std::string& path, int64_t offset) {
  auto chunk = ReadFileChunk(path, offset, kLogsChunk);
  if (chunk.ok()) return chunk;
  if (chunk.status().code() == StatusCode::kNotFound)
    return NotFound("no output yet: " + chunk.status().message() +
                    " (the task has not started, or did not write there)");
  return FailedPrecondition("the task's output: " + chunk.status().message());
}

// The body of POST /v1/jobs/{name}/scale: {"replicas": N}, N a JSON integer (kubectl's
// Scale subresource takes an int32: "3" or 3.0 is refused, not guessed at), no other key.
StatusOr<int64_t> ScaleReplicas(const std::string& text) {
  Status checked = spec::CheckText(text);
  if (!checked.ok()) return checked;
  auto body = ParseJson(text);
  if (!body.ok()) return body.status().WithContext("body");
  if (!body->is_object())
    return InvalidArgument("body: expected an object {\"replicas\": N}, got " + body->dump());
  ObjectReader r(*body, "");
  const Json* n = r.Get("replicas");
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (n == nullptr) return InvalidArgument("replicas: required ({\"replicas\": N})");
  if (n->is_number_unsigned() && n->get<uint64_t>() > uint64_t{INT64_MAX})
    return InvalidArgument("replicas: too large, got " + n->dump());
  if (!n->is_number_integer())
    return InvalidArgument("replicas: expected an integer, got " + n->dump());
  return n->get<int64_t>();
}

StatusOr<Principal> Auth(ControlPlane& cp, const httplib::Request& req) {
  return cp.tokens().Authenticate(req.get_header_value("Authorization"));
}

StatusOr<int64_t> IntParam(const httplib::Request& req, const char* name, int64_t def, int64_t min,
                           int64_t max) {
  if (!req.has_param(name)) return def;
  return ParseIntParam(name, req.get_param_value(name), min, max);
}

// Runs a handler that needs a principal; every exception becomes a 500 (never a crash).
template <typename F>
httplib::Server::Handler Authed(ControlPlane& cp, F f) {
  return [&cp, f](const httplib::Request& req, httplib::Response& res) {
    auto p = Auth(cp, req);
    if (!p.ok()) return Fail(res, p.status());
    f(*p, req, res);
    // Every refusal for the caller's role or queues is audited, whichever route refused it.
    if (res.status == 403) {
      auto body = Json::parse(res.body, nullptr, false);
      const Json* err = body.is_object() && body.contains("error") ? &body["error"] : nullptr;
      cp.AuditDenied(*p, req.method, req.path,
                     err && err->is_object() ? err->value("message", "") : std::string());
    }
  };
}

}  // namespace

ApiServer::ApiServer(ControlPlane& cp, ApiOptions options)
    : cp_(cp), options_(std::move(options)) {}

ApiServer::~ApiServer() { Stop(); }

Status ApiServer::Start() {
  auto http = NewHttpServer(options_.tls);
  if (!http.ok()) return http.status();
  http_ = std::move(*http);
  int threads = options_.threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_read_timeout(30, 0);
  http_->set_write_timeout(30, 0);
  http_->set_keep_alive_max_count(1000000);
  http_->set_tcp_nodelay(true);  // small JSON answers: no Nagle + delayed-ACK stalls
  http_->set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        Reply(res, 500, ErrorJson(Internal("unexpected error: " + what)));
      });
  // cpp-httplib reads a POST without Content-Length (curl -X POST with no -d sends none)
  // until the connection's read timeout, 30 s, and then answers a bare 400. Answer at once,
  // before any body is read, with what to send instead.
  http_->set_logger([](const httplib::Request& req, const httplib::Response& res) {
    // (A request refused before routing, e.g. malformed, has no start: counted, not timed.)
    const bool timed = request_began != std::chrono::steady_clock::time_point{};
    const double seconds =
        timed ? std::chrono::duration<double>(std::chrono::steady_clock::now() - request_began)
                    .count()
              : -1;
    request_began = {};
    ObserveHttpRequestForMetrics(RouteTemplate(req.path), req.method, res.status, seconds);
  });
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    request_began = std::chrono::steady_clock::now();
    const bool writes = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    // Read-only after a failed store write (ControlPlane::frozen): only agents' heartbeats,
    // which are told to hold, and reads go on.
    if ((writes || req.method == "DELETE") && cp_.frozen() && !req.path.ends_with("/heartbeat") &&
        req.path != "/v1/agents/register") {
      Reply(res, 503,
            ErrorJson(Unavailable(std::string(ControlPlane::kReadOnly) + " (" +
                                  cp_.store_health().error +
                                  "); make its data dir writable and restart it")));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!writes || req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))
      return httplib::Server::HandlerResponse::Unhandled;
    Reply(res, 411,
          ErrorJson(InvalidArgument(
              "a " + req.method + " needs a Content-Length header, 0 for no body (curl: -d '')")));
    return httplib::Server::HandlerResponse::Handled;
  });
  const size_t max_body = options_.max_body_bytes;
  http_->set_error_handler([max_body](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    // cpp-httplib caps a form-encoded body (curl -d's default type) at 8 KiB, far below
    // ours: say so, with the way round it.
    const std::string most = max_body % (1 << 20) == 0 ? std::to_string(max_body >> 20) + " MiB"
                                                       : std::to_string(max_body) + " bytes";
    const bool form =
        req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0;
    Status s =
        res.status == 413 && form
            ? ResourceExhausted(
                  "request body too large for Content-Type "
                  "application/x-www-form-urlencoded (curl -d's default; at most 8 KiB "
                  "as a form): send it as application/yaml or application/json (curl -H "
                  "'Content-Type: application/yaml' --data-binary @FILE), up to " +
                  most)
        : res.status == 413 ? ResourceExhausted("request body too large (at most " + most + ")")
        : res.status == 404 ? NotFound("no such path: " + req.path + " (see /openapi.json)")
        : res.status == 400 ? InvalidArgument("malformed HTTP request")
                            : Status(StatusCode::kInternal, "HTTP " + std::to_string(res.status));
    res.set_content(ErrorJson(s).dump(), "application/json");
  });
  Routes();
  // Debian's compiled cpp-httplib 0.11 listens with a backlog of 5: a burst of new
  // connections (16 clients starting at once) overflows it and waits ~1 s for a SYN
  // retransmit. Keep the listening socket and listen() again with a deep queue after binding
  // (Linux updates the backlog of a listening socket).
  int listen_fd = -1;
  http_->set_socket_options([&listen_fd](socket_t sock) {
    ReuseAddressOnly(sock);  // no SO_REUSEPORT: a second server must fail to bind
    listen_fd = static_cast<int>(sock);
  });
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host.c_str());
    if (port_ <= 0) return Unavailable("cannot bind " + options_.host);
  } else {
    if (!http_->bind_to_port(options_.host.c_str(), options_.port))
      return Unavailable("cannot bind " + options_.host + ":" + std::to_string(options_.port));
    port_ = options_.port;
  }
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  http_->set_socket_options(ReuseAddressOnly);
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib ignores a stop() that comes before its loop runs, and Stop() would then wait for
  // ever (a SIGTERM right after start): Start returns once the server listens.
  for (int i = 0; i < 5000 && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return Status::Ok();
}

void ApiServer::Stop() {
  stopping_ = true;
  if (http_) http_->stop();
  if (thread_.joinable()) thread_.join();
}

void ApiServer::Routes() {
  ControlPlane& cp = cp_;
  httplib::Server& s = *http_;
  s.Get("/openapi.json", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(OpenApiJson(), "application/json");
  });
  s.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  // Readiness: the process answers (/healthz) and its store takes writes. A full disk
  // makes every submission fail with 503 while the process lives on: a load balancer or an
  // alert should see it.
  s.Get("/readyz", [&cp](const httplib::Request&, httplib::Response& res) {
    ControlPlane::StoreHealth h = cp.store_health();
    if (h.error.empty() && !h.read_only) return res.set_content("ok\n", "text/plain");
    Reply(res, 503,
          ErrorJson(Unavailable(
              "the store refused the last write, " + std::to_string(h.seconds_ago) +
              " s ago: " + h.error +
              (h.read_only ? " (the server is read-only: make its data dir writable and restart it)"
                           : ""))));
  });
  RegisterObservabilityRoutes(s);  // /metrics, /ui/ (observability_routes.h)

  s.Post("/v1/jobs",
         Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
           bool replayed = false;
           auto r = cp.Submit(p, req.body, req.get_header_value("Idempotency-Key"), &replayed);
           if (!r.ok()) return Fail(res, r.status());
           // 200: a retry of a stored submission (same Idempotency-Key); nothing new created.
           Reply(res, replayed ? 200 : 201, Json{{"items", *r}});
         }));
  s.Get("/v1/jobs",
        Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
          ListOptions o;
          o.queue = req.get_param_value("queue");
          o.state = req.get_param_value("state");
          o.user = req.get_param_value("user");
          o.start_after = req.get_param_value("continue");
          auto limit = IntParam(req, "limit", 500, 1, 10000);
          if (!limit.ok()) return Fail(res, limit.status());
          o.limit = static_cast<size_t>(*limit);
          auto r = cp.ListJobs(p, o);
          if (!r.ok()) return Fail(res, r.status());
          Reply(res, 200, *r);
        }));
  s.Get(R"(/v1/jobs/([^/]+))",
        Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
          auto r = cp.GetJob(p, req.matches[1], req.get_param_value("describe") == "true");
          if (!r.ok()) return Fail(res, r.status());
          Reply(res, 200, *r);
        }));
  s.Get(R"(/v1/jobs/([^/]+)/describe)",
        Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
          auto r = cp.GetJob(p, req.matches[1], true);
          if (!r.ok()) return Fail(res, r.status());
          Reply(res, 200, *r);
        }));
  auto cancel =
      Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
        auto r = cp.Cancel(p, req.matches[1]);
        if (!r.ok()) return Fail(res, r.status());
        Reply(res, 200, *r);
      });
  s.Post(R"(/v1/jobs/([^/]+)/cancel)", cancel);
  s.Post(R"(/v1/jobs/([^/]+)/(hold|release))",
         Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
           auto r = cp.Hold(p, req.matches[1], req.matches[2] == "hold");
           if (!r.ok()) return Fail(res, r.status());
           Reply(res, 200, *r);
         }));
  // kubectl scale: a Deployment's replicas (docs/api.md).
  s.Post(R"(/v1/jobs/([^/]+)/scale)",
         Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
           auto n = ScaleReplicas(req.body);
           if (!n.ok()) return Fail(res, n.status());
           auto r = cp.Scale(p, req.matches[1], *n);
           if (!r.ok()) return Fail(res, r.status());
           Reply(res, 200, *r);
         }));
  s.Delete(R"(/v1/jobs/([^/]+))", Authed(cp, [&cp](const Principal& p, const httplib::Request& req,
                                                   httplib::Response& res) {
             auto r = cp.DeleteJob(p, req.matches[1]);
             if (!r.ok()) return Fail(res, r.status());
             Reply(res, 200, *r);
           }));
  // Logs, proxied from the task's node agent, or read from the file its pool wrote (Slurm;
  // Backend::LogFile) (docs/api.md). With follow=true it is a long
  // poll: it answers as soon as there are bytes after `offset` or the task has ended, else
  // after logs_follow_wait_ms with nothing; X-Tessera-Task-Ended: true once the task's
  // process is gone and every byte was read, so `tessera logs -f` knows when to stop.
  s.Get(R"(/v1/jobs/([^/]+)/logs)",
        Authed(cp, [&cp, this](const Principal& p, const httplib::Request& req,
                               httplib::Response& res) {
          auto task = IntParam(req, "task", 0, 0, 1000000);
          if (!task.ok()) return Fail(res, task.status());
          auto offset = IntParam(req, "offset", 0, 0, INT64_MAX);
          if (!offset.ok()) return Fail(res, offset.status());
          std::string stream =
              req.has_param("stream") ? req.get_param_value("stream") : std::string("stdout");
          if (stream != "stdout" && stream != "stderr")
            return Fail(res, InvalidArgument("stream: must be stdout or stderr"));
          const bool follow = req.get_param_value("follow") == "true";
          const std::string want = req.get_param_value("allocation");
          const int32_t task_index = static_cast<int32_t>(*task);
          // A waiting long poll holds one of the server's threads: at most a quarter of them
          // wait at once, or enough `logs -f` would leave none for heartbeats (nodes lost,
          // their jobs evicted). Past that a follow answers at once, with Retry-After.
          struct Slot {
            std::atomic<int>& n;
            bool held;
            ~Slot() {
              if (held) --n;
            }
          } slot{following_, false};
          if (follow) slot.held = ++following_ <= std::max(1, options_.threads / 4);
          if (follow && !slot.held) {
            --following_;
            res.set_header("Retry-After", "1");
          }
          const auto deadline =
              std::chrono::steady_clock::now() +
              std::chrono::milliseconds(slot.held ? options_.logs_follow_wait_ms : 0);
          for (;;) {
            auto src = cp.LogsSourceOf(p, req.matches[1], task_index, want, stream);
            if (!src.ok()) return Fail(res, src.status());
            if (!src->placed && !follow)
              return Fail(res, NotFound("job \"" + std::string(req.matches[1]) + "\" task " +
                                        std::to_string(*task) + " has not been placed yet"));
            std::string body;
            int64_t next = *offset;
            bool eof = true;
            if (src->placed && !src->file.empty()) {
              auto chunk = ReadOutputFile(src->file, *offset);
              if (chunk.ok()) {
                body = std::move(chunk->data);
                next = *offset + static_cast<int64_t>(body.size());
                eof = next >= chunk->size;
              } else if (!follow || chunk.status().code() != StatusCode::kNotFound) {
                return Fail(res, chunk.status());
              }
              // Following and not there yet: the task has not started writing.
            } else if (src->placed) {
              httplib::Client c(src->url);
              ApplyTls(c, options_.agent_tls);
              c.set_connection_timeout(5, 0);
              c.set_read_timeout(30, 0);
              // The agent's --logs-token, which it gave the server.
              if (!src->token.empty()) c.set_bearer_token_auth(src->token.c_str());
              std::string path = "/v1/logs/" + src->allocation + "?stream=" + stream +
                                 "&offset=" + std::to_string(*offset) +
                                 "&limit=" + std::to_string(kLogsChunk);
              // An agent answers at most one chunk (1 MiB, as ReadOutputFile); whatever it
              // sends beyond that and the slack for an error's words is not read into memory:
              // an agent-token holder could otherwise have the server buffer gigabytes.
              std::string answer;
              bool too_long = false;
              auto r = c.Get(path.c_str(), [&](const char* data, size_t n) {
                if (answer.size() + n > kMaxAgentLogsAnswer) return !(too_long = true);
                answer.append(data, n);
                return true;
              });
              // (The slack is for an error's words: a chunk itself is at most kLogsChunk.)
              if (too_long || (r && r->status == 200 && answer.size() > size_t{kLogsChunk}))
                return Reply(res, 502,
                             ErrorJson(Unavailable(
                                 "job \"" + std::string(req.matches[1]) + "\" task " +
                                 std::to_string(*task) + ": node agent at " + src->url +
                                 " answered more than " + std::to_string(kLogsChunk >> 20) +
                                 " MiB, the most one logs request returns: not passed on (is the "
                                 "agent a Tessera agent of this version?)")));
              if (!r)
                return Fail(res, Unavailable("node agent at " + src->url + " did not answer" +
                                             (IsTlsError(r.error())
                                                  ? ": " + DescribeHttpError(c, r.error(), src->url,
                                                                             options_.agent_tls)
                                                  : "")));
              // An agent not heard since this server started may want a token it has not
              // given yet: it comes with its next heartbeat.
              const bool no_token_yet = r->status == 401 && src->agent_unheard;
              if (r->status == 200) {
                body = std::move(answer);
                next = *offset + static_cast<int64_t>(body.size());
                if (r->has_header("X-Tessera-Log-Size"))
                  eof = next >= std::strtoll(r->get_header_value("X-Tessera-Log-Size").c_str(),
                                             nullptr, 10);
              } else if (!follow || (r->status != 404 && !no_token_yet)) {
                // Not following (or a real error, or output gone for good): the agent's
                // words, in the API's shape.
                Json e = Json::parse(answer, nullptr, false);
                std::string why = e.is_object() && e.contains("error") && e["error"].is_string()
                                      ? e["error"].get<std::string>()
                                      : answer;
                const std::string what = "job \"" + std::string(req.matches[1]) + "\" task " +
                                         std::to_string(*task) + ": ";
                // 410: the agent removed the task's folder after its retention, and says so.
                if (r->status == 410) return Fail(res, NotFound(what + why));
                return Fail(res, r->status == 404
                                     ? NotFound(what + "no " + stream +
                                                " on its node (the task never started, or its "
                                                "output was removed): " +
                                                why)
                                     : Unavailable(what + "node agent at " + src->url +
                                                   " answered HTTP " + std::to_string(r->status) +
                                                   ": " + why + (no_token_yet ? kNoTokenYet : "")));
              }
              // Following and 404: the task has not written its log file yet (401 with
              // no_token_yet: the agent's token is on its way).
            }
            const bool ended = src->ended && eof;
            if (!follow || !body.empty() || ended || stopping_ ||
                std::chrono::steady_clock::now() >= deadline) {
              res.status = 200;
              res.set_header("X-Next-Offset", std::to_string(next));
              res.set_header("X-Tessera-Allocation", src->allocation);
              res.set_header("X-Tessera-Task-Ended", ended ? "true" : "false");
              res.set_content(body, "text/plain; charset=utf-8");
              return;
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
          }
        }));
  s.Get("/v1/events",
        Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
          auto after = IntParam(req, "after", 0, 0, INT64_MAX);
          auto limit = IntParam(req, "limit", 500, 1, 10000);
          if (!after.ok()) return Fail(res, after.status());
          if (!limit.ok()) return Fail(res, limit.status());
          auto r = cp.ListEvents(p, req.get_param_value("job"), *after, static_cast<size_t>(*limit),
                                 req.get_param_value("object"), req.get_param_value("type"));
          if (!r.ok()) return Fail(res, r.status());
          Reply(res, 200, *r);
        }));
  s.Get("/v1/queues",
        Authed(cp, [&cp](const Principal& p, const httplib::Request&, httplib::Response& res) {
          Reply(res, 200, cp.ListQueues(p));
        }));
  auto apply =
      Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
        auto r = cp.Apply(p, req.body);
        if (!r.ok()) return Fail(res, r.status());
        Reply(res, 201, Json{{"items", *r}});
      });
  s.Post("/v1/queues", apply);
  s.Post("/v1/priorityclasses", apply);
  s.Get("/v1/priorityclasses",
        Authed(cp, [&cp](const Principal&, const httplib::Request&, httplib::Response& res) {
          Reply(res, 200, cp.ListPriorityClasses());
        }));
  s.Get("/v1/nodes",
        Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
          Reply(res, 200, cp.ListNodes(p, req.get_param_value("allocations") == "true"));
        }));
  // Node operations (admin), as kubectl cordon / uncordon / drain / delete node.
  s.Post(R"(/v1/nodes/([^/]+)/(cordon|uncordon|drain))",
         Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
           const std::string node = req.matches[1], op = req.matches[2];
           auto r = op == "drain" ? cp.DrainNode(p, node) : cp.CordonNode(p, node, op == "cordon");
           if (!r.ok()) return Fail(res, r.status());
           Reply(res, 200, *r);
         }));
  s.Delete(R"(/v1/nodes/([^/]+))", Authed(cp, [&cp](const Principal& p, const httplib::Request& req,
                                                    httplib::Response& res) {
             auto r = cp.DeleteNode(p, req.matches[1]);
             if (!r.ok()) return Fail(res, r.status());
             Reply(res, 200, *r);
           }));
  s.Get("/v1/pools",
        Authed(cp, [&cp](const Principal&, const httplib::Request&, httplib::Response& res) {
          Reply(res, 200, cp.ListPools());
        }));
  s.Get("/v1/audit",
        Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
          auto after = IntParam(req, "after", 0, 0, INT64_MAX);
          auto limit = IntParam(req, "limit", 500, 1, 10000);
          if (!after.ok()) return Fail(res, after.status());
          if (!limit.ok()) return Fail(res, limit.status());
          auto r = cp.ListAudit(p, *after, static_cast<size_t>(*limit));
          if (!r.ok()) return Fail(res, r.status());
          Reply(res, 200, *r);
        }));
  s.Get("/v1/tokens",
        Authed(cp, [&cp](const Principal& p, const httplib::Request&, httplib::Response& res) {
          auto r = cp.ListTokens(p);
          if (!r.ok()) return Fail(res, r.status());
          Reply(res, 200, *r);
        }));
  for (const auto& [path, kind] : {std::pair{R"(/v1/queues/([^/]+))", "queue"},
                                   std::pair{R"(/v1/priorityclasses/([^/]+))", "priorityclass"},
                                   std::pair{R"(/v1/tokens/([^/]+))", "token"}}) {
    s.Delete(path, Authed(cp, [&cp, kind](const Principal& p, const httplib::Request& req,
                                          httplib::Response& res) {
               const std::string name = req.matches[1];
               Status st = cp.Delete(p, kind, name);
               if (!st.ok()) return Fail(res, st);
               Reply(res, 200, Json{{"kind", kind}, {"name", name}, {"deleted", true}});
             }));
  }
  s.Post(
      "/v1/tokens",
      Authed(cp, [&cp](const Principal& p, const httplib::Request& req, httplib::Response& res) {
        // Before the body is read: a non-admin learns nothing of what it would accept.
        if (!p.IsAdmin()) return Fail(res, PermissionDenied("only an admin may create tokens"));
        auto body = ParseYaml(req.body);
        if (!body.ok()) return Fail(res, body.status());
        Json b = *body;
        if (!b.is_object())
          return Fail(res, InvalidArgument("body: expected an object {name, role, queues, nodes}"));
        std::string token = NewToken();
        if (b.contains("token") || b.contains("sha256"))
          return Fail(res, InvalidArgument("token: the server generates tokens; do not send one"));
        b["token"] = token;
        auto e = TokenRegistry::FromJson(b, "");
        if (!e.ok()) return Fail(res, e.status());
        e->origin = "api";
        Status st = cp.AddToken(p, *e);
        if (!st.ok()) return Fail(res, st);
        Json out = TokenRegistry::ToJson(*e);
        out["token"] = token;  // shown once; only the hash is stored
        Reply(res, 201, out);
      }));
  s.Post("/v1/agents/register",
         Authed(cp, [&cp, this](const Principal& p, const httplib::Request& req,
                                httplib::Response& res) {
           auto body = AgentBody(req);
           if (!body.ok()) return Fail(res, body.status());
           if (Status st = CheckAgentLogsUrl(req, *body); !st.ok()) return Fail(res, st);
           auto r = cp.RegisterAgent(p, *body);
           if (!r.ok()) return Fail(res, r.status());
           Reply(res, 200, *r);
         }));
  s.Post(R"(/v1/agents/([^/]+)/heartbeat)",
         Authed(cp, [&cp, this](const Principal& p, const httplib::Request& req,
                                httplib::Response& res) {
           auto body = AgentBody(req);
           if (!body.ok()) return Fail(res, body.status());
           if (Status st = CheckAgentLogsUrl(req, *body); !st.ok()) return Fail(res, st);
           auto r = cp.Heartbeat(p, req.matches[1], *body);
           if (!r.ok()) return Fail(res, r.status());
           Reply(res, 200, *r);
         }));
}

Status ApiServer::CheckAgentLogsUrl(const httplib::Request& req, const Json& body) {
  if (options_.agent_logs_any_host || !body.contains("logsUrl") || !body["logsUrl"].is_string())
    return Status::Ok();
  std::pair<std::string, std::string> key{body["logsUrl"].get<std::string>(), req.remote_addr};
  if (key.first.empty()) return Status::Ok();  // serves no logs (a Slurm pool's nodes)
  {
    std::lock_guard<std::mutex> l(logs_urls_mu_);
    if (logs_urls_ok_.count(key)) return Status::Ok();
  }
  Status st = CheckLogsUrlNamesPeer(key.first, key.second);
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> l(logs_urls_mu_);
  if (logs_urls_ok_.size() >= 100000) logs_urls_ok_.clear();  // bounded; refilled as asked
  logs_urls_ok_.insert(std::move(key));
  return Status::Ok();
}

}  // namespace tessera::server
