#include "agent/executor.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/read_file.h"
#include "common/duration.h"
#include "common/process.h"
#include "common/write_file.h"

namespace tessera::agent {

namespace {

using SteadyClock = std::chrono::steady_clock;

bool WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return false;
  out << data;
  return static_cast<bool>(out.flush());
}

bool IsDir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// /proc/<pid>/stat: state (field 3) and start time in clock ticks (field 22), which with the
// pid identifies a process across pid reuse. {0, '?'} when the process does not exist.
std::pair<uint64_t, char> ProcStat(int64_t pid) {
  std::string s = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  auto rp = s.rfind(')');
  if (rp == std::string::npos) return {0, '?'};
  std::istringstream in(s.substr(rp + 2));
  char state = '?';
  in >> state;
  std::string field;
  for (int i = 4; i < 22 && in >> field; ++i) {
  }
  uint64_t ticks = 0;
  in >> ticks;
  return {ticks, state};
}

bool ProcessAlive(int64_t pid, uint64_t start_ticks) {
  auto [ticks, state] = ProcStat(pid);
  return state != '?' && state != 'Z' && state != 'X' && ticks == start_ticks;
}

std::string ResolveExecutable(const std::string& name,
                              const std::map<std::string, std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path;
  if (auto it = env.find("PATH"); it != env.end()) {
    path = it->second;
  } else if (const char* p = std::getenv("PATH")) {
    path = p;
  } else {
    path = "/usr/local/bin:/usr/bin:/bin";
  }
  std::istringstream in(path);
  std::string dir;
  while (std::getline(in, dir, ':')) {
    if (dir.empty()) dir = ".";
    std::string cand = dir + "/" + name;
    if (::access(cand.c_str(), X_OK) == 0 && !IsDir(cand)) return cand;
  }
  return "";
}

// Formats n into buf without the C library (async-signal-safe); returns the length.
size_t FormatInt(char* buf, long n) {
  char tmp[24];
  size_t len = 0;
  bool neg = n < 0;
  unsigned long u = neg ? static_cast<unsigned long>(-n) : static_cast<unsigned long>(n);
  do {
    tmp[len++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u);
  size_t o = 0;
  if (neg) buf[o++] = '-';
  while (len) buf[o++] = tmp[--len];
  return o;
}

void WriteStr(int fd, const char* s) { WriteAll(fd, s, std::strlen(s)); }

// errno as text, for the task child's last words (strerror is not async-signal-safe).
void WriteErrno(int fd, int e) {
  switch (e) {
    case EACCES:
      return WriteStr(fd, "Permission denied");
    case EPERM:
      return WriteStr(fd, "Operation not permitted");
    case ENOENT:
      return WriteStr(fd, "No such file or directory");
    case ENOTDIR:
      return WriteStr(fd, "Not a directory");
    case EINVAL:
      return WriteStr(fd, "Invalid argument");
  }
  char buf[24];
  WriteStr(fd, "errno ");
  WriteAll(fd, buf, FormatInt(buf, e));
}

// Why the agent (or the task's monitor) stopped the task in `task_dir`: the first line of
// its `stopped` file; "" when none was.
std::string StopReason(const std::string& task_dir) {
  const std::string why = ReadFile(task_dir + "/stopped");
  return why.substr(0, why.find('\n'));
}

// Async-signal-safe, for the monitor.
int64_t MonotonicSeconds() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

// Whether the lease file was last touched over `seconds` and half a second ago: after a
// live agent's own lease ran out (it stops its tasks itself, with its reason), and well
// before the server's fence, a heartbeat later. `fd` is the file the monitor opened when the
// task started: once it is unlinked (the work dir wiped or moved), its keeper is gone even
// if a new agent keeps a new file at the same path, which knows nothing of this task. Without
// one (none could be opened), a missing file is not a lapse (nobody keeps one).
// Async-signal-safe, for the monitor.
bool LeaseLapsed(int fd, const char* path, int64_t seconds) {
  struct stat st {};
  if (fd >= 0) {
    if (::fstat(fd, &st) != 0 || st.st_nlink == 0) return true;
  } else if (::stat(path, &st) != 0) {
    return false;
  }
  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t ms =
      (now.tv_sec - st.st_mtim.tv_sec) * 1000 + (now.tv_nsec - st.st_mtim.tv_nsec) / 1000000;
  return ms > seconds * 1000 + 500;
}

void CloseFrom(int first, int max_fd) {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, first, ~0U, 0) == 0) return;
#endif
  for (int fd = first; fd < max_fd; ++fd) ::close(fd);
}

}  // namespace

const char* TaskStateName(TaskState s) {
  switch (s) {
    case TaskState::kRunning:
      return "running";
    case TaskState::kSucceeded:
      return "succeeded";
    case TaskState::kFailed:
      return "failed";
    case TaskState::kKilled:
      return "killed";
  }
  return "failed";
}

bool ValidAllocationId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return false;
  }
  return true;
}

