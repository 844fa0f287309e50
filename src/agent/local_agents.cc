#include "agent/local_agents.h"

#include <random>

#include "agent/inventory.h"
#include "common/rng.h"

namespace tessera::agent {

StatusOr<std::unique_ptr<LocalAgents>> LocalAgents::Start(const LocalAgentsOptions& options) {
  auto nodes = LoadInventory(options.inventory);
  if (!nodes.ok()) return nodes.status();
  uint64_t seed = options.seed;
  if (seed == 0) {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  Rng rng(seed);
  std::unique_ptr<LocalAgents> la(new LocalAgents());
  for (const auto& node : *nodes) {
    AgentOptions ao;
    ao.server_url = options.server_url;
    ao.server_tls = options.server_tls;
    ao.token = options.token;
    ao.node = node;
    ao.work_dir = options.work_dir + "/" + node.name;
    ao.boot_id = NewBootId(rng);
    ao.lease_seconds = options.lease_seconds;
    ao.srun_program = options.srun_program;
    ao.logs_token = options.logs_token.empty() ? SecureRandomHex(16) : options.logs_token;
    ao.log = options.log;
    auto a = Agent::Create(std::move(ao));
    if (!a.ok()) return a.status().WithContext("local agent " + node.name);
    Status s = (*a)->Start();
    if (!s.ok()) return s.WithContext("local agent " + node.name);  // destructor stops the others
    la->agents_.push_back(std::move(*a));
  }
  return la;
}

LocalAgents::~LocalAgents() { Stop(true); }

void LocalAgents::Stop(bool stop_tasks) {
  for (auto& a : agents_) a->Stop(stop_tasks);
}

std::vector<std::string> LocalAgents::nodes() const {
  std::vector<std::string> out;
  for (const auto& a : agents_) out.push_back(a->node().name);
  return out;
}

Agent* LocalAgents::agent(const std::string& node) {
  for (auto& a : agents_) {
    if (a->node().name == node) return a.get();
  }
  return nullptr;
}

}  // namespace tessera::agent
