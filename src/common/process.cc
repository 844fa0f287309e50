#include "common/process.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace tessera {

std::map<std::string, std::string> EnvironForTasks() {
  std::map<std::string, std::string> env = EnvironMap();
  for (const char* secret :
       {"TESSERA_AGENT_TOKEN", "TESSERA_LOGS_TOKEN", "TESSERA_TOKEN", "TESSERA_TOKEN_FILE"})
    env.erase(secret);
  return env;
}

std::map<std::string, std::string> EnvironMap() {
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) out[std::string(static_cast<const char*>(*e), eq)] = eq + 1;
  }
  return out;
}

std::vector<std::string> EnvironWith(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    if (!overrides.contains(kv.substr(0, kv.find('=')))) out.push_back(std::move(kv));
  }
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

void WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    data += w;
    n -= static_cast<size_t>(w);
  }
}

std::string QuoteArgv(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    bool plain = !a.empty() && a.find_first_not_of(
                                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRS"
                                   "TUVWXYZ0123456789-_=:,./%+@") == std::string::npos;
    if (plain) {
      s += a;
      continue;
    }
    s += '\'';
    for (char c : a) s += (c == '\'') ? std::string("'\\''") : std::string(1, c);
    s += '\'';
  }
  return s;
}

}  // namespace tessera
