#include "backends/slurm/slurm_pool.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backends/slurm/test_support.h"

namespace tessera::slurm {
namespace {

using testing::FakeCommandRunner;

struct J {
  int64_t id;
  std::string comment;
  std::string state;
  int64_t exit = 0;
  std::string nodes = "node1";
  int64_t het = 0, offset = 0;
};

CommandResult Squeue(const std::vector<J>& jobs) {
  nlohmann::json doc = {{"meta", nlohmann::json::object()}, {"errors", nlohmann::json::array()}};
  doc["jobs"] = nlohmann::json::array();
  for (const J& j : jobs) {
    doc["jobs"].push_back({{"job_id", j.id},
                           {"het_job_id", j.het},
                           {"het_job_offset", j.offset},
                           {"array_job_id", 0},
                           {"name", "x"},
                           {"comment", j.comment},
                           {"job_state", j.state},
                           {"state_reason", "None"},
                           {"exit_code", j.exit},
                           {"nodes", j.nodes},
                           {"partition", "debug"},
                           {"submit_time", 1},
                           {"start_time", 2},
                           {"end_time", 3},
                           {"time_limit", nullptr},
                           {"tasks", 1},
                           {"node_count", 1}});
  }
  return {0, doc.dump(), ""};
}

CommandResult Sinfo() {
  nlohmann::json doc = {{"errors", nlohmann::json::array()}, {"nodes", nlohmann::json::array()}};
  for (int i = 1; i <= 2; ++i) {
    doc["nodes"].push_back({{"name", "node" + std::to_string(i)},
                            {"state", "mixed"},
                            {"state_flags", nlohmann::json::array()},
                            {"reason", ""},
                            {"partitions", {"debug"}},
                            {"active_features", ""},
                            {"cpus", 32},
                            {"real_memory", 256000},
                            {"alloc_cpus", 4},
                            {"alloc_memory", 2000},
                            {"gres", "gpu:a100:8"},
                            {"gres_used", "gpu:a100:2(IDX:0-1)"}});
  }
  return {0, doc.dump(), ""};
}

const CommandResult kControllerDown = {
    1, "", "squeue: error: Unable to contact slurm controller (connect failure)\n"};

DispatchRequest Request(const std::string& alloc) {
  DispatchRequest r;
  r.job = "train";
  r.allocation = alloc;
  Binding b;
  b.job = "train";
  b.allocation.node = "node1";
  b.allocation.cpu_milli = 4000;
  b.allocation.memory_bytes = int64_t{2000} << 20;
  b.allocation.devices = {{0, 1000, 0, -1}, {1, 1000, 0, -1}};
  r.bindings = {b};
  r.command = {"sleep", "1"};
  return r;
}

class SlurmPoolTest : public ::testing::Test {
 protected:
  SlurmPoolTest() : runner(std::make_shared<FakeCommandRunner>()), pool(runner, {}) {
    runner->Reply("sinfo", Sinfo());
    runner->Reply("scontrol partition", testing::OnePartition());
  }
  std::shared_ptr<FakeCommandRunner> runner;
  SlurmPool pool;
};

TEST_F(SlurmPoolTest, DispatchIsIdempotentPerAllocation) {
  runner->Reply("sbatch", {0, "42\n", ""});
  auto first = pool.Dispatch(Request("a-1"));
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, "slurm:42");
  auto again = pool.Dispatch(Request("a-1"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, "slurm:42");
  EXPECT_EQ(runner->Count("sbatch"), 1);
  // What went to sbatch: the tag and the placement.
  const auto& call = runner->calls.back();
  EXPECT_EQ(call.argv[0], "sbatch");
  EXPECT_NE(std::find(call.argv.begin(), call.argv.end(), "tessera:train:a-1"), call.argv.end());
  EXPECT_NE(std::find(call.argv.begin(), call.argv.end(), "--nodelist=node1"), call.argv.end());
  EXPECT_NE(std::find(call.argv.begin(), call.argv.end(), "--gres=gpu:a100:2"), call.argv.end());
  EXPECT_NE(call.input.find("exec sleep 1"), std::string::npos);
}

TEST_F(SlurmPoolTest, LostSbatchAnswerIsLookedUpBeforeResubmitting) {
  runner->Reply("sbatch",
                {1, "", "sbatch: error: Batch job submission failed: Socket timed out\n"});
  auto first = pool.Dispatch(Request("a-1"));
  EXPECT_EQ(first.status().code(), StatusCode::kUnavailable) << first.status().ToString();
  // The job was created after all: found by its tag, not submitted again.
  runner->Reply("squeue", Squeue({{77, "tessera:train:a-1", "RUNNING"}}));
  auto retry = pool.Dispatch(Request("a-1"));
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ(*retry, "slurm:77");
  EXPECT_EQ(runner->Count("sbatch"), 1);
}

TEST_F(SlurmPoolTest, LostSbatchAnswerWithNoJobSubmitsAgain) {
  runner->Reply("sbatch", {1, "", "sbatch: error: Unable to contact slurm controller\n"});
  runner->Reply("sbatch", {0, "43", ""});
  EXPECT_FALSE(pool.Dispatch(Request("a-1")).ok());
  runner->Reply("squeue", Squeue({}));
  auto retry = pool.Dispatch(Request("a-1"));
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  EXPECT_EQ(*retry, "slurm:43");
  EXPECT_EQ(runner->Count("sbatch"), 2);
}

TEST_F(SlurmPoolTest, RejectedSubmissionIsNotRetryable) {
  runner->Reply("sbatch", {1, "",
                           "sbatch: error: Batch job submission failed: Requested node "
                           "configuration is not available\n"});
  auto got = pool.Dispatch(Request("a-1"));
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("Requested node configuration"), std::string::npos);
  EXPECT_EQ(pool.tracked(), 0u);
}

TEST_F(SlurmPoolTest, PollFollowsTheLifecycle) {
  runner->Reply("sbatch", {0, "42", ""});
  ASSERT_TRUE(pool.Dispatch(Request("a-1")).ok());
  struct Step {
    std::vector<J> squeue;
    AllocationPhase want;
    int32_t exit_code;
  } steps[] = {
      {{{42, "tessera:train:a-1", "PENDING", 0, ""}}, AllocationPhase::kPending, 0},
      {{{42, "tessera:train:a-1", "RUNNING"}}, AllocationPhase::kRunning, 0},
      {{{42, "tessera:train:a-1", "FAILED", 768}}, AllocationPhase::kFailed, 3},
  };
  for (const Step& s : steps) {
    runner->Reply("squeue", Squeue(s.squeue));
    auto got = pool.Poll();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_EQ(got->size(), 1u);
    EXPECT_EQ((*got)[0].allocation, "a-1");
    EXPECT_EQ((*got)[0].phase, s.want);
    EXPECT_EQ((*got)[0].exit_code, s.exit_code);
  }
  // Aged out of squeue after its end was reported: forgotten, without asking scontrol.
  runner->Reply("squeue", Squeue({}));
  auto after = pool.Poll();
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->empty());
  EXPECT_EQ(runner->Count("scontrol"), 0);
  EXPECT_EQ(pool.tracked(), 0u);
}