StatusOr<std::map<std::string, std::string>> DeviceEnvironment(
    const Node& node, const std::vector<DeviceAssignment>& devices) {
  std::map<std::string, std::string> env;
  std::string list;
  bool any_virtual = false;
  for (size_t i = 0; i < devices.size(); ++i) {
    const DeviceAssignment& a = devices[i];
    const std::string path = "devices[" + std::to_string(i) + "]";
    if (a.device < 0 || a.device >= static_cast<int32_t>(node.devices.size()))
      return InvalidArgument(path + ".device: node " + node.name + " has no GPU " +
                             std::to_string(a.device) + " (it has " +
                             std::to_string(node.devices.size()) + ")");
    const Device& d = node.devices[a.device];
    any_virtual = any_virtual || d.is_virtual;
    std::string id = std::to_string(d.index);
    if (a.mig_instance >= 0) {
      if (a.mig_instance >= static_cast<int32_t>(d.mig.size()))
        return InvalidArgument(path + ".migInstance: GPU " + std::to_string(a.device) +
                               " of node " + node.name + " has no MIG instance " +
                               std::to_string(a.mig_instance));
      id = d.mig[a.mig_instance].uuid;
      if (id.empty())
        return InvalidArgument(path + ".migInstance: MIG instance " +
                               std::to_string(a.mig_instance) + " of GPU " +
                               std::to_string(a.device) + " has no UUID");
    }
    if ((',' + list + ',').find(',' + id + ',') != std::string::npos) continue;  // fractions
    list += (list.empty() ? "" : ",") + id;
  }
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";  // indices then match NVML's
  env["CUDA_VISIBLE_DEVICES"] = list;
  env["NVIDIA_VISIBLE_DEVICES"] = list.empty() ? "void" : list;
  if (any_virtual) env["TESSERA_VIRTUAL_GPUS"] = "1";  // these GPUs do not exist
  if (devices.size() == 1 && devices[0].mig_instance < 0 && devices[0].milli < 1000) {
    // A share of one GPU. Tessera accounts for it but does not enforce it itself; it says it
    // in the environment, and in the variables CUDA's MPS honours where the node runs the
    // MPS control daemon (compute percentage; pinned memory of device 0, the only visible).
    const DeviceAssignment& a = devices[0];
    env["TESSERA_GPU_MILLI"] = std::to_string(a.milli);
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(std::max(1, (a.milli + 9) / 10));
    if (a.memory_bytes > 0) {
      env["TESSERA_GPU_MEMORY_BYTES"] = std::to_string(a.memory_bytes);
      env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] =
          "0=" + std::to_string(std::max<int64_t>(1, a.memory_bytes >> 20)) + "M";
    }
  }
  return env;
}

struct Executor::Proc {
  TaskStatus st;
  int64_t grace_seconds = 30;
  uint64_t start_ticks = 0;
  bool adopted = false;  // started by an earlier agent process: not our child
  bool sigkill_sent = false;
  SteadyClock::time_point kill_at;
  std::string cgroup;
  std::string stop_reason;
};

Executor::Executor(ExecutorOptions options) : opt_(std::move(options)) {
  if (!opt_.wall_clock) {
    opt_.wall_clock = [] {
      return std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  }
  ::mkdir(opt_.work_dir.c_str(), 0755);
  // Tasks' output and environments are their owners' alone: not for other users here. An
  // agent run as root may run tasks as other users (ResolveTaskIdentity), who must be able
  // to enter their own folders below: it may not be listed, and each folder is 0700 (0711,
  // its files the task's own, for a task run as another user).
  const mode_t tasks_mode = ::geteuid() == 0 ? 0711 : 0700;
  ::mkdir((opt_.work_dir + "/tasks").c_str(), tasks_mode);
  ::chmod((opt_.work_dir + "/tasks").c_str(), tasks_mode);
  // cgroup v2 limits, where this machine lets us (TaskCgroups says why not).
  cgroups_ = TaskCgroups::Open(opt_.cgroup_mount, opt_.cgroup_parent);
}

Executor::~Executor() {
  for (auto& [id, p] : procs_) delete p;
}

void Executor::Log(const std::string& msg) const {
  if (opt_.log) opt_.log(msg);
}

std::string Executor::TaskDir(const std::string& allocation) const {
  return opt_.work_dir + "/tasks/" + allocation;
}

std::string Executor::LogPath(const std::string& allocation, const std::string& stream) const {
  if (!ValidAllocationId(allocation) || (stream != "stdout" && stream != "stderr")) return "";
  return TaskDir(allocation) + "/" + stream;
}

StatusOr<FileChunk> Executor::ReadLog(const std::string& allocation, const std::string& stream,
                                      int64_t offset, int64_t limit) const {
  const std::string path = LogPath(allocation, stream);
  if (path.empty()) return InvalidArgument("bad allocation id or stream (stdout|stderr)");
  // "<stream>.id": the device and inode of the user's file it links to (Start). A link
  // without one is from an agent before this check: read as then.
  std::optional<FileId> id;
  if (std::ifstream in(path + ".id"); in) {
    FileId f;
    if (!(in >> f.dev >> f.ino)) return FailedPrecondition(path + ".id: unreadable");
    id = f;
  }
  return ReadFileChunk(path, offset, limit, id ? &*id : nullptr);
}

Status Executor::Record(Proc& p) const {
  nlohmann::json j = {{"allocation", p.st.allocation},
                      {"job", p.st.job},
                      {"task", p.st.task},
                      {"pgid", p.st.pid},
                      {"startTicks", p.start_ticks},
                      {"startedAt", p.st.started_at},
                      {"finishedAt", p.st.finished_at},  // for the retention, once ended
                      {"graceSeconds", p.grace_seconds},
                      {"cgroup", p.cgroup}};
  if (p.st.ran_as.known()) j["runAs"] = RanAsToJson(p.st.ran_as);
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : p.st.devices)
    devs.push_back({{"device", d.device}, {"milli", d.milli}, {"migInstance", d.mig_instance}});
  j["devices"] = devs;
  return WriteFileWhole(TaskDir(p.st.allocation) + "/task.json", j.dump() + "\n", 0644,
                        Durability::kProcessCrash);
}

