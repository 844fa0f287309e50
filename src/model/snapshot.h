// Snapshot: everything the engine knows for one cycle. Plan: everything it decides.
//
// `Plan Engine::Cycle(const Snapshot&, now, Rng&)` is a pure function of these. Vectors
// are kept in a canonical order (nodes by name, jobs by id) by Canonicalize(), so that
// equal clusters give equal plans byte for byte. Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/job.h"
#include "model/node.h"
#include "model/queue.h"

namespace tessera {

struct Snapshot {
  std::vector<Node> nodes;
  std::vector<Queue> queues;
  std::vector<PriorityClass> priority_classes;
  std::vector<Job> jobs;  // pending and running; finished jobs are not here

  // Sorts nodes, queues, classes and jobs by name/id. Idempotent.
  void Canonicalize();
};

// The closed vocabulary of what happened to a job this cycle (cf. the Kubernetes
// scheduler framework): placed, or why not, and whether waiting can help.
enum class Outcome {
  kPlaced,         // bindings for (at least) its gang minimum are in the plan
  kUnschedulable,  // does not fit now; may fit when capacity frees up
  kInfeasible,     // can never fit on this cluster as it is (e.g. 16 GPUs on 8-GPU nodes without gang spread)
  kWaiting,        // held by policy: queue limit, admission, reservation, victims still exiting
  kError,          // the job itself is invalid (unknown queue, bad request)
};

const char* OutcomeName(Outcome o);

struct Binding {
  std::string job;
  int32_t task = 0;
  TaskAllocation allocation;
};

struct Eviction {
  std::string job;
  int32_t task = 0;
  std::string node;
  std::string reason;      // "Preempted" | "Reclaimed"
  std::string preemptor;   // job that needs the capacity
  std::string message;     // human-readable, e.g. "priority 1000 > 100 in queue ml"
  int64_t grace_period_seconds = 30;
};

// Capacity held for a blocked head job so that backfill cannot delay it.
struct Reservation {
  std::string job;
  std::vector<std::string> nodes;
  int64_t earliest_start = 0;  // engine clock estimate from running jobs' runtimes
};

// Why a job was not started, in words and numbers a user can act on.
struct PendingReason {
  std::string code;     // "Insufficient", "GangUnsatisfied", "QueueOverLimit", "Reserved", ...
  std::string message;  // "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
  std::string resource; // the binding resource, e.g. "nvidia.com/gpu", "" if none
  std::map<std::string, int32_t> rejected_nodes;  // filter reason -> node count
};

struct JobDecision {
  std::string job;
  Outcome outcome = Outcome::kUnschedulable;
  // Null when placed. Shared and immutable: most jobs are placed, and an inline reason made
  // every decision 184 bytes (18 MiB of plan at 100k jobs, written by every cycle).
  std::shared_ptr<const PendingReason> reason;
};

struct Plan {
  int64_t now = 0;
  std::vector<Binding> bindings;         // in the order the engine decided them
  std::vector<Eviction> evictions;
  std::vector<Reservation> reservations;
  std::vector<JobDecision> decisions;    // one per job that was pending at cycle start, by id
};

}  // namespace tessera
