// `tessera agent`: the node agent (docs/agent.md), and `tessera agent --discover`.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <thread>

#include "agent/agent.h"
#include "agent/inventory.h"
#include "agent/local_agents.h"
#include "agent/nvml.h"
#include "agent/srun.h"
#include "cli/command.h"
#include "cli/tls_flags.h"
#include "common/duration.h"
#include "model/codec.h"
#if __has_include("server/hooks.h")
#include "server/hooks.h"
#define TESSERA_HAVE_SERVER_HOOKS 1
#endif

namespace tessera::cli {
namespace {

// This binary, for the `srun` an sbatch task finds on its PATH ("" when unknown: no srun).
std::string SelfProgram() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : p.string();
}

volatile std::sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

struct AgentFlags {
  std::string server;
  std::string token;
  std::string inventory;
  std::string node;
  std::string work_dir = "data/agent";
  std::string nvml_library;
  std::string logs_listen = "127.0.0.1:0";
  std::string logs_advertise;
  std::string logs_token;
  TlsClientOptions server_tls;
  TlsServerFiles logs_tls;
  agent::NodeAdditionFlags additions;
  int64_t lease_seconds = -1;
  std::string task_retention = "24h";
  int64_t max_finished_tasks = 1000;
  bool discover = false;
  std::string output = "json";
  bool stop_tasks_on_exit = false;
  std::string cgroup_parent;
  bool run_as_submitter = false;
  // --allow-root-tasks[=true|false]; not given: off with --run-as-submitter, else on.
  bool allow_root_tasks = false;
  bool allow_root_tasks_given = false;
  std::string allow_run_as_uids, allow_run_as_gids;  // id ranges: "1000-1999,65534"
};

// The node as the inventory file declares it, else as discovered (NVML when present).
StatusOr<Node> InventoryOrHostNode(const AgentFlags& f, std::shared_ptr<agent::NvmlGpus>& nvml,
                                   std::string& source) {
  if (!f.inventory.empty()) {
    auto nodes = agent::LoadInventory(f.inventory);
    if (!nodes.ok()) return nodes.status();
    source = "inventory " + f.inventory + " (virtual GPUs)";
    if (f.node.empty()) {
      if (nodes->size() == 1) return nodes->front();
      return InvalidArgument("--node: the inventory declares " + std::to_string(nodes->size()) +
                             " nodes; name the one this agent serves");
    }
    for (const auto& n : *nodes) {
      if (n.name == f.node) return n;
    }
    return NotFound("--node: \"" + f.node + "\" is not in the inventory " + f.inventory);
  }
  auto g = agent::NvmlGpus::Open(f.nvml_library);
  if (g.ok()) {
    nvml = std::shared_ptr<agent::NvmlGpus>(std::move(*g));
    source = "NVML " + nvml->library_path() + " (driver " + nvml->driver_version() + ")";
  } else {
    source = "host without GPUs: " + g.status().message();
  }
  return agent::DiscoverHostNode(f.node, nvml.get());
}

// The node this agent serves: from the inventory file, else discovered (NVML when present),
// with the operator's labels, taints, pool and price on top. A bad flag is an
// InvalidArgument that names it, found before anything is discovered.
StatusOr<Node> ResolveNode(const AgentFlags& f, std::shared_ptr<agent::NvmlGpus>& nvml,
                           std::string& source) {
  auto additions = agent::ParseNodeAdditions(f.additions);
  if (!additions.ok()) return additions.status();
  auto node = InventoryOrHostNode(f, nvml, source);
  if (node.ok()) agent::ApplyNodeAdditions(*additions, *node);
  return node;
}

int RunDiscover(const AgentFlags& f) {
  std::shared_ptr<agent::NvmlGpus> nvml;
  std::string source;
  auto node = ResolveNode(f, nvml, source);
  if (!node.ok()) {
    std::cerr << "tessera agent --discover: " << node.status().ToString() << "\n";
    return 1;
  }
  Json out = Json::object();
  out["source"] = source;
  out["nvml"] = nvml != nullptr;
  if (nvml) out["driverVersion"] = nvml->driver_version();
  out["node"] = NodeToJson(*node);
  if (nvml) {
    Json samples = Json::array();
    for (const auto& s : nvml->Sample()) {
      Json j = {{"index", s.index},
                {"utilPercent", s.util_percent},
                {"memoryUsed", s.memory_used_bytes},
                {"powerMilliwatts", s.power_milliwatts},
                {"healthy", s.healthy}};
      if (!s.health_message.empty()) j["healthMessage"] = s.health_message;
      samples.push_back(j);
    }
    out["samples"] = samples;
  }
  if (f.output == "json") {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  // table
  std::printf("node %s (%s)\n", node->name.c_str(), source.c_str());
  std::printf("%-5s %-12s %-10s %-8s %-7s %s\n", "INDEX", "MODEL", "MEMORY", "VIRTUAL", "HEALTHY",
              "UUID / MIG");
  for (const auto& d : node->devices) {
    std::printf("%-5d %-12s %-10s %-8s %-7s %s\n", d.index, d.model.c_str(),
                FormatBytes(d.memory_bytes).c_str(), d.is_virtual ? "yes" : "no",
                d.healthy ? "yes" : "no", d.uuid.c_str());
    for (const auto& m : d.mig)
      std::printf("%-5s %-12s %-10s %-8s %-7s   %s at slice %d: %s\n", "", "", "", "", "",
                  m.profile.c_str(), m.start_slice, m.uuid.c_str());
  }
  return 0;
}

int RunAgent(const AgentFlags& f) {
  if (f.server.empty()) {
    std::cerr << "tessera agent: --server is required (or --discover)\n";
    return 2;
  }
  std::string token = f.token;
  if (token.empty()) {
    if (const char* t = std::getenv("TESSERA_AGENT_TOKEN")) token = t;
  }
  auto retention = ParseDuration(f.task_retention);
  if (!retention.ok()) {
    std::cerr << "tessera agent: " << retention.status().WithContext("--task-retention").ToString()
              << "\n";
    return 1;
  }
  if (f.max_finished_tasks < 0) {
    std::cerr << "tessera agent: InvalidArgument: --max-finished-tasks: must be 0 (no limit) "
                 "or more, got "
              << f.max_finished_tasks << "\n";
    return 1;
  }
  std::vector<agent::IdRange> allowed_ids[2];
  for (int i = 0; i < 2; ++i) {
    const std::string& text = i == 0 ? f.allow_run_as_uids : f.allow_run_as_gids;
    const std::string flag = i == 0 ? "--allow-run-as-uids" : "--allow-run-as-gids";
    if (text.empty()) continue;
    if (!f.run_as_submitter) {
      // Without it a securityContext names any id already: the list would restrict nothing.
      std::cerr << "tessera agent: " << flag << " needs --run-as-submitter\n";
      return 2;
    }
    auto ranges = agent::ParseIdRanges(text, flag);
    if (!ranges.ok()) {
      std::cerr << "tessera agent: " << ranges.status().ToString() << "\n";
      return 2;
    }
    allowed_ids[i] = *ranges;
  }
  std::shared_ptr<agent::NvmlGpus> nvml;
  std::string source;
  auto node = ResolveNode(f, nvml, source);
  if (!node.ok()) {
    std::cerr << "tessera agent: " << node.status().ToString() << "\n";
    return 1;
  }
  agent::AgentOptions o;
  o.task_retention_seconds = *retention;
  o.max_finished_tasks = f.max_finished_tasks;
  o.server_url = f.server;
  auto tls = ResolveTlsClientFlags(f.server_tls, f.server, "tessera agent");
  if (!tls.ok()) {
    std::cerr << "tessera agent: " << tls.status().ToString() << "\n";
    return 1;
  }
  o.server_tls = *tls;
  o.logs_tls = f.logs_tls;
  o.token = token;
  o.node = *node;
  o.work_dir = f.work_dir;
  o.nvml = nvml;
  o.lease_seconds = f.lease_seconds;
  o.cgroup_parent = f.cgroup_parent;
  o.srun_program = SelfProgram();
  o.identity.run_as_submitter = f.run_as_submitter;
  // Without --run-as-submitter, tasks run as the agent as they always did (root, most
  // often): refusing root then would refuse every task. An operator who asks for
  // per-user tasks gets no root ones unless they allow them (docs/agent.md).
  o.identity.allow_root_tasks = f.allow_root_tasks_given ? f.allow_root_tasks : !f.run_as_submitter;
  o.identity.allowed_uids = allowed_ids[0];
  o.identity.allowed_gids = allowed_ids[1];
  auto colon = f.logs_listen.rfind(':');
  o.logs_host = colon == std::string::npos ? f.logs_listen : f.logs_listen.substr(0, colon);
  o.logs_port = colon == std::string::npos ? 0 : std::atoi(f.logs_listen.c_str() + colon + 1);
  o.logs_advertise = f.logs_advertise;
  // The server would call an HTTPS endpoint over plain HTTP, and get no logs.
  if (f.logs_tls.enabled() && !f.logs_advertise.empty() &&
      f.logs_advertise.rfind("https://", 0) != 0) {
    std::cerr << "tessera agent: --logs-advertise " << f.logs_advertise
              << ": the logs endpoint serves HTTPS (--tls-cert-file), so advertise an https:// "
                 "URL\n";
    return 1;
  }
  o.logs_token = f.logs_token;
  if (o.logs_token.empty()) {
    if (const char* t = std::getenv("TESSERA_LOGS_TOKEN")) o.logs_token = t;
  }
  std::random_device rd;
  Rng rng((static_cast<uint64_t>(rd()) << 32) ^ rd());
  o.boot_id = agent::NewBootId(rng);
  auto a = agent::Agent::Create(std::move(o));
  if (!a.ok()) {
    std::cerr << "tessera agent: " << a.status().ToString() << "\n";
    return 1;
  }
  std::fprintf(stderr, "tessera agent: node %s, %zu GPUs from %s\n", node->name.c_str(),
               node->devices.size(), source.c_str());
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGPIPE, SIG_IGN);
  Status s = (*a)->Start();
  if (!s.ok()) {
    std::cerr << "tessera agent: " << s.ToString() << "\n";
    return 1;
  }
  std::fprintf(stderr, "tessera agent: serving logs at %s\n", (*a)->logs_url().c_str());
  while (g_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::fprintf(stderr, "tessera agent: signal %d, stopping%s\n", static_cast<int>(g_signal),
               f.stop_tasks_on_exit ? " (and every task)"
                                    : " (tasks keep running; the next agent adopts them)");
  (*a)->Stop(f.stop_tasks_on_exit);
  return 0;
}

}  // namespace

void AddAgentCommands(CLI::App& app) {
#ifdef TESSERA_HAVE_SERVER_HOOKS
  // `tessera server --local-agent`: in-process agents for the seed's inventory (2 nodes x 8
  // virtual A100-80GB), work dirs under $TESSERA_LOCAL_AGENT_DIR (default <data dir>/agents).
  server::LocalAgentHook() = [](const std::string& url, const std::string& token,
                                const std::string& data_dir,
                                const TlsClientOptions& server_tls) -> server::StopFn {
    agent::LocalAgentsOptions o;
    o.server_url = url;
    o.token = token;
    o.server_tls = server_tls;
    o.work_dir = data_dir + "/agents";
    o.srun_program = SelfProgram();
    if (const char* d = std::getenv("TESSERA_LOCAL_AGENT_DIR"); d && *d) o.work_dir = d;
    if (const char* inv = std::getenv("TESSERA_LOCAL_AGENT_INVENTORY"); inv && *inv)
      o.inventory = inv;
    auto la = agent::LocalAgents::Start(o);
    if (!la.ok()) {
      std::fprintf(stderr, "tessera server: --local-agent: %s\n", la.status().ToString().c_str());
      return [] {};
    }
    std::shared_ptr<agent::LocalAgents> agents(std::move(*la));
    std::string names;
    for (const auto& n : agents->nodes()) names += (names.empty() ? "" : ", ") + n;
    std::fprintf(stderr, "tessera server: local agents for %s (virtual GPUs), work dir %s\n",
                 names.c_str(), o.work_dir.c_str());
    return [agents] { agents->Stop(true); };
  };
#endif
  auto f = std::make_shared<AgentFlags>();
  CLI::App* cmd = app.add_subcommand(
      "agent", "Run the node agent: register this node, heartbeat, run its tasks");
  cmd->add_option("--server", f->server, "Server URL, e.g. http://127.0.0.1:8080");
  cmd->add_option("--token", f->token, "Agent bearer token (or $TESSERA_AGENT_TOKEN)");
  AddTlsClientFlags(cmd, f->server_tls);
  cmd->add_option(
      "--inventory", f->inventory,
      "Inventory file declaring virtual GPUs (or 'seed-minimal'); default: discover with NVML");
  cmd->add_option("--node", f->node,
                  "Node name (default: the host name, or the inventory's only node)");
  cmd->add_option("--node-labels", f->additions.node_labels,
                  "Labels to add to the node: key=value,key2=value2 (repeatable; as kubelet's)")
      ->allow_extra_args(false);
  cmd->add_option("--register-with-taints", f->additions.taints,
                  "Taints to put on the node: key=value:Effect,key:Effect, Effect NoSchedule, "
                  "PreferNoSchedule or NoExecute (repeatable; as kubelet's)")
      ->allow_extra_args(false);
  cmd->add_option("--pool", f->additions.pool,
                  "The node's pool (default: default, or the inventory's)");
  cmd->add_option("--cost-per-gpu-hour", f->additions.cost_per_gpu_hour,
                  "The node's price per GPU-hour, e.g. 2.5 (as an inventory's costPerGpuHour)");
  cmd->add_option("--max-tasks", f->additions.max_tasks,
                  "Tasks the node runs at most (kubelet's --max-pods; default: the inventory's "
                  "maxTasks, else 110)");
  cmd->add_option("--work-dir", f->work_dir, "Task folders and logs (default data/agent)");
  cmd->add_option("--nvml-library", f->nvml_library,
                  "NVML library to load (default $TESSERA_NVML_LIBRARY or libnvidia-ml.so.1)");
  cmd->add_option("--logs-listen", f->logs_listen,
                  "host:port for the logs endpoint (default 127.0.0.1:0)");
  cmd->add_option("--logs-advertise", f->logs_advertise,
                  "Logs URL given to the server (default from --logs-listen)");
  AddTlsServerFlags(cmd, f->logs_tls,
                    "the logs endpoint (a certificate for its --logs-advertise host)");
  cmd->add_option("--logs-token", f->logs_token,
                  "Bearer token the logs endpoint requires (or $TESSERA_LOGS_TOKEN); the agent "
                  "gives it to the server, whose logs proxy sends it");
  cmd->add_option(
      "--lease-seconds", f->lease_seconds,
      "Stop every task after this long without a server answer (default 10 heartbeats, 20 s; 0 = "
      "never)");
  cmd->add_option("--task-retention", f->task_retention,
                  "Remove a finished task's folder (its logs) this long after it ended, e.g. "
                  "24h, 90m (default 24h; 0 = no age limit)");
  cmd->add_option("--max-finished-tasks", f->max_finished_tasks,
                  "Keep the folders of at most this many finished tasks, removing the oldest "
                  "(default 1000; 0 = no limit)");
  cmd->add_option(
      "--cgroup-parent", f->cgroup_parent,
      "cgroup v2 folder that holds the tasks' cgroups (default <cgroup2>/tessera; '-' = "
      "no CPU/memory limits)");
  cmd->add_flag("--stop-tasks-on-exit", f->stop_tasks_on_exit,
                "On SIGTERM/SIGINT also stop every task");
  cmd->add_flag("--run-as-submitter", f->run_as_submitter,
                "Run each task as the Unix account named by its submitter, as slurmd does "
                "(needs root); a securityContext may name only that account's uid, gid and "
                "groups, or ids the two flags below list");
  cmd->add_option("--allow-run-as-uids", f->allow_run_as_uids,
                  "With --run-as-submitter: uids any submitter's runAsUser may name besides "
                  "its own, e.g. 1000-1999,65534 (default none)");
  cmd->add_option("--allow-run-as-gids", f->allow_run_as_gids,
                  "With --run-as-submitter: gids any submitter's runAsGroup and "
                  "supplementalGroups may name besides its account's groups (default none)");
  CLI::Option* allow_root =
      cmd->add_flag("--allow-root-tasks", f->allow_root_tasks,
                    "Whether tasks may run as root, uid 0, or with root's group, gid 0 "
                    "(--allow-root-tasks=false refuses them; default: false with "
                    "--run-as-submitter, else true)");
  cmd->add_flag("--discover", f->discover,
                "Print this node's inventory (NVML or --inventory) and exit");
  cmd->add_option("-o,--output", f->output, "Output of --discover: json or table")
      ->check(CLI::IsMember({"json", "table"}));
  cmd->callback([f, allow_root] {
    f->allow_root_tasks_given = allow_root->count() > 0;
    SetExitCode(f->discover ? RunDiscover(*f) : RunAgent(*f));
  });

  CLI::App* srun = app.add_subcommand(
      "srun",
      "srun in an sbatch script on Tessera's own nodes: starts this node's share of the step's "
      "tasks with their ranks (the agent puts it first on the script's PATH; docs/slurm.md)");
  srun->prefix_command();
  srun->callback([srun] { SetExitCode(agent::SrunMain(srun->remaining())); });
}

}  // namespace tessera::cli
