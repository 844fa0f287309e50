// Trace loaders: the public cluster traces in ../shared/traces, read into plain values.
//
// Every loader is strict: a malformed row is an error naming the file, the line and the
// column ("philly.csv:17: num_gpus: expected an integer, got \"x\""). Numbers become
// integers at this edge (seconds, milli-CPU, MiB, milli-GPU). Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::sim {

// openb_node_list_*.csv: sn,cpu_milli,memory_mib,gpu,model
struct OpenbNode {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t gpus = 0;
  std::string model;  // "" for CPU nodes
};

// openb_pod_list_*.csv: name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,
// creation_time,deletion_time,scheduled_time
struct OpenbPod {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int32_t num_gpu = 0;
  // Thousandths of one GPU: 1..1000 when num_gpu is 1, exactly 1000 when more (the real
  // files never share a multi-GPU request), 0 for a CPU-only pod; anything else is refused.
  int32_t gpu_milli = 0;
  std::vector<std::string> gpu_spec;  // allowed models; empty = any
  std::string qos;
  std::string phase;
  std::optional<int64_t> creation_time;  // seconds from trace start; nullopt when empty
  std::optional<int64_t> deletion_time;
  std::optional<int64_t> scheduled_time;
  int64_t line = 0;  // the row's line in the file
};

StatusOr<std::vector<OpenbNode>> LoadOpenbNodes(const std::string& path);
StatusOr<std::vector<OpenbPod>> LoadOpenbPods(const std::string& path);

// fgd-seed42/*_arrival_order.csv (idx,name,cpu_milli,num_gpu,gpu_milli): the pod names in
// arrival order; clones are "<original>-tuned-<i>". The request columns, when the file has
// them, are a copy of the pod list's (the protocol takes requests from the pod list only):
// BuildFgdWorkload refuses a row that disagrees, which means the order was derived from
// another pod list.
struct ArrivalOrderEntry {
  std::string name;
  std::string where;  // "file.csv:12", for errors
  std::optional<int64_t> cpu_milli, num_gpu, gpu_milli;
};
StatusOr<std::vector<ArrivalOrderEntry>> LoadArrivalOrder(const std::string& path);
// fgd-seed42/*_node_prefix.csv (sn,sim_name): node name -> permuted tie-break name.
StatusOr<std::map<std::string, std::string>> LoadNodePrefix(const std::string& path);

// A job of a dynamic trace, in one shape for every format: `tasks` tasks of `gpus_per_task`
// whole GPUs (or a fraction of one GPU when gpu_milli < 1000), arriving at `submit`,
// running for `duration` seconds once started.
struct TraceJob {
  std::string id;
  std::string queue = "default";
  int64_t submit = 0;    // seconds from the trace's first submission
  int64_t duration = 0;  // seconds of service
  int32_t tasks = 1;
  int32_t gpus_per_task = 0;
  int32_t gpu_milli = 1000;  // per GPU; < 1000 only for one-GPU fractional tasks
  int64_t cpu_milli = 0;     // per task; 0 = not given by the trace
  int64_t memory_mib = 0;    // per task; 0 = not given by the trace
  std::vector<std::string> models;
  int64_t line = 0;  // the record's line in the trace file (0: not from a file)
};

// philly/philly.csv: timestamp,duration,num_gpus,gpu_time,cluster. Sorted by submit time
// (then row number); the virtual cluster becomes the queue "vc-<cluster>" (an empty one is
// refused); ids "philly-<row>". Impossible dates (2017-02-31) are refused.
StatusOr<std::vector<TraceJob>> LoadPhilly(const std::string& path);
// SymbioticLab Tiresias CSV: job_id,num_gpu,submit_time,iterations,model_name,duration,interval.
StatusOr<std::vector<TraceJob>> LoadTiresias(const std::string& path);

// Records a loader leaves out on purpose (not malformed ones, which are errors), counted by
// reason so that a caller can say what was dropped.
struct TraceSkips {
  std::map<std::string, int64_t> by_reason;  // e.g. "runtime <= 0" -> 173
  int64_t total() const;
  // "173 records skipped (runtime <= 0: 173)"; "" when none.
  std::string ToString() const;
};

// Standard Workload Format (18 whitespace-separated fields, ';' comments), plain or .gz.
// Processors become GPUs, exactly: `allocated processors` (else `requested`) GPUs as one task
// up to max_gpus_per_task, above that a gang of the fewest equal tasks, as Philly (12 -> 2 x 6).
// Submit and run times round up to whole seconds. Records with non-positive runtime or
// processors are skipped (counted in `skipped`).
struct SwfOptions {
  int32_t max_gpus_per_task = 8;
};
StatusOr<std::vector<TraceJob>> LoadSwf(const std::string& path, const SwfOptions& options = {},
                                        TraceSkips* skipped = nullptr);
// openb pods with creation/deletion times as jobs (pods without both times are skipped).
std::vector<TraceJob> OpenbPodsAsJobs(const std::vector<OpenbPod>& pods,
                                      TraceSkips* skipped = nullptr);

// The traces name GPU counts, not machines, and are split for 8-GPU machines: on a cluster
// whose largest node has fewer GPUs, a task asking more is re-split the same way (an 8-GPU
// job on 4-GPU nodes: a gang of 2 x 4) instead of never fitting.
void FitTasksToNodes(std::vector<TraceJob>& jobs, int32_t max_gpus_per_node);

// A dynamic trace as jobs, with what was skipped on the way.
struct LoadedTrace {
  std::vector<TraceJob> jobs;
  TraceSkips skipped;
};
// Loads by file name (philly*.csv, *.swf / *.swf.gz, openb_pod_list*.csv), else by the first
// line (a known CSV header, or 18 SWF fields); a file neither tells is an error naming it and
// the formats understood. A trace whose every record is skipped is an error saying why (a
// replay of nothing would look like a success); so is a job id given twice (file, line, id).
// A trace with no record at all loads as no jobs: the caller warns.
StatusOr<LoadedTrace> LoadTrace(const std::string& path, const std::string& format = "auto");

// Where the shared traces live: $TESSERA_TRACES, else $TESSERA_SOURCE_DIR/../shared/traces,
// else "" when neither exists.
std::string FindTracesDir();

}  // namespace tessera::sim
