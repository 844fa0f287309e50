#include "backends/slurm/server_adapter.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "backends/slurm/slurm_pool.h"
#include "backends/slurm/test_support.h"

namespace tessera::slurm {
namespace {

using testing::FakeCommandRunner;
using Clock = std::chrono::steady_clock;

CommandResult Sinfo() {
  nlohmann::json doc = {{"errors", nlohmann::json::array()}, {"nodes", nlohmann::json::array()}};
  for (int i = 1; i <= 2; ++i) {
    doc["nodes"].push_back({{"name", "node" + std::to_string(i)},
                            {"state", "idle"},
                            {"partitions", {"debug"}},
                            {"cpus", 32},
                            {"real_memory", 1000},
                            {"alloc_cpus", 0},
                            {"alloc_memory", 0},
                            {"gres", "gpu:a100:8"},
                            {"gres_used", ""}});
  }
  return {0, doc.dump(), ""};
}

CommandResult Squeue(const std::string& comment, const std::string& state, int64_t exit = 0,
                     const std::string& reason = "None") {
  nlohmann::json j = {
      {"job_id", 42},      {"het_job_id", 0},      {"het_job_offset", 0}, {"array_job_id", 0},
      {"name", "x"},       {"comment", comment},   {"job_state", state},  {"state_reason", reason},
      {"exit_code", exit}, {"nodes", "node[1-2]"}, {"submit_time", 1},    {"start_time", 2},
      {"end_time", 3},     {"tasks", 2},           {"node_count", 2}};
  nlohmann::json doc = {{"errors", nlohmann::json::array()}, {"jobs", {j}}};
  return {0, doc.dump(), ""};
}

struct SlurmJobRow {
  int64_t id;
  std::string comment, state;
  std::string nodes = "node1";
};
// squeue --json listing these jobs.
CommandResult SqueueJobs(const std::vector<SlurmJobRow>& rows) {
  nlohmann::json doc = {{"errors", nlohmann::json::array()}, {"jobs", nlohmann::json::array()}};
  for (const SlurmJobRow& r : rows)
    doc["jobs"].push_back({{"job_id", r.id},
                           {"het_job_id", 0},
                           {"het_job_offset", 0},
                           {"array_job_id", 0},
                           {"name", "x"},
                           {"comment", r.comment},
                           {"job_state", r.state},
                           {"state_reason", "None"},
                           {"exit_code", r.state == "CANCELLED" ? 15 : 0},
                           {"nodes", r.nodes},
                           {"submit_time", 1},
                           {"start_time", 2},
                           {"end_time", 3},
                           {"tasks", 1},
                           {"node_count", 1}});
  return {0, doc.dump(), ""};
}

server::Dispatch Task(int32_t task, const std::string& node) {
  server::Dispatch d;
  d.allocation = "a-00" + std::to_string(task + 1);
  d.job = "train";
  d.task = task;
  d.placement.node = node;
  d.placement.cpu_milli = 1000;
  d.placement.devices = {{0, 1000, 0, -1}};
  return d;
}

class AdapterTest : public ::testing::Test {
 protected:
  AdapterTest()
      : runner(std::make_shared<FakeCommandRunner>()),
        adapter(
            std::make_shared<SlurmPool>(runner, SlurmPoolOptions{}),
            [this](const std::string& job) -> std::optional<JobInfo> {
              if (job != "train") return std::nullopt;
              JobInfo info;
              info.tasks = tasks;
              info.command = {"python3", "train.py"};
              info.restart_on_eviction = restart_on_eviction;
              info.script = script;
              info.stdout_file = own_out;
              info.stderr_file = own_err;
              return info;
            },
            [this](const TaskReport& r) { reports.push_back(r); },
            ServerAdapterOptions{std::chrono::milliseconds(200), std::chrono::milliseconds(0),
                                 std::chrono::milliseconds(1000), false, "/shared/logs"}) {
    runner->Reply("sinfo", Sinfo());
    runner->Reply("scontrol partition", testing::OnePartition());
  }
  // Tasks 0 and 1 as Slurm job 42, RUNNING; then a stop of task 1 (a-002) alone.
  void RunTwoTasksThenStopTheSecond(Clock::time_point t0) {
    runner->Reply("sbatch", {0, "42", ""});
    runner->Reply("squeue", Squeue("tessera:train:a-001", "RUNNING"));
    adapter.Launch(Task(0, "node1"));
    adapter.Launch(Task(1, "node2"));
    adapter.Step(t0);
    ASSERT_EQ(runner->Count("sbatch"), 1);
    adapter.Stop("a-002", 30);
  }
  int32_t tasks = 2;
  bool restart_on_eviction = true;
  std::string script, own_out, own_err;  // a batch script, and the files it names itself
  std::shared_ptr<FakeCommandRunner> runner;
  std::vector<TaskReport> reports;
  SlurmServerBackend adapter;
};

TEST_F(AdapterTest, AGangIsOneSbatchAndEveryTaskHearsItsState) {
  runner->Reply("sbatch", {0, "42", ""});
  runner->Reply("squeue", Squeue("tessera:train:a-001", "RUNNING"));
  runner->Reply("squeue", Squeue("tessera:train:a-001", "COMPLETED"));
  adapter.Launch(Task(0, "node1"));
  adapter.Launch(Task(1, "node2"));
  auto now = Clock::now();
  adapter.Step(now);
  ASSERT_EQ(runner->Count("sbatch"), 1);
  const auto& argv = runner->calls[2].argv;  // [0] is sinfo, [1] scontrol show partition
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--nodelist=node1,node2"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "tessera:train:a-001"), argv.end());
  // Output where the server reads it: per job attempt.
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--output=/shared/logs/train.1.out"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--error=/shared/logs/train.1.err"), argv.end());
  // Tessera's files, shared by the attempt's Slurm jobs: appended to.
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--open-mode=append"), argv.end());
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].allocation, "a-001");
  EXPECT_EQ(reports[1].allocation, "a-002");
  EXPECT_EQ(reports[1].phase, AllocationPhase::kRunning);
  EXPECT_EQ(reports[1].external_id, "slurm:42");
  adapter.Step(now);
  ASSERT_EQ(reports.size(), 4u);
  EXPECT_EQ(reports[3].phase, AllocationPhase::kSucceeded);
  adapter.Step(now);  // finished gangs are forgotten: nothing more
  EXPECT_EQ(reports.size(), 4u);
  EXPECT_EQ(runner->Count("sbatch"), 1);
}

