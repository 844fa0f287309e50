// `tessera server`: the control plane (src/server). See docs/api.md and docs/lifecycle.md.
#include <cstdio>
#include <memory>

#include "backends/slurm/server_hookup.h"
#include "cli/command.h"
#include "cli/tls_flags.h"
#include "server/hooks.h"
#include "server/server_main.h"

namespace tessera::cli {

void AddServerCommands(CLI::App& app) {
  auto flags = std::make_shared<server::ServerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "server", "run the control plane: REST API, durable state, scheduling loop");
  cmd->add_option("--data-dir", flags->data_dir, "state directory (SQLite tessera.db, tokens)")
      ->capture_default_str();
  cmd->add_option("--store", flags->store,
                  "etcd://HOST:PORT[,HOST:PORT...]: keep the state in etcd, several servers of "
                  "which one leads (docs/store.md); etcd+https://HOST:PORT[,...]: the same over "
                  "HTTPS; default: SQLite in --data-dir")
      ->default_str("");
  cmd->add_option("--etcd-cacert", flags->etcd_cacert,
                  "etcd+https://: PEM CA file to check etcd's certificate against (default: the "
                  "system's CAs)");
  cmd->add_option("--etcd-cert", flags->etcd_cert,
                  "etcd+https://: PEM client certificate to present to etcd (its "
                  "--client-cert-auth)");
  cmd->add_option("--etcd-key", flags->etcd_key,
                  "the PEM private key of --etcd-cert, not encrypted");
  cmd->add_option("--etcd-prefix", flags->etcd_prefix,
                  "etcd key prefix of this cluster's state and election key")
      ->capture_default_str();
  cmd->add_option("--etcd-lease-seconds", flags->etcd_lease_seconds,
                  "leader lease TTL: a standby takes over this long after the leader dies")
      ->capture_default_str();
  cmd->add_option("--etcd-max-txn-ops", flags->etcd_max_txn_ops,
                  "the etcd's --max-txn-ops (larger transactions are refused here, clearly)")
      ->capture_default_str();
  cmd->add_option("--etcd-max-request-bytes", flags->etcd_max_request_bytes,
                  "the etcd's --max-request-bytes")
      ->capture_default_str();
  cmd->add_option("--listen", flags->listen, "HOST:PORT to serve the API on (port 0: any)")
      ->capture_default_str();
  cmd->add_option("--config", flags->engine_config,
                  "engine config (Tessera YAML or Volcano scheduler.conf)");
  cmd->add_option("--bootstrap", flags->bootstrap_dir,
                  "folder of queue / priority-class documents to apply at start (default: "
                  "examples/seed if present)");
  cmd->add_option("--auth-config", flags->auth_config,
                  "tokens file: tokens: [{name, role, queues, token|sha256}]");
  cmd->add_flag("--local-agent", flags->local_agent,
                "start in-process node agents (the seed's inventory)");
  cmd->add_flag("--agent-logs-any-host", flags->agent_logs_any_host,
                "take any logsUrl from node agents, not only one naming the address they "
                "connect from (agents serving logs on another network, or behind NAT)");
  AddTlsServerFlags(cmd, flags->tls, "the API (every route)");
  cmd->add_option("--tls-client-ca-file", flags->tls.client_ca_file,
                  "mutual TLS: every client (CLI, agent, Prometheus) must present a certificate "
                  "signed by a CA in this PEM file (docs/security.md)");
  cmd->add_option("--agent-cacert", flags->agent_cacert,
                  "PEM CA file to check agents serving logs over https:// (default: the "
                  "system's CAs)");
  cmd->add_option("--seed", flags->seed, "seed of the scheduling randomness")
      ->check(kSeed)
      ->capture_default_str();
  cmd->add_flag("!--no-fsync", flags->synchronous_full,
                "SQLite synchronous=NORMAL: survives kill -9 but not power loss (default FULL)");
  // Event retention (docs/lifecycle.md).
  cmd->add_option("--max-events-per-job", flags->max_events_per_job,
                  "events kept per job, its newest (0: no bound)")
      ->capture_default_str();
  cmd->add_option("--max-events", flags->max_events, "events kept in all (0: no bound)")
      ->capture_default_str();
  cmd->add_option("--event-ttl-seconds", flags->event_ttl_seconds,
                  "events older than this are dropped (0: kept)")
      ->capture_default_str();
  cmd->add_option("--finished-job-ttl-seconds", flags->finished_job_ttl_seconds,
                  "finished jobs are deleted this long after they end, with their events "
                  "(a job's ttlSecondsAfterFinished overrides it; 0: kept)")
      ->capture_default_str();
  // A Slurm cluster as one pool (docs/slurm.md).
  auto slurm = std::make_shared<slurm::HookupOptions>();
  auto slurm_conf = std::make_shared<std::string>();
  auto slurm_sync = std::make_shared<int64_t>(5);
  auto slurm_pending = std::make_shared<int64_t>(300);
  auto gpu_models = std::make_shared<std::vector<std::string>>();
  cmd->add_option("--slurm-pool", slurm->pool,
                  "connect a Slurm cluster as the pool NAME (its nodes, sbatch dispatch, "
                  "reconcile by tag); off unless given")
      ->default_str("");
  cmd->add_option("--slurm-conf", *slurm_conf,
                  "slurm.conf of that cluster, as SLURM_CONF for sinfo/sbatch/squeue/scancel "
                  "(default: the environment's SLURM_CONF, else Slurm's own default)");
  cmd->add_option("--slurm-partition", slurm->partitions,
                  "serve only these partitions (repeatable; default: all)");
  cmd->add_option("--slurm-gpu-model", *gpu_models,
                  "GRES type=Tessera GPU model, e.g. a100=A100-80GB (repeatable; default: the "
                  "type upper-cased)");
  cmd->add_option("--slurm-sbatch-arg", slurm->sbatch_args,
                  "extra sbatch option for every job, e.g. --account=ml (repeatable)");
  cmd->add_option("--slurm-sync-seconds", *slurm_sync, "read the Slurm nodes (sinfo) this often")
      ->capture_default_str();
  cmd->add_option("--slurm-pending-timeout", *slurm_pending,
                  "seconds a job Tessera placed may stay PENDING in Slurm (a foreign job took "
                  "its node) before it is cancelled there and placed again; 0 = never")
      ->capture_default_str();
  cmd->add_option("--slurm-logs-dir", slurm->logs_dir,
                  "where Slurm writes jobs' stdout/stderr for `tessera logs` (default: "
                  "<data-dir>/slurm-logs); on a real cluster a filesystem that the Slurm nodes "
                  "and the server share");
  slurm->pool.clear();
  cmd->callback([flags, slurm, slurm_conf, slurm_sync, slurm_pending, gpu_models] {
    if (!slurm->pool.empty()) {
      if (!slurm_conf->empty()) slurm->env["SLURM_CONF"] = *slurm_conf;
      for (const auto& m : *gpu_models) {
        auto eq = m.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
          std::fprintf(stderr,
                       "tessera server: --slurm-gpu-model: expected TYPE=MODEL, got \"%s\"\n",
                       m.c_str());
          SetExitCode(2);
          return;
        }
        slurm->gpu_models[m.substr(0, eq)] = m.substr(eq + 1);
      }
      if (*slurm_sync < 1) {
        std::fprintf(stderr, "tessera server: --slurm-sync-seconds: must be at least 1\n");
        SetExitCode(2);
        return;
      }
      slurm->sync = std::chrono::seconds(*slurm_sync);
      if (*slurm_pending < 0) {
        std::fprintf(stderr, "tessera server: --slurm-pending-timeout: must be 0 or more\n");
        SetExitCode(2);
        return;
      }
      slurm->pending_timeout = std::chrono::seconds(*slurm_pending);
      if (slurm->logs_dir.empty()) slurm->logs_dir = flags->data_dir + "/slurm-logs";
      server::PoolHooks().push_back(
          [opts = *slurm](server::ControlPlane& cp) -> StatusOr<server::StopFn> {
            auto h = slurm::SlurmPoolHookup::Start(cp, opts);
            if (!h.ok()) return h.status().WithContext("--slurm-pool " + opts.pool);
            std::fprintf(stderr, "tessera server: slurm pool %s connected\n", opts.pool.c_str());
            std::shared_ptr<slurm::SlurmPoolHookup> held(std::move(*h));
            return server::StopFn([held]() mutable { held.reset(); });
          });
    }
    Status st = server::RunServer(*flags);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera server: %s\n", st.ToString().c_str());
      SetExitCode(1);
    }
  });
}

}  // namespace tessera::cli
