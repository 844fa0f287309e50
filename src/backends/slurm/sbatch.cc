#include "backends/slurm/sbatch.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "backends/slurm/command_runner.h"
#include "common/hostlist.h"
#include "spec/spec.h"

namespace tessera::slurm {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr const char* kTagPrefix = "tessera:";

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Ids end up in a Slurm comment and job name: keep them to characters that survive both.
Status CheckId(const std::string& id, const char* field) {
  if (id.empty()) return InvalidArgument(std::string("dispatch.") + field + ": empty");
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return InvalidArgument(std::string("dispatch.") + field + ": \"" + id +
                             "\" may use only letters, digits, '-', '_' and '.'");
    }
  }
  return Status::Ok();
}

struct Shape {
  int32_t tasks = 0;
  int64_t cpus_per_task = 0;
  int64_t memory_mib = 0;
  std::map<std::string, int64_t> gpus;  // type -> count
  auto Key() const { return std::tie(tasks, cpus_per_task, memory_mib, gpus); }
};

// Long option names (without "--") and short letters whose #SBATCH lines Tessera owns.
const std::set<std::string>& OwnedLong() {
  static const std::set<std::string> s = {"nodes",
                                          "ntasks",
                                          "ntasks-per-node",
                                          "ntasks-per-socket",
                                          "ntasks-per-core",
                                          "ntasks-per-gpu",
                                          "cpus-per-task",
                                          "cpus-per-gpu",
                                          "mincpus",
                                          "mem",
                                          "mem-per-cpu",
                                          "mem-per-gpu",
                                          "gpus",
                                          "gpus-per-node",
                                          "gpus-per-task",
                                          "gpus-per-socket",
                                          "gres",
                                          "nodelist",
                                          "nodefile",
                                          "exclude",
                                          "partition",
                                          "time",
                                          "time-min",
                                          "job-name",
                                          "comment",
                                          "array",
                                          "exclusive",
                                          "constraint",
                                          "sockets-per-node",
                                          "cores-per-socket",
                                          "threads-per-core",
                                          "extra-node-info",
                                          "requeue",
                                          "no-requeue",
                                          "hold",
                                          "begin",
                                          "dependency",
                                          "kill-on-invalid-dep",
                                          "clusters",
                                          "het-group"};
  return s;
}
const std::string& OwnedShort() {
  static const std::string s = "NncGwFxptJaCHdBM";
  return s;
}

bool IsOwnedDirective(const std::string& args) {
  // args: what follows "#SBATCH", e.g. " --gpus=4", " -n 2", " hetjob".
  size_t p = args.find_first_not_of(" \t");
  if (p == std::string::npos) return false;
  std::string opt = args.substr(p);
  if (opt.rfind("hetjob", 0) == 0 || opt.rfind("packjob", 0) == 0) return true;
  if (opt.rfind("--", 0) == 0) {
    std::string name = opt.substr(2, opt.find_first_of("= \t") - 2);
    return OwnedLong().contains(name);
  }
  if (opt.size() >= 2 && opt[0] == '-') return OwnedShort().find(opt[1]) != std::string::npos;
  return false;
}

// The words of a script's leading #SBATCH lines, in order (Slurm reads no further), split
// and unquoted as sbatch does (spec::SbatchLineWords).
std::vector<std::string> DirectiveWords(const std::string& script) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < script.size()) {
    size_t end = script.find('\n', pos);
    if (end == std::string::npos) end = script.size();
    std::string line = script.substr(pos, end - pos);
    pos = end + 1;
    size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    if (line[first] != '#') break;
    if (line.rfind("#SBATCH", 0) != 0) continue;
    // A line with an unterminated quote has no options (the spec parser refuses it).
    auto words = spec::SbatchLineWords(line.substr(7), "");
    if (words.ok()) out.insert(out.end(), words->begin(), words->end());
  }
  return out;
}

// Slurm keeps account and QOS names in lower case (sacctmgr, slurm.conf's Allow*/Deny*).
std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}
bool SameName(const std::string& a, const std::string& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) ==
           std::tolower(static_cast<unsigned char>(y));
  });
}

