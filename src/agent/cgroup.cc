#include "agent/cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include "agent/read_file.h"

namespace tessera::agent {

namespace {

constexpr int64_t kPeriodMicros = 100000;  // cpu.max period: 100 ms
constexpr int64_t kMinQuotaMicros = 1000;  // the kernel refuses quotas under 1 ms

// One write(2) of the whole value, as cgroup files expect; "" or strerror on failure.
std::string WriteValue(const std::string& path, const std::string& value) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return std::strerror(errno);
  out << value;
  out.flush();
  if (!out) return std::strerror(errno != 0 ? errno : EIO);
  return "";
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// "cpuset cpu io memory\n" -> {cpuset, cpu, io, memory}; a leading '+' (as written into a
// subtree_control file) is ignored. Tokens, not substrings: "cpuset" is not "cpu".
std::set<std::string> Tokens(const std::string& text) {
  std::istringstream in(text);
  std::set<std::string> out;
  std::string t;
  while (in >> t) out.insert(t[0] == '+' ? t.substr(1) : t);
  return out;
}

std::string FindCgroup2Mount() {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "... <mount point> <options> - cgroup2 <source> <super options>"
    auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line.substr(0, dash));
    std::string id, parent, devno, root, mount;
    f >> id >> parent >> devno >> root >> mount;
    return mount;
  }
  return "";
}

std::string StripSlashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

std::string CpuMaxValue(int64_t cpu_milli) {
  if (cpu_milli <= 0) return "max " + std::to_string(kPeriodMicros);
  // milli-CPU * period / 1000 = microseconds of CPU per period.
  int64_t quota = std::max(kMinQuotaMicros, cpu_milli * (kPeriodMicros / 1000));
  return std::to_string(quota) + " " + std::to_string(kPeriodMicros);
}

TaskCgroups TaskCgroups::Open(const std::string& mount_arg, const std::string& parent_arg) {
  TaskCgroups c;
  const std::string no_limits = "; tasks run without CPU and memory limits";
  if (parent_arg == "-") {
    c.status_ = "disabled by configuration";
    return c;
  }
  const std::string mount = StripSlashes(mount_arg.empty() ? FindCgroup2Mount() : mount_arg);
  if (mount.empty()) {
    c.status_ = "unavailable: no cgroup2 file system mounted" + no_limits;
    return c;
  }
  const std::string controllers_text = ReadFile(mount + "/cgroup.controllers");
  const std::set<std::string> controllers = Tokens(controllers_text);
  if (!controllers.count("cpu") || !controllers.count("memory")) {
    std::string has;
    for (const auto& t : controllers) has += (has.empty() ? "" : " ") + t;
    c.status_ = "unavailable: cgroup2 at " + mount + " lacks the " +
                (controllers.count("cpu")      ? "memory controller"
                 : controllers.count("memory") ? "cpu controller"
                                               : "cpu and memory controllers") +
                " (has: " + (has.empty() ? "none" : has) + ")" + no_limits;
    return c;
  }
  const std::string parent = StripSlashes(parent_arg.empty() ? mount + "/tessera" : parent_arg);
  if (parent.size() <= mount.size() + 1 || parent.compare(0, mount.size() + 1, mount + "/") != 0) {
    c.status_ =
        "unavailable: " + parent + " is not a cgroup below the cgroup2 mount " + mount + no_limits;
    return c;
  }
  // Each level from the mount down to the parent must hand cpu and memory to its children.
  std::vector<std::string> levels = {mount};
  for (size_t pos = mount.size(); pos != std::string::npos;) {
    pos = parent.find('/', pos + 1);
    levels.push_back(parent.substr(0, pos));  // <mount>/a, <mount>/a/b, ..., parent
  }
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::string& dir = levels[i];
    if (i > 0 && ::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      c.status_ =
          "unavailable: cannot create " + dir + " (" + std::strerror(errno) + ")" + no_limits;
      return c;
    }
    if (!IsDir(dir)) {
      c.status_ = "unavailable: " + dir + " is not a directory" + no_limits;
      return c;
    }
    const std::string file = dir + "/cgroup.subtree_control";
    std::set<std::string> enabled = Tokens(ReadFile(file));
    if (enabled.count("cpu") && enabled.count("memory")) continue;
    if (std::string err = WriteValue(file, "+cpu +memory"); !err.empty()) {
      c.status_ =
          "unavailable: cannot enable cpu and memory in " + file + " (" + err + ")" + no_limits;
      return c;
    }
  }
  c.parent_ = parent;
  c.status_ = "enabled: " + parent;
  return c;
}

StatusOr<std::string> TaskCgroups::Create(const std::string& allocation, int64_t cpu_milli,
                                          int64_t memory_bytes) const {
  if (!available()) return FailedPrecondition("cgroup limits " + status_);
  const std::string cg = parent_ + "/" + allocation;
  if (::mkdir(cg.c_str(), 0755) != 0 && errno != EEXIST)
    return Unavailable("cannot create cgroup " + cg + ": " + std::strerror(errno));
  if (cpu_milli > 0) {
    if (std::string err = WriteValue(cg + "/cpu.max", CpuMaxValue(cpu_milli)); !err.empty()) {
      Remove(cg);
      return Unavailable("cannot write " + cg + "/cpu.max: " + err);
    }
  }
  if (memory_bytes > 0) {
    if (std::string err = WriteValue(cg + "/memory.max", std::to_string(memory_bytes));
        !err.empty()) {
      Remove(cg);
      return Unavailable("cannot write " + cg + "/memory.max: " + err);
    }
  }
  return cg;
}

Status TaskCgroups::Join(const std::string& cgroup, int64_t pid) {
  if (std::string err = WriteValue(cgroup + "/cgroup.procs", std::to_string(pid)); !err.empty())
    return Unavailable("cannot move process " + std::to_string(pid) + " into " + cgroup + ": " +
                       err);
  return Status::Ok();
}

void TaskCgroups::Kill(const std::string& cgroup) {
  if (cgroup.empty()) return;
  (void)WriteValue(cgroup + "/cgroup.kill", "1");
}

void TaskCgroups::Remove(const std::string& cgroup) {
  // Succeeds once the cgroup has no processes; its interface files go with it.
  if (!cgroup.empty()) ::rmdir(cgroup.c_str());
}

}  // namespace tessera::agent