Status Executor::Start(const TaskSpec& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ValidAllocationId(spec.allocation))
    return InvalidArgument("allocation: \"" + spec.allocation +
                           "\" is not a valid id (letters, digits, '-', '_', '.')");
  if (procs_.count(spec.allocation))
    return AlreadyExists("allocation " + spec.allocation + ": already known");
  auto* p = new Proc();
  procs_[spec.allocation] = p;
  p->st.allocation = spec.allocation;
  p->st.job = spec.job;
  p->st.task = spec.task;
  p->st.devices = spec.devices;
  p->st.started_at = opt_.wall_clock();
  p->grace_seconds = spec.grace_period_seconds;
  const std::string dir = TaskDir(spec.allocation);
  ::mkdir(dir.c_str(), 0700);

  auto fail = [&](const std::string& msg) {
    p->st.state = TaskState::kFailed;
    p->st.exit_code = 127;
    p->st.finished_at = p->st.started_at;
    p->st.message = msg;
    TaskCgroups::Remove(p->cgroup);
    p->cgroup.clear();
    WriteFile(dir + "/stderr", "tessera: " + msg + "\n");
    WriteFile(dir + "/exit", "error " + msg + "\n");
    (void)Record(*p);  // best effort: the status above is what the server hears
    return Status::Ok();
  };
  if (!spec.unreadable.empty()) return fail(spec.unreadable);
  if (spec.command.empty() && spec.script.empty())
    return fail("command: empty (the job gives no program to run)");
  auto denv = DeviceEnvironment(opt_.node, spec.devices);
  if (!denv.ok()) return fail(denv.status().message());
  // Who the task runs as: decided before anything is written for it.
  auto identity = ResolveTaskIdentity(spec.run_as, spec.submitter, opt_.identity, opt_.node.name);
  if (!identity.ok()) return fail(identity.status().message());
  const TaskIdentity id = *identity;
  p->st.ran_as = {id.uid, id.gid, id.name};
  std::string own_workdir = dir;
  if (id.switch_user) {
    // The folder keeps the agent's records (task.json names the process group the agent
    // signals; exit; stopped), so it stays the agent's: the task may enter it, not list or
    // change it. What the task writes is its own: its log files, its script, and `work`,
    // its working directory when none is given.
    ::chmod(dir.c_str(), 0711);
    own_workdir = dir + "/work";
    if ((::mkdir(own_workdir.c_str(), 0700) != 0 && errno != EEXIST) ||
        ::chown(own_workdir.c_str(), id.uid, id.gid) != 0)
      return fail("cannot give " + own_workdir + " to " + id.Describe() + ": " +
                  std::strerror(errno));
  }
  const std::string workdir = spec.working_dir.empty() ? own_workdir : spec.working_dir;
  if (!IsDir(workdir)) return fail("workingDir: " + workdir + " is not a directory");
  if (id.switch_user) {
    // Said here, in the task's status, rather than as a bare exit code 126 from the task's
    // process: a work dir below a folder only root may search (/root, a server's 0700 data
    // dir) keeps every such task out of its own folder, script and srun.
    if (int e = AccessAs(id, own_workdir, X_OK); e != 0)
      return fail("the task's folder " + own_workdir + " cannot be reached as " + id.Describe() +
                  ": " + std::strerror(e) +
                  " (every folder above the agent's --work-dir must be searchable by the "
                  "task's user: docs/agent.md, \"Task identity\")");
    if (int e = workdir == own_workdir ? 0 : AccessAs(id, workdir, X_OK); e != 0)
      return fail("workingDir: " + workdir + " cannot be entered as " + id.Describe() + ": " +
                  std::strerror(e));
  }
  std::vector<std::string> args = spec.command;
  std::string exe;
  if (!spec.script.empty()) {
    // Executed as a file, so that the kernel honours its #! line, as slurmd does.
    // Absolute: the task starts in its working directory, and the work dir may be relative.
    exe = std::filesystem::absolute(dir + "/script").string();
    if (Status st = WriteFileWhole(exe, spec.script, 0755, Durability::kProcessCrash); !st.ok())
      return fail(st.message());
    if (id.switch_user && (::chown(exe.c_str(), id.uid, id.gid) != 0 || ::chmod(exe.c_str(), 0700)))
      return fail("cannot give " + exe + " to " + id.Describe() + ": " + std::strerror(errno));
    args.insert(args.begin(), exe);
  } else {
    exe = ResolveExecutable(spec.command[0], spec.env);
    if (exe.empty()) return fail("command[0]: " + spec.command[0] + " not found in PATH");
  }

  // Environment: the agent's, then the allocation's, then what the agent alone knows.
  std::map<std::string, std::string> env = EnvironForTasks();
  if (id.switch_user && !id.name.empty()) {
    // The agent's own (root's) would point the task at a home it cannot use.
    env["USER"] = env["LOGNAME"] = id.name;
    env["HOME"] = id.home;
  }
  for (const auto& [k, v] : spec.env) env[k] = v;
  for (const auto& [k, v] : *denv) env[k] = v;
  env["TESSERA_ALLOCATION"] = spec.allocation;
  env["TESSERA_JOB"] = spec.job;
  env["TESSERA_TASK"] = std::to_string(spec.task);
  env["TESSERA_ATTEMPT"] = std::to_string(spec.attempt);
  env["TESSERA_NODE"] = opt_.node.name;
  if (!opt_.srun_program.empty() && spec.env.count("SLURM_JOB_ID")) {
    // An sbatch script's `srun` starts this node's share of its tasks (agent/srun.h).
    const std::string bin = std::filesystem::absolute(dir + "/bin").string();
    std::error_code ec;
    std::filesystem::create_directories(bin, ec);
    if (Status st = WriteFileWhole(
            bin + "/srun",
            "#!/bin/sh\nexec " + QuoteArgv({opt_.srun_program, "srun"}) + " \"$@\"\n", 0755,
            Durability::kProcessCrash);
        !st.ok())
      return fail(st.message());
    env["PATH"] = bin + (env.count("PATH") ? ":" + env["PATH"] : "");
  }
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string exit_path = dir + "/exit";
  const std::string exit_tmp = dir + "/exit.tmp";
  ::unlink(exit_path.c_str());

  // cgroup for this task (created before fork; the monitor is moved into it while it waits
  // at the gate, so the task and everything it forks start inside). Limits that cannot be
  // applied are logged; the task still runs.
  if (cgroups_.available() && (spec.cpu_milli > 0 || spec.memory_bytes > 0)) {
    auto cg = cgroups_.Create(spec.allocation, spec.cpu_milli, spec.memory_bytes);
    if (cg.ok()) {
      p->cgroup = *cg;
    } else {
      Log("allocation " + spec.allocation +
          " runs without cgroup limits: " + cg.status().message());
    }
  }

  // stdout and stderr: the task folder's files, or sbatch -o / -e (the user's files, appended
  // to), linked from the task folder so that the logs server reads them as the agent's own.
  const std::string* user_file[2] = {&spec.stdout_file, &spec.stderr_file};
  const char* const kStream[2] = {"stdout", "stderr"};
  int std_fd[2] = {-1, -1};
  for (int k = 0; k < 2; ++k) {
    const std::string own = dir + "/" + kStream[k];
    const std::string& file = *user_file[k];
    if (file.empty()) {
      std_fd[k] = ::open(own.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      // The task's own, so that it can write them (by path too), and no other user's.
      if (id.switch_user && std_fd[k] >= 0 &&
          (::fchown(std_fd[k], id.uid, id.gid) != 0 || ::fchmod(std_fd[k], 0600) != 0)) {
        const std::string why = std::strerror(errno);
        for (int fd : std_fd)
          if (fd >= 0) ::close(fd);
        return fail("cannot give " + own + " to " + id.Describe() + ": " + why);
      }
      continue;
    }
    const std::string path = file[0] == '/' ? file : workdir + "/" + file;
    // O_NOFOLLOW: the agent often runs as root, and a relative path may land in a shared
    // world-writable directory (/tmp) where another user could plant a link. The checked
    // descriptor is the one the task gets. Opened with the task's rights, not the agent's:
    // a task run as a user writes where that user may, not wherever root may.
    // O_NONBLOCK: a FIFO put there with no reader would hold the agent in open(); once open,
    // the task's writes block as usual.
    std_fd[k] =
        OpenAs(id, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (std_fd[k] >= 0) ::fcntl(std_fd[k], F_SETFL, ::fcntl(std_fd[k], F_GETFL) & ~O_NONBLOCK);
    if (std_fd[k] < 0) {
      const std::string why = std::strerror(errno);
      if (k == 1 && std_fd[0] >= 0) ::close(std_fd[0]);
      return fail(std::string(k == 0 ? "-o" : "-e") + ": cannot open " + path + ": " + why);
    }
    ::unlink(own.c_str());
    // Absolute: a relative target resolves from the link's own folder, not from here (the
    // work dir is relative under `--data-dir data`).
    if (::symlink(std::filesystem::absolute(path).c_str(), own.c_str()) != 0)
      Log("allocation " + spec.allocation + ": cannot link " + own + ": " + std::strerror(errno));
    // Which file that is (ReadLog reads it only while the path leads there).
    struct stat fst {};
    if (::fstat(std_fd[k], &fst) != 0 ||
        !WriteFileWhole(own + ".id",
                        std::to_string(fst.st_dev) + " " + std::to_string(fst.st_ino) + "\n", 0644,
                        Durability::kProcessCrash)
             .ok()) {
      const std::string why = std::strerror(errno);
      for (int fd : std_fd)
        if (fd >= 0) ::close(fd);
      return fail("cannot record which file " + path + " is: " + why);
    }
  }
  int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const int out = std_fd[0], err = std_fd[1];
  int gate[2] = {-1, -1};
  if (devnull < 0 || out < 0 || err < 0 || ::pipe2(gate, O_CLOEXEC) != 0) {
    std::string why = std::strerror(errno);
    for (int fd : {devnull, out, err, gate[0], gate[1]})
      if (fd >= 0) ::close(fd);
    return fail("cannot open log files in " + dir + ": " + why);
  }
  long max_fd = ::sysconf(_SC_OPEN_MAX);
  if (max_fd <= 0 || max_fd > 65536) max_fd = 65536;
  const char* wd = workdir.c_str();
  const char* exe_c = exe.c_str();
  const int64_t lease = opt_.lease_seconds && !opt_.lease_file.empty() ? opt_.lease_seconds() : 0;
  const char* lease_c = opt_.lease_file.c_str();
  const std::string stopped_path = dir + "/stopped";
  const char* stopped_c = stopped_path.c_str();
  const int64_t grace = std::max<int64_t>(0, spec.grace_period_seconds);
  const pid_t agent_group = ::getpgrp();  // where the monitor steps to before its last kill
  const std::string who = id.Describe();
  const char* who_c = who.c_str();

  pid_t pid = ::fork();
  if (pid == 0) {
    // The monitor. Only async-signal-safe calls from here on: we forked a threaded process.
    ::setpgid(0, 0);
    ::dup2(devnull, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::dup2(gate[0], 3);
    CloseFrom(4, static_cast<int>(max_fd));
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGTERM, &ign, nullptr);  // the group's SIGTERM is for the task
    ::sigaction(SIGINT, &ign, nullptr);
    ::sigaction(SIGHUP, &ign, nullptr);
    char go = 0;
    while (::read(3, &go, 1) < 0 && errno == EINTR) {
    }
    ::close(3);
    // The gate closed unopened: the agent could not record the task (or died before it
    // did), so no agent could find, report or stop it. It never starts.
    if (go != 1) ::_exit(125);
    const int lease_fd = lease > 0 ? ::open(lease_c, O_RDONLY | O_CLOEXEC) : -1;
    // Blocked before the fork: the task's end is pending for sigtimedwait below even when it
    // comes at once. (The task unblocks it.)
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    pid_t child = ::fork();
    if (child == 0) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGPIPE, SIGQUIT, SIGCHLD})
        ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      // Groups, group, then user: the monitor stays the agent's, to record the end and
      // stop the group; only the task drops to its identity.
      if (const char* call = DropPrivileges(id)) {
        const int e = errno;
        WriteStr(2, "tessera: cannot run the task as ");
        WriteStr(2, who_c);
        WriteStr(2, ": ");
        WriteStr(2, call);
        WriteStr(2, ": ");
        WriteErrno(2, e);
        WriteStr(2, "\n");
        ::_exit(126);
      }
      if (::chdir(wd) != 0) {
        const int e = errno;
        WriteStr(2, "tessera: cannot enter working directory ");
        WriteStr(2, wd);
        WriteStr(2, " as ");
        WriteStr(2, who_c);
        WriteStr(2, ": ");
        WriteErrno(2, e);
        WriteStr(2, "\n");
        ::_exit(126);
      }
      ::execve(exe_c, argv.data(), envp.data());
      const int e = errno;
      WriteStr(2, "tessera: exec failed: ");
      WriteStr(2, exe_c);
      WriteStr(2, ": ");
      WriteErrno(2, e);
      WriteStr(2, "\n");
      ::_exit(127);
    }
    int status = 0;
    long code = 127;
    const char* kind = "exit ";
    if (child < 0) {
      WriteStr(2, "tessera: fork failed\n");
    } else {
      // Wakes when the task ends, and every 250 ms to check the agent's lease file: a
      // stale one means the agent is gone (or cut off) and nobody else will stop the task.
      int64_t kill_at = -1;  // CLOCK_MONOTONIC seconds of the SIGKILL, once the lease lapsed
      for (;;) {
        const pid_t r = ::waitpid(child, &status, WNOHANG);
        if (r == child) break;
        if (r < 0 && errno != EINTR) {
          status = 127 << 8;
          break;
        }
        if (lease > 0 && kill_at < 0 && LeaseLapsed(lease_fd, lease_c, lease)) {
          // O_EXCL: a stop the agent began before it went (its reason and deadline) stands.
          int fd = ::open(stopped_c, O_WRONLY | O_CREAT | O_EXCL, 0644);
          if (fd >= 0) {
            // As Stop writes it: the reason, then when the grace period ends (wall clock), so
            // that an agent started meanwhile keeps that deadline rather than killing at once.
            char buf[96] = "stopped: agent gone (its lease lapsed)\nkill-at ";
            size_t n = std::strlen(buf);
            n += FormatInt(buf + n, static_cast<long>(::time(nullptr) + grace));
            buf[n++] = '\n';
            WriteAll(fd, buf, n);
            ::close(fd);
          }
          ::kill(0, grace > 0 ? SIGTERM : SIGKILL);  // the group; this monitor ignores SIGTERM
          kill_at = MonotonicSeconds() + grace;
        }
        if (kill_at >= 0 && MonotonicSeconds() >= kill_at) ::kill(0, SIGKILL);  // this too
        struct timespec tick {
          0, 250000000
        };
        ::sigtimedwait(&chld, nullptr, &tick);
      }
      if (WIFSIGNALED(status)) {
        kind = "signal ";
        code = WTERMSIG(status);
      } else {
        code = WEXITSTATUS(status);
      }
    }
    int fd = ::open(exit_tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      char buf[48];
      size_t n = 0;
      for (const char* k = kind; *k; ++k) buf[n++] = *k;
      n += FormatInt(buf + n, code);
      buf[n++] = '\n';
      WriteAll(fd, buf, n);
      ::close(fd);
      ::rename(exit_tmp.c_str(), exit_path.c_str());
    }
    // Nothing of the task outlives it (as Slurm's and the kubelet's ends of a job): what it
    // left in its group (a `cmd &`, a child that ignored SIGTERM) would keep its GPUs
    // busy under the next job. The monitor steps out of the group first, so that its exit
    // status still says the task's when the exit file could not be written (a full disk);
    // where it cannot (its agent's group is gone), it goes with the group.
    const pid_t group = ::getpgrp();
    if (::setpgid(0, agent_group) == 0)
      ::kill(-group, SIGKILL);
    else
      ::kill(0, SIGKILL);
    ::_exit(kind[0] == 's' ? static_cast<int>(128 + code) : static_cast<int>(code));
  }
  ::close(gate[0]);
  for (int fd : {devnull, out, err}) ::close(fd);
  if (pid < 0) {
    ::close(gate[1]);
    return fail(std::string("fork: ") + std::strerror(errno));
  }
  ::setpgid(pid, pid);  // also here: no window where a stop would miss the group
  p->st.pid = pid;
  // The monitor is blocked on the gate; its start time is settled.
  p->start_ticks = ProcStat(pid).first;
  if (!p->cgroup.empty()) {
    if (Status joined = TaskCgroups::Join(p->cgroup, pid); !joined.ok()) {
      Log("allocation " + spec.allocation + " runs without cgroup limits: " + joined.message());
      TaskCgroups::Remove(p->cgroup);
      p->cgroup.clear();
    }
  }
  // Before the task runs: a crashed agent's successor can find it. A task no record finds
  // would run on unseen beside the attempt the server starts after a restart, so without one
  // it does not start: the monitor, at the gate, sees it close unopened and exits.
  if (Status recorded = Record(*p); !recorded.ok()) {
    ::close(gate[1]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    p->st.pid = 0;
    return fail("not started: cannot record it (" + recorded.message() + ")");
  }
  char go = 1;
  (void)::write(gate[1], &go, 1);
  ::close(gate[1]);
  return Status::Ok();
}

