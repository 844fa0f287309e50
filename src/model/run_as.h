// RunAs: the Unix identity a task asks to run as, as a Kubernetes securityContext states it
// (runAsUser, runAsGroup, runAsNonRoot, supplementalGroups). It travels from the submitted
// document through the server's stored job and allocation to the agent, which resolves it
// (docs/agent.md, "Task identity"). A value type; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/codec.h"

namespace tessera {

// The largest id Kubernetes accepts for runAsUser, runAsGroup and supplementalGroups.
inline constexpr int64_t kMaxUnixId = 2147483647;

struct RunAs {
  std::optional<int64_t> user;               // runAsUser: a uid, which need not exist on the node
  std::optional<int64_t> group;              // runAsGroup: the primary gid
  bool non_root = false;                     // runAsNonRoot: refuse to run as uid 0
  std::vector<int64_t> supplemental_groups;  // added to the user's own groups
  bool empty() const { return !user && !group && !non_root && supplemental_groups.empty(); }
  friend bool operator==(const RunAs&, const RunAs&) = default;
};

// {"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": true, "supplementalGroups": [..]}
// with only what is set; {} when empty. The one shape of the server's storage, the agent
// protocol and describe.
Json RunAsToJson(const RunAs& r);
// Strict: unknown keys, ids that are not integers in 0..kMaxUnixId, and runAsNonRoot with
// runAsUser 0 are InvalidArgument naming the field under `path`.
StatusOr<RunAs> RunAsFromJson(const Json& v, const std::string& path);
// "uid 65534, gid 65534, supplemental groups 100,200, runAsNonRoot"; "" when empty.
std::string DescribeRunAs(const RunAs& r);

// The identity a task runs as, as its agent chose it and reports it: in the agent's
// task.json, its heartbeats and the server's allocation (`runAs`).
struct RanAs {
  int64_t uid = -1;  // -1: not chosen yet, or the task failed before
  int64_t gid = -1;
  std::string user;  // "" for a uid the node has no account for
  bool known() const { return uid >= 0; }
  friend bool operator==(const RanAs&, const RanAs&) = default;
};
// {"uid": 1000, "gid": 1000, "user": "alice"}.
Json RanAsToJson(const RanAs& r);
// Lenient (the JSON is an agent's own or already checked): what is missing stays unknown.
RanAs RanAsFromJson(const Json& v);

}  // namespace tessera