// A script's own -o and -e keep sbatch's default open mode (truncate): only Tessera's files are
// appended to.
TEST_F(AdapterTest, AScriptsOwnOutputFilesKeepSbatchsOpenMode) {
  tasks = 1;
  script = "#!/bin/sh\n#SBATCH -o mine.out\n#SBATCH -e mine.err\ntrue\n";
  own_out = "mine.out";
  own_err = "mine.err";
  runner->Reply("sbatch", {0, "42", ""});
  adapter.Launch(Task(0, "node1"));
  adapter.Step(Clock::now());
  ASSERT_EQ(runner->Count("sbatch"), 1);
  const auto& argv = runner->calls[2].argv;
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--output=mine.out"), argv.end());
  EXPECT_EQ(std::find(argv.begin(), argv.end(), "--open-mode=append"), argv.end());
}

TEST_F(AdapterTest, AnIncompleteGangWaitsForGather) {
  tasks = 3;
  runner->Reply("sbatch", {0, "42", ""});
  runner->Reply("squeue", Squeue("tessera:train:a-001", "PENDING"));
  adapter.Launch(Task(0, "node1"));
  adapter.Launch(Task(1, "node2"));
  auto now = Clock::now();
  adapter.Step(now);
  EXPECT_EQ(runner->Count("sbatch"), 0);
  adapter.Step(now + std::chrono::milliseconds(500));
  EXPECT_EQ(runner->Count("sbatch"), 1);
}

