#include "sim/traces.h"

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
  int64_t skipped = 0;
  auto jobs = OpenbPodsAsJobs(*pods, &skipped);
  EXPECT_EQ(jobs.size(), 1u);
  EXPECT_EQ(skipped, 2);
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
  EXPECT_EQ((*s)[1].queue, "q1");
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
  auto philly = LoadPhilly(dir + "/philly/philly.csv");
  ASSERT_TRUE(philly.ok()) << philly.status().ToString();
  EXPECT_EQ(philly->size(), 82247u);
  auto swf = LoadSwf(dir + "/small/NASA-iPSC-1993-3.1-cln.swf.gz");
  ASSERT_TRUE(swf.ok()) << swf.status().ToString();
  EXPECT_GT(swf->size(), 18000u);
  auto order = LoadArrivalOrder(dir + "/openb/fgd-seed42/default_ts42_arrival_order.csv");
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(order->size(), 10866u);
}

}  // namespace
}  // namespace tessera::sim
