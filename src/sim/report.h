// Reports of simulator runs: canonical JSON, CSV, and a self-contained HTML page with
// inline SVG plots (no scripts, no network). Equal results give byte-identical files:
// fixed key order, fixed number formatting, nothing from the wall clock. Stateless.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/codec.h"
#include "sim/alloc_curve.h"
#include "sim/fgd.h"
#include "sim/replay.h"

namespace tessera::sim {

// ---- FGD protocol ----
struct FgdSeedResult {
  uint64_t seed = 0;
  FgdRun run;
};
struct FgdPolicyResult {
  std::string policy;
  std::vector<FgdSeedResult> seeds;
  AllocCurve median;  // per column, the median over seeds (columns missing in any seed stay empty)
};
struct FgdReport {
  std::string nodes_file, pods_file;
  int64_t load_percent = 130;
  bool exact_order = false;  // --arrival-order given (the workload is the file's, not sampled)
  // The files the arrival order and the node tie-break names came from (--arrival-order,
  // --node-order, file names only); "" when the seeded Rng drew them.
  std::string arrival_order_file, node_order_file;
  int64_t total_gpus = 0;
  std::vector<FgdPolicyResult> policies;
};
AllocCurve MedianCurve(const std::vector<FgdSeedResult>& seeds);
Json FgdReportToJson(const FgdReport& r);
std::string FgdReportCsv(const FgdReport& r);  // policy,seed,arrived_percent,allocated_percent
std::string FgdReportHtml(const FgdReport& r);

// ---- dynamic replay ----
struct ReplayRun {
  std::string policy;  // baseline name or config file name
  ReplayResult result;
  ReplaySummary summary;
};
struct ReplayReport {
  std::string trace_file, cluster_file;
  int64_t jobs = 0;
  int64_t restart_cost_seconds = 0;  // ReplayOptions::restart_cost_seconds of every run
  std::map<std::string, int64_t> skipped_records;  // trace records not replayed, by reason
  std::vector<ReplayRun> runs;
};
Json ReplayReportToJson(const ReplayReport& r);
std::string ReplaySummaryCsv(const ReplayReport& r);  // one row per policy
std::string ReplayJobsCsv(const ReplayRun& run);      // one row per job
// GPU milli as a GPU count with the decimals it needs: 500 -> "0.5", 8000 -> "8".
std::string GpuCount(int64_t milli);
std::string ReplayReportHtml(const ReplayReport& r);

// A number with exactly `decimals` decimals ("4.86"), the one formatting every report uses.
std::string Fixed(double v, int decimals);

}  // namespace tessera::sim