TEST_F(AdapterTest, StopBeforeAndAfterDispatch) {
  adapter.Launch(Task(0, "node1"));
  adapter.Launch(Task(1, "node2"));
  adapter.Stop("a-001", 30);
  adapter.Stop("a-002", 30);
  adapter.Step(Clock::now());
  EXPECT_EQ(runner->Count("sbatch"), 0);  // never reached Slurm
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].phase, AllocationPhase::kKilled);

  reports.clear();
  runner->Reply("sbatch", {0, "42", ""});
  runner->Reply("squeue", Squeue("tessera:train:a-001", "RUNNING"));
  runner->Reply("squeue", Squeue("tessera:train:a-001", "CANCELLED", 15));
  runner->Reply("scancel", {0, "", ""});
  server::Dispatch t0 = Task(0, "node1"), t1 = Task(1, "node2");
  t0.attempt = t1.attempt = 2;
  adapter.Launch(t0);
  adapter.Launch(t1);
  adapter.Step(Clock::now());
  adapter.Stop("a-001", 30);
  adapter.Stop("a-002", 30);
  adapter.Step(Clock::now());
  EXPECT_EQ(runner->calls.back().argv.at(0), "squeue");
  EXPECT_EQ(runner->Count("scancel"), 1);
  EXPECT_EQ(reports.back().phase, AllocationPhase::kKilled);
  EXPECT_TRUE(reports.back().stopped_by_tessera);  // our own scancel: an expected stop
}

// Slurm cannot end part of a job: a stop of some of its tasks (a Deployment scaled down, an
// elastic job's partial eviction) cancels it, once the gather interval has passed (the stops
// of a whole cancel come one by one), and hands the others back to be placed again
// (PartlyStoppedInSlurm); waiting for the rest held the stopped tasks' resources as long as
// the job ran.
TEST_F(AdapterTest, AStopOfPartOfASlurmJobCancelsItAndHandsTheRestBack) {
  runner->Reply("scancel", {0, "", ""});
  const auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(RunTwoTasksThenStopTheSecond(t0));
  adapter.Step(Clock::now());  // within the gather interval: the other stop may be coming
  EXPECT_EQ(runner->Count("scancel"), 0);
  adapter.Step(t0 + std::chrono::seconds(1));
  ASSERT_EQ(runner->Count("scancel"), 1);
  for (const auto& c : runner->calls)
    if (c.argv.at(0) == "scancel") {
      EXPECT_EQ(c.argv, (std::vector<std::string>{"scancel", "42"}));
    }
  runner->Reply("squeue", Squeue("tessera:train:a-001", "CANCELLED", 15));
  adapter.Step(t0 + std::chrono::seconds(2));
  ASSERT_EQ(reports.size(), 4u);
  const TaskReport& kept = reports[2].allocation == "a-001" ? reports[2] : reports[3];
  const TaskReport& stopped = reports[2].allocation == "a-001" ? reports[3] : reports[2];
  EXPECT_EQ(kept.phase, AllocationPhase::kKilled);
  EXPECT_EQ(kept.state, "PARTSTOP");  // handed back: placed again
  EXPECT_FALSE(kept.stopped_by_tessera);
  EXPECT_NE(kept.message.find("task(s) 1 stopped, and Slurm cannot end part of"), std::string::npos)
      << kept.message;
  EXPECT_EQ(stopped.phase, AllocationPhase::kKilled);
  EXPECT_TRUE(stopped.stopped_by_tessera);  // the stop Tessera asked for
  EXPECT_FALSE(adapter.Tracks("a-001"));
  EXPECT_FALSE(adapter.Tracks("a-002"));
}

// A job that fails on an eviction (onEviction FailJob) is not failed for a partial stop: its
// Slurm job runs on until the rest stop or it ends, the stopped task waiting.
TEST_F(AdapterTest, APartialStopOfAFailJobSlurmJobWaitsForTheRest) {
  restart_on_eviction = false;
  const auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(RunTwoTasksThenStopTheSecond(t0));
  for (int i = 1; i <= 3; ++i) adapter.Step(t0 + std::chrono::seconds(i));
  EXPECT_EQ(runner->Count("scancel"), 0);
  EXPECT_TRUE(adapter.Tracks("a-002"));
}

