#include "server/server_main.h"

#include "server/observability_routes.h"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/write_file.h"
#include "server/api.h"
#include "server/hooks.h"
#include "store/etcd_store.h"

namespace tessera::server {
namespace {

// Whole or not at all: a full disk must not leave an empty token or URL file behind (the
// next start would take the empty file for the token).
Status WriteSecret(const std::string& path, const std::string& value) {
  return WriteFileWhole(path, value + "\n", 0600);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Makes sure a token of `role` exists; a generated one is written to <data_dir>/<file>.
Status EnsureToken(ControlPlane& cp, const std::string& data_dir, Role role,
                   const std::string& name, const std::string& file, std::string& token_out) {
  std::string path = data_dir + "/" + file;
  std::string existing = ReadFile(path);
  while (!existing.empty() && (existing.back() == '\n' || existing.back() == '\r'))
    existing.pop_back();
  if (!existing.empty()) {
    auto p = cp.tokens().Authenticate("Bearer " + existing);
    if (p.ok() && p->role == role) {
      token_out = existing;
      return Status::Ok();
    }
  }
  if (cp.tokens().HasRole(role) && role == Role::kAdmin)
    return Status::Ok();  // configured elsewhere
  std::string token = NewToken();
  TokenEntry e;
  e.principal.name = name;
  e.principal.role = role;
  if (role == Role::kAdmin) e.principal.queues = {"*"};  // an agent's token has none
  e.sha256_hex = Sha256Hex(token);
  e.origin = "bootstrap";
  Principal system{"system:bootstrap", Role::kAdmin, {"*"}};
  if (cp.tokens().HasName(name)) e.principal.name = name + "-" + token.substr(4, 8);
  TESSERA_RETURN_IF_ERROR(cp.AddToken(system, e));
  TESSERA_RETURN_IF_ERROR(WriteSecret(path, token));
  token_out = token;
  return Status::Ok();
}

// Ends a server on the etcd store at once, for its supervisor to restart it: it comes back
// as a standby, or leads again and reloads what etcd holds. Nothing it has not stored was
// acknowledged; what it holds in memory must not be served any longer.
[[noreturn]] void ExitToStandBy(const char* what, const Status& why) {
  std::fprintf(stderr,
               "tessera server: %s (%s); exiting (status %d) so that a supervisor restarts this "
               "server: it comes back as a standby, or leads and reloads what etcd holds\n",
               what, why.ToString().c_str(), kExitLostLeadership);
  std::fflush(stderr);
  std::_Exit(kExitLostLeadership);
}

// SQLite in --data-dir, or etcd (--store etcd://...): then this returns once this server
// leads, and the process exits when it stops leading, so that a supervisor restarts it as
// a standby (a deposed leader must not go on serving what it holds in memory).
StatusOr<std::unique_ptr<store::Store>> OpenStore(const ServerFlags& flags,
                                                  const sigset_t& stop_signals) {
  if (flags.store.empty()) {
    store::SqliteOptions so;
    so.synchronous_full = flags.synchronous_full;
    auto st = store::OpenSqliteStore(flags.data_dir, so);
    if (!st.ok()) return st.status();
    return std::move(*st);
  }
  // The data dir keeps this server's own files (tokens, server.url), as with SQLite: its
  // user's alone when created here.
  std::error_code ec;
  if (std::filesystem::create_directories(flags.data_dir, ec) && !ec)
    ::chmod(flags.data_dir.c_str(), 0700);
  if (ec) return Unavailable("cannot create data dir " + flags.data_dir + ": " + ec.message());
  auto endpoints = store::ParseEtcdUrl(flags.store);
  if (!endpoints.ok()) return endpoints.status();
  if (flags.etcd_lease_seconds < 1) return InvalidArgument("--etcd-lease-seconds: must be >= 1");
  if (flags.etcd_max_txn_ops < 16 || flags.etcd_max_request_bytes < 65536)
    return InvalidArgument(
        "--etcd-max-txn-ops, --etcd-max-request-bytes: at least 16 and 65536 (etcd's defaults "
        "are 128 and 1572864)");
  if (flags.etcd_prefix.empty() || flags.etcd_prefix.back() != '/')
    return InvalidArgument("--etcd-prefix: must end with '/', got \"" + flags.etcd_prefix + "\"");
  store::EtcdOptions eo;
  eo.endpoints = *endpoints;
  eo.tls.ca_file = flags.etcd_cacert;
  eo.tls.cert_file = flags.etcd_cert;
  eo.tls.key_file = flags.etcd_key;
  // TLS files with a plain etcd:// would look protected and not be: refused.
  if (eo.endpoints[0].rfind("http://", 0) == 0 &&
      (!eo.tls.ca_file.empty() || !eo.tls.cert_file.empty() || !eo.tls.key_file.empty()))
    return InvalidArgument("--etcd-cacert, --etcd-cert, --etcd-key: given for " + flags.store +
                           ", which is plain HTTP; write --store etcd+https://HOST:PORT[,...]");
  eo.prefix = flags.etcd_prefix;
  eo.lease_seconds = flags.etcd_lease_seconds;
  eo.max_txn_ops = static_cast<size_t>(flags.etcd_max_txn_ops);
  eo.max_request_bytes = static_cast<size_t>(flags.etcd_max_request_bytes);
  eo.on_lost_leadership = [](const Status& why) {
    ExitToStandBy("lost the leadership of the etcd store", why);
  };
  // SIGINT/SIGTERM are blocked (taken by sigwait later): a standby looks for them itself.
  eo.stop_waiting = [stop_signals] {
    sigset_t pending;
    sigpending(&pending);
    for (int sig : {SIGINT, SIGTERM})
      if (sigismember(&stop_signals, sig) && sigismember(&pending, sig)) return true;
    return false;
  };
  // Compactions and job deletes are split to fit (Store::MaxWritesPerTxn); what is not is a
  // scheduling cycle's bindings and a cancel or drain: a key per task placed or stopped.
  constexpr int64_t kComfortable = 4096;
  if (flags.etcd_max_txn_ops < kComfortable)
    std::fprintf(stderr,
                 "tessera server: warning: --etcd-max-txn-ops %lld: a scheduling cycle, cancel "
                 "or drain writes a key per task it places or stops in one transaction, and one "
                 "refused leaves the server read-only; run etcd with --max-txn-ops=20064 "
                 "--max-request-bytes=33554432 and pass the same here (docs/store.md, Limits)\n",
                 static_cast<long long>(flags.etcd_max_txn_ops));
  auto st = store::OpenEtcdStore(eo);
  if (!st.ok()) return st.status().WithContext("--store " + flags.store);
  return std::unique_ptr<store::Store>(std::move(*st));
}

}  // namespace

std::vector<PoolStarter>& PoolHooks() {
  static std::vector<PoolStarter> hooks;
  return hooks;
}

Status RunServer(const ServerFlags& flags) {
  // Signals are taken synchronously by this thread; every thread started below inherits the mask.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  auto host_port = flags.listen;
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos)
    return InvalidArgument("--listen: expected HOST:PORT, got \"" + host_port + "\"");
  ApiOptions api;
  api.host = host_port.substr(0, colon);
  try {
    api.port = std::stoi(host_port.substr(colon + 1));
  } catch (...) {
    return InvalidArgument("--listen: bad port in \"" + host_port + "\"");
  }
  if (api.port < 0 || api.port > 65535)
    return InvalidArgument("--listen: bad port in \"" + host_port + "\"");
  api.agent_logs_any_host = flags.agent_logs_any_host;
  // Checked before the store opens: a bad file must not wait behind an etcd election.
  api.tls = flags.tls;
  if (api.tls.enabled()) TESSERA_RETURN_IF_ERROR(CheckTlsServerFiles(api.tls));
  if (!api.tls.client_ca_file.empty() && flags.local_agent)
    return InvalidArgument(
        "--local-agent with --tls-client-ca-file: the in-process agents have no client "
        "certificate; run `tessera agent` with --client-certificate instead");
  api.agent_tls.ca_file = flags.agent_cacert;
  api.agent_tls.ca_flag = "--agent-cacert";
  if (!flags.agent_cacert.empty())
    TESSERA_RETURN_IF_ERROR(CheckCaFile("--agent-cacert", flags.agent_cacert));

