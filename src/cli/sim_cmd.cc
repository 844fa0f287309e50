// `tessera sim fgd` and `tessera sim replay`: the simulator's commands (docs/simulator.md).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <optional>
#include <set>

#include "cli/command.h"
#include "sim/cluster.h"
#include "sim/fgd.h"
#include "sim/replay.h"
#include "sim/report.h"
#include "sim/traces.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using namespace tessera::sim;

// Empty items are kept ("a,,b", "a,"): the caller names them as errors.
std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t c = s.find(',', start);
    out.push_back(s.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

// Each seed is one experiment of up to a second or so: a bigger range is a typo.
constexpr uint64_t kMaxSeedsInRange = 10001;

StatusOr<std::vector<uint64_t>> ParseSeeds(const std::string& s) {
  const Status bad =
      InvalidArgument("--seeds: expected N, N-M or a comma list of them, got \"" + s + "\"");
  // The whole text a number: "1e3" or "42x" is a typo, not seed 1 or 42.
  auto number = [](const std::string& t) -> std::optional<uint64_t> {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size()) return std::nullopt;
    return v;
  };
  std::vector<uint64_t> out;
  std::set<uint64_t> seen;
  for (const std::string& part : SplitList(s)) {
    size_t dash = part.find('-');
    auto a = number(part.substr(0, dash));
    auto b = dash == std::string::npos ? a : number(part.substr(dash + 1));
    if (!a || !b) return bad;
    if (*b < *a)
      return InvalidArgument("--seeds: bad range \"" + part + "\": it ends before it starts");
    if (*b - *a >= kMaxSeedsInRange)
      return InvalidArgument("--seeds: bad range \"" + part + "\": " + std::to_string(*b - *a + 1) +
                             " seeds, at most " + std::to_string(kMaxSeedsInRange) +
                             " in one range");
    for (uint64_t x = *a;; ++x) {  // (no x <= b: b may be the largest value)
      // A seed twice would count twice in the median.
      if (!seen.insert(x).second)
        return InvalidArgument("--seeds: seed " + std::to_string(x) + " is given twice");
      out.push_back(x);
      if (x == *b) break;
    }
  }
  if (out.empty()) return bad;
  return out;
}

// Where the reports go can be written: checked before a long run, not after it.
Status CheckWritable(const std::string& file, const std::string& dir = "") {
  if (!dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return Unavailable("cannot create " + dir + ": " + ec.message());
  }
  const std::string path = dir.empty() ? file : dir + "/" + file;
  if (path.empty() || path == "-") return Status::Ok();
  const bool existed = fs::exists(path);
  std::ofstream probe(path, std::ios::app);
  if (!probe) return Unavailable("cannot write " + path);
  probe.close();
  if (!existed) fs::remove(path);
  return Status::Ok();
}

Status WriteOut(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::cout << text;
    return Status::Ok();
  }
  std::ofstream out(path, std::ios::binary);
  if (!out) return Unavailable("cannot write " + path);
  out << text;
  return out ? Status::Ok() : Unavailable("cannot write " + path);
}

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int Fail(const Status& s) {
  std::fprintf(stderr, "tessera sim: %s\n", s.ToString().c_str());
  return 1;
}

// A flag the command refuses: exit 2, as every usage error of the CLI (docs/cli.md).
int Usage(const Status& s) {
  Fail(s);
  return 2;
}

struct Policy {
  std::string name;   // a known policy's name, or a configuration file's path
  std::string label;  // names the run and its output files
  bool file = false;
};