// A Deployment scaled up: the new replica is launched once its attempt's Slurm job runs. It
// is a Slurm job of its own (not added, unsent, to the first one), and scaling down again
// cancels that one alone.
TEST_F(AdapterTest, ATaskLaunchedAfterItsAttemptWentToSlurmIsASlurmJobOfItsOwn) {
  tasks = 1;
  runner->Reply("sbatch", {0, "42", ""});
  runner->Reply("squeue", SqueueJobs({{42, "tessera:train:a-001", "RUNNING"}}));
  adapter.Launch(Task(0, "node1"));
  const auto t0 = Clock::now();
  adapter.Step(t0);
  ASSERT_EQ(runner->Count("sbatch"), 1);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].phase, AllocationPhase::kRunning);

  tasks = 2;  // scaled to 2 replicas
  runner->Reply("sbatch", {0, "43", ""});
  runner->Reply("squeue", SqueueJobs({{42, "tessera:train:a-001", "RUNNING"},
                                      {43, "tessera:train:a-002", "RUNNING", "node2"}}));
  adapter.Launch(Task(1, "node2"));
  adapter.Step(t0 + std::chrono::seconds(1));  // (complete: no wait for `gather`)
  ASSERT_EQ(runner->Count("sbatch"), 2);
  const auto& argv = runner->calls[runner->calls.size() - 2].argv;
  ASSERT_EQ(argv.at(0), "sbatch");
  EXPECT_NE(std::find(argv.begin(), argv.end(), "tessera:train:a-002"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--nodelist=node2"), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--ntasks=1"), argv.end());
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].allocation, "a-002");
  EXPECT_EQ(reports[1].phase, AllocationPhase::kRunning);
  EXPECT_EQ(reports[1].external_id, "slurm:43");

  // Scaled back to 1: replica 1's Slurm job is cancelled, replica 0's runs on.
  runner->Reply("scancel", {0, "", ""});
  adapter.Stop("a-002", 30);
  adapter.Step(t0 + std::chrono::seconds(2));
  ASSERT_EQ(runner->Count("scancel"), 1);
  for (const auto& c : runner->calls)
    if (c.argv.at(0) == "scancel") {
      EXPECT_EQ(c.argv, (std::vector<std::string>{"scancel", "43"}));
    }
  runner->Reply("squeue", SqueueJobs({{42, "tessera:train:a-001", "RUNNING"},
                                      {43, "tessera:train:a-002", "CANCELLED", "node2"}}));
  adapter.Step(t0 + std::chrono::seconds(3));
  ASSERT_EQ(reports.size(), 3u);
  EXPECT_EQ(reports[2].allocation, "a-002");
  EXPECT_EQ(reports[2].phase, AllocationPhase::kKilled);
  EXPECT_TRUE(reports[2].stopped_by_tessera);
  EXPECT_TRUE(adapter.Tracks("a-001"));
  EXPECT_FALSE(adapter.Tracks("a-002"));
}