  auto st = OpenStore(flags, set);
  if (!st.ok()) return st.status();
  auto t0 = std::chrono::steady_clock::now();
  EngineConfig ec = DefaultEngineConfig();
  if (!flags.engine_config.empty()) {
    auto c = LoadEngineConfig(flags.engine_config);
    if (!c.ok()) return c.status().WithContext("--config");
    ec = *c;
  }
  auto engine = Engine::Create(ec);
  if (!engine.ok()) return engine.status();
  // The cost counters go on from where they were stored, the time the server was down
  // included; stored every 10 s and as the control plane closes, before its store.
  // The gap is counted for at most as long as a task with the default grace period runs on
  // without a server (an agent's default lease, a heartbeat, the grace): stopped by then.
  TESSERA_RETURN_IF_ERROR(MakeCostAccrualDurable(
      ProcessMetrics(), **st, 10,
      RunsOnUnattended(ControlPlaneOptions{}.heartbeat_seconds, -1, Job{}.grace_period_seconds)));
  ControlPlaneOptions cpo;
  cpo.seed = flags.seed;
  cpo.on_cycle = ObserveCycleForMetrics;  // /metrics (observability_routes.h)
  cpo.on_stop = [] { FlushCostAccrual(ProcessMetrics()); };
  cpo.on_store_error = ObserveStoreErrorForMetrics;
  if (!flags.store.empty()) {
    // A read-only leader would hold the leadership for ever, and its standbys would never
    // take over; and a write whose answer was lost may have been applied, which this
    // server's memory would not know. So once etcd failed a write (unreachable, no quorum),
    // this server goes; whoever leads next (itself, restarted) reloads what etcd holds. A
    // transaction refused for its size would fail again after a restart: it stays read-only.
    cpo.on_store_error = [](const Status& why, bool read_only) {
      ObserveStoreErrorForMetrics(why, read_only);
      if (why.retryable()) ExitToStandBy("the etcd store failed a write", why);
    };
  }
  cpo.on_evictions = [](const std::string& reason, int64_t tasks) {
    ProcessMetrics().ObserveEvictions(reason, tasks);
  };
  if (flags.max_events_per_job < 0 || flags.max_events < 0 || flags.event_ttl_seconds < 0 ||
      flags.finished_job_ttl_seconds < 0)
    return InvalidArgument(
        "--max-events-per-job, --max-events, --event-ttl-seconds, --finished-job-ttl-seconds: "
        "must be >= 0");
  cpo.finished_job_ttl_seconds = flags.finished_job_ttl_seconds;
  cpo.max_events_per_job = static_cast<size_t>(flags.max_events_per_job);
  cpo.max_events = static_cast<size_t>(flags.max_events);
  cpo.event_ttl_seconds = flags.event_ttl_seconds;
  auto cp = ControlPlane::Open(std::move(*st), std::move(*engine), cpo);
  if (!cp.ok()) return cp.status();
  auto loaded =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();

