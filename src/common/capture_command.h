// For tests that run a program (the tessera binary, Slurm's tools) and read what it printed.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

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

}  // namespace tessera