// Pending in Slurm past the timeout (5 min by default): scancelled, and once Slurm confirms,
// every task is reported killed with Slurm state PENDING and why, to be placed again.
TEST_F(AdapterTest, AGangPendingTooLongIsCancelledInSlurmAndHandedBack) {
  runner->Reply("sbatch", {0, "42", ""});
  runner->Reply("squeue", Squeue("tessera:train:a-001", "PENDING", 0, "Resources"));
  runner->Reply("scancel", {0, "", ""});
  adapter.Launch(Task(0, "node1"));
  adapter.Launch(Task(1, "node2"));
  const auto t0 = Clock::now();
  adapter.Step(t0);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].phase, AllocationPhase::kPending);
  adapter.Step(t0 + std::chrono::seconds(299));
  adapter.Step(t0 + std::chrono::seconds(300));  // past it: cancelled at the next step
  EXPECT_EQ(runner->Count("scancel"), 0);
  runner->Reply("squeue", Squeue("tessera:train:a-001", "CANCELLED", 15));
  adapter.Step(t0 + std::chrono::seconds(301));
  EXPECT_EQ(runner->Count("scancel"), 1);
  ASSERT_EQ(reports.size(), 4u);
  for (const TaskReport& r : {reports[2], reports[3]}) {
    EXPECT_EQ(r.phase, AllocationPhase::kKilled) << r.allocation;
    EXPECT_EQ(r.state, "PENDING") << r.allocation;  // not CANCELLED: nobody cancelled the job
    EXPECT_EQ(r.message,
              "Slurm job 42 PENDING (Resources) for 300 s, past the Slurm pool's pending "
              "timeout (300 s): cancelled in Slurm, to be placed again");
  }
  EXPECT_FALSE(adapter.Tracks("a-001"));
  adapter.Step(t0 + std::chrono::seconds(400));
  EXPECT_EQ(runner->Count("scancel"), 1);
  EXPECT_EQ(reports.size(), 4u);
}

// Held in Slurm (someone chose that), or a job that must not be restarted (sbatch
// --no-requeue: onEviction FailJob): left pending in Slurm, however long.
TEST_F(AdapterTest, HeldOrNoRequeueJobsStayPendingInSlurm) {
  for (const auto& [reason, requeue] : {std::pair<std::string, bool>{"JobHeldAdmin", true},
                                        std::pair<std::string, bool>{"Resources", false}}) {
    SCOPED_TRACE(reason);
    restart_on_eviction = requeue;
    const std::string alloc = requeue ? "a-001" : "b-001";  // a fresh allocation per case
    runner->Reply("sbatch", {0, "42", ""});
    runner->Reply("squeue", Squeue("tessera:train:" + alloc, "PENDING", 0, reason));
    server::Dispatch t0 = Task(0, "node1"), t1 = Task(1, "node2");
    t0.allocation = alloc;
    t1.allocation = alloc + "-1";
    t0.attempt = t1.attempt = requeue ? 1 : 2;
    adapter.Launch(t0);
    adapter.Launch(t1);
    const auto start = Clock::now();
    for (int m = 0; m <= 60; m += 5) adapter.Step(start + std::chrono::minutes(m));
    EXPECT_EQ(runner->Count("scancel"), 0);
    EXPECT_TRUE(adapter.Tracks(alloc));
    EXPECT_EQ(reports.back().phase, AllocationPhase::kPending);
    adapter.Stop(alloc, 0);
    runner->Reply("scancel", {0, "", ""});
    runner->Reply("squeue", Squeue("tessera:train:" + alloc, "CANCELLED", 15));
    adapter.Step(start + std::chrono::minutes(61));
    EXPECT_FALSE(adapter.Tracks(alloc));
    runner->calls.clear();
  }
}

// A Slurm limit (its account's, QOS's or partition's) holds wherever the job is placed: past
// the timeout it is left in Slurm's queue, and its tasks' message says why.
TEST_F(AdapterTest, AJobPendingOnASlurmLimitIsLeftInSlurmsQueue) {
  runner->Reply("sbatch", {0, "42", ""});
  runner->Reply("squeue", Squeue("tessera:train:a-001", "PENDING", 0, "QOSMaxGRESPerUser"));
  adapter.Launch(Task(0, "node1"));
  adapter.Launch(Task(1, "node2"));
  const auto t0 = Clock::now();
  for (int m = 0; m <= 30; m += 5) adapter.Step(t0 + std::chrono::minutes(m));
  EXPECT_EQ(runner->Count("scancel"), 0);
  EXPECT_TRUE(adapter.Tracks("a-001"));
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().phase, AllocationPhase::kPending);
  EXPECT_EQ(reports.back().message,
            "Slurm job 42 PENDING (QOSMaxGRESPerUser): a Slurm limit, not its nodes: left in "
            "Slurm's queue (placing it again would not lift it)");
}