  std::vector<TokenEntry> config_tokens;
  if (!flags.auth_config.empty()) {
    auto doc = LoadYamlFile(flags.auth_config);
    if (!doc.ok()) return doc.status().WithContext("--auth-config");
    auto entries = TokenRegistry::ParseConfig(*doc);
    if (!entries.ok()) return entries.status().WithContext(flags.auth_config);
    config_tokens = std::move(*entries);
    for (const TokenEntry& e : config_tokens) (*cp)->tokens().Add(e);
  }
  std::string admin_token, agent_token;
  TESSERA_RETURN_IF_ERROR(
      EnsureToken(**cp, flags.data_dir, Role::kAdmin, "admin", "admin.token", admin_token));
  TESSERA_RETURN_IF_ERROR(
      EnsureToken(**cp, flags.data_dir, Role::kAgent, "local-agent", "agent.token", agent_token));

  std::string boot = flags.bootstrap_dir;
  if (boot.empty() && std::filesystem::is_directory("examples/seed")) boot = "examples/seed";
  Principal system{"system:bootstrap", Role::kAdmin, {"*"}};
  if (!boot.empty()) {
    std::vector<std::string> files;
    std::error_code err;
    for (const auto& f : std::filesystem::directory_iterator(boot, err)) {
      auto ext = f.path().extension().string();
      if (ext == ".yaml" || ext == ".yml" || ext == ".json") files.push_back(f.path().string());
    }
    if (err) return NotFound("--bootstrap: cannot read " + boot + ": " + err.message());
    std::sort(files.begin(), files.end());
    // Priority classes first, then queues; job documents in the folder are ignored.
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& f : files) {
        std::string text = ReadFile(f);
        bool has_queue = text.find("kind: Queue") != std::string::npos;
        if ((pass == 0) == has_queue) continue;
        auto r = (*cp)->Apply(system, text, true);
        if (!r.ok()) return r.status().WithContext("--bootstrap " + f);
      }
  }
  if ((*cp)->ListQueues(system)["items"].empty()) {
    auto r = (*cp)->Apply(
        system,
        "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: default}\n");
    if (!r.ok()) return r.status();
  }
  // After the bootstrap: --auth-config's tokens' queues must exist, as POST /v1/tokens
  // checks them. (The tokens themselves are in before the admin token is ensured: an admin
  // there means none is minted.)
  if (!config_tokens.empty()) {
    std::set<std::string> queues;
    const Json listed = (*cp)->ListQueues(system);  // (a temporary's items would dangle)
    std::string known;
    for (const Json& q : listed["items"]) queues.insert(q.value("name", ""));
    for (const std::string& q : queues) known += (known.empty() ? "" : ", ") + q;
    for (const TokenEntry& e : config_tokens)
      for (const std::string& q : e.principal.queues)
        if (q != "*" && !queues.count(q))
          return InvalidArgument("--auth-config " + flags.auth_config + ": token \"" +
                                 e.principal.name + "\": queues: unknown queue \"" + q +
                                 "\" (known: " + known + ")");
  }

