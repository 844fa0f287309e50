#include "backends/slurm/job_state.h"

#include <algorithm>

#include "backends/slurm/sbatch.h"
#include "common/hostlist.h"

namespace tessera {

const char* AllocationPhaseName(AllocationPhase p) {
  switch (p) {
    case AllocationPhase::kPending:
      return "Pending";
    case AllocationPhase::kRunning:
      return "Running";
    case AllocationPhase::kSucceeded:
      return "Succeeded";
    case AllocationPhase::kFailed:
      return "Failed";
    case AllocationPhase::kKilled:
      return "Killed";
    case AllocationPhase::kLost:
      return "Lost";
  }
  return "?";
}

namespace slurm {

std::string ExternalId(int64_t id) { return "slurm:" + std::to_string(id); }

AllocationPhase PhaseOfSlurmState(const std::string& state) {
  static const std::vector<std::pair<std::string, AllocationPhase>> kTable = {
      {"PENDING", AllocationPhase::kPending},      {"CONFIGURING", AllocationPhase::kPending},
      {"REQUEUED", AllocationPhase::kPending},     {"REQUEUE_FED", AllocationPhase::kPending},
      {"REQUEUE_HOLD", AllocationPhase::kPending}, {"RESIZING", AllocationPhase::kPending},
      {"RUNNING", AllocationPhase::kRunning},      {"COMPLETING", AllocationPhase::kRunning},
      {"SUSPENDED", AllocationPhase::kRunning},    {"STAGE_OUT", AllocationPhase::kRunning},
      {"SIGNALING", AllocationPhase::kRunning},    {"COMPLETED", AllocationPhase::kSucceeded},
      {"FAILED", AllocationPhase::kFailed},        {"TIMEOUT", AllocationPhase::kFailed},
      {"OUT_OF_MEMORY", AllocationPhase::kFailed}, {"NODE_FAIL", AllocationPhase::kFailed},
      {"BOOT_FAIL", AllocationPhase::kFailed},     {"DEADLINE", AllocationPhase::kFailed},
      {"SPECIAL_EXIT", AllocationPhase::kFailed},  {"CANCELLED", AllocationPhase::kKilled},
      {"PREEMPTED", AllocationPhase::kKilled},     {"REVOKED", AllocationPhase::kKilled},
  };
  for (const auto& [name, phase] : kTable) {
    if (state == name) return phase;
  }
  // An unknown word from a newer Slurm: not finished as far as we can tell.
  return AllocationPhase::kPending;
}

ExitStatus DecodeWaitStatus(int64_t raw) {
  ExitStatus e;
  int32_t sig = static_cast<int32_t>(raw & 0x7f);
  if (sig != 0) {
    e.signal = sig;
    e.exit_code = 128 + sig;
  } else {
    e.exit_code = static_cast<int32_t>((raw >> 8) & 0xff);
  }
  return e;
}

AllocationStatus StatusFromSlurm(const std::vector<SlurmJob>& components) {
  std::vector<SlurmJob> jobs = components;
  std::sort(jobs.begin(), jobs.end(), [](const SlurmJob& a, const SlurmJob& b) {
    return std::tie(a.het_job_offset, a.job_id) < std::tie(b.het_job_offset, b.job_id);
  });
  const SlurmJob& lead = jobs.front();
  AllocationStatus st;
  if (auto tag = ParseTag(lead.comment)) {
    st.job = tag->job;
    st.allocation = tag->allocation;
  }
  st.external_id = ExternalId(lead.het_job_id != 0 ? lead.het_job_id : lead.job_id);

  bool any_pending = false, any_running = false, any_failed = false, any_killed = false;
  const SlurmJob* decisive = nullptr;  // the component whose state explains the outcome
  for (const SlurmJob& j : jobs) {
    AllocationPhase p = PhaseOfSlurmState(j.state);
    ExitStatus e = DecodeWaitStatus(j.exit_code);
    if (p == AllocationPhase::kSucceeded && e.exit_code != 0) p = AllocationPhase::kFailed;
    any_pending |= p == AllocationPhase::kPending;
    any_running |= p == AllocationPhase::kRunning;
    if (p == AllocationPhase::kFailed && !any_failed) decisive = &j;
    if (p == AllocationPhase::kKilled && !any_failed && !any_killed) decisive = &j;
    any_failed |= p == AllocationPhase::kFailed;
    any_killed |= p == AllocationPhase::kKilled;
  }
  if (any_pending && !any_running) {
    st.phase = AllocationPhase::kPending;
  } else if (any_pending || any_running) {
    st.phase = AllocationPhase::kRunning;
  } else if (any_failed) {
    st.phase = AllocationPhase::kFailed;
  } else if (any_killed) {
    st.phase = AllocationPhase::kKilled;
  } else {
    st.phase = AllocationPhase::kSucceeded;
  }
  const SlurmJob& why = decisive ? *decisive : lead;
  ExitStatus e = DecodeWaitStatus(why.exit_code);
  if (IsTerminal(st.phase)) {
    st.exit_code = e.exit_code;
    st.signal = e.signal;
  }
  st.state = why.state;
  st.reason =
      (why.state_reason.empty() || why.state_reason == "None") ? why.state : why.state_reason;
  st.message = "Slurm job " + std::to_string(why.job_id) + " " + why.state;
  if (why.state_reason != "None" && !why.state_reason.empty()) {
    st.message += " (" + why.state_reason + ")";
  }
  if (IsTerminal(st.phase) && st.phase != AllocationPhase::kSucceeded) {
    st.message +=
        e.signal ? ", signal " + std::to_string(e.signal) : ", exit " + std::to_string(e.exit_code);
  }
  int64_t start = 0, end = 0;
  for (const SlurmJob& j : jobs) {
    if (auto hosts = ExpandHostlist(j.nodes); hosts.ok()) {
      for (std::string& h : *hosts) st.nodes.push_back(std::move(h));
    }
    if (j.start_time > 0 && (start == 0 || j.start_time < start)) start = j.start_time;
    end = std::max(end, j.end_time);
  }
  std::sort(st.nodes.begin(), st.nodes.end());
  st.nodes.erase(std::unique(st.nodes.begin(), st.nodes.end()), st.nodes.end());
  // Slurm sets a start/end *estimate* on pending jobs; only report what really happened.
  if (st.phase != AllocationPhase::kPending) st.started_at = start;
  if (IsTerminal(st.phase)) st.finished_at = end;
  return st;
}

}  // namespace slurm
}  // namespace tessera
