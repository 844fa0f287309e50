// Backend: how a plan's allocations reach a real system, one per pool kind.
//
// The control plane persists an allocation first, then tells the backend of its pool (a
// change the store refuses never reaches a backend: ControlPlane::Commit). Own
// agents are pull-based (docs/agent-protocol.md): the heartbeat answer IS the dispatch, so
// AgentBackend only wakes nothing and records nothing. Slurm, Kubernetes and cloud backends
// implement Launch/Stop by calling their systems and report task states back through
// ControlPlane::ReportTask. Implementations must be thread-safe and must not block for long
// (they are called with the control plane's lock held).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/status.h"
#include "model/job.h"
#include "spec/spec.h"

namespace tessera::server {

struct Dispatch {
  std::string allocation;  // "a-000000000123": never reused
  std::string job;
  int32_t task = 0;
  int32_t attempt = 1;
  TaskAllocation placement;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Kind() const = 0;  // "agent", "slurm", ...
  virtual void Launch(const Dispatch& d) = 0;
  virtual void Stop(const std::string& allocation, int64_t grace_period_seconds) = 0;
  // Where task `d` of `job` writes `stream` ("stdout" or "stderr") when its pool puts task
  // output in files that the server reads itself (Slurm's --output on a shared filesystem):
  // the file's path; "" when the node's agent serves the logs (its logsUrl, the default);
  // an error, saying why, when the pool has no output to serve. Called with the control
  // plane's lock held: compute the path, never wait.
  virtual StatusOr<std::string> LogFile(const spec::JobSpec& job, const Dispatch& d,
                                        const std::string& stream) const {
    return std::string();
  }
  // Nodes of this pool that would refuse `job` whatever is free there (a Slurm partition's
  // AllowAccounts, AllowGroups, AllowQos...), each with why: the engine keeps the job off
  // them. Called with the control plane's lock held, for every pending job each cycle:
  // answer from what is known, never wait. `job_id` names the job across cycles (its spec
  // does not change), so a pool may remember what it read from the spec.
  virtual std::map<std::string, std::string> RefusingNodes(const std::string& job_id,
                                                           const spec::JobSpec& job) const {
    return {};
  }
};

// Own node agents: they poll for their desired state, so there is nothing to push.
class AgentBackend final : public Backend {
 public:
  std::string Kind() const override { return "agent"; }
  void Launch(const Dispatch&) override {}
  void Stop(const std::string&, int64_t) override {}
};

}  // namespace tessera::server
