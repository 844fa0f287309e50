#include "agent/identity.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

namespace tessera::agent {
namespace {

// The overflow group (nogroup): a uid without an account and without runAsGroup gets it,
// not the root group that a container runtime would give.
constexpr gid_t kNoGroup = 65534;

struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string name, home;
};

std::optional<Account> FromPasswd(const passwd* pw) {
  if (pw == nullptr) return std::nullopt;
  return Account{pw->pw_uid, pw->pw_gid, pw->pw_name, pw->pw_dir ? pw->pw_dir : ""};
}

std::optional<Account> AccountByName(const std::string& name) {
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0) return std::nullopt;
  return FromPasswd(found);
}

std::optional<Account> AccountById(uid_t uid) {
  passwd pw{}, *found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0) return std::nullopt;
  return FromPasswd(found);
}

// What initgroups(name, gid) would set: gid and the groups that list the user.
std::vector<gid_t> GroupList(const std::string& name, gid_t gid) {
  int n = 64;
  std::vector<gid_t> groups(n);
  while (::getgrouplist(name.c_str(), gid, groups.data(), &n) < 0) groups.resize(n + 16);
  groups.resize(n);
  return groups;
}

std::vector<gid_t> OwnGroups() {
  std::vector<gid_t> groups(std::max(0, ::getgroups(0, nullptr)));
  const int n = ::getgroups(static_cast<int>(groups.size()), groups.data());
  groups.resize(std::max(0, n));
  groups.push_back(::getegid());
  return groups;
}

bool Contains(const std::vector<gid_t>& v, int64_t g) {
  return std::find(v.begin(), v.end(), static_cast<gid_t>(g)) != v.end();
}

std::string JoinIds(const std::vector<gid_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

}  // namespace

bool InIdRanges(const std::vector<IdRange>& ranges, int64_t id) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const IdRange& r) { return r.first <= id && id <= r.last; });
}

StatusOr<std::vector<IdRange>> ParseIdRanges(const std::string& text, const std::string& flag) {
  std::vector<IdRange> out;
  auto id = [&](const std::string& s, int64_t& v) {
    if (s.empty() || s.size() > 10 ||
        !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    v = std::stoll(s);
    return v <= kMaxUnixId;
  };
  size_t at = 0;
  while (at <= text.size()) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(at, comma - at);
    const size_t dash = item.find('-');
    IdRange r;
    const bool ok = dash == std::string::npos
                        ? id(item, r.first) && (r.last = r.first, true)
                        : id(item.substr(0, dash), r.first) && id(item.substr(dash + 1), r.last) &&
                              r.first <= r.last;
    if (!ok)
      return InvalidArgument(flag + ": \"" + item +
                             "\" is not an id or a range of ids (e.g. 1000-1999,65534; ids 0.." +
                             std::to_string(kMaxUnixId) + ")");
    out.push_back(r);
    at = comma + 1;
  }
  return out;
}

std::string TaskIdentity::Describe() const {
  std::string s = "uid " + std::to_string(uid) + (name.empty() ? "" : " (" + name + ")") +
                  ", gid " + std::to_string(gid);
  if (!groups.empty()) {
    s += ", groups ";
    for (size_t i = 0; i < groups.size(); ++i) s += (i ? "," : "") + std::to_string(groups[i]);
  }
  return s;
}

