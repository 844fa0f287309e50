// What Slurm 22.05 tells us, as plain values, and the parsers that read it.
//
// Sources: `sinfo --json` and `squeue --json` (openapi/v0.0.38: {"meta","errors",...}),
// `scontrol -o show job ID` and `scontrol -a -o show partition` (one line of Key=Value per
// job or partition; 22.05 has no `scontrol --json`), and
// GRES strings ("gpu:a100:8", "gpu:a100:8(IDX:0-7)", "gpu:4(S:0-1)"). Parsing is lenient
// about fields we do not use and strict about the ones we do: a missing or mistyped field
// we need is an error naming it ("sinfo.nodes[2].cpus: expected an integer"). Stateless;
// thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::slurm {

// One GRES entry: name "gpu", type "a100" ("" when untyped), count.
struct GresEntry {
  std::string name;
  std::string type;
  int64_t count = 0;
  friend bool operator==(const GresEntry&, const GresEntry&) = default;
};

// "gpu:a100:8,gpu:v100:2(S:0)" -> entries; "(null)", "N/A" and "" -> none. Commas inside
// parentheses ("(IDX:0-1,4)") do not split entries.
StatusOr<std::vector<GresEntry>> ParseGres(const std::string& text);

struct SlurmNode {
  std::string name;
  std::string state;                     // "idle", "mixed", "allocated", "down", ...
  std::vector<std::string> state_flags;  // "DRAIN", "NOT_RESPONDING", ...
  std::string reason;
  std::vector<std::string> partitions;
  std::vector<std::string> features;  // active_features, split on ','
  int64_t cpus = 0;
  int64_t real_memory_mib = 0;
  int64_t alloc_cpus = 0;
  int64_t alloc_memory_mib = 0;
  std::vector<GresEntry> gres;       // configured
  std::vector<GresEntry> gres_used;  // in use by any job
};

// Every state Slurm reports for a job, collapsed to what the lifecycle needs.
struct SlurmJob {
  int64_t job_id = 0;
  int64_t het_job_id = 0;  // leader's id for a heterogeneous job component, else 0
  int64_t het_job_offset = 0;
  int64_t array_job_id = 0;
  std::string name;
  std::string comment;
  std::string state;         // "PENDING", "RUNNING", "COMPLETED", ...
  std::string state_reason;  // "None", "Resources", "BadConstraints", ...
  int64_t exit_code = 0;     // the raw wait status (768 = exit 3; 15 = SIGTERM)
  std::string nodes;         // hostlist expression, "" while pending
  std::string partition;
  int64_t submit_time = 0;  // epoch seconds
  int64_t start_time = 0;
  int64_t end_time = 0;
  std::optional<int64_t> time_limit_minutes;  // nullopt = UNLIMITED
  int64_t tasks = 0;
  int64_t node_count = 0;
};

// One partition, as `scontrol -a -o show partition` shows it (what choosing one needs).
struct SlurmPartition {
  std::string name;
  std::string state;  // "UP", "DOWN", "DRAIN", "INACTIVE"
  bool is_default = false;
  bool hidden = false;
  std::optional<int64_t> max_time_seconds;  // nullopt = UNLIMITED
  std::optional<int64_t> max_nodes;         // nullopt = UNLIMITED
  int64_t priority_tier = 1;
  // Who may use it (slurm.conf AllowAccounts, AllowGroups, AllowQos): nullopt = ALL. Deny*
  // apply only where the matching Allow* is ALL (Slurm takes one or the other).
  std::optional<std::vector<std::string>> allow_accounts = {}, allow_groups = {}, allow_qos = {};
  std::vector<std::string> deny_accounts = {}, deny_qos = {};
};

StatusOr<std::vector<SlurmNode>> ParseSinfoJson(const std::string& text);
StatusOr<std::vector<SlurmJob>> ParseSqueueJson(const std::string& text);

// `scontrol -o show job ID`: "JobId=8 JobName=wrap ... ExitCode=0:0 ..." to a map. A value
// runs to the next " Key=" so values with spaces (Command=, Comment=) survive.
std::map<std::string, std::string> ParseScontrolLine(const std::string& line);
// The fields of one `scontrol -o show job` line that SlurmJob carries (state, reason,
// exit code from "N:S", name, comment, nodes, partition).
StatusOr<SlurmJob> SlurmJobFromScontrol(const std::map<std::string, std::string>& kv);

// `scontrol -a -o show partition`: one partition per line ("No partitions in the system"
// reads as none). A line without PartitionName, State or a readable MaxTime is an error
// naming the partition and field. Access lists: "ALL", "" or a missing key is no restriction.
StatusOr<std::vector<SlurmPartition>> ParseScontrolPartitions(const std::string& text);

// A Slurm time ("UNLIMITED", "INFINITE", "MM", "MM:SS", "HH:MM:SS", "D-HH", "D-HH:MM",
// "D-HH:MM:SS") in seconds; nullopt for unlimited.
StatusOr<std::optional<int64_t>> ParseSlurmTime(const std::string& text);

}  // namespace tessera::slurm