  ApiServer server(**cp, api);
  TESSERA_RETURN_IF_ERROR(server.Start());
  // Only a convenience for the CLI: a full disk must not keep the server from starting.
  if (Status st = WriteSecret(flags.data_dir + "/server.url", server.url()); !st.ok())
    std::fprintf(stderr, "tessera server: warning: %s\n", st.ToString().c_str());
  auto counts = (*cp)->counts();
  std::fprintf(stderr,
               "tessera server: listening on %s (data dir %s, store %s: %zu jobs, %zu events, %zu "
               "allocations, %zu nodes loaded in %lld ms)\n",
               server.url().c_str(), flags.data_dir.c_str(),
               flags.store.empty() ? "sqlite" : flags.store.c_str(), counts.jobs, counts.events,
               counts.allocations, counts.nodes, static_cast<long long>(loaded));
  if (!admin_token.empty())
    std::fprintf(stderr,
                 "tessera server: admin token in %s/admin.token (the CLI reads it from there)\n",
                 flags.data_dir.c_str());
  else if (flags.auth_config.empty())
    // The store keeps only tokens' hashes: a lost file is not written again (it would need a
    // new admin token nobody asked for), but say so rather than start locked out in silence.
    std::fprintf(stderr,
                 "tessera server: warning: %s/admin.token is missing; the admin tokens are "
                 "those stored before (only their holders have them). Without one, restart "
                 "with --auth-config giving an admin token (docs/api.md, Auth)\n",
                 flags.data_dir.c_str());
  std::vector<StopFn> stop_pools;  // pools other systems run (hooks.h), stopped in reverse
  auto stop_all_pools = [&] {
    for (auto it = stop_pools.rbegin(); it != stop_pools.rend(); ++it) (*it)();
  };
  for (const auto& start : PoolHooks()) {
    auto stop = start(**cp);
    if (!stop.ok()) {
      stop_all_pools();
      server.Stop();
      return stop.status();
    }
    stop_pools.push_back(std::move(*stop));
  }
  StopFn stop_agents;
  if (flags.local_agent) {
    if (LocalAgentHook()) {
      // In-process agents reach this server on this machine: with TLS they need not check
      // its certificate (a CA-signed one would not be in any file they know).
      TlsClientOptions in_process;
      in_process.insecure_skip_verify = true;
      stop_agents = LocalAgentHook()(server.url(), agent_token, flags.data_dir, in_process);
    } else {
      std::fprintf(stderr,
                   "tessera server: --local-agent: no in-process agent is linked into this build; "
                   "run `tessera agent "
                   "--server %s --token $(cat %s/agent.token)`\n",
                   server.url().c_str(), flags.data_dir.c_str());
    }
  }
  int sig = 0;
  sigwait(&set, &sig);
  std::fprintf(stderr, "tessera server: signal %d, shutting down\n", sig);
  if (stop_agents) stop_agents();
  stop_all_pools();
  server.Stop();
  return Status::Ok();
}

}  // namespace tessera::server