// The policies to run, checked before any trace is read: each a known name (one of
// `known`, whatever files the folder holds) or a configuration file that loads, none twice.
// `unknown` words the error for a name that is neither.
StatusOr<std::vector<Policy>> PolicyList(const std::string& list,
                                         const std::vector<std::string>& configs,
                                         const std::vector<std::string>& known,
                                         const std::function<Status(const std::string&)>& unknown) {
  std::vector<std::string> names = SplitList(list);
  names.insert(names.end(), configs.begin(), configs.end());
  if (names.empty()) return InvalidArgument("--policy: no policy given");
  std::vector<Policy> out;
  std::set<std::string> labels;
  for (const std::string& name : names) {
    Policy p{name, name, false};
    if (name.empty()) return InvalidArgument("--policy: an empty name in \"" + list + "\"");
    if (std::find(known.begin(), known.end(), name) != known.end()) {
    } else if (!fs::exists(name)) {
      return unknown(name);
    } else if (!fs::is_regular_file(name)) {
      return InvalidArgument("--policy: " + name + " is not a configuration file");
    } else {
      auto c = LoadEngineConfig(name);
      if (!c.ok()) return c.status();
      p.label = fs::path(name).stem().string();
      p.file = true;
    }
    if (!labels.insert(p.label).second)
      return InvalidArgument("--policy: \"" + p.label + "\" is given twice (a file is labelled " +
                             "by its name without folder and extension)");
    out.push_back(std::move(p));
  }
  return out;
}

struct FgdArgs {
  std::string nodes, pods, arrival_order, node_order, json, csv, html;
  std::string policies = "random,dotprod,gpuclustering,gpupacking,bestfit,fgd,tessera";
  std::string seeds = "42";
  std::vector<std::string> configs;
  int64_t load = 130;
  bool load_given = false;
  bool quiet = false;
};