void Executor::Stop(const std::string& allocation, const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(allocation);
  if (it == procs_.end()) return;
  Proc& p = *it->second;
  if (p.st.state != TaskState::kRunning || p.st.stopping) return;
  p.st.stopping = true;
  p.stop_reason = reason;
  // Kept beside the task: an agent that exits before the task does (or crashes) leaves its
  // successor to report it, and the successor must know the agent stopped it: killed (not
  // the task's failure), and why.
  // Its second line is when the grace period ends (wall clock), so that a successor keeps
  // the deadline rather than killing the task at once.
  const int64_t grace = std::max<int64_t>(0, p.grace_seconds);
  (void)WriteFileWhole(TaskDir(allocation) + "/stopped",
                       reason + "\nkill-at " + std::to_string(::time(nullptr) + grace) + "\n", 0644,
                       Durability::kProcessCrash);
  p.kill_at = SteadyClock::now() + std::chrono::seconds(grace);
  ::kill(-static_cast<pid_t>(p.st.pid), p.grace_seconds > 0 ? SIGTERM : SIGKILL);
  if (p.grace_seconds <= 0) {
    TaskCgroups::Kill(p.cgroup);
    p.sigkill_sent = true;
  }
}

void Executor::StopAll(const std::string& reason) {
  std::vector<std::string> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, p] : procs_) ids.push_back(id);
  }
  for (const auto& id : ids) Stop(id, reason);
}

