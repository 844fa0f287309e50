#include "server/auth.h"

#include <strings.h>

#include <openssl/evp.h>

#include "common/hostlist.h"
#include "common/rng.h"

namespace tessera::server {

const char* RoleName(Role r) {
  switch (r) {
    case Role::kAdmin:
      return "admin";
    case Role::kMember:
      return "member";
    case Role::kAgent:
      return "agent";
  }
  return "member";
}

StatusOr<Role> ParseRole(const std::string& s) {
  if (s == "admin") return Role::kAdmin;
  if (s == "member") return Role::kMember;
  if (s == "agent") return Role::kAgent;
  return InvalidArgument("unknown role \"" + s + "\" (admin, member, agent)");
}

std::string Sha256Hex(const std::string& data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md, &n, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < n; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

std::string NewToken() { return "tsr_" + SecureRandomHex(32); }

void TokenRegistry::Add(TokenEntry e) {
  std::lock_guard<std::mutex> l(mu_);
  auto old = hash_by_name_.find(e.principal.name);
  if (old != hash_by_name_.end()) by_hash_.erase(old->second);
  hash_by_name_[e.principal.name] = e.sha256_hex;
  by_hash_[e.sha256_hex] = std::move(e);
}

bool TokenRegistry::HasName(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  return hash_by_name_.count(name) > 0;
}

bool TokenRegistry::HasRole(Role r) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [name, hash] : hash_by_name_)
    if (by_hash_.at(hash).principal.role == r) return true;
  return false;
}

StatusOr<Principal> TokenRegistry::Authenticate(const std::string& header) const {
  if (header.empty()) return Unauthenticated("missing Authorization: Bearer <token> header");
  // The scheme is case-insensitive (RFC 7235): "bearer" and "BEARER" are "Bearer".
  if (header.size() < 7 || strncasecmp(header.c_str(), "Bearer ", 7) != 0)
    return Unauthenticated("Authorization header must be \"Bearer <token>\"");
  std::string token = header.substr(7);
  std::string h = Sha256Hex(token);
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_hash_.find(h);
  if (it == by_hash_.end()) return Unauthenticated("unknown or revoked token");
  return it->second.principal;
}

std::optional<TokenEntry> TokenRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = hash_by_name_.find(name);
  if (it == hash_by_name_.end()) return std::nullopt;
  return by_hash_.at(it->second);
}

void TokenRegistry::Remove(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = hash_by_name_.find(name);
  if (it == hash_by_name_.end()) return;
  by_hash_.erase(it->second);
  hash_by_name_.erase(it);
}

std::vector<TokenEntry> TokenRegistry::List() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<TokenEntry> out;
  for (const auto& [name, hash] : hash_by_name_) out.push_back(by_hash_.at(hash));
  return out;
}

Json TokenRegistry::ToJson(const TokenEntry& e) {
  Json j = Json::object();
  j["name"] = e.principal.name;
  j["role"] = RoleName(e.principal.role);
  j["queues"] = Json::array();
  for (const auto& q : e.principal.queues) j["queues"].push_back(q);
  if (!e.principal.nodes.empty())
    j["nodes"] = JoinHostlist({e.principal.nodes.begin(), e.principal.nodes.end()});
  j["sha256"] = e.sha256_hex;
  j["origin"] = e.origin;
  return j;
}

StatusOr<TokenEntry> TokenRegistry::FromJson(const Json& v, const std::string& path) {
  TokenEntry e;
  ObjectReader r(v, path);
  std::string role, token, nodes;
  std::vector<std::string> queues;
  TESSERA_RETURN_IF_ERROR(r.String("name", e.principal.name, true));
  TESSERA_RETURN_IF_ERROR(r.String("role", role, true));
  TESSERA_RETURN_IF_ERROR(r.StringList("queues", queues));
  TESSERA_RETURN_IF_ERROR(r.String("nodes", nodes));
  TESSERA_RETURN_IF_ERROR(r.String("token", token));
  TESSERA_RETURN_IF_ERROR(r.String("sha256", e.sha256_hex));
  TESSERA_RETURN_IF_ERROR(r.String("origin", e.origin));
  TESSERA_RETURN_IF_ERROR(r.Finish());
  // The name is who the token is for (audit records, listings) and a store key.
  if (e.principal.name.empty()) return InvalidArgument(r.Path("name") + ": must not be empty");
  for (unsigned char c : e.principal.name)
    if (c <= ' ' || c == '/' || c == 0x7f)
      return InvalidArgument(r.Path("name") + ": \"" + e.principal.name +
                             "\": no spaces, control characters or '/'");
  if (e.principal.name.size() > 253)
    return InvalidArgument(r.Path("name") + ": at most 253 characters");
  auto parsed = ParseRole(role);
  if (!parsed.ok()) return parsed.status().WithContext(r.Path("role"));
  e.principal.role = *parsed;
  e.principal.queues.insert(queues.begin(), queues.end());
  if (!token.empty()) {
    if (token.size() < 16) return InvalidArgument(r.Path("token") + ": at least 16 characters");
    e.sha256_hex = Sha256Hex(token);
  }
  if (e.sha256_hex.size() != 64)
    return InvalidArgument(r.Path("token") + ": give token or sha256 (64 hex digits)");
  if (e.principal.role == Role::kMember && e.principal.queues.empty())
    return InvalidArgument(r.Path("queues") + ": a member needs at least one queue");
  if (!nodes.empty()) {
    if (e.principal.role != Role::kAgent)
      return InvalidArgument(r.Path("nodes") + ": only an agent token is bound to nodes");
    auto names = ExpandHostlist(nodes);
    if (!names.ok()) return names.status().WithContext(r.Path("nodes"));
    if (names->empty()) return InvalidArgument(r.Path("nodes") + ": names no node");
    e.principal.nodes.insert(names->begin(), names->end());
  }
  return e;
}

StatusOr<std::vector<TokenEntry>> TokenRegistry::ParseConfig(const Json& doc) {
  ObjectReader r(doc, "");
  std::vector<TokenEntry> out;
  const Json* tokens = r.Get("tokens");
  TESSERA_RETURN_IF_ERROR(r.Finish());
  if (tokens == nullptr) return out;
  if (!tokens->is_array()) return InvalidArgument("tokens: expected a list");
  for (size_t i = 0; i < tokens->size(); ++i) {
    auto e = FromJson((*tokens)[i], "tokens[" + std::to_string(i) + "]");
    if (!e.ok()) return e.status();
    e->origin = "config";
    out.push_back(std::move(*e));
  }
  return out;
}

}  // namespace tessera::server

#include "server/hooks.h"

namespace tessera::server {
LocalAgentStarter& LocalAgentHook() {
  static LocalAgentStarter hook;
  return hook;
}
}  // namespace tessera::server
