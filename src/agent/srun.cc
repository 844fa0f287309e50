#include "agent/srun.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/process.h"

namespace tessera::agent {
namespace {

std::optional<int32_t> PositiveInt(const std::string& s) {
  int32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 1) return std::nullopt;
  return v;
}

constexpr char kSupported[] =
    "srun on Tessera's own nodes takes -n/--ntasks, -N/--nodes, --ntasks-per-node, "
    "-c/--cpus-per-task, -K/--kill-on-bad-exit, -l/--label, -u/--unbuffered, -J/--job-name, "
    "--export=ALL and --mpi=none";

}  // namespace

StatusOr<SrunStep> PlanSrunStep(const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& env) {
  auto env_int = [&](const char* name) -> std::optional<int32_t> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : PositiveInt(it->second);
  };
  const std::optional<int32_t> job_nodes = env_int("SLURM_NNODES");
  auto node_id = env.find("SLURM_NODEID");
  if (!job_nodes || node_id == env.end())
    return FailedPrecondition(
        "not inside an sbatch job on Tessera's nodes (SLURM_NNODES or SLURM_NODEID unset)");
  const int32_t node = std::atoi(node_id->second.c_str());
  const int32_t job_tasks = env_int("SLURM_NTASKS").value_or(*job_nodes);
  const int32_t per_node =
      env_int("SLURM_NTASKS_PER_NODE").value_or(std::max<int32_t>(1, job_tasks / *job_nodes));

  SrunStep step;
  std::optional<int32_t> n, nodes, tasks_per_node;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.size() < 2 || a[0] != '-') break;  // the command
    std::string name = a, value;
    bool attached = false;  // --opt=value, -n4
    if (a.starts_with("--")) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        attached = true;
      }
    } else if (a.size() > 2) {
      name = a.substr(0, 2);
      value = a.substr(2);
      attached = true;
    }
    auto take = [&]() -> StatusOr<std::string> {
      if (attached) return value;
      if (i + 1 >= args.size()) return InvalidArgument(name + ": needs a value");
      return args[++i];
    };
    auto count = [&](std::optional<int32_t>& out) -> Status {
      auto v = take();
      if (!v.ok()) return v.status();
      out = PositiveInt(*v);
      if (!out) return InvalidArgument(name + ": a whole number of at least 1, got \"" + *v + "\"");
      return Status::Ok();
    };
    Status st = Status::Ok();
    if (name == "-n" || name == "--ntasks") {
      st = count(n);
    } else if (name == "-N" || name == "--nodes") {
      st = count(nodes);
    } else if (name == "--ntasks-per-node") {
      st = count(tasks_per_node);
    } else if (name == "-c" || name == "--cpus-per-task") {
      std::optional<int32_t> ignored;  // the node's share of the job's CPUs is the task's
      st = count(ignored);
    } else if (name == "-K" || name == "--kill-on-bad-exit") {
      step.kill_on_bad_exit = !attached || value != "0";
    } else if ((name == "-l" || name == "--label") && !attached) {
      step.label = true;
    } else if ((name == "-u" || name == "--unbuffered") && !attached) {
      // the tasks write to srun's own stdout and stderr, unbuffered by srun
    } else if (name == "-J" || name == "--job-name") {
      auto v = take();
      st = v.status();
    } else if (name == "--export" || name == "--mpi") {
      auto v = take();
      st = v.status();
      const char* fine = name == "--export" ? "ALL" : "none";
      if (st.ok() && *v != fine)
        st = InvalidArgument(
            name + "=" + *v + ": not supported" +
            (name == "--mpi" ? " (no PMI on Tessera's nodes: start MPI ranks with mpirun, or use "
                               "torchrun's rendezvous)"
                             : " (the tasks get the batch script's environment)"));
    } else {
      st = InvalidArgument(a + ": not supported (" + kSupported + ")");
    }
    if (!st.ok()) return st;
  }
  step.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (step.command.empty()) return InvalidArgument("no command given to execute");
  if (nodes && *nodes > *job_nodes)
    return InvalidArgument("-N " + std::to_string(*nodes) + ": only " + std::to_string(*job_nodes) +
                           " node(s) in the job's allocation");
  // As Slurm's srun: the batch environment's SLURM_NNODES and SLURM_NTASKS stand for -N and
  // -n; a step of fewer tasks than nodes takes only as many nodes; tasks in blocks (the
  // first nodes get one more when they do not divide evenly).
  step.nodes = nodes.value_or(*job_nodes);
  step.ntasks = n.value_or(nodes || tasks_per_node ? step.nodes * tasks_per_node.value_or(per_node)
                                                   : job_tasks);
  step.nodes = std::min(step.nodes, step.ntasks);
  if (node < step.nodes) {
    const int32_t base = step.ntasks / step.nodes, extra = step.ntasks % step.nodes;
    step.local_tasks = base + (node < extra ? 1 : 0);
    step.first_rank = node * base + std::min(node, extra);
  }
  return step;
}

namespace {

// -l/--label: one task's stdout or stderr, written on srun's own with "RANK: " before each line.
struct LabelledStream {
  int fd = -1;  // read end; -1 once closed
  int to = 1;
  std::string prefix, pending;
  void Emit(bool all) {
    auto put = [this](const std::string& line) { WriteAll(to, line.data(), line.size()); };
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      put(prefix + pending.substr(0, nl + 1));
      pending.erase(0, nl + 1);
    }
    if (all && !pending.empty()) put(prefix + pending + "\n");  // its own line
    if (all) pending.clear();
  }
};

