#include "sim/report.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "common/capture_command.h"

namespace tessera::sim {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Report, FixedFormatting) {
  EXPECT_EQ(Fixed(4.855, 2), "4.86");  // 485.5 is not exact in binary; rounds as numpy does
  EXPECT_EQ(Fixed(2.5, 0), "2");
  EXPECT_EQ(Fixed(-0.001, 2), "0.00");
}

// The page says where each random input came from: the arrival order and the node
// tie-break names each from a file (by name) or from the seeded Rng. It used to call any
// --arrival-order run "the paper's seed-42 files", node names included, and a --node-order
// run "sampled", without the file.
TEST(Report, FgdHtmlSaysWhatWasRun) {
  FgdReport r;
  r.nodes_file = "nodes.csv";
  r.pods_file = "pods.csv";
  r.load_percent = 98;
  FgdPolicyResult p;
  p.policy = "fgd";
  p.seeds.push_back({42, {}});
  r.policies.push_back(p);
  r.exact_order = true;
  r.arrival_order_file = "my_order.csv";
  std::string html = FgdReportHtml(r);
  EXPECT_NE(html.find("Arrival order from my_order.csv (98 % of GPU capacity arrives)."),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("Node tie-break names permuted by Tessera's seeded Rng (seed 42;"),
            std::string::npos);
  EXPECT_EQ(html.find("seed-42 files"), std::string::npos);
  EXPECT_EQ(FgdReportToJson(r)["arrivalOrderFile"], "my_order.csv");
  EXPECT_TRUE(FgdReportToJson(r)["nodeOrderFile"].is_null());

  r.exact_order = false;
  r.arrival_order_file.clear();
  r.node_order_file = "my_prefix.csv";
  r.load_percent = 130;
  r.policies[0].seeds.push_back({43, {}});
  html = FgdReportHtml(r);
  EXPECT_NE(html.find("Pods shuffled and cloned to 130 % of GPU capacity by Tessera's seeded Rng "
                      "(seeds 42, 43; not Go's math/rand). Node tie-break names from "
                      "my_prefix.csv."),
            std::string::npos)
      << html;
}

// The jobs CSV gives a job's real GPU amount: a half-GPU job showed as 1.
TEST(Report, JobsCsvGivesFractionalGpus) {
  EXPECT_EQ(GpuCount(500), "0.5");
  EXPECT_EQ(GpuCount(250), "0.25");
  EXPECT_EQ(GpuCount(5), "0.005");
  EXPECT_EQ(GpuCount(8000), "8");
  EXPECT_EQ(GpuCount(1500), "1.5");
  ReplayRun run;
  run.policy = "fifo";
  JobRecord j;
  j.id = "half";
  j.queue = "default";
  j.gpu_milli = 500;
  run.result.jobs.push_back(j);
  EXPECT_NE(ReplayJobsCsv(run).find("\nhalf,default,0.5,"), std::string::npos)
      << ReplayJobsCsv(run);
}

// The time axes of the replay page take their unit from the span: a 15-minute replay was
// drawn in hours (0 to 0.25).
TEST(Report, ReplayTimeAxisUnitFollowsTheSpan) {
  const std::pair<int64_t, std::string> cases[] = {
      {90, "seconds"}, {900, "minutes"}, {7200, "hours"}, {86400, "hours"}, {10 * 86400, "days"}};
  for (const auto& [span, unit] : cases) {
    ReplayReport r;
    ReplayRun run;
    run.policy = "fifo";
    run.result.total_gpu_milli = 8000;
    run.result.series = {{100, 0, 1, 0}, {100 + span, 1000, 0, 1}};
    r.runs.push_back(run);
    const std::string html = ReplayReportHtml(r);
    EXPECT_NE(html.find(unit + " since the first submission"), std::string::npos)
        << span << " s should be in " << unit;
  }
}