void Executor::Finish(Proc& p, int wait_status, bool have_status) {
  const std::string dir = TaskDir(p.st.allocation);
  std::string rec = ReadFile(dir + "/exit");
  int32_t code = -1;
  std::string how;
  if (rec.rfind("exit ", 0) == 0) {
    code = std::atoi(rec.c_str() + 5);
    how = "exited with code " + std::to_string(code);
  } else if (rec.rfind("signal ", 0) == 0) {
    int sig = std::atoi(rec.c_str() + 7);
    code = 128 + sig;
    how = std::string("killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  } else if (have_status && WIFSIGNALED(wait_status)) {
    // The monitor itself was killed (SIGKILL to the group): so was the task.
    int sig = WTERMSIG(wait_status);
    code = 128 + sig;
    how = std::string("killed by signal ") + std::to_string(sig) + " (" + strsignal(sig) + ")";
  } else if (have_status) {
    code = WEXITSTATUS(wait_status);
    how = "exited with code " + std::to_string(code);
  }
  p.st.finished_at = opt_.wall_clock();
  // Stopped by its monitor, the agent's lease having lapsed: an eviction, not a failure.
  if (!p.st.stopping)
    if (std::string why = StopReason(dir); !why.empty()) {
      p.st.stopping = true;
      p.stop_reason = why;
    }
  if (p.st.stopping) {
    p.st.state = TaskState::kKilled;
    p.st.exit_code = code < 0 ? 137 : code;
    p.st.message = p.stop_reason + (how.empty() ? "" : ": " + how);
  } else if (code < 0) {
    p.st.state = TaskState::kFailed;
    p.st.exit_code = -1;
    p.st.message = "lost: the task ended while no agent watched it and left no exit status";
  } else {
    p.st.state = code == 0 ? TaskState::kSucceeded : TaskState::kFailed;
    p.st.exit_code = code;
    p.st.message = how;
  }
  TaskCgroups::Kill(p.cgroup);    // what left the process group (setsid) goes too
  TaskCgroups::Remove(p.cgroup);  // (busy while the killed exit: Forget tries again)
}

void Executor::Poll() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = SteadyClock::now();
  for (auto& [id, pp] : procs_) {
    Proc& p = *pp;
    if (p.st.state != TaskState::kRunning) continue;
    if (p.st.stopping && !p.sigkill_sent && now >= p.kill_at) {
      ::kill(-static_cast<pid_t>(p.st.pid), SIGKILL);
      TaskCgroups::Kill(p.cgroup);  // also what left the process group
      p.sigkill_sent = true;
    }
    if (!p.adopted) {
      int status = 0;
      pid_t r = ::waitpid(static_cast<pid_t>(p.st.pid), &status, WNOHANG);
      if (r == static_cast<pid_t>(p.st.pid)) {
        Finish(p, status, true);
      } else if (r < 0 && errno == ECHILD) {
        Finish(p, 0, false);
      }
    } else if (!ProcessAlive(p.st.pid, p.start_ticks)) {
      Finish(p, 0, false);
    }
  }
}

