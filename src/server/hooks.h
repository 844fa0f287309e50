// Hooks the `tessera server` command offers to components linked above the server.
//
// LocalAgentHook: with --local-agent, the server command calls it once the API is up, with
// the API's URL, an agent token, the server's data dir and how to check the API's TLS
// certificate (https:// URLs); it starts in-process node agents
// (src/agent) and returns a function that stops them. Unset (the default), --local-agent only
// prints a notice. Set it before the command runs (e.g. from a static initialiser in
// src/cli/agent_cmd.cc).
//
// PoolHooks: each is called once the control plane is loaded and the API is up, before the
// local agents; it connects a pool that another system runs (Slurm:
// src/backends/slurm/server_hookup.h) and returns a function that disconnects it (called at
// shutdown, before the API stops). An error stops the server from starting. Set them from
// the command's flags before it runs (src/cli/server_cmd.cc).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/tls.h"

namespace tessera::server {

class ControlPlane;

using StopFn = std::function<void()>;
using LocalAgentStarter =
    std::function<StopFn(const std::string& server_url, const std::string& agent_token,
                         const std::string& data_dir, const TlsClientOptions& server_tls)>;
LocalAgentStarter& LocalAgentHook();

using PoolStarter = std::function<StatusOr<StopFn>(ControlPlane& cp)>;
std::vector<PoolStarter>& PoolHooks();

}  // namespace tessera::server