// Sets who's account and QOS from sbatch options (-A X, -AX, --account=X, --account X; the
// same for -q/--qos), lower-cased as Slurm reads them; a later option wins, as in sbatch.
void ReadAccountAndQos(const std::vector<std::string>& words, SlurmIdentity& who) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    auto value = [&](const std::string& long_name, const std::string& short_name) {
      std::optional<std::string> v;
      if ((w == long_name || w == short_name) && i + 1 < words.size()) {
        v = words[++i];
      } else if (w.rfind(long_name + "=", 0) == 0) {
        v = w.substr(long_name.size() + 1);
      } else if (w.size() > 2 && w.rfind(short_name, 0) == 0) {
        v = w.substr(2);
      }
      return v;
    };
    if (auto a = value("--account", "-A")) {
      who.account = Lower(*a);
    } else if (auto q = value("--qos", "-q")) {
      who.qos = Lower(*q);
    }
  }
}

// The process's user never changes: read the user and group databases once.
const Submitter& ProcessSubmitter() {
  static const Submitter self = CurrentSubmitter();
  return self;
}

}  // namespace

Submitter CurrentSubmitter() {
  Submitter s;
  const uid_t uid = geteuid();
  s.privileged = uid == 0;
  s.user = std::to_string(uid);
  std::vector<char> buf(1 << 16);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) return s;
  s.user = pw.pw_name;
  // As slurmctld: the primary group and every group that lists the user.
  int n = 64;
  std::vector<gid_t> gids(n);
  while (getgrouplist(pw.pw_name, pw.pw_gid, gids.data(), &n) < 0) gids.resize(n);
  gids.resize(n);
  std::vector<char> gbuf(1 << 16);
  for (gid_t gid : gids) {
    group gr{};
    group* g = nullptr;
    if (getgrgid_r(gid, &gr, gbuf.data(), gbuf.size(), &g) == 0 && g != nullptr)
      s.groups.push_back(g->gr_name);
  }
  std::sort(s.groups.begin(), s.groups.end());
  s.groups.erase(std::unique(s.groups.begin(), s.groups.end()), s.groups.end());
  return s;
}

std::string PartitionRefuses(const SlurmPartition& p, const SlurmIdentity& who) {
  auto has = [](const std::vector<std::string>& list, const std::string& s) {
    return std::find(list.begin(), list.end(), s) != list.end();
  };
  // Accounts and QOS: Slurm compares them lower-cased, whatever case slurm.conf or the job
  // gave them in.
  auto has_name = [](const std::vector<std::string>& list, const std::string& s) {
    return std::any_of(list.begin(), list.end(),
                       [&](const std::string& x) { return SameName(x, s); });
  };
  // Slurm lets root use any partition whatever its AllowGroups (slurm.conf).
  if (p.allow_groups && !who.submitter.privileged &&
      std::none_of(who.submitter.groups.begin(), who.submitter.groups.end(),
                   [&](const std::string& g) { return has(*p.allow_groups, g); })) {
    return "refuses user " + who.submitter.user + " (AllowGroups=" + JoinHostlist(*p.allow_groups) +
           ": none of its groups)";
  }
  // Allow* and Deny* exclude each other: Slurm ignores Deny* where Allow* is set.
  if (!who.account.empty()) {
    if (p.allow_accounts ? !has_name(*p.allow_accounts, who.account)
                         : has_name(p.deny_accounts, who.account)) {
      return "refuses account " + who.account + " (" +
             (p.allow_accounts ? "AllowAccounts=" + JoinHostlist(*p.allow_accounts)
                               : "DenyAccounts=" + JoinHostlist(p.deny_accounts)) +
             ")";
    }
  }
  if (!who.qos.empty()) {
    if (p.allow_qos ? !has_name(*p.allow_qos, who.qos) : has_name(p.deny_qos, who.qos)) {
      return "refuses QOS " + who.qos + " (" +
             (p.allow_qos ? "AllowQos=" + JoinHostlist(*p.allow_qos)
                          : "DenyQos=" + JoinHostlist(p.deny_qos)) +
             ")";
    }
  }
  return "";
}

