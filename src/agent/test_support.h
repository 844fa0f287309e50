// Helpers shared by the agent's tests: read a file, tell whether a process is alive, poll.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "agent/read_file.h"

namespace tessera::agent::testing {

inline std::string Slurp(const std::string& path) { return ReadFile(path); }

// Alive and not a zombie (gVisor's init reaps orphans late, so kill(pid, 0) is not enough).
inline bool Running(pid_t pid) {
  std::string s = Slurp("/proc/" + std::to_string(pid) + "/stat");
  auto rp = s.rfind(')');
  return rp != std::string::npos && s.size() > rp + 2 && s[rp + 2] != 'Z' && s[rp + 2] != 'X';
}

// Polls cond every poll_ms until it holds or `seconds` pass; returns its last value.
template <typename F>
bool WaitFor(F cond, int seconds = 20, int poll_ms = 20) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
  return cond();
}

}  // namespace tessera::agent::testing
