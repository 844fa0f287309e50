// Against a REAL Slurm 22.05: munge, slurmctld and 4 emulated slurmd nodes (32 CPUs,
// 8 fake a100 GPUs each) on loopback, from scripts/slurm/up.sh. Under ctest the cluster is
// a fixture (slurm_cluster_up / slurm_cluster_down, the latter runs even when tests fail);
// run directly, this binary starts and stops it itself. Skips, saying why, where Slurm
// cannot run (not root, packages missing).
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "backends/slurm/job_state.h"
#include "backends/slurm/live_cluster.h"
#include "backends/slurm/server_adapter.h"
#include "backends/slurm/slurm_pool.h"

namespace tessera::slurm {
namespace {

namespace fs = std::filesystem;

using testing::ClusterDir;
using testing::ReadFile;
using testing::Shell;
using testing::SourceDir;
const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new testing::LiveClusterEnvironment);

class SlurmIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip = ReadFile(ClusterDir() + "/skip");
    if (!skip.empty()) GTEST_SKIP() << "Slurm cannot run here: " << skip;
    if (!fs::exists(ClusterDir() + "/slurm.conf")) {
      GTEST_SKIP() << "no cluster at " << ClusterDir() << " (scripts/slurm/up.sh not run)";
    }
    runner_ = std::make_shared<SubprocessRunner>(
        std::map<std::string, std::string>{{"SLURM_CONF", ClusterDir() + "/slurm.conf"}});
    pool_ = std::make_unique<SlurmPool>(runner_, SlurmPoolOptions{});
    work_ =
        ClusterDir() + "/work/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(work_);
    fs::create_directories(work_);
  }

  // Fresh allocation ids per test: the cluster lives across tests.
  std::string Alloc(const std::string& name) {
    return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
           name;
  }

  static Binding Bind(const std::string& job, int32_t task, const std::string& node,
                      int64_t cpu_milli, std::vector<int32_t> gpus) {
    Binding b;
    b.job = job;
    b.task = task;
    b.allocation.node = node;
    b.allocation.cpu_milli = cpu_milli;
    b.allocation.memory_bytes = int64_t{256} << 20;
    for (int32_t g : gpus) b.allocation.devices.push_back({g, 1000, 0, -1});
    return b;
  }

  DispatchRequest Request(const std::string& job, std::vector<Binding> bindings,
                          std::vector<std::string> command) {
    DispatchRequest r;
    r.job = job;
    r.allocation = Alloc(job);
    r.bindings = std::move(bindings);
    r.command = std::move(command);
    r.working_dir = work_;
    r.stdout_path = work_ + "/" + job + ".out";
    return r;
  }

  // Polls until the allocation reaches `until` (or any terminal phase); <= 60 s.
  AllocationStatus WaitFor(const std::string& allocation,
                           std::function<bool(const AllocationStatus&)> until) {
    AllocationStatus last;
    for (int i = 0; i < 300; ++i) {
      auto st = pool_->Poll();
      if (st.ok()) {
        for (const AllocationStatus& s : *st) {
          if (s.allocation == allocation) last = s;
        }
        if (last.allocation == allocation && until(last)) return last;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << allocation << " did not get there; last phase "
                  << AllocationPhaseName(last.phase) << ": " << last.message;
    return last;
  }
  AllocationStatus WaitTerminal(const std::string& allocation) {
    return WaitFor(allocation, [](const AllocationStatus& s) { return IsTerminal(s.phase); });
  }

  // Slurm jobs carrying a given allocation tag, finished ones included.
  int TaggedCount(const std::string& allocation) {
    SlurmCli cli(*runner_);
    auto jobs = cli.Jobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    int n = 0;
    for (const SlurmJob& j : *jobs) {
      auto tag = ParseTag(j.comment);
      n += tag && tag->allocation == allocation && j.het_job_offset == 0;
    }
    return n;
  }

  std::shared_ptr<SubprocessRunner> runner_;
  std::unique_ptr<SlurmPool> pool_;
  std::string work_;
};

TEST_F(SlurmIntegrationTest, DiscoversNodesGpusAndDrain) {
  auto nodes = pool_->Discover();
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 4u);
  for (const Node& n : *nodes) {
    EXPECT_EQ(n.pool, "slurm");
    EXPECT_EQ(n.cpu_milli, 32000) << n.name;
    EXPECT_EQ(n.memory_bytes, int64_t{256000} << 20) << n.name;
    ASSERT_EQ(n.devices.size(), 8u) << n.name;
    EXPECT_EQ(n.devices[0].model, "A100");
    EXPECT_EQ(n.labels.at("slurm.partition"), "debug");
    EXPECT_TRUE(n.ready);
    EXPECT_FALSE(n.unschedulable);
  }
  ASSERT_EQ(Shell("SLURM_CONF=" + ClusterDir() +
                  "/slurm.conf scontrol update nodename=node4 state=drain reason=maintenance"),
            0);
  auto drained = pool_->Discover();
  ASSERT_TRUE(drained.ok());
  EXPECT_TRUE((*drained)[3].unschedulable);
  EXPECT_EQ((*drained)[3].labels.at("slurm.reason"), "maintenance");
  ASSERT_EQ(Shell("SLURM_CONF=" + ClusterDir() +
                  "/slurm.conf scontrol update nodename=node4 state=resume"),
            0);
  // Slurm pings a resumed node first (NOT_RESPONDING for a moment): not ready until then.
  bool back = false;
  for (int i = 0; i < 100 && !back; ++i) {
    auto nodes = pool_->Discover();
    ASSERT_TRUE(nodes.ok());
    back = (*nodes)[3].ready && !(*nodes)[3].unschedulable;
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(back) << "node4 did not come back after resume";
}

TEST_F(SlurmIntegrationTest, GangRunsExactlyWhereTesseraPlacedIt) {
  // 4 tasks: 2 on node2, 2 on node3, 2 GPUs each; every task records where it ran.
  std::string rec = work_ + "/task-$SLURM_PROCID";
  DispatchRequest r =
      Request("gang",
              {Bind("gang", 0, "node2", 1000, {0, 1}), Bind("gang", 1, "node2", 1000, {2, 3}),
               Bind("gang", 2, "node3", 1000, {0, 1}), Bind("gang", 3, "node3", 1000, {2, 3})},
              {"sh", "-c", "echo $SLURMD_NODENAME $SLURM_NTASKS $SLURM_JOB_NAME > " + rec});
  auto id = pool_->Dispatch(r);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  AllocationStatus st = WaitTerminal(r.allocation);
  EXPECT_EQ(st.phase, AllocationPhase::kSucceeded) << st.message << "\n" << ReadFile(r.stdout_path);
  EXPECT_EQ(st.external_id, *id);
  EXPECT_EQ(st.nodes, (std::vector<std::string>{"node2", "node3"}));
  std::vector<std::string> where;
  for (int t = 0; t < 4; ++t) where.push_back(ReadFile(work_ + "/task-" + std::to_string(t)));
  EXPECT_EQ(where, (std::vector<std::string>{"node2 4 tessera-gang\n", "node2 4 tessera-gang\n",
                                             "node3 4 tessera-gang\n", "node3 4 tessera-gang\n"}));
}

// An exclusive job (sbatch --exclusive) gets the whole node from Slurm: every CPU of it,
// though Tessera bound one; a plain job on the same node gets what it asked for.
TEST_F(SlurmIntegrationTest, ExclusiveJobGetsTheWholeNodeFromSlurm) {
  std::string rec = work_ + "/cpus-";
  for (bool exclusive : {true, false}) {
    const std::string job = exclusive ? "whole" : "part";
    DispatchRequest r = Request(job, {Bind(job, 0, "node3", 1000, {0})},
                                {"sh", "-c", "echo $SLURM_CPUS_ON_NODE > " + rec + job});
    r.exclusive = exclusive;
    ASSERT_TRUE(pool_->Dispatch(r).ok());
    AllocationStatus st = WaitTerminal(r.allocation);
    EXPECT_EQ(st.phase, AllocationPhase::kSucceeded) << st.message;
  }
  EXPECT_EQ(ReadFile(rec + "whole"), "32\n");  // the test cluster's nodes have 32 CPUs
  EXPECT_EQ(ReadFile(rec + "part"), "1\n");
}

TEST_F(SlurmIntegrationTest, UnevenPlacementRunsAsOneHeterogeneousJob) {
  // 2 tasks on node1 with 1 GPU each, 1 task on node4 with 3 GPUs: two components.
  DispatchRequest r = Request(
      "het",
      {Bind("het", 0, "node1", 1000, {0}), Bind("het", 1, "node1", 1000, {1}),
       Bind("het", 2, "node4", 2000, {0, 1, 2})},
      {"sh", "-c", "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES > " + work_ + "/t-$SLURM_PROCID"});
  ASSERT_TRUE(pool_->Dispatch(r).ok());
  AllocationStatus st = WaitTerminal(r.allocation);
  EXPECT_EQ(st.phase, AllocationPhase::kSucceeded) << st.message << "\n" << ReadFile(r.stdout_path);
  EXPECT_EQ(st.nodes, (std::vector<std::string>{"node1", "node4"}));
  // Slurm numbers tasks across het components in order: 0-1 on node1, 2 on node4.
  EXPECT_EQ(ReadFile(work_ + "/t-0").substr(0, 6), "node1 ");
  EXPECT_EQ(ReadFile(work_ + "/t-2"), "node4 0,1,2\n");
}

TEST_F(SlurmIntegrationTest, SbatchScriptRunsUnchanged) {
  // A user's script with its own (conflicting) placement lines and an output path.
  std::string out = work_ + "/user-%j.log";
  DispatchRequest r = Request("script", {Bind("script", 0, "node3", 2000, {0, 1})}, {});
  r.stdout_path.clear();
  r.script = "#!/bin/bash\n#SBATCH --gpus=4\n#SBATCH --ntasks=8\n#SBATCH -J mine\n#SBATCH -o " +
             out +
             "\n#SBATCH --time=5\nset -e\necho \"nodes=$SLURM_JOB_NODELIST "
             "gpus=$CUDA_VISIBLE_DEVICES tasks=$SLURM_NTASKS cpus=$SLURM_CPUS_ON_NODE\"\n";
  auto id = pool_->Dispatch(r);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  AllocationStatus st = WaitTerminal(r.allocation);
  EXPECT_EQ(st.phase, AllocationPhase::kSucceeded) << st.message;
  std::string log = ReadFile(work_ + "/user-" + id->substr(6) + ".log");  // the #SBATCH -o
  EXPECT_EQ(log, "nodes=node3 gpus=0,1 tasks=1 cpus=2\n");
}

TEST_F(SlurmIntegrationTest, ExitCodesAndCancel) {
  DispatchRequest fail =
      Request("fail", {Bind("fail", 0, "node1", 1000, {})}, {"sh", "-c", "exit 3"});
  DispatchRequest slow = Request("slow", {Bind("slow", 0, "node2", 1000, {0})}, {"sleep", "300"});
  ASSERT_TRUE(pool_->Dispatch(fail).ok());
  ASSERT_TRUE(pool_->Dispatch(slow).ok());
  AllocationStatus f = WaitTerminal(fail.allocation);
  EXPECT_EQ(f.phase, AllocationPhase::kFailed);
  EXPECT_EQ(f.exit_code, 3);
  EXPECT_GT(f.finished_at, 0);
  AllocationStatus running = WaitFor(slow.allocation, [](const AllocationStatus& s) {
    return s.phase != AllocationPhase::kPending;
  });
  EXPECT_EQ(running.phase, AllocationPhase::kRunning);
  EXPECT_GT(running.started_at, 0);
  ASSERT_TRUE(pool_->Cancel(slow.allocation).ok());
  AllocationStatus k = WaitTerminal(slow.allocation);
  EXPECT_EQ(k.phase, AllocationPhase::kKilled) << k.message;
  ASSERT_TRUE(pool_->Cancel(slow.allocation).ok());  // idempotent
}

TEST_F(SlurmIntegrationTest, PendingOnDrainedNodeThenRuns) {
  std::string conf = "SLURM_CONF=" + ClusterDir() + "/slurm.conf ";
  ASSERT_EQ(Shell(conf + "scontrol update nodename=node2 state=drain reason=test"), 0);
  DispatchRequest r = Request("drained", {Bind("drained", 0, "node2", 1000, {})}, {"true"});
  ASSERT_TRUE(pool_->Dispatch(r).ok());
  AllocationStatus p = WaitFor(r.allocation, [](const AllocationStatus& s) {
    return s.phase == AllocationPhase::kPending && s.reason == "ReqNodeNotAvail";
  });
  EXPECT_EQ(p.phase, AllocationPhase::kPending);
  ASSERT_EQ(Shell(conf + "scontrol update nodename=node2 state=resume"), 0);
  EXPECT_EQ(WaitTerminal(r.allocation).phase, AllocationPhase::kSucceeded);
}

// Partitions made for one test, removed after it (their jobs cancelled) even when it fails:
// the cluster is shared.
class ScratchPartitions {
 public:
  explicit ScratchPartitions(std::vector<std::pair<std::string, std::string>> parts)
      : parts_(std::move(parts)) {
    Remove();  // left over by a crashed run
    for (const auto& [name, spec] : parts_)
      EXPECT_EQ(Shell(Conf() + "scontrol create partitionname=" + name + " " + spec), 0) << name;
  }
  ~ScratchPartitions() { Remove(); }

 private:
  static std::string Conf() { return "SLURM_CONF=" + ClusterDir() + "/slurm.conf "; }
  void Remove() {
    for (const auto& [name, spec] : parts_)
      (void)Shell(Conf() + "scancel -p " + name + " 2>/dev/null; " + Conf() +
                  "scontrol delete partitionname=" + name + " 2>/dev/null");
  }
  std::vector<std::pair<std::string, std::string>> parts_;
};

// Which partition Slurm ran a job in: the cluster's default if it can take the job, else an
// UP one whose MaxTime allows the job's --time; a DOWN one never (a job sent there would wait
// forever, PartitionDown), and none that fits is an error naming each one's reason.
TEST_F(SlurmIntegrationTest, PartitionIsTheDefaultOrAnUpOneThatAllowsTheTimeLimit) {
  // "aaa-down" comes first by name and is DOWN; "short" allows 10 min; "long" a day.
  ScratchPartitions scratch({{"aaa-down", "nodes=node1 state=down"},
                             {"short", "nodes=node1 maxtime=10 state=up"},
                             {"long", "nodes=node[1-2] maxtime=1-0 state=up"}});
  SlurmCli cli(*runner_);
  auto ran_in = [&](SlurmPool& pool, const std::string& job, std::optional<int64_t> limit,
                    const std::string& partition = "") -> std::string {
    DispatchRequest r = Request(job, {Bind(job, 0, "node1", 1000, {})}, {"true"});
    r.time_limit_seconds = limit;
    r.partition = partition;
    auto id = pool.Dispatch(r);
    if (!id.ok()) return id.status().ToString();
    auto jobs = cli.Jobs();
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    for (const SlurmJob& j : *jobs)
      if (ExternalId(j.job_id) == *id) return j.partition;
    return "no Slurm job " + *id;
  };
  // Every partition served: the default, debug.
  EXPECT_EQ(ran_in(*pool_, "dflt", 300), "debug");
  // Served: the three scratch ones. 5 min: the tightest that allows it; 20 min and none: long.
  SlurmPoolOptions o;
  o.discovery.partitions = {"aaa-down", "short", "long"};
  SlurmPool scoped(runner_, o);
  EXPECT_EQ(ran_in(scoped, "five", 300), "short");
  EXPECT_EQ(ran_in(scoped, "twenty", 1200), "long");
  EXPECT_EQ(ran_in(scoped, "unlimited", std::nullopt), "long");
  std::string named = ran_in(scoped, "named", 300, "aaa-down");
  EXPECT_NE(named.find("Slurm partition \"aaa-down\" cannot run the job on node1: State=DOWN"),
            std::string::npos)
      << named;
  o.discovery.partitions = {"aaa-down", "short"};
  SlurmPool narrow(runner_, o);
  std::string none = ran_in(narrow, "none", 1200);
  EXPECT_NE(none.find("no Slurm partition can run the job on node1 (aaa-down: State=DOWN; debug: "
                      "not served by this pool (--slurm-partition); long: not served by this pool "
                      "(--slurm-partition); short: MaxTime=0-00:10:00 is less than the job's "
                      "--time=0-00:20:00)"),
            std::string::npos)
      << none;
  for (const char* job : {"dflt", "five", "twenty", "unlimited"})
    EXPECT_EQ(WaitTerminal(Alloc(job)).phase, AllocationPhase::kSucceeded) << job;
}

// Runs every Slurm client as another user (runuser), as a server that is not root would.
class AsUserRunner : public CommandRunner {
 public:
  AsUserRunner(std::shared_ptr<CommandRunner> inner, std::string user)
      : inner_(std::move(inner)), user_(std::move(user)) {}
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                              const std::string& input) override {
    std::vector<std::string> full = {"runuser", "-u", user_, "--"};
    full.insert(full.end(), argv.begin(), argv.end());
    return inner_->Run(full, input);
  }

 private:
  std::shared_ptr<CommandRunner> inner_;
  std::string user_;
};

