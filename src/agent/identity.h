// TaskIdentity: the Unix user, group and supplementary groups a task runs as, and the calls
// that switch a forked child to them (docs/agent.md, "Task identity").
//
// ResolveTaskIdentity decides, in the agent, from the task's securityContext (RunAs), its
// submitter's name and the agent's policy; it reads the user database (NSS), so it must not
// run in a forked child. DropPrivileges and OpenAs only make async-signal-safe calls on what
// ResolveTaskIdentity prepared. Stateless; thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/run_as.h"

namespace tessera::agent {

// Inclusive ranges of Unix ids, as an operator lists them: "1000-1999,65534".
struct IdRange {
  int64_t first = 0, last = 0;
  friend bool operator==(const IdRange&, const IdRange&) = default;
};
bool InIdRanges(const std::vector<IdRange>& ranges, int64_t id);
// "1000-1999,65534" -> {{1000, 1999}, {65534, 65534}}; InvalidArgument naming `flag` for
// anything else (ids 0..kMaxUnixId, first <= last).
StatusOr<std::vector<IdRange>> ParseIdRanges(const std::string& text, const std::string& flag);

struct IdentityPolicy {
  // Tasks run as the Unix account named by their submitter (as slurmd runs a job as the user
  // who submitted it); a name the node does not know fails the task. A securityContext may
  // then only name the submitter's own uid, its primary gid and groups (its account's, from
  // the group database), or ids listed below: a tenant picks no one else's identity.
  bool run_as_submitter = false;
  // With run_as_submitter: the uids a runAsUser, and the gids a runAsGroup or
  // supplementalGroups, may name beside the submitter's own (--allow-run-as-uids,
  // --allow-run-as-gids). Listing 0 is not enough for root: allow_root_tasks must say so too.
  std::vector<IdRange> allowed_uids, allowed_gids;
  // Whether a task may run as uid 0 (root) or with gid 0 (root's group) as its group or one
  // of its supplementalGroups: given, or by running as the agent's own root.
  bool allow_root_tasks = true;
};

struct TaskIdentity {
  // false: the task keeps the agent's own ids (what was asked is what the agent is, or
  // nothing was asked); the fields below then describe the agent.
  bool switch_user = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups, the user's own (initgroups) first
  std::string name, home;     // from the user database; "" for a uid it does not know
  // "uid 65534 (nobody), gid 65534, groups 65534,100"
  std::string Describe() const;
};

// The identity a task gets on node `node`:
// - uid: securityContext runAsUser; else, with run_as_submitter, the submitter's account
//   (a name the node does not resolve fails the task); else the agent's own.
// - gid: runAsGroup; else the user's primary group; else (a uid without an account) 65534.
// - groups: the user's groups in the group database (as initgroups), then supplementalGroups.
// A FailedPrecondition whose message says why (naming the user and the node) when the task
// may not start: runAsNonRoot or !allow_root_tasks with uid 0, !allow_root_tasks with gid 0
// (runAsGroup, the primary group, or supplementalGroups), an unknown submitter, with
// run_as_submitter an id other than the submitter's own that the policy does not list, or
// an agent that is not root asked for an identity other than its own.
StatusOr<TaskIdentity> ResolveTaskIdentity(const RunAs& run_as, const std::string& submitter,
                                           const IdentityPolicy& policy, const std::string& node);

// In a forked child: setgroups, setgid, then setuid (in that order: each needs the
// privilege the next drops), and a check that root cannot be regained. nullptr when done,
// else the name of the call that failed (errno says why). Async-signal-safe.
const char* DropPrivileges(const TaskIdentity& id);

// access(path, mode) as `id` (its real ids), in a child that drops to it: 0, or the errno
// (e.g. EACCES where a folder above `path` may not be searched by it). For an identity
// that does not switch, a plain access.
int AccessAs(const TaskIdentity& id, const std::string& path, int mode);

// open(path, flags, mode) as `id` (sbatch -o/-e: the task's files, opened with its rights,
// not the agent's), through a child that drops to it and passes the descriptor back. The
// descriptor, or -1 with errno set. For an identity that does not switch, a plain open.
int OpenAs(const TaskIdentity& id, const std::string& path, int flags, mode_t mode);

}  // namespace tessera::agent
