// For tests that run a program (the tessera binary, Slurm's tools, etcd): read what it
// printed, or start it in the background.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

extern char** environ;  // the environment a spawned child gets

namespace tessera {

// Runs `cmd` with /bin/sh; returns its exit code (-1 if it did not exit normally or could
// not start) and its stdout (add 2>&1 to the command for stderr too).
inline std::pair<int, std::string> CaptureCommand(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Starts args[0] (a path) with `args` and this process's environment, in the background: its
// stderr appended to `stderr_file`, its stdout to `stdout_file` ("": this process's). Returns
// its pid, or -1 when it could not be started.
inline pid_t SpawnInBackground(std::vector<std::string> args, const std::string& stderr_file,
                               const std::string& stdout_file = "") {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (!stdout_file.empty())
    posix_spawn_file_actions_addopen(&fa, 1, stdout_file.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                     0644);
  posix_spawn_file_actions_addopen(&fa, 2, stderr_file.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

}  // namespace tessera