SlurmIdentity JobIdentity(const std::string& script, const SbatchOptions& options) {
  SlurmIdentity who;
  ReadAccountAndQos(DirectiveWords(script), who);
  ReadAccountAndQos(options.extra_args, who);  // sbatch's command line wins over the script
  who.submitter = options.submitter ? *options.submitter : ProcessSubmitter();
  return who;
}

std::map<std::string, std::string> RefusingNodes(
    const SlurmIdentity& who, const std::map<std::string, SlurmNode>& inventory,
    const std::map<std::string, SlurmPartition>& partitions,
    const std::vector<std::string>& served) {
  std::map<std::string, std::string> out;
  for (const auto& [name, node] : inventory) {
    std::string why;
    bool open = false, admitted = false;
    for (const std::string& part : node.partitions) {
      if (!served.empty() && std::find(served.begin(), served.end(), part) == served.end())
        continue;
      auto p = partitions.find(part);
      if (p == partitions.end()) {  // not described: nothing to judge it by
        admitted = true;
        break;
      }
      if (p->second.state != "UP" || p->second.hidden) continue;
      open = true;
      const std::string refuses = PartitionRefuses(p->second, who);
      if (refuses.empty()) {
        admitted = true;
        break;
      }
      why += (why.empty() ? "Slurm partition " : "; partition ") + part + " " + refuses;
    }
    if (open && !admitted) out[name] = why;
  }
  return out;
}

bool IsAccessRefusal(const Status& s) {
  if (s.ok() || s.retryable()) return false;
  // ChoosePartition's: every partition there refuses the job's account, QOS or user.
  if (s.code() == StatusCode::kPermissionDenied) return true;
  const std::string& m = s.message();
  // sbatch's (Slurm 22.05). Not "Requested partition configuration not available now": that
  // is a partition's limits (MaxTime, MaxNodes...), which other nodes would not change.
  for (const char* phrase :
       {"Invalid account or account/partition combination",
        "QOS not permitted to use this partition", "group not permitted to use this partition"}) {
    if (m.find(phrase) != std::string::npos) return true;
  }
  return false;
}

std::string SlurmJobName(const std::string& job) { return "tessera-" + job; }

std::string SlurmComment(const std::string& job, const std::string& allocation) {
  return kTagPrefix + job + ":" + allocation;
}

std::optional<Tag> ParseTag(const std::string& comment) {
  if (comment.rfind(kTagPrefix, 0) != 0) return std::nullopt;
  std::string rest = comment.substr(std::string(kTagPrefix).size());
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == rest.size()) return std::nullopt;
  return Tag{rest.substr(0, colon), rest.substr(colon + 1)};
}

std::string SlurmDuration(int64_t seconds) {
  int64_t d = seconds / 86400, h = seconds / 3600 % 24, m = seconds / 60 % 60, s = seconds % 60;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld-%02lld:%02lld:%02lld", static_cast<long long>(d),
                static_cast<long long>(h), static_cast<long long>(m), static_cast<long long>(s));
  return buf;
}

OutputFiles JobOutputFiles(const std::string& dir, const std::string& job, int32_t attempt,
                           const std::string& script) {
  OutputFiles f;
  if (dir.empty()) return f;
  // Which streams the script names in its leading #SBATCH block.
  bool output = false, error = false;
  for (const std::string& w : DirectiveWords(script)) {
    std::string name = w.substr(0, w.find('='));
    output = output || name == "--output" || (w.size() >= 2 && w.compare(0, 2, "-o") == 0);
    error = error || name == "--error" || (w.size() >= 2 && w.compare(0, 2, "-e") == 0);
  }
  const std::string base = dir + "/" + job + "." + std::to_string(attempt);
  if (!output) f.stdout_path = base + ".out";
  if (!output && !error) f.stderr_path = base + ".err";
  return f;
}