TEST_F(SlurmPoolTest, VanishedBeforeSeenFinishingIsLost) {
  runner->Reply("sbatch", {0, "42", ""});
  ASSERT_TRUE(pool.Dispatch(Request("a-1")).ok());
  runner->Reply("squeue", Squeue({}));
  runner->Reply("scontrol", {1, "", "slurm_load_jobs error: Invalid job id specified\n"});
  auto got = pool.Poll();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ((*got)[0].phase, AllocationPhase::kLost);
  EXPECT_EQ((*got)[0].external_id, "slurm:42");
  EXPECT_TRUE(pool.Poll()->empty());  // reported once
}

TEST_F(SlurmPoolTest, ControllerDownChangesNothing) {
  runner->Reply("sbatch", {0, "42", ""});
  ASSERT_TRUE(pool.Dispatch(Request("a-1")).ok());
  runner->Reply("squeue", kControllerDown);
  runner->Reply("squeue", Squeue({{42, "tessera:train:a-1", "RUNNING"}}));
  auto down = pool.Poll();
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable) << down.status().ToString();
  EXPECT_EQ(pool.tracked(), 1u);
  auto back = pool.Poll();
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*back)[0].phase, AllocationPhase::kRunning);
  EXPECT_EQ(runner->Count("sbatch"), 1);
}

TEST_F(SlurmPoolTest, PollReportsTaggedJobsOfAPreviousInstance) {
  runner->Reply("squeue", Squeue({{5, "tessera:old:a-9", "RUNNING"},
                                  {6, "", "RUNNING"},
                                  {7, "tessera:older:a-8", "COMPLETED"}}));
  auto got = pool.Poll();
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 2u);  // the untagged job is not ours
  EXPECT_EQ((*got)[0].job, "older");
  EXPECT_EQ((*got)[1].job, "old");
  EXPECT_EQ(pool.tracked(), 1u);  // the live one
  // A finished one is reported once, not at every poll while squeue lists it.
  auto again = pool.Poll();
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].job, "old");
}

TEST_F(SlurmPoolTest, CancelByKnownIdOrByTag) {
  runner->Reply("sbatch", {0, "42", ""});
  runner->Reply("scancel", {0, "", ""});
  ASSERT_TRUE(pool.Dispatch(Request("a-1")).ok());
  ASSERT_TRUE(pool.Cancel("a-1").ok());
  EXPECT_EQ(runner->calls.back().argv, (std::vector<std::string>{"scancel", "42"}));
  // Not known here (another instance submitted it): found by tag.
  runner->Reply("squeue", Squeue({{50, "tessera:x:a-2", "PENDING"}}));
  ASSERT_TRUE(pool.Cancel("a-2").ok());
  EXPECT_EQ(runner->calls.back().argv, (std::vector<std::string>{"scancel", "50"}));
  // Unknown everywhere: nothing to do, not an error.
  int before = runner->Count("scancel");
  ASSERT_TRUE(pool.Cancel("a-3").ok());
  EXPECT_EQ(runner->Count("scancel"), before);
}

