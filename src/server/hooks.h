// Hooks the `tessera server` command offers to components linked above the server.
//
// LocalAgentHook: with --local-agent, the server command calls it once the API is up, with
// the API's URL and an agent token; it starts in-process node agents (src/agent) and returns
// a function that stops them. Unset (the default), --local-agent only prints a notice.
// Set it before the command runs (e.g. from a static initialiser in src/cli/agent_cmd.cc).
#pragma once

#include <functional>
#include <string>

namespace tessera::server {

using StopFn = std::function<void()>;
using LocalAgentStarter =
    std::function<StopFn(const std::string& server_url, const std::string& agent_token)>;
LocalAgentStarter& LocalAgentHook();

}  // namespace tessera::server
