// Synthetic clusters and workloads for benchmarks and property tests: deterministic for a
// seed. Not used by the scheduling path. Stateless functions; thread-safe.
#pragma once

#include <cstdint>

#include "common/rng.h"
#include "model/snapshot.h"

namespace tessera {

struct SyntheticSpec {
  int32_t nodes = 100;
  int32_t gpus_per_node = 8;  // two NVLink islands of gpus_per_node/2
  int32_t jobs = 1000;        // single-task jobs unless gang_fraction_percent > 0
  uint64_t seed = 1;
  // Job mix in percent of jobs (the rest are CPU-only): fractions of one GPU (250m or 500m),
  // 1, 2, 4 and 8 whole GPUs. The default demand is ~93% of an 8-GPU cluster's capacity
  // when jobs = 10 * nodes.
  int32_t fraction_percent = 40, one_percent = 50, two_percent = 7, four_percent = 2,
          eight_percent = 1;
  int32_t gang_percent = 0;     // jobs that are gangs of 2..4 one-GPU tasks (property tests)
  int32_t running_percent = 0;  // not used yet: every job starts pending
  // Queues "q00".."qNN" with equal guarantees (the GPUs / queues) and borrowing, jobs spread
  // over them at random; 1 = every job in "default" (no queues defined).
  int32_t queues = 1;
};

// Nodes "n000000".. with 8 cores and 64 GiB per GPU (128 cores, 1 TiB for 8 GPUs), H100-80GB
// devices; jobs "j0000000".. in queue "default" (or spec.queues queues), submit time =
// index, priority 0..3.
Snapshot SyntheticSnapshot(const SyntheticSpec& spec);

}  // namespace tessera