// A partition's AllowAccounts / AllowGroups, as Slurm 22.05 without slurmdbd applies them:
// AllowAccounts other than ALL keeps every job pending (AccountNotAllowed), AllowGroups
// refuses the sbatch of a user in none of the groups (root may use any partition).
TEST_F(SlurmIntegrationTest, PartitionAccessRulesAreRespected) {
  // "acct" is what the admin prefers (PriorityTier), but takes only account ml.
  ScratchPartitions scratch({{"acct", "nodes=node[1-2] allowaccounts=ml prioritytier=10 state=up"},
                             {"open", "nodes=node[1-2] state=up"},
                             {"grp", "nodes=node[3-4] allowgroups=ALL state=up"}});
  SlurmPoolOptions o;
  o.discovery.partitions = {"acct", "open", "grp"};
  SlurmPool pool(runner_, o);
  ASSERT_TRUE(pool.Discover().ok());
  const std::string cv = "#!/bin/sh\n#SBATCH -A cv\ntrue\n";
  EXPECT_EQ(pool.RefusingNodes("cv", cv).size(), 0u);  // "open" admits it on node1-2
  DispatchRequest r = Request("cv", {Bind("cv", 0, "node1", 1000, {})}, {});
  r.script = cv;
  auto id = pool.Dispatch(r);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  SlurmCli cli(*runner_);
  auto jobs = cli.Jobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  for (const SlurmJob& j : *jobs) {
    if (ExternalId(j.job_id) == *id) {
      EXPECT_EQ(j.partition, "open");
    }
  }
  // (In "acct" it would wait forever: Slurm keeps it PENDING, AccountNotAllowed.)
  EXPECT_EQ(WaitTerminal(r.allocation).phase, AllocationPhase::kSucceeded);

  // Served "acct" alone: node1-2 refuse account cv, and a dispatch there says so.
  o.discovery.partitions = {"acct"};
  SlurmPool only_acct(runner_, o);
  ASSERT_TRUE(only_acct.Discover().ok());
  using Want = std::map<std::string, std::string>;
  const std::string why = "Slurm partition acct refuses account cv (AllowAccounts=ml)";
  EXPECT_EQ(only_acct.RefusingNodes("cv", cv), Want({{"node1", why}, {"node2", why}}));
  EXPECT_TRUE(only_acct.RefusingNodes("ml", "#!/bin/sh\n#SBATCH -A ml\ntrue\n").empty());
  // sbatch removes quotes and Slurm lower-cases account names: this is account ml too, and
  // it runs in "acct".
  const std::string quoted = "#!/bin/sh\n#SBATCH --account=\"ML\"\ntrue\n";
  EXPECT_TRUE(only_acct.RefusingNodes("quoted", quoted).empty());
  DispatchRequest q = Request("quoted", {Bind("quoted", 0, "node1", 1000, {})}, {});
  q.script = quoted;
  auto quoted_id = only_acct.Dispatch(q);
  ASSERT_TRUE(quoted_id.ok()) << quoted_id.status().ToString();
  auto after = cli.Jobs();
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  bool found = false;
  for (const SlurmJob& j : *after) {
    if (ExternalId(j.job_id) == *quoted_id) {
      found = true;
      EXPECT_EQ(j.partition, "acct");
    }
  }
  EXPECT_TRUE(found) << *quoted_id;
  r.allocation = Alloc("cv-acct");
  auto refused = only_acct.Dispatch(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(IsAccessRefusal(refused.status())) << refused.status().ToString();

  // AllowGroups, for real: sbatch as nobody, which is not in group root.
  if (Shell("runuser -u nobody -- true 2>/dev/null") != 0)
    GTEST_SKIP() << "runuser -u nobody does not work here";
  o.discovery.partitions = {"grp"};
  o.sbatch.submitter = Submitter{"nobody", {"nogroup"}, false};
  SlurmPool as_nobody(std::make_shared<AsUserRunner>(runner_, "nobody"), o);
  ASSERT_TRUE(as_nobody.Discover().ok());
  EXPECT_TRUE(as_nobody.RefusingNodes("nobody", "").empty());  // AllowGroups=ALL
  // The rule changes between discovery and dispatch: sbatch refuses, and the pool reads the
  // partitions again at once.
  ASSERT_EQ(Shell("SLURM_CONF=" + ClusterDir() +
                  "/slurm.conf scontrol update partitionname=grp allowgroups=root"),
            0);
  DispatchRequest g = Request("grp", {Bind("grp", 0, "node3", 1000, {})}, {"true"});
  g.working_dir = "/tmp";
  g.stdout_path = "/dev/null";
  auto sbatch_refused = as_nobody.Dispatch(g);
  ASSERT_FALSE(sbatch_refused.ok());
  EXPECT_NE(sbatch_refused.status().message().find("group not permitted to use this partition"),
            std::string::npos)
      << sbatch_refused.status().ToString();
  EXPECT_TRUE(IsAccessRefusal(sbatch_refused.status()));
  const std::string grp_why =
      "Slurm partition grp refuses user nobody (AllowGroups=root: none of its groups)";
  EXPECT_EQ(as_nobody.RefusingNodes("nobody", ""), Want({{"node3", grp_why}, {"node4", grp_why}}));
}

TEST_F(SlurmIntegrationTest, TesseraRestartAdoptsCancelsStaleAndNeverDuplicates) {
  DispatchRequest keep = Request("keep", {Bind("keep", 0, "node1", 1000, {0})}, {"sleep", "300"});
  DispatchRequest stale =
      Request("stale", {Bind("stale", 0, "node1", 1000, {1})}, {"sleep", "300"});
  ASSERT_TRUE(pool_->Dispatch(keep).ok());
  auto stale_id = pool_->Dispatch(stale);
  ASSERT_TRUE(stale_id.ok());
  // The server restarts: a new backend instance, knowing only what the server persisted.
  // It still wants `keep` (but never learned its Slurm id), and no longer wants `stale`.
  pool_ = std::make_unique<SlurmPool>(runner_, SlurmPoolOptions{});
  auto rep = pool_->Reconcile(
      {{"keep", keep.allocation, "", keep.bindings}, {"fresh", Alloc("fresh"), "", {}}});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->adopted.size(), 1u);
  EXPECT_EQ(rep->adopted[0].allocation, keep.allocation);
  EXPECT_EQ(rep->cancelled_stale, std::vector<std::string>{*stale_id});
  ASSERT_EQ(rep->missing.size(), 1u);
  EXPECT_EQ(rep->missing[0].allocation, Alloc("fresh"));
  // Dispatching `keep` again submits nothing.
  auto again = pool_->Dispatch(keep);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, rep->adopted[0].external_id);
  EXPECT_EQ(TaggedCount(keep.allocation), 1);
  EXPECT_EQ(WaitTerminal(stale.allocation).phase, AllocationPhase::kKilled);
  ASSERT_TRUE(pool_->Cancel(keep.allocation).ok());
  EXPECT_EQ(WaitTerminal(keep.allocation).phase, AllocationPhase::kKilled);
}