// sbatch's answer was lost (slurmctld went away mid-call): the job may exist in Slurm under
// its tag. A stop then asks Slurm (squeue by tag, scancel what it finds) and the tasks are
// over only once Slurm has answered, never "stopped before it reached Slurm" on a guess.
TEST_F(AdapterTest, AStopWhileTheSubmissionIsUncertainCancelsItInSlurm) {
  runner->Fail("sbatch", Unavailable("sbatch: error: Batch job submission failed: Socket "
                                     "timed out on send/recv operation"));
  adapter.Launch(Task(0, "node1"));
  adapter.Launch(Task(1, "node2"));
  const auto t0 = Clock::now();
  adapter.Step(t0);
  ASSERT_EQ(runner->Count("sbatch"), 1);
  EXPECT_TRUE(reports.empty());
  adapter.Stop("a-001", 30);
  adapter.Stop("a-002", 30);
  // Slurm still away: nothing is known, so nothing is reported; asked again later.
  runner->Fail("squeue", Unavailable("squeue: error: Unable to contact slurm controller"));
  adapter.Step(t0 + std::chrono::seconds(3));
  EXPECT_TRUE(reports.empty());
  EXPECT_TRUE(adapter.Tracks("a-001"));
  EXPECT_EQ(runner->Count("scancel"), 0);
  // It answers: the lost sbatch did create job 42, which is cancelled.
  runner->Reply("squeue", Squeue("tessera:train:a-001", "RUNNING"));
  runner->Reply("scancel", {0, "", ""});
  adapter.Step(t0 + std::chrono::seconds(6));
  ASSERT_EQ(runner->Count("scancel"), 1);
  EXPECT_EQ(runner->calls.back().argv, (std::vector<std::string>{"scancel", "42"}));
  EXPECT_EQ(runner->Count("sbatch"), 1);  // never submitted again
  ASSERT_EQ(reports.size(), 2u);
  for (const TaskReport& r : reports) {
    EXPECT_EQ(r.phase, AllocationPhase::kKilled) << r.allocation;
    EXPECT_NE(r.message.find("answer was lost"), std::string::npos) << r.message;
  }
  EXPECT_FALSE(adapter.Tracks("a-001"));
  EXPECT_FALSE(adapter.Tracks("a-002"));
}

TEST(PlacingAgainMayHelp, NodesAndQueueYesLimitsNo) {
  for (const char* r : {"Resources", "Priority", "ReqNodeNotAvail, UnavailableNodes:node3",
                        "Nodes_required_for_job_are_DOWN,_DRAINED_or_reserved", "PartitionDown",
                        "AccountNotAllowed", "QOSNotAllowed"})
    EXPECT_TRUE(PlacingAgainMayHelp(r)) << r;
  for (const char* r : {"QOSMaxGRESPerUser", "AssocGrpGRES", "PartitionTimeLimit",
                        "PartitionNodeLimit", "Dependency", "BeginTime", "InvalidAccount", ""})
    EXPECT_FALSE(PlacingAgainMayHelp(r)) << r;
}