// Runs the tessera binary (the same command twice) and compares the outputs byte for byte.
int RunQuiet(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

TEST(Determinism, SameCommandTwiceGivesByteIdenticalOutputs) {
  const char* bin = std::getenv("TESSERA_BINARY");
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  if (bin == nullptr || src == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY/TESSERA_SOURCE_DIR not set (run through ctest)";
  std::string traces = FindTracesDir();
  if (traces.empty()) GTEST_SKIP() << "../shared/traces not found (set TESSERA_TRACES); skipping";
  auto dir =
      std::filesystem::temp_directory_path() / ("tessera_sim_det_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string b = bin, s = src, d = dir.string();
  for (int k = 0; k < 2; ++k) {
    std::string out = d + "/" + std::to_string(k);
    std::filesystem::create_directories(out);
    // An earlier run's output for a policy not replayed now goes; other files stay.
    if (k == 1) std::ofstream(out + "/jobs-sjf.csv") << "stale\n";
    if (k == 1) std::ofstream(out + "/notes.txt") << "mine\n";
    ASSERT_EQ(
        RunQuiet(b + " sim replay --quiet --trace " + traces +
                 "/small/tiresias_60_job.csv --cluster " + s +
                 "/examples/clusters/small-8gpu.yaml --policy fifo,las,tessera --cycle-interval "
                 "10 --restart-cost 120 --out " +
                 out),
        0);
    ASSERT_EQ(RunQuiet(b + " sim fgd --quiet --policy random,fgd --seeds 43 --load 20 --json " +
                       out + "/fgd.json --csv " + out + "/fgd.csv --html " + out + "/fgd.html"),
              0);
  }
  EXPECT_FALSE(std::filesystem::exists(d + "/1/jobs-sjf.csv"));
  EXPECT_TRUE(std::filesystem::exists(d + "/1/notes.txt"));
  int compared = 0;
  for (const auto& e : std::filesystem::directory_iterator(d + "/0")) {
    std::string name = e.path().filename().string();
    std::string a = Slurp(e.path().string()), c = Slurp(d + "/1/" + name);
    EXPECT_FALSE(a.empty()) << name;
    EXPECT_EQ(a, c) << name << " differs between two identical runs";
    ++compared;
  }
  EXPECT_GE(compared, 8);  // replay.json, summary.csv, report.html, 3 jobs CSVs, fgd.json/csv/html
  std::filesystem::remove_all(dir);
}

// Bad input names what is wrong, before any trace is read.
TEST(ReplayCli, BadNumbersAreRejectedByName) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  const std::pair<std::string, std::string> cases[] = {
      {"--restart-cost -5", "--restart-cost: expected seconds >= 0, got -5"},
      {"--cycle-interval 0", "--cycle-interval: expected seconds >= 1, got 0"},
      {"--max-jobs -1", "--max-jobs: expected a job count >= 0, got -1"},
      {"--cpu-per-gpu -100", "--cpu-per-gpu: expected milli-CPU >= 0, got -100"},
      {"--restart-cost 4611686018427387904",
       "--restart-cost: expected seconds <= 31536000, got 4611686018427387904"},
  };
  for (const auto& [args, message] : cases) {
    std::string cmd = std::string(bin) + " sim replay --trace no-such.csv --cluster no-such.yaml " +
                      args + " 2>&1";
    const auto [rc, out] = CaptureCommand(cmd);
    EXPECT_NE(rc, 0) << args;
    EXPECT_NE(out.find(message), std::string::npos) << args << ": " << out;
  }
}

// A policy list is checked whole before any trace is read: an empty list, an unknown name
// or one given twice (its label names the run's output files) is a usage error, exit 2.
TEST(SimCli, PolicyListsAreCheckedBeforeAnyRun) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  const std::string replay = " sim replay --trace no-such.csv --cluster no-such.yaml";
  const std::string fgd = " sim fgd --nodes no-such.csv --pods no-such.csv";
  const std::pair<std::string, std::string> cases[] = {
      {replay + " --policy ''", "--policy: no policy given"},
      {replay + " --policy fifo,las,fifo", "--policy: \"fifo\" is given twice"},
      {replay + " --policy fifo,lass", "unknown baseline \"lass\""},
      {fgd + " --policy ''", "--policy: no policy given"},
      {fgd + " --policy fgd,bestfit,fgd", "--policy: \"fgd\" is given twice"},
      {fgd + " --policy fdg", "--policy: unknown \"fdg\""},
      {fgd + " --load 0", "--load: must be 1..1000"},
      {fgd + " --policy fgd,", "--policy: an empty name in \"fgd,\""},
      {fgd + " --policy /", "--policy: / is not a configuration file"},
      {fgd + " --seeds 1e3", "--seeds: expected N, N-M or a comma list of them, got \"1e3\""},
      {fgd + " --seeds 42-43x", "got \"42-43x\""},
      {fgd + " --seeds 42,40-45", "--seeds: seed 42 is given twice"},
      {fgd + " --seeds 50-42", "--seeds: bad range \"50-42\": it ends before it starts"},
      // The flag, the value and the limit (it said only: bad range "1-20000").
      {fgd + " --seeds 1-20000", "--seeds: bad range \"1-20000\": 20000 seeds, at most 10001"},
      {fgd + " --seeds 42 --arrival-order a.csv --load 150",
       "--load: --arrival-order fixes the workload and its load"},
      {replay + " --format bogus", "--format: bogus not in"},
  };
  for (const auto& [args, message] : cases) {
    const auto [rc, out] = CaptureCommand(std::string(bin) + args + " 2>&1");
    EXPECT_EQ(rc, 2) << args << ": " << out;
    EXPECT_NE(out.find(message), std::string::npos) << args << ": " << out;
  }
}

// What the replay's files do not say is said on stderr: an empty trace, a job that can never
// fit, a queue the cluster file does not define (created with weight 1) warn, even with
// --quiet; a job id twice or a trace of unknown format is an error naming the file.
TEST(ReplayCli, SurprisesInTheInputAreSaid) {
  const char* bin = std::getenv("TESSERA_BINARY");
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  if (bin == nullptr || src == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY/TESSERA_SOURCE_DIR not set (run through ctest)";
  auto dir =
      std::filesystem::temp_directory_path() / ("tessera_sim_warn_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  const std::string header = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n";
  std::ofstream(d + "/empty.csv") << header;
  std::ofstream(d + "/big.csv") << header << "1,64,0,1,x,100,1\n2,1,5,1,x,100,1\n";
  std::ofstream(d + "/dup.csv") << header << "1,1,0,1,x,100,1\n1,1,500,1,x,100,1\n";
  std::ofstream(d + "/odd.csv") << "a,b\n1,2\n";
  const std::string tail = " -1 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1\n";
  std::ofstream(d + "/q.swf") << "1 0 -1 50 1 -1 -1 -1 -1 -1 -1 1 1 -1 7 -1 -1 -1\n"
                              << "2 0 -1 50 1 -1 -1 -1 -1 -1 -1 1 1 -1 -1 -1 -1 -1\n";
  const struct {
    std::string trace;
    int rc;
    std::string message;
  } cases[] = {
      {"empty.csv", 0, "warning: empty.csv: the trace has no jobs, nothing to replay"},
      {"big.csv", 0,
       "warning: fifo: 1 job can never run on small-8gpu.yaml (infeasible) and was dropped:\n"
       "  tiresias-1 (64 GPUs): can never fit on this cluster as it is: "},
      {"dup.csv", 1, "dup.csv:3: job id \"tiresias-1\" is given twice (first at line 2)"},
      {"odd.csv", 1, "odd.csv: cannot tell the trace format from the file name or the first line"},
      // Queue 7 is not in small-8gpu.yaml; -1 (unknown) goes to its queue "default".
      {"q.swf", 0,
       "warning: q.swf: queue q7 not defined in small-8gpu.yaml; created with weight 1 and no "
       "guarantee"},
  };
  for (const auto& c : cases) {
    const auto [rc, out] = CaptureCommand(std::string(bin) + " sim replay --quiet --trace " + d +
                                          "/" + c.trace + " --cluster " + src +
                                          "/examples/clusters/small-8gpu.yaml --policy fifo 2>&1");
    EXPECT_EQ(rc, c.rc) << c.trace << ": " << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.trace << ": " << out;
    if (c.trace == "q.swf") {
      EXPECT_EQ(out.find("queue default"), std::string::npos) << out;
    }
  }
  // A negative seed is refused, not taken as 2^64-1.
  const auto [rc, out] =
      CaptureCommand(std::string(bin) + " sim replay --seed -1 --trace " + d +
                     "/big.csv --cluster " + src + "/examples/clusters/small-8gpu.yaml 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--seed: expected a seed, an integer >= 0, got \"-1\""), std::string::npos)
      << out;
  std::filesystem::remove_all(dir);
}

// Every flag of `tessera sim fgd` and `tessera sim replay` is documented in
// docs/simulator.md (as `--flag`): eight of them were not.
TEST(SimCli, EveryFlagIsDocumented) {
  const char* bin = std::getenv("TESSERA_BINARY");
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  if (bin == nullptr || src == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY/TESSERA_SOURCE_DIR not set (run through ctest)";
  const std::string doc = Slurp(std::string(src) + "/docs/simulator.md");
  ASSERT_FALSE(doc.empty());
  int flags = 0;
  for (const char* command : {"fgd", "replay"}) {
    const auto [rc, help] = CaptureCommand(std::string(bin) + " sim " + command + " --help 2>&1");
    ASSERT_EQ(rc, 0) << help;
    for (size_t p = help.find("--"); p != std::string::npos; p = help.find("--", p + 2)) {
      size_t e = p + 2;
      while (e < help.size() &&
             (std::isalnum(static_cast<unsigned char>(help[e])) || help[e] == '-'))
        ++e;
      const std::string flag = help.substr(p, e - p);
      if (flag == "--help" || flag.size() < 4 ||
          (p > 0 && help[p - 1] != ' ' && help[p - 1] != ','))
        continue;
      ++flags;
      EXPECT_NE(doc.find("`" + flag), std::string::npos)
          << "sim " << command << " " << flag << " is not in docs/simulator.md";
    }
  }
  EXPECT_GE(flags, 27);  // 12 of sim fgd, 15 of sim replay
}

}  // namespace
}  // namespace tessera::sim
