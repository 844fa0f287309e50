#include "backends/slurm/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/process.h"

namespace tessera::slurm {
namespace {

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

StatusOr<CommandResult> SubprocessRunner::Run(const std::vector<std::string>& argv,
                                              const std::string& input) {
  if (argv.empty()) return InvalidArgument("command: empty argv");
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    for (int* p : {in, out, err}) CloseFd(p[0]), CloseFd(p[1]);
    return Unavailable(std::string("pipe: ") + std::strerror(errno));
  }
  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<std::string> env = EnvironWith(env_);
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) {
    for (int* p : {in, out, err}) CloseFd(p[0]), CloseFd(p[1]);
    return Unavailable(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    // The child starts with default signal handling whatever the server set up.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvpe(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  CloseFd(in[0]);
  CloseFd(out[1]);
  CloseFd(err[1]);
  fcntl(in[1], F_SETFL, O_NONBLOCK);
  if (input.empty()) CloseFd(in[1]);

  // A child that exits without reading its stdin must not SIGPIPE the server: block the
  // signal in this thread while writing, and swallow a pending one afterwards.
  sigset_t pipe_set, old_mask;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  bool broken_pipe = false;

  CommandResult result;
  size_t written = 0;
  auto deadline = std::chrono::steady_clock::now() + timeout_;
  bool timed_out = false;
  while (out[0] >= 0 || err[0] >= 0 || in[1] >= 0) {
    pollfd fds[3];
    int n = 0;
    if (out[0] >= 0) fds[n++] = {out[0], POLLIN, 0};
    if (err[0] >= 0) fds[n++] = {err[0], POLLIN, 0};
    if (in[1] >= 0) fds[n++] = {in[1], POLLOUT, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int r = poll(fds, n, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in[1]) {
        ssize_t w = write(in[1], input.data() + written, input.size() - written);
        if (w > 0) written += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) {  // EPIPE: the child stopped reading
          broken_pipe = broken_pipe || errno == EPIPE;
          written = input.size();
        }
        if (written >= input.size()) CloseFd(in[1]);
        continue;
      }
      char buf[65536];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (fds[i].fd == out[0] ? result.out : result.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        if (fds[i].fd == out[0])
          CloseFd(out[0]);
        else
          CloseFd(err[0]);
      }
    }
  }
  for (int* fd : {&in[1], &out[0], &err[0]}) CloseFd(*fd);
  if (broken_pipe && !sigismember(&old_mask, SIGPIPE)) {
    timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) == SIGPIPE) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return Unavailable(QuoteArgv(argv) + ": no answer within " + std::to_string(timeout_.count()) +
                       " ms (killed)");
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
    if (result.exit_code == 127 && result.out.empty() && result.err.empty()) {
      return Unavailable(argv[0] + ": cannot be run (not installed or not in PATH)");
    }
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

}  // namespace tessera::slurm
