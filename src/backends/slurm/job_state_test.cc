#include "backends/slurm/job_state.h"

#include <gtest/gtest.h>

#include "backends/slurm/test_support.h"

namespace tessera::slurm {
namespace {

SlurmJob Job(int64_t id, std::string state, int64_t exit = 0, std::string reason = "None") {
  SlurmJob j;
  j.job_id = id;
  j.state = std::move(state);
  j.exit_code = exit;
  j.state_reason = std::move(reason);
  j.comment = "tessera:train-1:a-7";
  j.nodes = "node[1-2]";
  j.start_time = 1000;
  j.end_time = 2000;
  return j;
}

TEST(JobState, PhaseTable) {
  struct Case {
    std::string state;
    AllocationPhase want;
  } cases[] = {
      {"PENDING", AllocationPhase::kPending},     {"CONFIGURING", AllocationPhase::kPending},
      {"REQUEUED", AllocationPhase::kPending},    {"RUNNING", AllocationPhase::kRunning},
      {"COMPLETING", AllocationPhase::kRunning},  {"SUSPENDED", AllocationPhase::kRunning},
      {"COMPLETED", AllocationPhase::kSucceeded}, {"FAILED", AllocationPhase::kFailed},
      {"TIMEOUT", AllocationPhase::kFailed},      {"OUT_OF_MEMORY", AllocationPhase::kFailed},
      {"NODE_FAIL", AllocationPhase::kFailed},    {"BOOT_FAIL", AllocationPhase::kFailed},
      {"DEADLINE", AllocationPhase::kFailed},     {"CANCELLED", AllocationPhase::kKilled},
      {"PREEMPTED", AllocationPhase::kKilled},    {"SOMETHING_NEW", AllocationPhase::kPending},
  };
  for (const Case& c : cases) EXPECT_EQ(PhaseOfSlurmState(c.state), c.want) << c.state;
}

TEST(JobState, WaitStatusTable) {
  struct Case {
    int64_t raw;
    int32_t exit_code, signal;
  } cases[] = {
      {0, 0, 0},   {768, 3, 0},    // exit 3
      {256, 1, 0}, {15, 143, 15},  // SIGTERM
      {9, 137, 9}, {32512, 127, 0},
  };
  for (const Case& c : cases) {
    ExitStatus e = DecodeWaitStatus(c.raw);
    EXPECT_EQ(e.exit_code, c.exit_code) << c.raw;
    EXPECT_EQ(e.signal, c.signal) << c.raw;
  }
}

TEST(JobState, StatusOfOneJob) {
  AllocationStatus ok = StatusFromSlurm({Job(5, "COMPLETED")});
  EXPECT_EQ(ok.phase, AllocationPhase::kSucceeded);
  EXPECT_EQ(ok.job, "train-1");
  EXPECT_EQ(ok.allocation, "a-7");
  EXPECT_EQ(ok.external_id, "slurm:5");
  EXPECT_EQ(ok.nodes, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(ok.started_at, 1000);
  EXPECT_EQ(ok.finished_at, 2000);

  AllocationStatus failed = StatusFromSlurm({Job(6, "FAILED", 768, "NonZeroExitCode")});
  EXPECT_EQ(failed.phase, AllocationPhase::kFailed);
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(failed.reason, "NonZeroExitCode");
  EXPECT_EQ(failed.message, "Slurm job 6 FAILED (NonZeroExitCode), exit 3");

  AllocationStatus killed = StatusFromSlurm({Job(7, "CANCELLED", 15)});
  EXPECT_EQ(killed.phase, AllocationPhase::kKilled);
  EXPECT_EQ(killed.signal, 15);
  EXPECT_EQ(killed.exit_code, 143);

  AllocationStatus timeout = StatusFromSlurm({Job(8, "TIMEOUT", 0, "TimeLimit")});
  EXPECT_EQ(timeout.phase, AllocationPhase::kFailed);
  EXPECT_EQ(timeout.reason, "TimeLimit");

  // Pending jobs carry Slurm's start estimate; it is not a start.
  AllocationStatus pending = StatusFromSlurm({Job(9, "PENDING", 0, "ReqNodeNotAvail")});
  EXPECT_EQ(pending.phase, AllocationPhase::kPending);
  EXPECT_EQ(pending.reason, "ReqNodeNotAvail");
  EXPECT_EQ(pending.started_at, 0);
  EXPECT_EQ(pending.finished_at, 0);
  EXPECT_EQ(pending.exit_code, 0);

  // COMPLETED with a non-zero status cannot be a success.
  EXPECT_EQ(StatusFromSlurm({Job(10, "COMPLETED", 256)}).phase, AllocationPhase::kFailed);
}

TEST(JobState, HeterogeneousJobFolds) {
  auto comp = [](int64_t id, int64_t offset, std::string state, int64_t exit = 0) {
    SlurmJob j = Job(id, std::move(state), exit);
    j.het_job_id = 20;
    j.het_job_offset = offset;
    j.nodes = "node" + std::to_string(offset + 1);
    return j;
  };
  // Given out of order: the leader (offset 0) names it.
  AllocationStatus both = StatusFromSlurm({comp(21, 1, "RUNNING"), comp(20, 0, "RUNNING")});
  EXPECT_EQ(both.phase, AllocationPhase::kRunning);
  EXPECT_EQ(both.external_id, "slurm:20");
  EXPECT_EQ(both.nodes, (std::vector<std::string>{"node1", "node2"}));
  EXPECT_EQ(StatusFromSlurm({comp(20, 0, "PENDING"), comp(21, 1, "PENDING")}).phase,
            AllocationPhase::kPending);
  EXPECT_EQ(StatusFromSlurm({comp(20, 0, "COMPLETED"), comp(21, 1, "RUNNING")}).phase,
            AllocationPhase::kRunning);
  AllocationStatus one_failed =
      StatusFromSlurm({comp(20, 0, "CANCELLED", 15), comp(21, 1, "FAILED", 512)});
  EXPECT_EQ(one_failed.phase, AllocationPhase::kFailed);  // failed beats killed
  EXPECT_EQ(one_failed.exit_code, 2);
  EXPECT_EQ(StatusFromSlurm({comp(20, 0, "COMPLETED"), comp(21, 1, "COMPLETED")}).phase,
            AllocationPhase::kSucceeded);
}

TEST(JobState, CapturedSqueue) {
  auto jobs = ParseSqueueJson(testing::Testdata("squeue_tagged.json"));
  ASSERT_TRUE(jobs.ok());
  // [0],[1]: het job 1 (completed); [3]: exit 3; [4]: cancelled while running.
  AllocationStatus het = StatusFromSlurm({(*jobs)[0], (*jobs)[1]});
  EXPECT_EQ(het.phase, AllocationPhase::kSucceeded);
  EXPECT_EQ(het.allocation, "a-2");
  EXPECT_EQ(het.nodes, (std::vector<std::string>{"node1", "node3"}));
  EXPECT_EQ(StatusFromSlurm({(*jobs)[3]}).exit_code, 3);
  EXPECT_EQ(StatusFromSlurm({(*jobs)[4]}).phase, AllocationPhase::kKilled);
  EXPECT_EQ(StatusFromSlurm({(*jobs)[5]}).phase, AllocationPhase::kPending);
}

}  // namespace
}  // namespace tessera::slurm