// Placed again three times and kept pending each time: whatever holds it is not the nodes
// Tessera chose, so the fourth attempt is left in Slurm's queue instead of going round again.
TEST_F(AdapterTest, AJobIsPlacedAgainAtMostThreeTimesInARow) {
  for (int attempt = 1; attempt <= 4; ++attempt) {
    SCOPED_TRACE(attempt);
    server::Dispatch t0 = Task(0, "node1"), t1 = Task(1, "node2");
    t0.allocation = "r" + std::to_string(attempt) + "-0";
    t1.allocation = "r" + std::to_string(attempt) + "-1";
    t0.attempt = t1.attempt = attempt;
    runner->Reply("sbatch", {0, "42", ""});
    runner->Reply("squeue", Squeue("tessera:train:" + t0.allocation, "PENDING", 0, "Resources"));
    runner->Reply("scancel", {0, "", ""});
    adapter.Launch(t0);
    adapter.Launch(t1);
    const auto start = Clock::now();
    adapter.Step(start);
    adapter.Step(start + std::chrono::seconds(300));
    if (attempt <= 3) {
      runner->Reply("squeue", Squeue("tessera:train:" + t0.allocation, "CANCELLED", 15));
      adapter.Step(start + std::chrono::seconds(301));
      EXPECT_EQ(runner->Count("scancel"), attempt);
      EXPECT_FALSE(adapter.Tracks(t0.allocation));
      EXPECT_EQ(reports.back().phase, AllocationPhase::kKilled);
    } else {
      for (int m = 6; m <= 60; m += 6) adapter.Step(start + std::chrono::minutes(m));
      EXPECT_EQ(runner->Count("scancel"), 3);
      EXPECT_TRUE(adapter.Tracks(t0.allocation));
      EXPECT_EQ(reports.back().phase, AllocationPhase::kPending);
      EXPECT_NE(reports.back().message.find(
                    "left in Slurm's queue after 3 placements that Slurm kept pending"),
                std::string::npos)
          << reports.back().message;
    }
  }
}

TEST_F(AdapterTest, RefusedSubmissionFailsEveryTask) {
  runner->Reply("sbatch", {1, "",
                           "sbatch: error: Batch job submission failed: Requested node "
                           "configuration is not available\n"});
  adapter.Launch(Task(0, "node1"));
  adapter.Launch(Task(1, "node2"));
  adapter.Step(Clock::now());
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].phase, AllocationPhase::kFailed);
  EXPECT_NE(reports[0].message.find("Requested node configuration"), std::string::npos);
}

// sbatch refuses the job's account, QOS or group (a partition's rules changed since
// discovery): the tasks go back as evicted (state REFUSED) to be placed again, at most
// max_pending_replacements times in a row; then the job fails with Slurm's words.
TEST_F(AdapterTest, AnAccessRefusalIsPlacedAgainAFewTimesThenFails) {
  runner->Reply("sbatch", {1, "",
                           "sbatch: error: Batch job submission failed: Invalid account or "
                           "account/partition combination specified\n"});
  for (int attempt = 1; attempt <= 4; ++attempt) {
    SCOPED_TRACE(attempt);
    reports.clear();
    server::Dispatch t0 = Task(0, "node1"), t1 = Task(1, "node2");
    t0.allocation = "r" + std::to_string(attempt) + "-0";
    t1.allocation = "r" + std::to_string(attempt) + "-1";
    t0.attempt = t1.attempt = attempt;
    adapter.Launch(t0);
    adapter.Launch(t1);
    adapter.Step(Clock::now());
    ASSERT_EQ(reports.size(), 2u);
    EXPECT_FALSE(adapter.Tracks(t0.allocation));
    EXPECT_NE(reports[0].message.find("Invalid account"), std::string::npos);
    if (attempt <= 3) {
      EXPECT_EQ(reports[0].phase, AllocationPhase::kKilled);
      EXPECT_EQ(reports[0].state, "REFUSED");
    } else {
      EXPECT_EQ(reports[0].phase, AllocationPhase::kFailed);
    }
  }
  // A job that must not be placed again (onEviction FailJob) fails at once.
  restart_on_eviction = false;
  reports.clear();
  server::Dispatch t = Task(0, "node1");
  t.job = "train";
  t.allocation = "nr-0";
  t.attempt = 9;
  tasks = 1;
  adapter.Launch(t);
  adapter.Step(Clock::now());
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].phase, AllocationPhase::kFailed);
}

