// Which logsUrl the server takes from a node agent. The server fetches task logs from it for
// any user who asks (GET /v1/jobs/{name}/logs) and relays the answer, so a compromised node
// naming another host there would make the server fetch from any service it can reach (SSRF).
// By default the URL must name the address the agent connects from.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera::server {

// OK when `url` (http:// or https://, host and port, the agent's --logs-advertise) names
// `peer`, the address the request came from: the same IP, or a host name that resolves to
// it. InvalidArgument naming logsUrl, its host and the peer otherwise, or for a URL that is
// not http(s)://HOST[:PORT].
Status CheckLogsUrlNamesPeer(const std::string& url, const std::string& peer);

}  // namespace tessera::server