int RunFgdCommand(const FgdArgs& a) {
  auto seeds = ParseSeeds(a.seeds);
  if (!seeds.ok()) return Usage(seeds.status());
  std::string traces = FindTracesDir();
  std::string nodes_path = a.nodes, pods_path = a.pods;
  if (nodes_path.empty())
    nodes_path = traces.empty() ? "" : traces + "/openb/openb_node_list_gpu_node.csv";
  if (pods_path.empty())
    pods_path = traces.empty() ? "" : traces + "/openb/openb_pod_list_default.csv";
  if (nodes_path.empty() || pods_path.empty())
    return Fail(InvalidArgument(
        "--nodes/--pods: not given and ../shared/traces not found (set TESSERA_TRACES)"));
  if (!a.arrival_order.empty() && seeds->size() > 1)
    return Usage(InvalidArgument("--arrival-order fixes one workload; give one seed"));
  if (!a.arrival_order.empty() && a.load_given)
    return Usage(InvalidArgument("--load: --arrival-order fixes the workload and its load"));
  if (a.load < 1 || a.load > 1000)
    return Usage(InvalidArgument("--load: must be 1..1000 (% of GPU capacity), got " +
                                 std::to_string(a.load)));
  // The protocol's figure is the unallocated share at 100 % arrived load; a smaller load
  // (a quick look at the curve's start) has none.
  if (a.load < 100 && !a.quiet)
    std::fprintf(stderr,
                 "tessera sim: note: --load %lld: the curves end at %lld %% arrived load, so "
                 "there is no value at 100 %%\n",
                 static_cast<long long>(a.load), static_cast<long long>(a.load));
  auto names = PolicyList(a.policies, a.configs, FgdPolicyNames(), [](const std::string& name) {
    std::string list;
    for (const auto& n : FgdPolicyNames()) list += (list.empty() ? "" : ", ") + n;
    return InvalidArgument("--policy: unknown \"" + name + "\" (" + list +
                           ", or a configuration file)");
  });
  if (!names.ok()) return Usage(names.status());
  for (const std::string& path : {a.json, a.csv, a.html})
    if (Status s = CheckWritable(path); !s.ok()) return Fail(s);
  auto nodes = LoadOpenbNodes(nodes_path);
  if (!nodes.ok()) return Fail(nodes.status());
  auto pods = LoadOpenbPods(pods_path);
  if (!pods.ok()) return Fail(pods.status());
  FgdWorkloadOptions wo;
  wo.load_percent = a.load;
  if (!a.arrival_order.empty()) {
    auto o = LoadArrivalOrder(a.arrival_order);
    if (!o.ok()) return Fail(o.status());
    wo.arrival_order = *o;
  }
  if (!a.node_order.empty()) {
    auto o = LoadNodePrefix(a.node_order);
    if (!o.ok()) return Fail(o.status());
    wo.node_order = *o;
  }

  FgdReport report;
  report.nodes_file = fs::path(nodes_path).filename().string();
  report.pods_file = fs::path(pods_path).filename().string();
  report.load_percent = a.load;
  report.exact_order = wo.arrival_order.has_value();
  if (!a.arrival_order.empty())
    report.arrival_order_file = fs::path(a.arrival_order).filename().string();
  if (!a.node_order.empty()) report.node_order_file = fs::path(a.node_order).filename().string();
  for (const Policy& policy : *names) {
    FgdPolicyResult pr;
    pr.policy = policy.label;
    for (uint64_t seed : *seeds) {
      wo.seed = seed;
      auto w = BuildFgdWorkload(*nodes, *pods, wo);
      if (!w.ok()) return Fail(w.status());
      report.total_gpus = w->total_gpus;
      // The curves run to the load that arrived: --load, or the arrival order's own.
      report.load_percent = wo.arrival_order ? w->arrived_percent : a.load;
      StatusOr<EngineConfig> config = InvalidArgument("");
      if (policy.file) {
        config = LoadEngineConfig(policy.name);
        if (config.ok()) AddTypicalRequests(*w, *config);
      } else {
        config = FgdPolicyConfig(policy.name, *w);
      }
      if (!config.ok()) return Fail(config.status());
      auto t0 = std::chrono::steady_clock::now();
      auto placer = EnginePlacer::Create(*w, *config, seed);
      if (!placer.ok()) return Fail(placer.status());
      auto run = RunFgd(*w, **placer, static_cast<int>(report.load_percent));
      if (!run.ok()) return Fail(run.status());
      double secs = Since(t0);
      if (!a.quiet) {
        auto u = run->curve.UnallocatedAt(100);
        std::fprintf(stderr,
                     "%-14s seed %-4llu unallocated GPU %% at 100%% load: %6s  (%lld pods, %lld "
                     "failed, %.2f s)\n",
                     pr.policy.c_str(), static_cast<unsigned long long>(seed),
                     u ? Fixed(*u, 2).c_str() : "-", static_cast<long long>(run->arrived),
                     static_cast<long long>(run->failed), secs);
      }
      pr.seeds.push_back({seed, std::move(*run)});
    }
    pr.median = MedianCurve(pr.seeds);
    report.policies.push_back(std::move(pr));
  }
  // Summary table on stdout unless JSON goes there.
  if (a.json != "-") {
    std::printf("%-14s %s\n", "policy",
                "unallocated GPU % at 100% arrived load (median over seeds)");
    Json j = FgdReportToJson(report);
    for (const auto& p : j["policies"])
      std::printf("%-14s %s\n", p["policy"].get<std::string>().c_str(),
                  p["medianUnallocatedAt100"].is_null()
                      ? "-"
                      : Fixed(p["medianUnallocatedAt100"].get<double>(), 2).c_str());
  }
  if (!a.json.empty()) {
    Status s = WriteOut(a.json, FgdReportToJson(report).dump(2) + "\n");
    if (!s.ok()) return Fail(s);
  }
  if (!a.csv.empty()) {
    Status s = WriteOut(a.csv, FgdReportCsv(report));
    if (!s.ok()) return Fail(s);
  }
  if (!a.html.empty()) {
    Status s = WriteOut(a.html, FgdReportHtml(report));
    if (!s.ok()) return Fail(s);
  }
  return 0;
}

struct ReplayArgs {
  std::string trace, format = "auto", cluster, out, json;
  std::string policies = "fifo,sjf,las,tessera";
  ReplayOptions options;
  bool quiet = false;
};

