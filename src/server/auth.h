// Auth: bearer tokens, stored only as SHA-256 hashes, mapped to principals with roles.
//
// Roles: admin (everything), member (jobs of its queues only: submit, see, cancel), agent
// (the node-agent protocol only). Tokens come from a config file (--auth-config) or are
// created through the API (POST /v1/tokens, admin only) and persisted hashed in the store.
// Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "model/codec.h"

namespace tessera::server {

enum class Role { kAdmin, kMember, kAgent };
const char* RoleName(Role r);
StatusOr<Role> ParseRole(const std::string& s);

struct Principal {
  std::string name;
  Role role = Role::kMember;
  std::set<std::string> queues;  // member: the queues it may use; "*" = all
  // agent: the nodes it may register and speak for; empty = any (one token for the fleet).
  // A per-node token keeps a stolen one from impersonating other nodes (as Kubernetes'
  // NodeRestriction does for kubelets).
  std::set<std::string> nodes = {};

  bool IsAdmin() const { return role == Role::kAdmin; }
  bool MayUseQueue(const std::string& q) const {
    return role == Role::kAdmin || queues.count("*") > 0 || queues.count(q) > 0;
  }
  // Whether it may register and heartbeat as node `n`: admin, or agent bound to no node or
  // to `n` (the caller checks the role).
  bool MaySpeakFor(const std::string& n) const { return nodes.empty() || nodes.count(n) > 0; }
};

struct TokenEntry {
  Principal principal;
  std::string sha256_hex;
  std::string origin;  // "config" | "api" | "bootstrap"
};

std::string Sha256Hex(const std::string& data);
// 32 random bytes from the OS, hex, with a "tsr_" prefix.
std::string NewToken();

class TokenRegistry {
 public:
  void Add(TokenEntry e);
  bool HasName(const std::string& name) const;
  bool HasRole(Role r) const;
  // Resolves an `Authorization` header value ("Bearer <token>").
  StatusOr<Principal> Authenticate(const std::string& header) const;
  std::vector<TokenEntry> List() const;  // by name
  std::optional<TokenEntry> Find(const std::string& name) const;
  void Remove(const std::string& name);  // the token stops authenticating at once

  static Json ToJson(const TokenEntry& e);
  static StatusOr<TokenEntry> FromJson(const Json& v, const std::string& path);
  // `tokens: [{name, role, queues, nodes, token | sha256}]` from an auth config file.
  static StatusOr<std::vector<TokenEntry>> ParseConfig(const Json& doc);

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, TokenEntry> by_hash_;  // lookup only; never iterated for output
  std::map<std::string, std::string> hash_by_name_;
};

}  // namespace tessera::server
