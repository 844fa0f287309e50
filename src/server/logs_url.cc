#include "server/logs_url.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace tessera::server {
namespace {

// An address as 16 bytes (IPv4 as ::ffff:a.b.c.d, as a dual-stack socket reports it).
std::optional<std::string> Canonical(const std::string& ip) {
  unsigned char buf[16] = {};
  if (inet_pton(AF_INET6, ip.c_str(), buf) == 1) return std::string(buf, buf + 16);
  in_addr v4;
  if (inet_pton(AF_INET, ip.c_str(), &v4) != 1) return std::nullopt;
  buf[10] = buf[11] = 0xff;
  std::memcpy(buf + 12, &v4, 4);
  return std::string(buf, buf + 16);
}

// What `host` stands for: itself when it is an address, else what the resolver answers.
std::vector<std::string> AddressesOf(const std::string& host) {
  if (auto c = Canonical(host)) return {*c};
  addrinfo hints = {};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return {};
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> hold(res, freeaddrinfo);
  std::vector<std::string> out;
  char text[INET6_ADDRSTRLEN];
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const void* src =
        a->ai_family == AF_INET
            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr)
            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr);
    if (inet_ntop(a->ai_family, src, text, sizeof text) == nullptr) continue;
    if (auto c = Canonical(text)) out.push_back(*c);
  }
  return out;
}

}  // namespace

Status CheckLogsUrlNamesPeer(const std::string& url, const std::string& peer) {
  auto bad = [&](const std::string& why) {
    return InvalidArgument("logsUrl: \"" + url + "\": " + why);
  };
  size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.compare(0, scheme, "http") != 0 && url.compare(0, scheme, "https") != 0))
    return bad("must be http://HOST:PORT or https://HOST:PORT");
  std::string rest = url.substr(scheme + 3);
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    if (slash + 1 != rest.size()) return bad("must have no path (the server adds /v1/logs/...)");
    rest.resize(slash);
  }
  if (rest.find('@') != std::string::npos) return bad("must have no user information");
  std::string host;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == std::string::npos) return bad("unclosed [ in the host");
    host = rest.substr(1, close - 1);
  } else {
    host = rest.substr(0, rest.rfind(':'));
  }
  if (host.empty()) return bad("has no host");
  auto from = Canonical(peer);
  if (!from) return Status::Ok();  // not an IP connection (a Unix socket): nothing to compare
  for (const std::string& a : AddressesOf(host))
    if (a == *from) return Status::Ok();
  return bad("host " + host + " is not the address this agent connects from (" + peer +
             "); the server fetches task logs there. Advertise the node's own address "
             "(tessera agent --logs-advertise), or start the server with "
             "--agent-logs-any-host where agents serve logs on another network");
}

}  // namespace tessera::server
