// TaskCgroups: per-task cgroup v2 limits under one parent cgroup (<cgroup2>/tessera).
//
// Open() checks that the cgroup2 hierarchy has the cpu and memory controllers, enables them
// for the parent's children (cgroup.subtree_control, from the mount down to the parent), and
// creates the parent. Create() makes <parent>/<allocation> with cpu.max (from the task's
// milli-CPU) and memory.max (bytes); Join() moves a process into it (cgroup.procs); Kill()
// writes cgroup.kill; Remove() deletes it. Every path is a plain file write, so the tests point
// `mount` at a fake cgroup2 root (a temp dir with cgroup.controllers) and read back the files.
//
// A machine without a writable cgroup2 or without those controllers is not an error: Open()
// returns a TaskCgroups whose available() is false and whose status() says why in words for
// the agent's log; tasks then run without limits.
//
// Thread-compatible: the executor calls it under its own lock.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tessera::agent {

// cpu.max for a task's CPU request: quota per 100 ms period ("150000 100000" for 1500 milli),
// at least the kernel's minimum quota of 1 ms; "max 100000" for no limit (milli <= 0).
std::string CpuMaxValue(int64_t cpu_milli);

class TaskCgroups {
 public:
  // mount: the cgroup2 mount point; "" = find it in /proc/self/mountinfo.
  // parent: the cgroup the tasks' cgroups go under; "" = <mount>/tessera; "-" = never use
  // cgroups (the status says so).
  static TaskCgroups Open(const std::string& mount, const std::string& parent);

  bool available() const { return !parent_.empty(); }
  // "enabled: /sys/fs/cgroup/tessera" or "unavailable: <why>; tasks run without CPU and
  // memory limits" or "disabled by configuration".
  const std::string& status() const { return status_; }
  const std::string& parent() const { return parent_; }

  // Creates the allocation's cgroup and writes its limits (a limit <= 0 is left unset).
  // Returns the cgroup's path; an error names the file that could not be written.
  StatusOr<std::string> Create(const std::string& allocation, int64_t cpu_milli,
                               int64_t memory_bytes) const;
  // Moves pid into the cgroup (and so every process it forks afterwards).
  static Status Join(const std::string& cgroup, int64_t pid);
  // Kills every process in the cgroup, including those that left the task's process group
  // (kernel 5.14+; elsewhere a no-op, the group SIGKILL still applies).
  static void Kill(const std::string& cgroup);
  // Removes the cgroup once its processes are gone (rmdir; a fake root's files stay).
  static void Remove(const std::string& cgroup);

 private:
  std::string parent_;
  std::string status_;
};

}  // namespace tessera::agent
