#include "sim/traces.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

std::string WriteTemp(const std::string& name, const std::string& text) {
  auto dir =
      std::filesystem::temp_directory_path() / ("tessera_sim_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

// The multigpu* variants have only the first five columns: the rest are optional.
TEST(Traces, OpenbPodsWithOnlyTheResourceColumns) {
  auto path = WriteTemp("pods5.csv",
                        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                        "p0,12000,16384,4,1000\n");
  auto pods = LoadOpenbPods(path);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 1u);
  EXPECT_EQ((*pods)[0].num_gpu, 4);
  EXPECT_TRUE((*pods)[0].gpu_spec.empty());
  EXPECT_FALSE((*pods)[0].creation_time.has_value());
  EXPECT_FALSE(LoadOpenbPods(WriteTemp("pods4.csv", "name,cpu_milli,memory_mib,num_gpu\n")).ok());
}

TEST(Traces, OpenbPodsParseAndClamp) {
  auto path = WriteTemp("pods.csv",
                        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                        "creation_time,deletion_time,"
                        "scheduled_time\n"
                        "p0,12000,16384,1,460,,LS,Running,0,100,0\n"
                        "p1,8000,1024,2,1000,T4|P100,BE,Failed,5,,\n"
                        "p2,4000,1024,0,0,,BE,Running,,,\n");
  auto pods = LoadOpenbPods(path);
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  ASSERT_EQ(pods->size(), 3u);
  EXPECT_EQ((*pods)[0].gpu_milli, 460);
  EXPECT_EQ((*pods)[0].deletion_time.value(), 100);
  EXPECT_EQ((*pods)[1].gpu_spec, (std::vector<std::string>{"T4", "P100"}));
  EXPECT_FALSE((*pods)[1].deletion_time.has_value());
  // Only pods with both times become replay jobs.
  TraceSkips skipped;
  auto jobs = OpenbPodsAsJobs(*pods, &skipped);
  EXPECT_EQ(jobs.size(), 1u);
  EXPECT_EQ(skipped.total(), 2);
  EXPECT_EQ(skipped.ToString(), "2 records skipped (no creation_time or deletion_time: 2)");
  EXPECT_EQ(jobs[0].duration, 100);
}

TEST(Traces, ErrorsNameFileLineAndColumn) {
  struct Case {
    std::string text;
    std::string want;
  } cases[] = {
      {"sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,x,P100\n",
       "nodes.csv:2: gpu: expected an integer, got \"x\""},
      {"sn,cpu_milli,memory_mib,model\n", "nodes.csv: missing column \"gpu\""},
      {"sn,cpu_milli,memory_mib,gpu,model\nn0,1,2,3\n", "nodes.csv:2: expected 5 columns, got 4"},
  };
  for (const Case& c : cases) {
    auto nodes = LoadOpenbNodes(WriteTemp("nodes.csv", c.text));
    ASSERT_FALSE(nodes.ok());
    EXPECT_NE(nodes.status().message().find(c.want), std::string::npos) << nodes.status().message();
  }
}

TEST(Traces, PhillySortedBySubmitWithQueuesAndGangs) {
  auto path = WriteTemp("philly.csv",
                        "timestamp,duration,num_gpus,gpu_time,cluster\n"
                        "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
                        "2017-10-09 06:13:03,2951.5,16,2951.0,6214e9\n"
                        "2017-10-09 06:13:03,10.0,12,40.0,6214e9\n");
  auto jobs = LoadPhilly(path);
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 3u);
  // Equal submit times keep row order; times are relative to the first submission.
  EXPECT_EQ((*jobs)[0].id, "philly-00001");
  EXPECT_EQ((*jobs)[1].id, "philly-00002");
  EXPECT_EQ((*jobs)[2].submit, 48 * 60 + 52);
  EXPECT_EQ((*jobs)[0].tasks, 2);  // 16 GPUs = a gang of two 8-GPU tasks
  EXPECT_EQ((*jobs)[0].gpus_per_task, 8);
  EXPECT_EQ((*jobs)[0].duration, 2952);  // fractions round up
  EXPECT_EQ((*jobs)[0].queue, "vc-6214e9");
  EXPECT_EQ((*jobs)[1].tasks, 2);  // 12 GPUs = two 6-GPU tasks
  EXPECT_EQ((*jobs)[1].gpus_per_task, 6);

  // On 4-GPU machines the same jobs are re-split to fit one: 16 = 4 x 4, 12 = 3 x 4; the
  // 1-GPU job is unchanged.
  FitTasksToNodes(*jobs, 4);
  EXPECT_EQ((*jobs)[0].tasks, 4);
  EXPECT_EQ((*jobs)[0].gpus_per_task, 4);
  EXPECT_EQ((*jobs)[1].tasks, 3);
  EXPECT_EQ((*jobs)[1].gpus_per_task, 4);
  EXPECT_EQ((*jobs)[2].tasks, 1);
  EXPECT_EQ((*jobs)[2].gpus_per_task, 1);
}