// The numeric options, checked before any trace is read: a typo names itself instead of
// quietly skewing an hour's replay.
Status CheckReplayOptions(const ReplayOptions& o) {
  // Upper bounds keep the arithmetic (seconds x GPU milli) far from overflow.
  constexpr int64_t kYear = 365 * 86400, kMax = std::numeric_limits<int64_t>::max();
  const struct {
    const char* flag;
    int64_t value, min, max;
    const char* unit;
  } checks[] = {
      {"--cycle-interval", o.cycle_interval, 1, kYear, "seconds"},
      {"--cpu-per-gpu", o.cpu_milli_per_gpu, 0, 1000000000, "milli-CPU"},
      {"--memory-mib-per-gpu", o.memory_mib_per_gpu, 0, 1000000000, "MiB"},
      {"--max-jobs", o.max_jobs, 0, kMax, "a job count"},
      {"--restart-cost", o.restart_cost_seconds, 0, kYear, "seconds"},
  };
  for (const auto& c : checks) {
    if (c.value < c.min)
      return InvalidArgument(std::string(c.flag) + ": expected " + c.unit +
                             " >= " + std::to_string(c.min) + ", got " + std::to_string(c.value));
    if (c.value > c.max)
      return InvalidArgument(std::string(c.flag) + ": expected " + c.unit +
                             " <= " + std::to_string(c.max) + ", got " + std::to_string(c.value));
  }
  return Status::Ok();
}