bool Executor::WaitAll(int64_t timeout_ms) {
  const auto deadline = SteadyClock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    Poll();
    bool running = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, p] : procs_) running = running || p->st.state == TaskState::kRunning;
    }
    if (!running) return true;
    if (SteadyClock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<TaskStatus> Executor::Statuses() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TaskStatus> out;
  for (const auto& [id, p] : procs_) out.push_back(p->st);
  return out;
}

int64_t Executor::MaxGraceSeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t g = 0;
  for (const auto& [id, p] : procs_) {
    if (p->st.state == TaskState::kRunning) g = std::max(g, p->grace_seconds);
  }
  return g;
}

bool Executor::Has(const std::string& allocation) const {
  std::lock_guard<std::mutex> lock(mu_);
  return procs_.count(allocation) > 0;
}

void Executor::Forget(const std::string& allocation) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(allocation);
  if (it == procs_.end() || it->second->st.state == TaskState::kRunning) return;
  Proc& p = *it->second;
  // Reported and no longer wanted: a later Recover() must not report it again. The record
  // keeps when the task ended, for the retention after an agent restart.
  (void)Record(p);  // best effort: without finishedAt the retention goes by the exit file's time
  const std::string dir = TaskDir(allocation);
  ::rename((dir + "/task.json").c_str(), (dir + "/task.done.json").c_str());
  finished_[allocation] = {p.st.job, p.st.task, p.st.finished_at};
  TaskCgroups::Remove(p.cgroup);  // if it was still busy when the task ended
  delete it->second;
  procs_.erase(it);
}