// SWF has 18 fields, and a submit time is seconds since the log's start: a line with more
// fields, or a negative submit, is refused naming the line (not cut short, or rebased).
TEST(Traces, SwfRefusesExtraFieldsAndNegativeSubmitTimes) {
  auto extra =
      LoadSwf(WriteTemp("extra.swf", "1 0 -1 100 1 -1 -1 1 -1 -1 1 1 1 -1 3 -1 -1 -1 7 8\n"));
  ASSERT_FALSE(extra.ok());
  EXPECT_EQ(extra.status().message(), "extra.swf:1: expected 18 fields, got 20");
  auto neg = LoadSwf(WriteTemp("neg.swf", "1 -50 -1 100 1 -1 -1 1 -1 -1 1 1 1 -1 3 -1 -1 -1\n"));
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "neg.swf:1: field 2: submit time must be >= 0, got -50");
}

// A corrupt count is refused, not wrapped into another job's size (4294967311 GPUs became a
// 15-GPU job after a split that took seconds).
TEST(Traces, HugeGpuCountsAreRefused) {
  auto tiresias =
      LoadTiresias(WriteTemp("huge.csv",
                             "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                             "1,4294967311,30,133,vgg11,10,23\n"));
  ASSERT_FALSE(tiresias.ok());
  EXPECT_EQ(tiresias.status().message(), "huge.csv:2: num_gpu: must be 1..1048576, got 4294967311");
  auto swf =
      LoadSwf(WriteTemp("huge.swf", "1 0 -1 100 2000000 -1 -1 1 -1 -1 1 1 1 -1 3 -1 -1 -1\n"));
  ASSERT_FALSE(swf.ok());
  EXPECT_EQ(swf.status().message(), "huge.swf:1: field 5: must be 1..1048576, got 2000000");
}

// A spreadsheet's export starts with a UTF-8 byte-order mark: the header's first column is
// still found, and the format still told.
TEST(Traces, AByteOrderMarkBeforeTheHeaderIsSkipped) {
  auto t = LoadTrace(WriteTemp("bom.csv",
                               "\xEF\xBB\xBFjob_id,num_gpu,submit_time,iterations,model_name,"
                               "duration,interval\n0,1,0,606,vgg19,164,30\n"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->jobs.size(), 1u);
  EXPECT_EQ(t->jobs[0].duration, 164);
}

// An openb pod's CPU and memory are the pod's: split over smaller nodes, each task gets its
// share, not the whole pod's again (a 2-GPU pod of 6 CPUs fits two 1-GPU nodes of 4 CPUs).
TEST(Traces, APodSplitOverSmallerNodesSharesItsCpuAndMemory) {
  auto pods =
      LoadOpenbPods(WriteTemp("openb_pod_list_split.csv",
                              "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                              "creation_time,deletion_time,scheduled_time\n"
                              "p2,6000,20001,2,1000,,LS,Running,0,100,0\n"));
  ASSERT_TRUE(pods.ok()) << pods.status().ToString();
  auto jobs = OpenbPodsAsJobs(*pods);
  ASSERT_EQ(jobs.size(), 1u);
  FitTasksToNodes(jobs, 1);
  EXPECT_EQ(jobs[0].tasks, 2);
  EXPECT_EQ(jobs[0].gpus_per_task, 1);
  EXPECT_EQ(jobs[0].cpu_milli, 3000);
  EXPECT_EQ(jobs[0].memory_mib, 10001);  // rounded up: nothing of the pod's request is lost
}

TEST(Traces, TiresiasAndSwf) {
  auto t =
      LoadTiresias(WriteTemp("60_job.csv",
                             "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                             "0,1,0,606,vgg19,164,30\n1,8,30,133,vgg11,147,23\n"));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)[1].gpus_per_task, 8);
  EXPECT_EQ((*t)[1].submit, 30);
  auto s = LoadSwf(WriteTemp("x.swf",
                             "; comment\n"
                             "    1        0     -1   1451  128     -1    -1   -1     -1    -1 -1  "
                             " 1   1  -1 -1 -1 -1 -1\n"
                             "    2       10     -1      0    4     -1    -1   -1     -1    -1 -1  "
                             " 1   1  -1 -1 -1 -1 -1\n"
                             "   57    25574     -1     10    1     -1    -1   -1     -1    -1 -1  "
                             " 4   1   2  1 -1 -1 -1\n"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 2u);  // the zero-runtime job is skipped
  EXPECT_EQ((*s)[0].tasks, 16);
  EXPECT_EQ((*s)[0].queue, "default");  // queue -1, SWF's "unknown" (docs/simulator.md)
  EXPECT_EQ((*s)[1].queue, "q1");
  EXPECT_EQ((*s)[1].line, 4);
}

// A job id twice is an error naming the file, the line and the id (the replay keyed its
// books by id: the second job replaced the first, or the run failed with "already exists"
// and no line).
TEST(Traces, DuplicateJobIdsAreAnError) {
  const std::string header = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n";
  auto t = LoadTrace(WriteTemp("dup.csv", header + "7,1,0,1,x,10,1\n8,1,5,1,x,10,1\n"
                                                   "7,2,500,1,x,10,1\n"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "dup.csv:4: job id \"tiresias-7\" is given twice (first at line 2)");
  const std::string pods =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  t = LoadTrace(WriteTemp("openb_pod_list_dup.csv", pods + "p,1,1,0,0,,LS,Running,9,20,9\n"
                                                           "p,1,1,0,0,,LS,Running,3,20,3\n"));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "openb_pod_list_dup.csv:3: job id \"p\" is given twice (first at line 2)");
  // An empty trace loads as no jobs (the command warns).
  t = LoadTrace(WriteTemp("none.csv", header));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->jobs.empty());
}

// --format auto reads the file name, else the first line; a file neither tells is an error
// that names it and the formats understood (it used to be read as Tiresias: "missing column
// job_id").
TEST(Traces, FormatDetectionNamesTheFileAndTheFormats) {
  auto philly = LoadTrace(WriteTemp("jobs.csv",
                                    "timestamp,duration,num_gpus,gpu_time,cluster\n"
                                    "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"));
  ASSERT_TRUE(philly.ok()) << philly.status().ToString();
  EXPECT_EQ(philly->jobs[0].queue, "vc-11cb48");
  const std::string tail = " -1 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1\n";
  auto swf = LoadTrace(WriteTemp("log.txt", "1 0 -1 50 4" + tail));
  ASSERT_TRUE(swf.ok()) << swf.status().ToString();
  EXPECT_EQ(swf->jobs[0].id, "swf-1");
  auto tiresias = LoadTrace(WriteTemp("t.csv", "job_id,num_gpu,submit_time,duration\n1,2,0,9\n"));
  ASSERT_TRUE(tiresias.ok()) << tiresias.status().ToString();
  for (const char* text : {"a,b,c\n1,2,3\n", "", "1 2 3\n"}) {
    auto t = LoadTrace(WriteTemp("weird.csv", text));
    ASSERT_FALSE(t.ok()) << text;
    const std::string m(t.status().message());
    EXPECT_EQ(m.rfind("weird.csv: cannot tell the trace format", 0), 0u) << m;
    for (const char* f : {"philly (", "openb (", "tiresias (", "swf (", "--format"})
      EXPECT_NE(m.find(f), std::string::npos) << f << " in " << m;
  }
}

// Processors become exactly that many GPUs, split as Philly's GPUs are.
TEST(Traces, SwfProcessorsAreGpusSplitAsPhilly) {
  // job, submit, wait, runtime, procs, then 13 unused fields.
  const std::string tail = " -1 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1\n";
  auto s = LoadSwf(WriteTemp("wide.swf", "1 0 -1 50 12" + tail + "2 1 -1 50 100" + tail +
                                             "3 2 -1 50 13" + tail + "4 3 -1 50 8" + tail));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->size(), 4u);
  struct Want {
    int32_t tasks, gpus_per_task;
  } want[] = {
      {2, 6},   // 12 = 2 x 6 (a ceil split asked 2 x 8 = 16)
      {20, 5},  // 100 = 20 x 5 (not 13 x 8 = 104)
      {13, 1},  // a prime above 8: 13 one-GPU tasks
      {1, 8},
  };
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*s)[i].tasks, want[i].tasks) << i;
    EXPECT_EQ((*s)[i].gpus_per_task, want[i].gpus_per_task) << i;
  }
}

TEST(Traces, SkippedRecordsAreCountedAndAllSkippedIsAnError) {
  const std::string tail = " -1 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1\n";
  auto t = LoadTrace(WriteTemp("mixed.swf", "1 0 -1 50 4" + tail + "2 1 -1 0 4" + tail +
                                                "3 2 -1 -1 4" + tail + "4 3 -1 50 -1" + tail));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->jobs.size(), 1u);
  EXPECT_EQ(t->skipped.total(), 3);
  EXPECT_EQ(t->skipped.ToString(), "3 records skipped (processors <= 0: 1, runtime <= 0: 2)");

  auto none = LoadTrace(WriteTemp("none.swf", "2 1 -1 0 4" + tail));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().message(),
            "none.swf: every record was skipped, no job to replay: 1 record skipped "
            "(runtime <= 0: 1)");
  // A replay of 0 jobs looked like a success.
  EXPECT_FALSE(LoadTrace(WriteTemp("none.swf", "2 1 -1 0 4" + tail)).ok());

  // The multigpu* pod lists have no time columns: every pod is skipped.
  auto pods = LoadTrace(WriteTemp("openb_pod_list_x.csv",
                                  "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                  "p0,12000,16384,4,1000\n"));
  ASSERT_FALSE(pods.ok());
  EXPECT_EQ(pods.status().message(),
            "openb_pod_list_x.csv: no pod has both creation_time and deletion_time; a dynamic "
            "replay needs them (sim fgd uses this list)");
}

// Invalid pod values are refused, not changed; the values the real files hold load.
TEST(Traces, OpenbPodsRefuseInvalidValues) {
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,"
      "deletion_time\n";
  auto ok = LoadOpenbPods(WriteTemp("pods_ok.csv", header + "cpu,4000,1024,0,0,0,1\n"
                                                            "share,4000,1024,1,50,0,1\n"
                                                            "one,4000,0,1,1000,0,1\n"
                                                            "eight,0,1024,8,1000,0,1\n"));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)[1].gpu_milli, 50);
  EXPECT_EQ((*ok)[3].num_gpu, 8);
  struct Case {
    std::string row, want;
  } cases[] = {
      {"p,4000,1024,1,0,0,1", "pods.csv:2: gpu_milli: must be 1..1000 when num_gpu is 1, got 0"},
      {"p,4000,1024,1,-5,0,1", "pods.csv:2: gpu_milli: must be 1..1000 when num_gpu is 1, got -5"},
      {"p,4000,1024,1,5000,0,1",
       "pods.csv:2: gpu_milli: must be 1..1000 when num_gpu is 1, got 5000"},
      {"p,4000,1024,2,500,0,1", "pods.csv:2: gpu_milli: must be 1000 when num_gpu > 1, got 500"},
      {"p,4000,1024,0,300,0,1", "pods.csv:2: gpu_milli: must be 0 when num_gpu is 0, got 300"},
      {"p,-1,1024,1,1000,0,1", "pods.csv:2: cpu_milli: must be >= 0, got -1"},
      {"p,4000,-1,1,1000,0,1", "pods.csv:2: memory_mib: must be >= 0, got -1"},
      {"p,4000,1024,1,1000,10,5", "pods.csv:2: deletion_time: before creation_time (5 < 10)"},
  };
  for (const Case& c : cases) {
    auto pods = LoadOpenbPods(WriteTemp("pods.csv", header + c.row + "\n"));
    ASSERT_FALSE(pods.ok()) << c.row;
    EXPECT_EQ(pods.status().message(), c.want);
  }
}