int RunReplayCommand(const ReplayArgs& a) {
  if (Status s = CheckReplayOptions(a.options); !s.ok()) return Usage(s);
  auto names = PolicyList(a.policies, {}, ReplayBaselineNames(), [](const std::string& name) {
    return ReplayBaselineConfig(name).status();
  });
  if (!names.ok()) return Usage(names.status());
  for (const Status& s :
       {CheckWritable(a.json), a.out.empty() ? Status::Ok() : CheckWritable("replay.json", a.out)})
    if (!s.ok()) return Fail(s);
  auto trace = LoadTrace(a.trace, a.format);
  if (!trace.ok()) return Fail(trace.status());
  std::vector<TraceJob>& jobs = trace->jobs;
  const std::string trace_name = fs::path(a.trace).filename().string();
  const std::string cluster_name = fs::path(a.cluster).filename().string();
  if (trace->skipped.total() > 0 && !a.quiet)
    std::fprintf(stderr, "tessera sim: note: %s: %s\n", trace_name.c_str(),
                 trace->skipped.ToString().c_str());
  // Warnings go to stderr even with --quiet (it silences the per-run lines only): each says
  // the replay is not what the files seem to ask for.
  if (jobs.empty())
    std::fprintf(stderr, "tessera sim: warning: %s: the trace has no jobs, nothing to replay\n",
                 trace_name.c_str());
  auto cluster = LoadCluster(a.cluster);
  if (!cluster.ok()) return Fail(cluster.status());
  if (auto implicit = ImplicitQueues(*cluster, jobs, a.options); !implicit.empty()) {
    std::string names;
    for (const std::string& q : implicit) names += (names.empty() ? "" : ", ") + q;
    std::fprintf(stderr,
                 "tessera sim: warning: %s: %s %s not defined in %s; created with weight 1 and "
                 "no guarantee (define %s in the cluster file%s)\n",
                 trace_name.c_str(), implicit.size() == 1 ? "queue" : "queues", names.c_str(),
                 cluster_name.c_str(), implicit.size() == 1 ? "it" : "them",
                 a.options.single_queue ? "" : ", or use --single-queue");
  }
  int32_t max_gpus_per_node = 0;
  for (const Node& n : cluster->nodes)
    max_gpus_per_node = std::max(max_gpus_per_node, static_cast<int32_t>(n.devices.size()));
  FitTasksToNodes(jobs, max_gpus_per_node);
  ReplayReport report;
  report.trace_file = trace_name;
  report.cluster_file = cluster_name;
  report.restart_cost_seconds = a.options.restart_cost_seconds;
  report.skipped_records = trace->skipped.by_reason;
  report.jobs = a.options.max_jobs > 0
                    ? std::min<int64_t>(a.options.max_jobs, static_cast<int64_t>(jobs.size()))
                    : static_cast<int64_t>(jobs.size());
  for (const Policy& policy : *names) {
    ReplayOptions o = a.options;
    StatusOr<EngineConfig> config = InvalidArgument("");
    const std::string& label = policy.label;
    if (policy.file) {
      config = LoadEngineConfig(policy.name);
    } else {
      config = ReplayBaselineConfig(policy.name);
      if (BaselineUsesOracle(policy.name)) o.oracle_runtimes = true;
    }
    if (!config.ok()) return Fail(config.status());
    auto t0 = std::chrono::steady_clock::now();
    auto result = RunReplay(*cluster, jobs, *config, o);
    if (!result.ok()) return Fail(result.status().WithContext(label));
    double secs = Since(t0);
    ReplayRun run{label, std::move(*result), {}};
    run.summary = Summarise(run.result);
    if (run.summary.infeasible > 0) {
      // Name a few, each with the engine's reason (the cluster's size, a GPU model it lacks,
      // a queue limit); the jobs CSV has every one's.
      std::string some;
      int64_t named = 0;
      for (const JobRecord& j : run.result.jobs)
        if ((j.outcome == "infeasible" || j.outcome == "error") && named++ < 5)
          some += "\n  " + j.id + " (" + GpuCount(j.gpu_milli) +
                  " GPUs): " + (j.why.empty() ? j.outcome : j.why);
      std::fprintf(stderr,
                   "tessera sim: warning: %s: %lld %s can never run on %s (infeasible) and %s "
                   "dropped:%s%s\n",
                   label.c_str(), static_cast<long long>(run.summary.infeasible),
                   run.summary.infeasible == 1 ? "job" : "jobs", cluster_name.c_str(),
                   run.summary.infeasible == 1 ? "was" : "were", some.c_str(),
                   named > 5 ? "\n  ... (every one in the jobs CSV's why column)" : "");
    }
    if (!a.quiet)
      std::fprintf(stderr,
                   "%-10s avg JCT %10.0f s  p99 wait %9lld s  max pending %9lld s  %lld cycles  "
                   "%.2f s\n",
                   label.c_str(), run.summary.avg_jct, static_cast<long long>(run.summary.p99_wait),
                   static_cast<long long>(run.summary.max_pending),
                   static_cast<long long>(run.result.cycles), secs);
    report.runs.push_back(std::move(run));
  }
  if (a.json != "-") std::cout << ReplaySummaryCsv(report);
  if (!a.json.empty()) {
    Status s = WriteOut(a.json, ReplayReportToJson(report).dump(2) + "\n");
    if (!s.ok()) return Fail(s);
  }
  if (!a.out.empty()) {
    Status s = WriteOut(a.out + "/replay.json", ReplayReportToJson(report).dump(2) + "\n");
    if (s.ok()) s = WriteOut(a.out + "/summary.csv", ReplaySummaryCsv(report));
    if (s.ok()) s = WriteOut(a.out + "/report.html", ReplayReportHtml(report));
    std::set<std::string> written;
    for (const ReplayRun& run : report.runs) {
      written.insert("jobs-" + run.policy + ".csv");
      if (s.ok()) s = WriteOut(a.out + "/jobs-" + run.policy + ".csv", ReplayJobsCsv(run));
    }
    if (!s.ok()) return Fail(s);
    // An earlier run's per-job files for policies this run did not replay would sit beside
    // a report that does not describe them.
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(a.out, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file() && name.starts_with("jobs-") && name.ends_with(".csv") &&
          written.count(name) == 0)
        std::filesystem::remove(e.path(), ec);
    }
  }
  return 0;
}

}  // namespace