TEST_F(SlurmPoolTest, ReconcileAdoptsCancelsAndReportsMissing) {
  runner->Reply("squeue", Squeue({
                              {10, "tessera:train:a-1", "RUNNING"},   // desired: adopt
                              {11, "tessera:gone:a-2", "RUNNING"},    // not desired: stale
                              {12, "tessera:gone:a-3", "COMPLETED"},  // not desired, finished
                              {13, "tessera:dup:a-4", "RUNNING"},     // desired twice:
                              {14, "tessera:dup:a-4", "PENDING"},     //   keep 13, cancel 14
                              {15, "", "RUNNING"},                    // not ours: untouched
                          }));
  runner->Reply("scancel", {0, "", ""});
  std::vector<DesiredAllocation> desired = {
      {"train", "a-1", "slurm:10", Request("a-1").bindings},
      {"dup", "a-4", "", {}},
      {"new", "a-5", "", {}},         // never submitted: dispatch it
      {"old", "a-6", "slurm:3", {}},  // submitted, now unknown: lost
  };
  auto rep = pool.Reconcile(desired);
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->adopted.size(), 2u);
  EXPECT_EQ(rep->adopted[0].external_id, "slurm:10");
  EXPECT_EQ(rep->adopted[1].external_id, "slurm:13");
  EXPECT_EQ(rep->cancelled_stale, std::vector<std::string>{"slurm:11"});
  EXPECT_EQ(rep->cancelled_duplicates, std::vector<std::string>{"slurm:14"});
  ASSERT_EQ(rep->missing.size(), 2u);
  EXPECT_EQ(rep->missing[0].allocation, "a-5");
  EXPECT_EQ(rep->missing[1].external_id, "slurm:3");
  EXPECT_EQ(runner->calls.back().argv, (std::vector<std::string>{"scancel", "11", "14"}));
  // Adopted allocations are not submitted again.
  auto again = pool.Dispatch(Request("a-1"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, "slurm:10");
  EXPECT_EQ(runner->Count("sbatch"), 0);
}

TEST_F(SlurmPoolTest, DiscoverCountsOnlyOthersUsage) {
  // Both nodes: Slurm holds 4 CPUs, 2000 MiB, 2 GPUs. On node1 that is Tessera's own job.
  runner->Reply("sbatch", {0, "42", ""});
  ASSERT_TRUE(pool.Dispatch(Request("a-1")).ok());
  runner->Reply("squeue", Squeue({{42, "tessera:train:a-1", "RUNNING"}}));
  ASSERT_TRUE(pool.Poll().ok());
  auto nodes = pool.Discover();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  EXPECT_EQ((*nodes)[0].cpu_milli, 32000);  // own: not subtracted
  EXPECT_EQ((*nodes)[1].cpu_milli, 28000);  // foreign: subtracted
  EXPECT_EQ((*nodes)[1].memory_bytes, int64_t{254000} << 20);
  EXPECT_EQ((*nodes)[0].pool, "slurm");
}

// The server asks for every pending job in every cycle: a job's script is read once (by job
// id: a job's script never changes), and only so many jobs are remembered.
TEST(SlurmPoolRefusingNodes, ReadsAJobsScriptOnce) {
  auto runner = std::make_shared<FakeCommandRunner>();
  runner->Reply("sinfo", Sinfo());
  runner->Reply("scontrol partition",
                {0,
                 "PartitionName=debug AllowAccounts=ml AllowGroups=ALL Default=YES Hidden=NO "
                 "MaxNodes=UNLIMITED MaxTime=UNLIMITED Nodes=ALL PriorityTier=1 State=UP\n",
                 ""});
  SlurmPool pool(runner, {});
  ASSERT_TRUE(pool.Discover().ok());
  EXPECT_EQ(pool.RefusingNodes("cv", "#!/bin/sh\n#SBATCH -A cv\ntrue\n").size(), 2u);
  // Job cv again: its account was read the first time (this other script is not read).
  EXPECT_EQ(pool.RefusingNodes("cv", "#!/bin/sh\n#SBATCH -A ml\ntrue\n").size(), 2u);
  EXPECT_TRUE(pool.RefusingNodes("ml", "#!/bin/sh\n#SBATCH -A ml\ntrue\n").empty());
  EXPECT_EQ(pool.remembered_jobs(), 2u);
  for (size_t i = 0; i < SlurmPool::kRememberedJobs; ++i)
    (void)pool.RefusingNodes("j" + std::to_string(i), "");
  EXPECT_LE(pool.remembered_jobs(), SlurmPool::kRememberedJobs);
  EXPECT_GE(pool.remembered_jobs(), 1u);
}

}  // namespace
}  // namespace tessera::slurm