namespace {

// A word as sbatch reads it back from a #SBATCH line (quoted when it must be); nullopt when
// it holds both kinds of quote.
std::optional<std::string> Requoted(const std::string& w) {
  if (w.find_first_of(" \t'\"#") == std::string::npos && !w.empty()) return w;
  if (w.find('\'') == std::string::npos) return "'" + w + "'";
  if (w.find('"') == std::string::npos) return "\"" + w + "\"";
  return std::nullopt;
}

// A line "#SBATCH -N 2 -A ml" whose options Tessera owns only some of: the others, as their
// own "#SBATCH" line ("#SBATCH -A ml"), so that commenting out the line does not lose them;
// "" when every option is Tessera's, nullopt when none is (or the line cannot be read).
std::optional<std::string> OptionsNotOwned(const std::string& args) {
  auto words = spec::SbatchLineWords(args, "");
  if (!words.ok() || words->empty()) return std::nullopt;
  std::string kept;
  bool any_owned = false;
  for (size_t i = 0; i < words->size();) {
    // An option and its values: the words up to the next that starts with '-'.
    size_t end = i + 1;
    while (end < words->size() && (*words)[end].rfind('-', 0) != 0) ++end;
    if (IsOwnedDirective(" " + (*words)[i])) {
      any_owned = true;
    } else {
      for (size_t k = i; k < end; ++k) {
        auto q = Requoted((*words)[k]);
        if (!q) return std::nullopt;
        kept += " " + *q;
      }
    }
    i = end;
  }
  if (!any_owned) return std::nullopt;
  return kept.empty() ? "" : "#SBATCH" + kept;
}

}  // namespace

std::string NeutralizePlacementDirectives(const std::string& script) {
  std::string out;
  size_t pos = 0;
  bool header = true;  // Slurm stops reading #SBATCH at the first command line
  while (pos < script.size()) {
    size_t end = script.find('\n', pos);
    size_t next = end == std::string::npos ? script.size() : end + 1;
    std::string line = script.substr(pos, next - pos);
    std::string body = line.substr(0, line.find_last_not_of("\r\n") + 1);
    if (header) {
      size_t first = body.find_first_not_of(" \t");
      if (first != std::string::npos && body[first] != '#') header = false;
    }
    const bool directive = header && body.rfind("#SBATCH", 0) == 0;
    std::optional<std::string> others;
    if (directive && (others = OptionsNotOwned(body.substr(7)))) {
      // Several options on one line: those Tessera does not decide stay in force.
      out += "# [tessera] " + line;
      const std::string ending = line.substr(body.size());  // "\n", "\r\n", or none (last)
      if (!others->empty()) out += (ending.empty() ? "\n" : "") + *others + ending;
    } else if (directive && IsOwnedDirective(body.substr(7))) {
      out += "# [tessera] " + line;
    } else {
      out += line;
    }
    pos = next;
  }
  return out;
}

