// Why a task was evicted: an event's reason and tessera_scheduling_evictions_total's label.
// A closed set, so that the metric's series are known in advance (created at 0) and a pool
// cannot invent label values.
#pragma once

#include <algorithm>
#include <array>
#include <string_view>

namespace tessera {

// Decided by Tessera: the engine (Preempted, Reclaimed), a drain, a node lost or whose agent
// restarted, and tasks an agent stopped on its own (Evicted).
inline constexpr std::array<std::string_view, 6> kTesseraEvictionReasons = {
    "Preempted", "Reclaimed", "Drained", "NodeLost", "NodeRestarted", "Evicted"};

// Reported by a pool that runs tasks itself (Slurm) for a task it ended; any other reason a
// pool gives reads "Evicted".
inline constexpr std::array<std::string_view, 8> kPoolEvictionReasons = {
    "NodeFailed",  "PreemptedBySlurm", "KilledBySlurm",  "CancelledInSlurm",
    "LostInSlurm", "StuckInSlurm",     "RefusedBySlurm", "PartlyStoppedInSlurm"};

inline bool IsPoolEvictionReason(std::string_view reason) {
  return std::find(kPoolEvictionReasons.begin(), kPoolEvictionReasons.end(), reason) !=
         kPoolEvictionReasons.end();
}

}  // namespace tessera