void AddSimCommands(CLI::App& app) {
  CLI::App* sim =
      app.add_subcommand("sim", "simulate: the real engine on public traces, on a virtual clock");
  sim->require_subcommand(1);

  auto fa = std::make_shared<FgdArgs>();
  CLI::App* fgd = sim->add_subcommand(
      "fgd", "the FGD paper's packing protocol on openb traces (unallocated GPU %)");
  fgd->add_option("--nodes", fa->nodes,
                  "openb node CSV (default: traces/openb/openb_node_list_gpu_node.csv)");
  fgd->add_option("--pods", fa->pods,
                  "openb pod CSV (default: traces/openb/openb_pod_list_default.csv)");
  fgd->add_option("--policy", fa->policies,
                  "comma list: random, dotprod, gpuclustering, gpupacking, bestfit, fgd, tessera, "
                  "or a config file")
      ->capture_default_str();
  fgd->add_option("--config", fa->configs, "an engine configuration file to compare (repeatable)");
  fgd->add_option("--seeds", fa->seeds,
                  "seeds: N, N-M or a comma list; the report gives the median")
      ->capture_default_str();
  fgd->add_option("--load", fa->load, "inflate the workload to this % of GPU capacity")
      ->capture_default_str();
  fgd->add_option("--arrival-order", fa->arrival_order,
                  "the paper's arrival order file (fgd-seed42/)");
  fgd->add_option("--node-order", fa->node_order, "the paper's node tie-break names (fgd-seed42/)");
  fgd->add_option("--json", fa->json, "write the JSON report here ('-' = stdout)");
  fgd->add_option("--csv", fa->csv, "write the curves as CSV here");
  fgd->add_option("--html", fa->html, "write an HTML report with plots here");
  fgd->add_flag("--quiet", fa->quiet, "no per-run lines on stderr (warnings still)");
  fgd->callback([fa, fgd] {
    fa->load_given = fgd->count("--load") > 0;
    SetExitCode(RunFgdCommand(*fa));
  });

  auto ra = std::make_shared<ReplayArgs>();
  CLI::App* rp =
      sim->add_subcommand("replay", "replay arrivals and completions through the engine");
  rp->add_option("--trace", ra->trace, "philly.csv, openb pod CSV, Tiresias CSV, or SWF (.gz)")
      ->required();
  rp->add_option("--format", ra->format,
                 "auto (by file name, else by the first line), philly, openb, tiresias, swf")
      ->check(CLI::IsMember({"auto", "philly", "openb", "tiresias", "swf"}))
      ->capture_default_str();
  rp->add_option("--cluster", ra->cluster, "cluster YAML (examples/clusters/)")->required();
  rp->add_option("--policy", ra->policies,
                 "comma list of baselines (fifo, sjf, las, tessera) or config files")
      ->capture_default_str();
  rp->add_option("--cycle-interval", ra->options.cycle_interval,
                 "seconds between cycles while work waits")
      ->capture_default_str();
  rp->add_option("--seed", ra->options.seed, "the engine's random seed")
      ->check(kSeed)
      ->capture_default_str();
  rp->add_flag("--oracle-runtimes", ra->options.oracle_runtimes,
               "give every job its true runtime as estimate");
  rp->add_flag("--single-queue", ra->options.single_queue, "put every job in queue 'default'");
  rp->add_option("--cpu-per-gpu", ra->options.cpu_milli_per_gpu,
                 "milli-CPU per GPU when the trace has none")
      ->capture_default_str();
  rp->add_option("--memory-mib-per-gpu", ra->options.memory_mib_per_gpu,
                 "MiB per GPU when the trace has none")
      ->capture_default_str();
  rp->add_option("--max-jobs", ra->options.max_jobs, "replay only the first N jobs (0 = all)")
      ->capture_default_str();
  rp->add_option("--restart-cost", ra->options.restart_cost_seconds,
                 "seconds a preempted job spends restarting, without progress, each time it "
                 "runs again")
      ->capture_default_str();
  rp->add_option("--out", ra->out,
                 "write replay.json, summary.csv, jobs-<policy>.csv and report.html here (other "
                 "jobs-*.csv there, from earlier runs, are removed)");
  rp->add_option("--json", ra->json, "write the JSON report here ('-' = stdout)");
  rp->add_flag("--quiet", ra->quiet, "no per-run lines on stderr (warnings still)");
  rp->callback([ra] { SetExitCode(RunReplayCommand(*ra)); });
}

}  // namespace tessera::cli