StatusOr<TaskIdentity> ResolveTaskIdentity(const RunAs& run_as, const std::string& submitter,
                                           const IdentityPolicy& policy, const std::string& node) {
  const uid_t euid = ::geteuid();
  const gid_t egid = ::getegid();
  const std::string on = " on node " + node;
  TaskIdentity id;
  std::optional<Account> account;
  // Asked for an identity: the agent sets every id, even where one equals its own.
  const bool asked =
      run_as.user || run_as.group || !run_as.supplemental_groups.empty() || policy.run_as_submitter;
  std::string who;  // for the messages: how the uid was chosen
  if (run_as.user) {
    id.uid = static_cast<uid_t>(*run_as.user);
    account = AccountById(id.uid);  // Kubernetes runs a uid that has no account too
    who = "securityContext.runAsUser " + std::to_string(id.uid);
  } else if (policy.run_as_submitter) {
    if (submitter.empty())
      return FailedPrecondition(
          "the server named no submitter for this task (an older server?): the agent" + on +
          " runs each task as its submitter's Unix account (--run-as-submitter), never as "
          "itself");
    account = AccountByName(submitter);
    if (!account)
      return FailedPrecondition("user \"" + submitter + "\" (the job's submitter) does not exist" +
                                on +
                                ": the agent runs each task as its submitter's Unix account "
                                "(--run-as-submitter)");
    id.uid = account->uid;
    who = "the submitter \"" + submitter + "\" (uid " + std::to_string(id.uid) + ")";
  } else {
    id.uid = euid;
    account = AccountById(euid);
    who = "the agent's own user (uid " + std::to_string(euid) + ")";
  }
  if (account) id.name = account->name, id.home = account->home;
  if (run_as.group)
    id.gid = static_cast<gid_t>(*run_as.group);
  else if (!asked)
    id.gid = egid;
  else
    id.gid = account ? account->gid : kNoGroup;
  if (asked) {
    id.groups = account ? GroupList(account->name, id.gid) : std::vector<gid_t>{id.gid};
    for (int64_t g : run_as.supplemental_groups)
      if (std::find(id.groups.begin(), id.groups.end(), static_cast<gid_t>(g)) == id.groups.end())
        id.groups.push_back(static_cast<gid_t>(g));
  }

  if (id.uid == 0 && run_as.non_root)
    return FailedPrecondition("securityContext.runAsNonRoot: the task would run as " + who +
                              ", which is root" + on + " (give it a runAsUser other than 0)");
  if (id.uid == 0 && !policy.allow_root_tasks)
    return FailedPrecondition("the task would run as root (uid 0): " + who + "; the agent" + on +
                              " runs no task as root unless started with --allow-root-tasks");
  // Root's group opens what root's files allow their group (/etc/shadow, disks): refused as
  // uid 0 is.
  if (!policy.allow_root_tasks && asked) {
    std::string how;  // (a group the group database gives the account is the operator's)
    if (id.gid == 0)
      how = run_as.group ? "securityContext.runAsGroup 0" : "the primary group of " + who;
    else if (std::find(run_as.supplemental_groups.begin(), run_as.supplemental_groups.end(), 0) !=
             run_as.supplemental_groups.end())
      how = "securityContext.supplementalGroups 0";
    if (!how.empty())
      return FailedPrecondition("the task would run with root's group (gid 0): " + how +
                                "; the agent" + on +
                                " runs no task with group 0 unless started with "
                                "--allow-root-tasks");
  }
  // A tenant's task runs as its submitter, not as whoever its securityContext names: another
  // user's uid, or a group the submitter is not in, only where the operator listed it.
  if (policy.run_as_submitter &&
      (run_as.user || run_as.group || !run_as.supplemental_groups.empty())) {
    std::optional<Account> own;
    if (!run_as.user)
      own = account;
    else if (!submitter.empty())
      own = AccountByName(submitter);
    const std::vector<gid_t> own_groups =
        own ? GroupList(own->name, own->gid) : std::vector<gid_t>{};
    const std::string whose =
        own ? "the submitter \"" + submitter + "\"'s own"
            : "the submitter's own (\"" + submitter + "\" has no account" + on + ")";
    const std::string rule = ": the agent" + on +
                             " runs each task as its submitter's account (--run-as-submitter) "
                             "and other ids only where ";
    if (run_as.user && !(own && own->uid == *run_as.user) &&
        !InIdRanges(policy.allowed_uids, *run_as.user))
      return FailedPrecondition("securityContext.runAsUser " + std::to_string(*run_as.user) +
                                " is not " + whose + " uid" +
                                (own ? " (" + std::to_string(own->uid) + ")" : "") + rule +
                                "--allow-run-as-uids lists them");
    std::vector<std::pair<std::string, int64_t>> gids;
    if (run_as.group) gids.push_back({"runAsGroup", *run_as.group});
    for (int64_t g : run_as.supplemental_groups) gids.push_back({"supplementalGroups", g});
    for (const auto& [field, g] : gids)
      if (!Contains(own_groups, g) && !InIdRanges(policy.allowed_gids, g))
        return FailedPrecondition("securityContext." + field + " " + std::to_string(g) +
                                  " is not one of " + whose + " groups" +
                                  (own ? " (" + JoinIds(own_groups) + ")" : "") + rule +
                                  "--allow-run-as-gids lists them");
  }
  if (asked && euid != 0) {
    const std::vector<gid_t> own = OwnGroups();
    const bool has_all = std::all_of(id.groups.begin(), id.groups.end(), [&](gid_t g) {
      return std::find(own.begin(), own.end(), g) != own.end();
    });
    if (id.uid != euid || id.gid != egid || !has_all)
      return FailedPrecondition("cannot run the task as " + id.Describe() + ": the agent" + on +
                                " runs as uid " + std::to_string(euid) +
                                ", not root, and cannot switch users");
    return id;  // already that user: nothing to switch
  }
  id.switch_user = asked;
  return id;
}