// The whole path of an sbatch script submitted to Tessera: the server's parser (spec) makes
// it one task per node; the server launches those tasks one by one through its Backend;
// Slurm runs the ORIGINAL script once, with Slurm's own view of 8 tasks on 2 nodes.
TEST_F(SlurmIntegrationTest, SbatchScriptThroughTheServerBackend) {
  std::string script =
      "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=4\n#SBATCH -c 2\n"
      "#SBATCH --gres=gpu:a100:2\n#SBATCH -t 5\n#SBATCH -o " +
      work_ +
      "/mpi-%j.out\n"
      "echo \"ntasks=$SLURM_NTASKS nodes=$SLURM_JOB_NODELIST\"\n"
      "srun bash -c 'echo $SLURMD_NODENAME' | sort | uniq -c | awk '{print $2\"=\"$1}'\n";
  auto spec = spec::ParseSbatchScript(script);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  spec->job.id = "mpi";
  std::mutex mu;
  std::vector<TaskReport> reports;
  ServerAdapterOptions fast;
  fast.poll = std::chrono::milliseconds(200);
  fast.retry = std::chrono::milliseconds(1000);
  {
    SlurmServerBackend backend(
        std::make_shared<SlurmPool>(runner_, SlurmPoolOptions{}),
        [&](const std::string& job) -> std::optional<JobInfo> {
          if (job != "mpi") return std::nullopt;
          return JobInfoFromSpec(*spec, job);
        },
        [&](const TaskReport& r) {
          std::lock_guard<std::mutex> lock(mu);
          reports.push_back(r);
        },
        fast);
    // What the engine decided: node2 and node4, 8 CPUs and 2 GPUs each.
    for (int32_t t = 0; t < 2; ++t) {
      server::Dispatch d;
      d.allocation = Alloc("t" + std::to_string(t));
      d.job = "mpi";
      d.task = t;
      d.placement.node = t == 0 ? "node2" : "node4";
      d.placement.cpu_milli = 8000;
      d.placement.memory_bytes = int64_t{512} << 20;
      d.placement.devices = {{0, 1000, 0, -1}, {1, 1000, 0, -1}};
      backend.Launch(d);
    }
    for (int i = 0; i < 300; ++i) {
      {
        std::lock_guard<std::mutex> lock(mu);
        int done = 0;
        for (const TaskReport& r : reports) done += IsTerminal(r.phase);
        if (done == 2) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().phase, AllocationPhase::kSucceeded) << reports.back().message;
  std::string id = reports.back().external_id.substr(6);
  EXPECT_EQ(ReadFile(work_ + "/mpi-" + id + ".out"),
            "ntasks=8 nodes=node[2,4]\nnode2=4\nnode4=4\n");
  EXPECT_EQ(TaggedCount(Alloc("t0")), 1);
}

TEST_F(SlurmIntegrationTest, SurvivesSlurmctldRestart) {
  DispatchRequest r =
      Request("ctld", {Bind("ctld", 0, "node3", 1000, {0})}, {"sh", "-c", "sleep 3; echo done"});
  auto id = pool_->Dispatch(r);
  ASSERT_TRUE(id.ok());
  WaitFor(r.allocation,
          [](const AllocationStatus& s) { return s.phase == AllocationPhase::kRunning; });
  // slurmctld goes away (the job finishes meanwhile) and comes back on its saved state.
  ASSERT_EQ(Shell(SourceDir() + "/scripts/slurm/ctld.sh stop >/dev/null"), 0);
  auto down = pool_->Poll();
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable) << down.status().ToString();
  // A dispatch while it is down fails retryably; retried later it is submitted once.
  DispatchRequest during = Request("during", {Bind("during", 0, "node4", 1000, {})}, {"true"});
  auto d = pool_->Dispatch(during);
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable) << d.status().ToString();
  ASSERT_EQ(Shell(SourceDir() + "/scripts/slurm/ctld.sh start >/dev/null"), 0);
  ASSERT_TRUE(pool_->Dispatch(during).ok());
  AllocationStatus st = WaitTerminal(r.allocation);
  EXPECT_EQ(st.phase, AllocationPhase::kSucceeded) << st.message;
  EXPECT_EQ(st.external_id, *id);
  EXPECT_EQ(ReadFile(r.stdout_path), "done\n");
  EXPECT_EQ(WaitTerminal(during.allocation).phase, AllocationPhase::kSucceeded);
  EXPECT_EQ(TaggedCount(r.allocation), 1);
  EXPECT_EQ(TaggedCount(during.allocation), 1);
}

}  // namespace
}  // namespace tessera::slurm