namespace {

namespace fs = std::filesystem;

// Lets the owner into and write every folder below `dir` (a task may leave read-only ones,
// as Go's module cache), so that they can be removed. Links are not followed.
void MakeFoldersWritable(const fs::path& dir) {
  std::error_code ec;
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::add, ec);
  // increment(ec), not ++: a folder that vanishes or refuses must not throw.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->symlink_status(ec).type() == fs::file_type::directory) MakeFoldersWritable(it->path());
  }
}

// rm -rf: "" when `path` is gone, else why not. Links (sbatch -o / -e) go, not their targets.
std::string RemoveTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (!ec) return "";
  MakeFoldersWritable(path);
  fs::remove_all(path, ec);
  return ec ? ec.message() : "";
}

// Removal notices kept across restarts: at most twice this many, trimmed to it.
constexpr size_t kNoticesKept = 10000;

}  // namespace

std::vector<std::string> Executor::RemoveOldTaskFolders(const std::set<std::string>& listed) {
  std::vector<std::string> gone;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = opt_.wall_clock();
    const int64_t max_age = opt_.task_retention_seconds, max_kept = opt_.max_finished_tasks;
    std::vector<std::pair<int64_t, std::string>> kept;  // (ended, allocation): oldest first
    for (const auto& [id, f] : finished_) {
      if (!listed.count(id) && !procs_.count(id)) kept.emplace_back(f.finished_at, id);
    }
    std::sort(kept.begin(), kept.end());
    std::string appended;
    int64_t left = static_cast<int64_t>(kept.size());
    for (const auto& [ended, id] : kept) {
      const bool expired = max_age > 0 && now - ended >= max_age;
      if (!expired && !(max_kept > 0 && left > max_kept)) break;
      const FinishedFolder& f = finished_[id];
      std::string notice = "logs of job " + f.job + " task " + std::to_string(f.task) +
                           " (allocation " + id + ") were removed ";
      notice += expired ? "after " + FormatDuration(max_age) + " (the agent's --task-retention)"
                        : FormatDuration(now - ended) +
                              " after the task ended: the node keeps the folders of its " +
                              std::to_string(max_kept) +
                              " latest finished tasks (the agent's --max-finished-tasks)";
      notices_[id] = notice;
      notice_order_.push_back(id);
      appended += id + " " + notice + "\n";
      finished_.erase(id);
      gone.push_back(id);
      --left;
    }
    if (notice_order_.size() > 2 * kNoticesKept) {
      std::string all;
      while (notice_order_.size() > kNoticesKept) {
        notices_.erase(notice_order_.front());
        notice_order_.pop_front();
      }
      for (const auto& id : notice_order_) all += id + " " + notices_[id] + "\n";
      (void)WriteFileWhole(NoticesFile(), all, 0600, Durability::kProcessCrash);
    } else if (!appended.empty()) {
      const int fd = ::open(NoticesFile().c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        WriteAll(fd, appended.data(), appended.size());
        ::close(fd);
      }
    }
  }
  // Outside the lock: a large folder takes a while, and the tasks are polled meanwhile.
  for (const auto& id : gone) {
    if (std::string why = RemoveTree(TaskDir(id)); !why.empty())
      Log("allocation " + id + ": cannot remove its folder " + TaskDir(id) + ": " + why);
  }
  return gone;
}