TEST(Traces, TruncatedGzipIsAnError) {
  std::string text;
  for (int i = 1; i <= 2000; ++i)
    text += std::to_string(i) + " " + std::to_string(i * 7) +
            " -1 100 4 -1 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1\n";
  auto path = WriteTemp("whole.swf.gz", "");
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
  auto whole = LoadSwf(path);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->size(), 2000u);

  // Cut it mid-stream: it used to read as the first ~half of the jobs, silently.
  std::ifstream in(path, std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto cut = WriteTemp("cut.swf.gz", gz.substr(0, gz.size() / 2));
  auto s = LoadSwf(cut);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("cut.swf.gz: truncated gzip"), std::string::npos)
      << s.status().message();
  // Only the trailer missing: every job is there but the file is still cut.
  auto no_trailer = WriteTemp("notrailer.swf.gz", gz.substr(0, gz.size() - 4));
  EXPECT_FALSE(LoadSwf(no_trailer).ok());
}

TEST(Traces, StrictFieldsAndDates) {
  const std::string tail = " -1 -1 -1 -1 -1 -1 1 1 1 -1 -1 -1 -1\n";
  // SWF: trailing junk is refused; a fractional run time rounds up, as the CSV loaders do.
  auto junk = LoadSwf(WriteTemp("junk.swf", "1 100x -1 50 4" + tail));
  ASSERT_FALSE(junk.ok());
  EXPECT_EQ(junk.status().message(), "junk.swf:1: field 2: expected a number, got \"100x\"");
  auto frac_procs = LoadSwf(WriteTemp("fp.swf", "1 0 -1 50 4.5" + tail));
  ASSERT_FALSE(frac_procs.ok());
  EXPECT_EQ(frac_procs.status().message(), "fp.swf:1: field 5: expected an integer, got \"4.5\"");
  auto frac = LoadSwf(WriteTemp("frac.swf", "1 0 -1.00 100.7 4.00" + tail));
  ASSERT_TRUE(frac.ok()) << frac.status().ToString();
  EXPECT_EQ((*frac)[0].duration, 101);

  const std::string header = "timestamp,duration,num_gpus,gpu_time,cluster\n";
  struct Case {
    std::string row, want;  // want "" = loads
  } cases[] = {
      {"2017-02-31 00:00:00,1,1,1,vc", "philly.csv:2: timestamp: expected YYYY-MM-DD HH:MM:SS"},
      {"2017-02-29 00:00:00,1,1,1,vc", "philly.csv:2: timestamp: expected YYYY-MM-DD HH:MM:SS"},
      {"2016-02-29 00:00:00,1,1,1,vc", ""},  // a leap day
      {"2017-04-31 00:00:00,1,1,1,vc", "philly.csv:2: timestamp: expected YYYY-MM-DD HH:MM:SS"},
      {"+017-10-09 07:01:55,1,1,1,vc", "philly.csv:2: timestamp: expected YYYY-MM-DD HH:MM:SS"},
      {"2017-10-09 07:01:55,1,1,1,", "philly.csv:2: cluster: empty virtual cluster id"},
  };
  for (const Case& c : cases) {
    auto jobs = LoadPhilly(WriteTemp("philly.csv", header + c.row + "\n"));
    if (c.want.empty()) {
      EXPECT_TRUE(jobs.ok()) << c.row << ": " << jobs.status().ToString();
      continue;
    }
    ASSERT_FALSE(jobs.ok()) << c.row;
    EXPECT_EQ(jobs.status().message().rfind(c.want, 0), 0u) << jobs.status().message();
  }
}

