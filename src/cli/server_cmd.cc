// `tessera server`: the control plane (src/server). See docs/api.md and docs/lifecycle.md.
#include <cstdio>

#include "cli/command.h"
#include "server/server_main.h"

namespace tessera::cli {

void AddServerCommands(CLI::App& app) {
  auto flags = std::make_shared<server::ServerFlags>();
  CLI::App* cmd = app.add_subcommand(
      "server", "run the control plane: REST API, durable state, scheduling loop");
  cmd->add_option("--data-dir", flags->data_dir, "state directory (SQLite tessera.db, tokens)")
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
  cmd->add_option("--seed", flags->seed, "seed of the scheduling randomness")
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
  cmd->callback([flags] {
    Status st = server::RunServer(*flags);
    if (!st.ok()) {
      std::fprintf(stderr, "tessera server: %s\n", st.ToString().c_str());
      SetExitCode(1);
    }
  });
}

}  // namespace tessera::cli