std::string Executor::RemovalNotice(const std::string& allocation) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = notices_.find(allocation);
  return it == notices_.end() ? "" : it->second;
}

void Executor::LoadNotices() {
  std::istringstream in(ReadFile(NoticesFile()));
  notices_.clear();
  notice_order_.clear();
  for (std::string line; std::getline(in, line);) {
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    const std::string id = line.substr(0, sp);
    if (notices_.count(id) == 0) notice_order_.push_back(id);
    notices_[id] = line.substr(sp + 1);
  }
  while (notice_order_.size() > 2 * kNoticesKept) {
    notices_.erase(notice_order_.front());
    notice_order_.pop_front();
  }
}

// Folders whose task an earlier agent forgot (task.done.json): the retention's to remove.
// One without a record is not Tessera's to judge, and stays.
void Executor::LoadFinishedFolders(const std::vector<std::string>& allocations) {
  for (const auto& id : allocations) {
    const std::string dir = TaskDir(id);
    nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/task.done.json"), nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    FinishedFolder f;
    f.job = j.value("job", "");
    f.task = j.value("task", 0);
    f.finished_at = j.value("finishedAt", int64_t{0});
    if (f.finished_at <= 0) {
      // Recorded by an agent that kept no finishedAt: the exit file's time is the end.
      struct stat st {};
      if (::stat((dir + "/exit").c_str(), &st) == 0 ||
          ::stat((dir + "/task.done.json").c_str(), &st) == 0)
        f.finished_at = st.st_mtim.tv_sec;
    }
    finished_[id] = f;
  }
}

Status Executor::Recover() {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string root = opt_.work_dir + "/tasks";
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) return Status::Ok();
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (ValidAllocationId(n)) names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  LoadNotices();
  std::vector<std::string> forgotten;
  for (const auto& id : names) {
    if (procs_.count(id)) continue;
    std::string text = ReadFile(root + "/" + id + "/task.json");
    if (text.empty()) {
      forgotten.push_back(id);
      continue;
    }
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    auto* p = new Proc();
    p->st.allocation = id;
    p->st.job = j.value("job", "");
    p->st.task = j.value("task", 0);
    p->st.pid = j.value("pgid", int64_t{0});
    p->st.started_at = j.value("startedAt", int64_t{0});
    p->start_ticks = j.value("startTicks", uint64_t{0});
    p->grace_seconds = j.value("graceSeconds", int64_t{30});
    p->cgroup = j.value("cgroup", "");
    if (const auto r = j.find("runAs"); r != j.end()) p->st.ran_as = RanAsFromJson(*r);
    if (j.contains("devices") && j["devices"].is_array()) {
      for (const auto& dj : j["devices"]) {
        DeviceAssignment a;
        a.device = dj.value("device", 0);
        a.milli = dj.value("milli", 1000);
        a.mig_instance = dj.value("migInstance", -1);
        p->st.devices.push_back(a);
      }
    }
    p->adopted = true;
    if (std::string why = StopReason(root + "/" + id); !why.empty()) {
      // An earlier agent was stopping it: finish the stop, SIGKILL when its grace period
      // (the file's "kill-at", when there is one) is over and it still runs.
      p->st.stopping = true;
      p->stop_reason = why;
      int64_t left = 0;
      const std::string file = ReadFile(root + "/" + id + "/stopped");
      if (size_t k = file.find("\nkill-at "); k != std::string::npos)
        left = std::atoll(file.c_str() + k + 9) - ::time(nullptr);
      p->kill_at = SteadyClock::now() + std::chrono::seconds(std::clamp<int64_t>(left, 0, 86400));
    }
    procs_[id] = p;
    std::string rec = ReadFile(root + "/" + id + "/exit");
    if (rec.rfind("error ", 0) == 0) {  // never started
      p->st.state = TaskState::kFailed;
      p->st.exit_code = 127;
      p->st.finished_at = p->st.started_at;
      p->st.message = rec.substr(6, rec.find('\n') - 6);
    } else if (p->st.pid <= 0 || !ProcessAlive(p->st.pid, p->start_ticks)) {
      Finish(*p, 0, false);
    }
  }
  LoadFinishedFolders(forgotten);
  return Status::Ok();
}

}  // namespace tessera::agent