TEST(Traces, DirectoryIsNotATrace) {
  auto dir = std::filesystem::path(WriteTemp("x", "")).parent_path() / "philly.d";
  std::filesystem::create_directories(dir);
  auto jobs = LoadTrace(dir.string(), "philly");
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().message(), dir.string() + ": is a directory, expected a trace file");
}

// The shared traces, when present: row counts from ../shared/traces/README.md.
TEST(Traces, SharedTracesLoad) {
  std::string dir = FindTracesDir();
  if (dir.empty()) GTEST_SKIP() << "../shared/traces not found (set TESSERA_TRACES); skipping";
  auto nodes = LoadOpenbNodes(dir + "/openb/openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  EXPECT_EQ(nodes->size(), 1213u);
  int64_t gpus = 0;
  for (const auto& n : *nodes) gpus += n.gpus;
  EXPECT_EQ(gpus, 6212);
  auto pods = LoadOpenbPods(dir + "/openb/openb_pod_list_default.csv");
  ASSERT_TRUE(pods.ok());
  EXPECT_EQ(pods->size(), 8152u);
  // Every variant's rows are valid (the value checks refuse none of them).
  for (const auto& e : std::filesystem::directory_iterator(dir + "/openb"))
    if (e.path().filename().string().starts_with("openb_pod_list_")) {
      auto p = LoadOpenbPods(e.path().string());
      EXPECT_TRUE(p.ok()) << p.status().ToString();
    }
  auto multigpu = LoadTrace(dir + "/openb/openb_pod_list_multigpu20.csv");
  ASSERT_FALSE(multigpu.ok());
  EXPECT_NE(multigpu.status().message().find("no pod has both creation_time"), std::string::npos);
  auto philly = LoadPhilly(dir + "/philly/philly.csv");
  ASSERT_TRUE(philly.ok()) << philly.status().ToString();
  EXPECT_EQ(philly->size(), 82247u);
  auto swf = LoadTrace(dir + "/small/NASA-iPSC-1993-3.1-cln.swf.gz");
  ASSERT_TRUE(swf.ok()) << swf.status().ToString();
  EXPECT_EQ(swf->jobs.size(), 18239u - 173u);
  EXPECT_EQ(swf->skipped.ToString(), "173 records skipped (runtime <= 0: 173)");
  auto order = LoadArrivalOrder(dir + "/openb/fgd-seed42/default_ts42_arrival_order.csv");
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->size(), 10866u);
}

}  // namespace
}  // namespace tessera::sim