namespace {

// A job's Slurm shape: its bindings checked, nodes of equal shape grouped into components.
struct Layout {
  std::vector<std::pair<Shape, std::vector<std::string>>> components;
  std::map<std::string, NodeUsage> usage;
  std::vector<std::string> nodes;  // in name order
};

StatusOr<Layout> LayOut(const DispatchRequest& req,
                        const std::map<std::string, SlurmNode>& inventory) {
  if (req.bindings.empty()) return InvalidArgument("dispatch.bindings: empty");
  if (req.processes_per_task < 1) {
    return InvalidArgument("dispatch.processes_per_task: must be >= 1, got " +
                           std::to_string(req.processes_per_task));
  }
  // Per-node totals, nodes in name order.
  struct Totals {
    int32_t tasks = 0;
    int64_t cpu_milli = 0;
    int64_t memory_bytes = 0;
    std::map<std::string, int64_t> gpus;
  };
  std::map<std::string, Totals> per_node;
  std::set<int32_t> seen_tasks;
  for (size_t i = 0; i < req.bindings.size(); ++i) {
    const Binding& b = req.bindings[i];
    std::string path = "dispatch.bindings[" + std::to_string(i) + "]";
    if (b.job != req.job) {
      return InvalidArgument(path + ".job: \"" + b.job + "\" is not the dispatched job \"" +
                             req.job + "\"");
    }
    if (!seen_tasks.insert(b.task).second) {
      return InvalidArgument(path + ".task: " + std::to_string(b.task) + " bound twice");
    }
    const TaskAllocation& a = b.allocation;
    auto inv = inventory.find(a.node);
    if (inv == inventory.end()) {
      return FailedPrecondition(path + ".node: \"" + a.node + "\" is not a known Slurm node");
    }
    std::vector<std::string> types = GpuTypes(inv->second);
    Totals& t = per_node[a.node];
    t.tasks += req.processes_per_task;
    t.cpu_milli += a.cpu_milli;
    t.memory_bytes += a.memory_bytes;
    for (const DeviceAssignment& d : a.devices) {
      if (d.milli != 1000 || d.mig_instance >= 0) {
        return InvalidArgument(path +
                               ".devices: fractional and MIG GPUs cannot be placed on "
                               "the Slurm pool (Slurm gives whole GPUs only)");
      }
      if (d.device < 0 || d.device >= static_cast<int32_t>(types.size())) {
        return FailedPrecondition(path + ".devices: GPU " + std::to_string(d.device) +
                                  " does not exist on Slurm node " + a.node);
      }
      t.gpus[types[d.device]] += 1;
    }
  }

  Layout out;
  for (const auto& [node, t] : per_node) {
    out.nodes.push_back(node);
    Shape s;
    s.tasks = t.tasks;
    int64_t cpus = std::max<int64_t>(1, CeilDiv(t.cpu_milli, 1000));
    s.cpus_per_task = CeilDiv(cpus, t.tasks);
    // 0 = the job asked for no memory: no --mem, so Slurm's DefMemPerCPU/DefMemPerNode
    // applies (a token 1 MiB would be the job's cgroup limit where memory is enforced).
    s.memory_mib = CeilDiv(t.memory_bytes, kMiB);
    s.gpus = t.gpus;
    NodeUsage u;
    u.cpus = s.cpus_per_task * s.tasks;
    u.memory_mib = s.memory_mib;
    for (const auto& [type, n] : s.gpus) u.gpus += n;
    if (req.exclusive) {
      // Slurm gives an --exclusive job every CPU and GPU of its nodes (the memory it asks).
      const SlurmNode& sn = inventory.at(node);
      u.cpus = std::max(u.cpus, sn.cpus);
      u.gpus = std::max(u.gpus, static_cast<int64_t>(GpuTypes(sn).size()));
    }
    out.usage[node] = u;
    auto it = std::find_if(out.components.begin(), out.components.end(),
                           [&](const auto& c) { return c.first.Key() == s.Key(); });
    if (it == out.components.end()) {
      out.components.push_back({s, {node}});
    } else {
      it->second.push_back(node);
    }
  }
  return out;
}

bool Has(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

}  // namespace

StatusOr<std::map<std::string, NodeUsage>> SlurmUsage(
    const DispatchRequest& request, const std::map<std::string, SlurmNode>& inventory) {
  auto layout = LayOut(request, inventory);
  if (!layout.ok()) return layout.status();
  return layout->usage;
}

StatusOr<std::string> ChoosePartition(const DispatchRequest& req,
                                      const std::vector<std::string>& nodes,
                                      const std::map<std::string, SlurmNode>& inventory,
                                      const std::map<std::string, SlurmPartition>& partitions,
                                      const std::vector<std::string>& served,
                                      const SlurmIdentity& who) {
  // Slurm counts time limits in whole minutes (rounded up), as SlurmDuration says.
  const std::optional<int64_t> limit =
      req.time_limit_seconds ? std::optional<int64_t>(CeilDiv(*req.time_limit_seconds, 60) * 60)
                             : std::nullopt;
  // Why a partition cannot take the job ("" when it can), and what kind of reason it is:
  // only a refusal on access rules everywhere makes the job worth placing elsewhere
  // (RefusingNodes then keeps it off these nodes); limits would fail it there again.
  enum class Kind { kUsable, kAbsent, kAccess, kLimit };
  struct Verdict {
    std::string why;
    Kind kind = Kind::kUsable;
  };
  auto why_not = [&](const std::string& name) -> Verdict {
    // Partitions that are not there for this job (as RefusingNodes sees nodes): kAbsent.
    for (const std::string& node : nodes) {
      auto n = inventory.find(node);
      if (n == inventory.end() || !Has(n->second.partitions, name))
        return {"does not hold " + node, Kind::kAbsent};
    }
    auto it = partitions.find(name);
    if (it == partitions.end()) return {"not listed by scontrol show partition", Kind::kLimit};
    const SlurmPartition& p = it->second;
    if (p.state != "UP") return {"State=" + p.state, Kind::kAbsent};
    if (std::string refuses = PartitionRefuses(p, who); !refuses.empty())
      return {refuses, Kind::kAccess};
    if (limit && p.max_time_seconds && *p.max_time_seconds < *limit) {
      return {"MaxTime=" + SlurmDuration(*p.max_time_seconds) +
                  " is less than the job's --time=" + SlurmDuration(*limit),
              Kind::kLimit};
    }
    if (p.max_nodes && *p.max_nodes < static_cast<int64_t>(nodes.size())) {
      return {"MaxNodes=" + std::to_string(*p.max_nodes) + " is less than the job's " +
                  std::to_string(nodes.size()) + " nodes",
              Kind::kLimit};
    }
    return {};
  };
  const std::string where = JoinHostlist(nodes);
  if (!req.partition.empty()) {
    const Verdict v = why_not(req.partition);
    if (v.kind == Kind::kUsable) return req.partition;
    const std::string message = "dispatch.partition: Slurm partition \"" + req.partition +
                                "\" cannot run the job on " + where + ": " + v.why;
    return v.kind == Kind::kAccess ? PermissionDenied(message) : FailedPrecondition(message);
  }
  std::set<std::string> names;  // every partition of the job's nodes
  for (const std::string& node : nodes) {
    if (auto n = inventory.find(node); n != inventory.end()) {
      names.insert(n->second.partitions.begin(), n->second.partitions.end());
    }
  }
  std::vector<const SlurmPartition*> usable;
  std::string rejected;
  bool refused = false, limited = false;  // some partition refused on access; on limits
  for (const std::string& name : names) {
    Verdict v = !served.empty() && !Has(served, name)
                    ? Verdict{"not served by this pool (--slurm-partition)", Kind::kAbsent}
                    : why_not(name);
    if (v.kind == Kind::kUsable && partitions.at(name).hidden)
      v = {"Hidden=YES (only used when named)", Kind::kAbsent};
    if (v.kind == Kind::kUsable) {
      usable.push_back(&partitions.at(name));
    } else {
      rejected += (rejected.empty() ? "" : "; ") + name + ": " + v.why;
      refused = refused || v.kind == Kind::kAccess;
      limited = limited || v.kind == Kind::kLimit;
    }
  }
  if (usable.empty()) {
    const std::string message = "dispatch.bindings: no Slurm partition can run the job on " +
                                where + " (" +
                                (rejected.empty() ? "they are in no partition" : rejected) + ")";
    // PermissionDenied: every partition that could run it here refuses its account, QOS or
    // user (IsAccessRefusal), so other nodes may take it.
    return refused && !limited ? PermissionDenied(message) : FailedPrecondition(message);
  }
  for (const SlurmPartition* p : usable) {
    if (p->is_default) return p->name;
  }
  auto order = [&](const SlurmPartition* p) {
    const int64_t max_time = p->max_time_seconds.value_or(INT64_MAX);
    return std::make_tuple(-p->priority_tier, limit ? max_time : -max_time, p->name);
  };
  return (*std::min_element(usable.begin(), usable.end(),
                            [&](const SlurmPartition* a, const SlurmPartition* b) {
                              return order(a) < order(b);
                            }))
      ->name;
}

StatusOr<SbatchCommand> BuildSbatch(const DispatchRequest& req,
                                    const std::map<std::string, SlurmNode>& inventory,
                                    const std::map<std::string, SlurmPartition>& partitions,
                                    const SbatchOptions& options) {
  TESSERA_RETURN_IF_ERROR(CheckId(req.job, "job"));
  TESSERA_RETURN_IF_ERROR(CheckId(req.allocation, "allocation"));
  auto layout = LayOut(req, inventory);
  if (!layout.ok()) return layout.status();
  if (req.script.empty() && req.command.empty()) {
    return InvalidArgument("dispatch: neither script nor command given");
  }
  if (req.time_limit_seconds && *req.time_limit_seconds <= 0) {
    return InvalidArgument("dispatch.time_limit_seconds: must be > 0, got " +
                           std::to_string(*req.time_limit_seconds));
  }
  auto partition = ChoosePartition(req, layout->nodes, inventory, partitions, options.partitions,
                                   JobIdentity(req.script, options));
  if (!partition.ok()) return partition.status();
  const auto& components = layout->components;
  SbatchCommand cmd;
  cmd.usage = layout->usage;
  cmd.components = static_cast<int32_t>(components.size());

  std::vector<std::string>& argv = cmd.argv;
  argv = {"sbatch",      "--parsable",
          "-J",          SlurmJobName(req.job),
          "--comment",   SlurmComment(req.job, req.allocation),
          "--no-requeue"};
  for (const std::string& a : options.extra_args) argv.push_back(a);
  if (req.time_limit_seconds) argv.push_back("--time=" + SlurmDuration(*req.time_limit_seconds));
  if (!req.working_dir.empty()) argv.push_back("--chdir=" + req.working_dir);
  if (!req.stdout_path.empty()) argv.push_back("--output=" + req.stdout_path);
  if (!req.stderr_path.empty()) argv.push_back("--error=" + req.stderr_path);
  if (req.append_output) argv.push_back("--open-mode=append");  // (DispatchRequest)
  if (!req.env.empty()) {
    std::string exp = "--export=ALL";
    for (const auto& [k, v] : req.env) {
      if (k.empty() || k.find_first_of("=, ") != std::string::npos ||
          v.find(',') != std::string::npos) {
        return InvalidArgument("dispatch.env." + k +
                               ": Slurm's --export cannot carry names with '=', ',' or ' ' "
                               "or values with ','");
      }
      exp += "," + k + "=" + v;
    }
    argv.push_back(exp);
  }
  int32_t total_tasks = 0;
  for (size_t c = 0; c < components.size(); ++c) {
    const auto& [s, nodes] = components[c];
    if (c > 0) argv.push_back(":");
    int64_t n = static_cast<int64_t>(nodes.size());
    argv.push_back("--partition=" + *partition);
    argv.push_back("--nodes=" + std::to_string(n));
    argv.push_back("--nodelist=" + JoinHostlist(nodes));
    argv.push_back("--ntasks=" + std::to_string(n * s.tasks));
    argv.push_back("--ntasks-per-node=" + std::to_string(s.tasks));
    argv.push_back("--cpus-per-task=" + std::to_string(s.cpus_per_task));
    // Per component: a heterogeneous job's options are each component's own.
    if (req.exclusive) argv.push_back("--exclusive");
    if (s.memory_mib > 0) argv.push_back("--mem=" + std::to_string(s.memory_mib));
    if (!s.gpus.empty()) {
      std::string g;
      for (const auto& [type, count] : s.gpus) {
        g += (g.empty() ? "" : ",") + std::string("gpu:") + (type.empty() ? "" : type + ":") +
             std::to_string(count);
      }
      argv.push_back("--gres=" + g);
    }
    total_tasks += static_cast<int32_t>(n) * s.tasks;
  }

  if (!req.script.empty()) {
    cmd.script = NeutralizePlacementDirectives(req.script);
  } else {
    std::string run = QuoteArgv(req.command);
    std::string launcher;
    if (total_tasks > 1) {
      launcher = "srun --kill-on-bad-exit=1";
      if (components.size() > 1) {
        launcher += " --het-group=0-" + std::to_string(components.size() - 1);
      }
      launcher += " ";
    }
    cmd.script = "#!/bin/sh\n# Tessera job " + req.job + ", allocation " + req.allocation +
                 "\nexec " + launcher + run + "\n";
  }
  return cmd;
}

}  // namespace tessera::slurm