// Reads what is there, waiting up to timeout_ms for something; how many streams had
// something (data, or their end): 0 when none is open or none was ready.
int PumpLabelled(std::vector<LabelledStream>& streams, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<LabelledStream*> of;
  for (LabelledStream& s : streams)
    if (s.fd >= 0) {
      fds.push_back({s.fd, POLLIN, 0});
      of.push_back(&s);
    }
  if (fds.empty() || ::poll(fds.data(), fds.size(), timeout_ms) <= 0) return 0;
  int ready = 0;
  char buf[65536];
  for (size_t i = 0; i < fds.size(); ++i) {
    if (!fds[i].revents) continue;
    ++ready;
    const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      of[i]->pending.append(buf, static_cast<size_t>(n));
      of[i]->Emit(false);
    } else {
      of[i]->Emit(true);
      ::close(of[i]->fd);
      of[i]->fd = -1;
    }
  }
  return ready;
}

}  // namespace

int RunSrunStep(const SrunStep& step) {
  const char* host = std::getenv("TESSERA_NODE");
  std::vector<pid_t> pids;
  std::vector<LabelledStream> streams;
  std::vector<char*> argv;
  for (const std::string& a : step.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (int32_t local = 0; local < step.local_tasks; ++local) {
    const std::string rank = std::to_string(step.first_rank + local);
    const std::string lid = std::to_string(local);
    const std::string ntasks = std::to_string(step.ntasks);
    const std::vector<std::string> env =
        EnvironWith({{"SLURM_PROCID", rank},
                     {"RANK", rank},
                     {"SLURM_LOCALID", lid},
                     {"LOCAL_RANK", lid},
                     {"SLURM_NTASKS", ntasks},
                     {"SLURM_NPROCS", ntasks},
                     {"SLURM_STEP_NUM_TASKS", ntasks},
                     {"WORLD_SIZE", ntasks},
                     {"SLURM_STEP_NUM_NODES", std::to_string(step.nodes)}});
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (step.label && (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)) {
      std::fprintf(stderr, "srun: error: pipe: %s\n", std::strerror(errno));
      for (int fd : {out[0], out[1], err[0], err[1]})
        if (fd >= 0) ::close(fd);
      for (pid_t p : pids) ::kill(p, SIGKILL);
      break;
    }
    const std::string exec_error = std::string("srun: error: ") + (host ? host : "?") + ": task " +
                                   rank + ": execve(): " + argv[0] + ": ";
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "srun: error: fork: %s\n", std::strerror(errno));
      for (int fd : {out[0], out[1], err[0], err[1]})
        if (fd >= 0) ::close(fd);
      for (pid_t p : pids) ::kill(p, SIGKILL);
      break;
    }
    if (pid == 0) {                // only async-signal-safe calls from here on
      ::signal(SIGTERM, SIG_DFL);  // srun's own are ignored (SrunMain)
      ::signal(SIGINT, SIG_DFL);
      if (step.label) {
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
      }
      ::execvpe(argv[0], argv.data(), envp.data());
      const int e = errno;
      (void)!::write(2, exec_error.data(), exec_error.size());
      const char* why = e == ENOENT ? "No such file or directory\n" : "cannot execute\n";
      (void)!::write(2, why, std::strlen(why));
      ::_exit(127);
    }
    pids.push_back(pid);
    if (step.label) {
      ::close(out[1]);
      ::close(err[1]);
      streams.push_back({out[0], 1, rank + ": ", ""});
      streams.push_back({err[0], 2, rank + ": ", ""});
    }
  }
  int worst = pids.size() == static_cast<size_t>(step.local_tasks) ? 0 : 1;
  size_t left = pids.size();
  bool killed_rest = false;
  while (left > 0) {
    int status = 0;
    // With labels, output is pumped between looks at the tasks (a full pipe would stall
    // them); once every stream is closed, srun just waits.
    const bool open = std::any_of(streams.begin(), streams.end(),
                                  [](const LabelledStream& s) { return s.fd >= 0; });
    if (open) PumpLabelled(streams, 100);
    const pid_t pid = ::waitpid(-1, &status, open ? WNOHANG : 0);
    if (pid == 0) continue;
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    --left;
    const int rank = step.first_rank + static_cast<int>(it - pids.begin());
    *it = -1;
    int code = 0;
    if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
      if (code != 0)
        std::fprintf(stderr, "srun: error: %s: task %d: Exited with exit code %d\n",
                     host ? host : "?", rank, code);
    } else if (WIFSIGNALED(status)) {
      // The kill -K sent is not a task's own failure: srun says how the first one failed.
      if (killed_rest && WTERMSIG(status) == SIGKILL) continue;
      code = 128 + WTERMSIG(status);
      if (!killed_rest)
        std::fprintf(stderr, "srun: error: %s: task %d: %s\n", host ? host : "?", rank,
                     strsignal(WTERMSIG(status)));
    }
    worst = std::max(worst, code);
    if (code != 0 && step.kill_on_bad_exit && !killed_rest) {
      killed_rest = true;
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
    }
  }
  // The tasks are gone: what they wrote is read (for at most a second); a process they left
  // behind holding a pipe, writing or not, does not keep srun waiting.
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < drain_until && PumpLabelled(streams, 0) > 0) {
  }
  for (LabelledStream& s : streams) {
    s.Emit(true);
    if (s.fd >= 0) ::close(s.fd);
  }
  return worst;
}

int SrunMain(const std::vector<std::string>& args) {
  auto step = PlanSrunStep(args, EnvironMap());
  if (!step.ok()) {
    std::fprintf(stderr, "srun: error: %s\n", step.status().message().c_str());
    return 1;
  }
  // The job's stop (SIGTERM to its process group) reaches the tasks themselves; srun waits
  // for them to end and reports how they did.
  ::signal(SIGTERM, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  return RunSrunStep(*step);
}

}  // namespace tessera::agent