const char* DropPrivileges(const TaskIdentity& id) {
  if (!id.switch_user) return nullptr;
  if (::setgroups(id.groups.size(), id.groups.data()) != 0) return "setgroups";
  if (::setgid(id.gid) != 0) return "setgid";
  if (::setuid(id.uid) != 0) return "setuid";
  // A uid other than root must not be able to take root back (a setuid that only changed
  // the effective id would allow it).
  if (id.uid != 0 && (::setuid(0) == 0 || ::geteuid() == 0)) {
    errno = EPERM;
    return "setuid (root could be regained)";
  }
  return nullptr;
}

int AccessAs(const TaskIdentity& id, const std::string& path, int mode) {
  if (!id.switch_user) return ::access(path.c_str(), mode) == 0 ? 0 : errno;
  const char* p = path.c_str();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls: the agent is threaded. errno values fit an exit status.
    if (DropPrivileges(id) != nullptr || ::access(p, mode) != 0) ::_exit(errno & 0xff);
    ::_exit(0);
  }
  if (pid < 0) return errno;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return errno;
  return WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
}

int OpenAs(const TaskIdentity& id, const std::string& path, int flags, mode_t mode) {
  if (!id.switch_user) return ::open(path.c_str(), flags, mode);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  const char* p = path.c_str();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls: the agent is threaded.
    ::close(sv[0]);
    int err = 0;
    int fd = -1;
    if (DropPrivileges(id) != nullptr || (fd = ::open(p, flags, mode)) < 0) err = errno;
    msghdr msg{};
    iovec iov{&err, sizeof(err)};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (fd >= 0) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    ::_exit(::sendmsg(sv[1], &msg, 0) == static_cast<ssize_t>(sizeof(err)) ? 0 : 1);
  }
  ::close(sv[1]);
  if (pid < 0) {
    const int e = errno;
    ::close(sv[0]);
    errno = e;
    return -1;
  }
  int err = EIO;
  int fd = -1;
  msghdr msg{};
  iovec iov{&err, sizeof(err)};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  while ((n = ::recvmsg(sv[0], &msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  if (n == static_cast<ssize_t>(sizeof(err)))
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
  ::close(sv[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (fd >= 0) return fd;
  errno = n == static_cast<ssize_t>(sizeof(err)) && err != 0 ? err : EIO;
  return -1;
}

}  // namespace tessera::agent