TEST(JobInfoFromSpec, SbatchScriptAndCommand) {
  std::string script =
      "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=4\n#SBATCH -c 2\n"
      "#SBATCH --gres=gpu:a100:2\n#SBATCH -t 10\nsrun hostname\n";
  auto spec = spec::ParseSbatchScript(script);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  JobInfo info = JobInfoFromSpec(*spec, "mpi");
  EXPECT_EQ(info.tasks, 2);  // one Tessera task per node
  EXPECT_EQ(info.processes_per_task, 4);
  EXPECT_EQ(info.script, script);  // the original, unchanged
  EXPECT_TRUE(info.command.empty());
  EXPECT_EQ(info.time_limit_seconds, std::optional<int64_t>(600));
  EXPECT_FALSE(info.env.contains("SLURM_NTASKS"));
  EXPECT_FALSE(info.exclusive);
  auto whole = spec::ParseSbatchScript("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --exclusive\ntrue\n");
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_TRUE(JobInfoFromSpec(*whole, "whole").exclusive);  // sbatch is told --exclusive

  spec::JobSpec plain;
  plain.job.groups.resize(1);
  plain.job.groups[0].replicas = 3;
  plain.templates.emplace_back();
  plain.templates[0].command = {"python3", "train.py"};
  plain.templates[0].env = {{"A", "1"}};
  plain.templates[0].working_dir = "/w";
  JobInfo p = JobInfoFromSpec(plain, "plain");
  EXPECT_EQ(p.tasks, 3);
  EXPECT_EQ(p.command, (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(p.working_dir, "/w");
  EXPECT_EQ(p.processes_per_task, 1);
  EXPECT_TRUE(p.script.empty());
}

// Slurm names the job tessera-<job> (squeue tells Tessera's jobs apart): a script's %x is
// expanded by Tessera to the name the user gave, and its -o / -e go to sbatch as options.
TEST(JobInfoFromSpec, PercentXIsTheJobsOwnName) {
  auto s = spec::ParseSbatchScript(
      "#!/bin/bash\n#SBATCH -J train\n#SBATCH -o logs/%x-%j.out\n#SBATCH -e %x.%A.%a.err\ntrue\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  JobInfo info = JobInfoFromSpec(*s, "train");
  EXPECT_EQ(info.stdout_file, "logs/train-%j.out");
  EXPECT_EQ(info.stderr_file, "train.%A.%a.err") << "not an array: %A and %a are Slurm's";
  auto none = spec::ParseSbatchScript("#!/bin/bash\ntrue\n");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(JobInfoFromSpec(*none, "x").stdout_file, "");  // Tessera's own files
}

// An array element runs on Slurm as a job of its own: its SLURM_ARRAY_* go in its --export,
// and its script's -o / -e get %A and %a expanded by Tessera (Slurm would write the element's
// own id and 4294967294), the rest left to Slurm.
TEST(JobInfoFromSpec, AnArrayElementsEnvironmentAndFiles) {
  struct Case {
    const char* directives;
    std::string stdout_file, stderr_file;
  } cases[] = {
      {"#SBATCH -o out-%A_%a-%j.log\n", "out-7_3-%j.log", ""},  // stderr goes with stdout
      {"#SBATCH -o %x-%a.out\n", "arr-3.out", ""},              // the array's name
      {"#SBATCH -e err-%a\n", "slurm-7_3.out", "err-3"},
      {"#SBATCH -o o-%a\n#SBATCH -e e-%a\n", "o-3", "e-3"},
      {"", "", ""},  // Tessera's own log files (JobOutputFiles)
  };
  for (const auto& c : cases) {
    auto s = spec::ParseSbatchScript(std::string("#!/bin/bash\n#SBATCH --array=1-3\n") +
                                     c.directives + "true\n");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    auto elements = spec::ArrayElements(*s, "arr", 7);
    ASSERT_TRUE(elements.ok()) << elements.status().ToString();
    JobInfo info = JobInfoFromSpec(elements->back(), "arr_3");
    EXPECT_EQ(info.stdout_file, c.stdout_file) << c.directives;
    EXPECT_EQ(info.stderr_file, c.stderr_file) << c.directives;
    EXPECT_EQ(info.env.at("SLURM_ARRAY_TASK_ID"), "3");
    EXPECT_EQ(info.env.at("SLURM_ARRAY_JOB_ID"), "7");
  }
}

}  // namespace
}  // namespace tessera::slurm
