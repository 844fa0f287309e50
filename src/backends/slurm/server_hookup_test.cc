// SlurmPoolHookup with a real ControlPlane (SQLite store, first-fit scripted engine) and a
// scripted Slurm: nodes appear in the server, a job's lifecycle follows squeue, and a
// restarted server adopts, re-dispatches or writes off (lost) exactly as the journal says.
// The real-Slurm, real-binary path is slurm_server_e2e_test.cc.
#include "backends/slurm/server_hookup.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "backends/slurm/test_support.h"
#include "server/control_plane.h"
#include "server/test_util.h"

namespace tessera::slurm {
namespace {

using server::ControlPlane;

// Slurm's clients, scripted; thread-safe (the hookup calls from several threads).
class FakeSlurm : public CommandRunner {
 public:
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                              const std::string& input) override {
    std::lock_guard<std::mutex> l(mu_);
    calls_[argv.at(0)]++;
    const std::string& p = argv.at(0);
    if (ctld_down_ && (p != "sinfo" || sinfo_down_))  // (sinfo answers unless told not to)
      return CommandResult{1, "",
                           p + ": error: Unable to contact slurm controller (connect failure)"};
    if (p == "sinfo") return CommandResult{0, Sinfo(), ""};
    if (p == "squeue") return CommandResult{0, Squeue(), ""};
    if (p == "sbatch" && refuse_sbatch > 0) {
      --refuse_sbatch;
      return CommandResult{1, "",
                           "sbatch: error: Batch job submission failed: User's group not "
                           "permitted to use this partition"};
    }
    if (p == "sbatch") {
      int64_t id = next_id_++;
      std::string comment;
      for (size_t i = 0; i + 1 < argv.size(); ++i)
        if (argv[i] == "--comment") comment = argv[i + 1];
      jobs_[id] = {comment, "PENDING", 0};
      last_sbatch_ = argv;
      last_script_ = input;
      return CommandResult{0, std::to_string(id) + "\n", ""};
    }
    if (p == "scancel") {
      for (size_t i = 1; i < argv.size(); ++i) jobs_[std::stoll(argv[i])].state = "CANCELLED";
      return CommandResult{0, "", ""};
    }
    if (p == "scontrol" && std::find(argv.begin(), argv.end(), "partition") != argv.end())
      return partitions.empty() ? testing::OnePartition() : CommandResult{0, partitions, ""};
    if (p == "scontrol") return CommandResult{1, "", "slurm_load_jobs error: Invalid job id"};
    return Internal("FakeSlurm: unexpected " + p);
  }
  int Calls(const std::string& p) {
    std::lock_guard<std::mutex> l(mu_);
    return calls_[p];
  }
  // Sets the state of every job (the test runs one at a time).
  void SetAll(const std::string& state, int64_t exit_status = 0,
              const std::string& reason = "None") {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, j] : jobs_) j.state = state, j.exit = exit_status, j.reason = reason;
  }
  // Every call but sinfo (and sinfo too with `sinfo_too`): "Unable to contact slurm controller".
  void SetCtldDown(bool down, bool sinfo_too = false) {
    std::lock_guard<std::mutex> l(mu_);
    ctld_down_ = down;
    sinfo_down_ = sinfo_too;
  }
  void SetNodeState(const std::string& node, const std::string& state) {
    std::lock_guard<std::mutex> l(mu_);
    node_state_[node] = state;
  }
  // Slurm ran the jobs on these nodes ("node1,node2").
  void SetJobNodes(const std::string& nodes) {
    std::lock_guard<std::mutex> l(mu_);
    job_nodes_ = nodes;
  }
  void Forget() {  // slurmctld purged everything (MinJobAge passed)
    std::lock_guard<std::mutex> l(mu_);
    jobs_.clear();
  }
  size_t Count() {
    std::lock_guard<std::mutex> l(mu_);
    return jobs_.size();
  }
  std::string JobState(int64_t id) {  // "" for a job it never had
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(id);
    return it == jobs_.end() ? "" : it->second.state;
  }
  std::vector<std::string> LastSbatch() {
    std::lock_guard<std::mutex> l(mu_);
    return last_sbatch_;
  }
  std::string LastScript() {  // what sbatch read on its stdin
    std::lock_guard<std::mutex> l(mu_);
    return last_script_;
  }
  std::string drained;     // a node to show drained (set before Start)
  std::string partitions;  // scontrol show partition's answer (set before Start; "": one, open)
  int refuse_sbatch = 0;   // the next this many sbatch calls are refused (a partition's rules)

 private:
  struct J {
    std::string comment, state;
    int64_t exit = 0;
    std::string reason = "None";
  };
  std::string Sinfo() {
    nlohmann::json doc = {{"errors", nlohmann::json::array()}, {"nodes", nlohmann::json::array()}};
    for (int i = 1; i <= 2; ++i) {
      std::string name = "node" + std::to_string(i);
      std::string state = name == drained ? "drained" : "idle";
      std::vector<std::string> flags;
      if (auto it = node_state_.find(name); it != node_state_.end()) {
        state = it->second;
        if (state == "down") flags = {"NOT_RESPONDING"};
      }
      doc["nodes"].push_back({{"name", name},
                              {"state", state},
                              {"state_flags", flags},
                              {"partitions", {"debug"}},
                              {"cpus", 32},
                              {"real_memory", 64000},
                              {"alloc_cpus", 0},
                              {"alloc_memory", 0},
                              {"gres", "gpu:a100:8"},
                              {"gres_used", ""}});
    }
    return doc.dump();
  }
  std::string Squeue() {
    nlohmann::json doc = {{"errors", nlohmann::json::array()}, {"jobs", nlohmann::json::array()}};
    for (const auto& [id, j] : jobs_)
      doc["jobs"].push_back({{"job_id", id},
                             {"het_job_id", 0},
                             {"het_job_offset", 0},
                             {"array_job_id", 0},
                             {"name", "x"},
                             {"comment", j.comment},
                             {"job_state", j.state},
                             {"state_reason", j.reason},
                             {"exit_code", j.exit},
                             {"nodes", job_nodes_},
                             {"submit_time", 1},
                             {"start_time", 2},
                             {"end_time", 3},
                             {"tasks", 1},
                             {"node_count", 1}});
    return doc.dump();
  }
  std::mutex mu_;
  std::map<std::string, int> calls_;
  std::map<int64_t, J> jobs_;
  std::vector<std::string> last_sbatch_;
  std::string last_script_;
  int64_t next_id_ = 42;
  bool ctld_down_ = false, sinfo_down_ = false;
  std::map<std::string, std::string> node_state_;
  std::string job_nodes_ = "node1";
};

const server::Principal kAdmin{"admin", server::Role::kAdmin, {"*"}};

class HookupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = server::testing::TempDir("slurm_hookup");
    std::filesystem::create_directories(dir_);
    slurm_ = std::make_shared<FakeSlurm>();
  }
  void TearDown() override {
    Close();
    std::filesystem::remove_all(dir_);
  }
  std::unique_ptr<ControlPlane> OpenControlPlane() {
    auto st = store::OpenSqliteStore(dir_);
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    if (!st.ok()) return nullptr;
    server::ControlPlaneOptions o;
    o.run_scheduler = false;
    std::unique_ptr<Engine> engine = std::make_unique<server::testing::ScriptedEngine>();
    if (real_engine_) {
      auto e = Engine::Create(DefaultEngineConfig());
      EXPECT_TRUE(e.ok()) << e.status().ToString();
      if (!e.ok()) return nullptr;
      engine = std::move(*e);
    }
    auto cp = ControlPlane::Open(std::move(*st), std::move(engine), o);
    EXPECT_TRUE(cp.ok()) << cp.status().ToString();
    return cp.ok() ? std::move(*cp) : nullptr;
  }
  HookupOptions Options() const {
    HookupOptions ho;
    ho.pool = "hpc";
    ho.runner = slurm_;
    ho.sync = std::chrono::milliseconds(50);
    ho.heartbeat = std::chrono::milliseconds(20);
    ho.poll = std::chrono::milliseconds(20);
    ho.logs_dir = logs_dir_;
    ho.pending_timeout = pending_timeout_;
    return ho;
  }
  // The control plane and the pool's hookup on dir_, as a server starts (again); by default
  // waits for the reconciliation with Slurm.
  void Open(bool wait_reconciled = true) {
    cp_ = OpenControlPlane();
    ASSERT_NE(cp_, nullptr);
    ASSERT_TRUE(cp_->Apply(kAdmin,
                           "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                           "metadata: {name: default}\n",
                           true)
                    .ok());
    auto h = SlurmPoolHookup::Start(*cp_, Options());
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    hookup_ = std::move(*h);
    if (wait_reconciled) {
      ASSERT_TRUE(hookup_->WaitReconciled(std::chrono::seconds(10)));
    }
  }
  void Close() {
    hookup_.reset();
    cp_.reset();
  }
  // Polls (cycling the scheduler) until `f` holds; <= 10 s.
  bool Until(const std::function<bool()>& f) {
    for (int i = 0; i < 1000; ++i) {
      if (f()) return true;
      (void)cp_->RunCycle();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::string State(const std::string& job) {
    auto j = cp_->GetJob(kAdmin, job, false);
    return j.ok() ? (*j).value("state", "") : j.status().ToString();
  }
  Json Describe(const std::string& job) { return *cp_->GetJob(kAdmin, job, true); }
  void Submit(const std::string& name, const std::string& body = "sleep 60\n") {
    auto r = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J " + name + "\n#SBATCH -c 2\n" + body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  // Opens on the fake cluster's two nodes, submits `name`, and waits until Slurm runs it.
  // Opens with the real engine (the first fit places only whole jobs, not a running job's new
  // task) and runs Deployment "web" (1 replica) as Slurm job 42.
  void RunWebDeployment() {
    real_engine_ = true;
    Open();
    ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
    ASSERT_TRUE(cp_->Submit(kAdmin,
                            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
                            "spec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n"
                            "      - name: web\n        command: [sleep, '3000']\n"
                            "        resources: {requests: {cpu: 1, memory: 100Mi}}\n")
                    .ok());
    ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
    slurm_->SetAll("RUNNING");
    ASSERT_TRUE(Until([&] { return State("web") == "Running"; })) << State("web");
  }
  void OpenAndRun(const std::string& name) {
    Open();
    ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
    Submit(name);
    ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
    slurm_->SetAll("RUNNING");
    ASSERT_TRUE(Until([&] { return State(name) == "Running"; }));
  }

  std::string dir_;
  std::string logs_dir_;  // HookupOptions::logs_dir
  std::chrono::milliseconds pending_timeout_{std::chrono::minutes(5)};
  bool real_engine_ = false;  // the default engine, not a first fit that ignores affinity
  std::shared_ptr<FakeSlurm> slurm_;
  std::unique_ptr<ControlPlane> cp_;
  std::unique_ptr<SlurmPoolHookup> hookup_;
};

TEST_F(HookupTest, SlurmNodesJoinThePoolAndDrainedOnesTakeNoWork) {
  slurm_->drained = "node2";
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Json nodes = cp_->ListNodes(kAdmin)["items"];
  EXPECT_EQ(nodes[0].value("pool", ""), "hpc");
  EXPECT_EQ(nodes[0]["devices"].size(), 8u);
  EXPECT_EQ(nodes[0]["labels"].value("slurm.partition.debug", ""), "true");
  // As every node the server knows: a selector can pin a job to one Slurm node.
  EXPECT_EQ(nodes[0]["labels"].value("kubernetes.io/hostname", ""), nodes[0].value("name", ""));
  EXPECT_EQ(nodes[1]["labels"].value("kubernetes.io/hostname", ""), "node2");
  EXPECT_FALSE(nodes[0].value("unschedulable", false));
  EXPECT_TRUE(nodes[1].value("unschedulable", false)) << nodes[1].dump();
  EXPECT_EQ(cp_->ListPools()["items"][0].value("backend", ""), "slurm");
}

// A node Slurm says is down stays Ready (it heartbeats: its jobs are Slurm's to end, with
// NODE_FAIL) but takes no work, and says it is down (label pool.down, pools' downNodes).
TEST_F(HookupTest, DownSlurmNodesAreUnschedulableAndSayTheyAreDown) {
  slurm_->SetNodeState("node2", "down");
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Json nodes = cp_->ListNodes(kAdmin)["items"];
  EXPECT_TRUE(nodes[1].value("ready", false)) << nodes[1].dump();
  EXPECT_TRUE(nodes[1].value("unschedulable", false)) << nodes[1].dump();
  EXPECT_EQ(nodes[1]["labels"].value("pool.down", ""), "slurm: down") << nodes[1].dump();
  EXPECT_FALSE(nodes[0]["labels"].contains("pool.down")) << nodes[0].dump();
  EXPECT_EQ(cp_->ListPools()["items"][0].value("downNodes", -1), 1);
  slurm_->SetNodeState("node2", "idle");  // back: schedulable, not down
  ASSERT_TRUE(Until([&] {
    Json n = cp_->ListNodes(kAdmin)["items"][1];
    return !n.value("unschedulable", false) && !n["labels"].contains("pool.down");
  })) << cp_->ListNodes(kAdmin)["items"][1].dump();
  EXPECT_EQ(cp_->ListPools()["items"][0].value("downNodes", -1), 0);
}

// slurmctld unreachable: what the server knows of the pool is stale. Its nodes stay Ready
// (their running jobs are Slurm's) but take no new work and say why, until Slurm answers.
TEST_F(HookupTest, AnUnreachableSlurmctldIsShownOnThePoolsNodesUntilItAnswers) {
  real_engine_ = true;  // (one that honours unschedulable)
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  slurm_->SetCtldDown(true, /*sinfo_too=*/true);
  auto all_down = [&] {
    const Json nodes = cp_->ListNodes(kAdmin);  // (a temporary would die before the loop)
    for (const Json& n : nodes["items"])
      if (n["labels"].value("pool.down", "") != "slurm: slurmctld unreachable") return false;
    return true;
  };
  ASSERT_TRUE(Until(all_down)) << cp_->ListNodes(kAdmin).dump();
  const Json nodes = cp_->ListNodes(kAdmin);
  for (const Json& n : nodes["items"]) {
    EXPECT_TRUE(n.value("ready", false)) << n.dump();
    EXPECT_TRUE(n.value("unschedulable", false)) << n.dump();
    EXPECT_NE(n["labels"].value("slurm.error", "").find("Unable to contact slurm controller"),
              std::string::npos)
        << n.dump();
  }
  EXPECT_EQ(cp_->ListPools()["items"][0].value("downNodes", -1), 2);
  Submit("waits");
  for (int i = 0; i < 20; ++i) (void)cp_->RunCycle();
  EXPECT_EQ(State("waits"), "Pending");  // not sent to nodes Slurm cannot be asked about
  EXPECT_EQ(slurm_->Calls("sbatch"), 0);
  slurm_->SetCtldDown(false);
  ASSERT_TRUE(Until([&] {
    const Json nodes = cp_->ListNodes(kAdmin);
    for (const Json& n : nodes["items"])
      if (n.value("unschedulable", false) || n["labels"].contains("pool.down") ||
          n["labels"].contains("slurm.error"))
        return false;
    return true;
  })) << cp_->ListNodes(kAdmin).dump();
  EXPECT_EQ(cp_->ListPools()["items"][0].value("downNodes", -1), 0);
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; })) << State("waits");
}

TEST_F(HookupTest, LifecycleFollowsSlurmWithExitCodes) {
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("ok");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  EXPECT_EQ(State("ok"), "Scheduled");
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return State("ok") == "Running"; })) << State("ok");
  slurm_->SetAll("COMPLETED");
  ASSERT_TRUE(Until([&] { return State("ok") == "Succeeded"; })) << State("ok");

  Submit("bad");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 2; }));
  slurm_->SetAll("FAILED", 3 << 8);
  ASSERT_TRUE(Until([&] { return State("bad") == "Failed"; })) << State("bad");
  EXPECT_NE(Describe("bad").dump().find("exit code 3"), std::string::npos) << Describe("bad");
  EXPECT_EQ(slurm_->Calls("sbatch"), 2);
}

TEST_F(HookupTest, CancelIsScancel) {
  ASSERT_NO_FATAL_FAILURE(OpenAndRun("c"));
  ASSERT_TRUE(cp_->Cancel(kAdmin, "c").ok());
  ASSERT_TRUE(Until([&] { return State("c") == "Cancelled"; })) << State("c");
  EXPECT_GE(slurm_->Calls("scancel"), 1);
}

TEST_F(HookupTest, RestartAdoptsWhatSlurmStillRuns) {
  ASSERT_NO_FATAL_FAILURE(OpenAndRun("r"));
  Close();
  Open();
  EXPECT_EQ(hookup_->counts().adopted, 1);
  slurm_->SetAll("COMPLETED");
  ASSERT_TRUE(Until([&] { return State("r") == "Succeeded"; })) << State("r");
  EXPECT_EQ(slurm_->Calls("sbatch"), 1);  // never submitted twice
  EXPECT_EQ(Describe("r").value("attempt", 0), 1);
}

TEST_F(HookupTest, RestartEvictsWhatSlurmLostAndTheJobPolicyDecides) {
  ASSERT_NO_FATAL_FAILURE(OpenAndRun("lost"));
  Close();
  slurm_->Forget();
  Open();
  EXPECT_EQ(hookup_->counts().lost, 1);
  // Its outcome is unknown: an eviction (no exit code), and an sbatch job restarts
  // (onEviction), as a new attempt with its own Slurm job.
  ASSERT_TRUE(Until([&] { return slurm_->Calls("sbatch") == 2; })) << Describe("lost").dump();
  const std::string events = Describe("lost")["events"].dump();
  EXPECT_NE(events.find("LostInSlurm"), std::string::npos) << events;
  EXPECT_NE(events.find("gone from Slurm"), std::string::npos) << events;
  EXPECT_EQ(events.find("exit code"), std::string::npos) << events;
  EXPECT_EQ(Describe("lost").value("attempt", 0), 2);
}

// A job scancelled in Slurm, not by Tessera, ends Cancelled (Slurm never requeues a cancelled
// job), rather than being restarted as an eviction "stopped by its agent".
TEST_F(HookupTest, ScancelInSlurmEndsTheJob) {
  ASSERT_NO_FATAL_FAILURE(OpenAndRun("sc"));
  slurm_->SetAll("CANCELLED", 15);
  ASSERT_TRUE(Until([&] { return State("sc") == "Cancelled"; })) << State("sc");
  std::string events = Describe("sc")["events"].dump();
  EXPECT_NE(events.find("scancel of slurm:42 in Slurm"), std::string::npos) << events;
  EXPECT_EQ(events.find("stopped by its agent"), std::string::npos) << events;
  EXPECT_EQ(Describe("sc").value("attempt", 0), 1);
  for (int i = 0; i < 20; ++i) (void)cp_->RunCycle();
  EXPECT_EQ(slurm_->Calls("sbatch"), 1);  // never submitted again
}

// A Deployment scaled on a Slurm pool: the new replica is a Slurm job of its own, and scaling
// down cancels that job alone; the replica left runs on, the job is not taken as cancelled
// in Slurm.
TEST_F(HookupTest, ScalingADeploymentRunsAndCancelsItsOwnSlurmJobs) {
  ASSERT_NO_FATAL_FAILURE(RunWebDeployment());
  auto running = [&] {
    int n = 0;
    const Json j = Describe("web");  // (a temporary's items would dangle)
    for (const auto& a : j["allocations"]) n += a.value("state", "") == "Running";
    return n;
  };

  ASSERT_TRUE(cp_->Scale(kAdmin, "web", 2).ok());
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 2; }))
      << "the new replica never reached Slurm: " << Describe("web").dump();
  EXPECT_EQ(slurm_->JobState(42), "RUNNING");
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return running() == 2; })) << Describe("web")["allocations"].dump();

  ASSERT_TRUE(cp_->Scale(kAdmin, "web", 1).ok());
  ASSERT_TRUE(Until([&] { return slurm_->JobState(43) == "CANCELLED"; }));
  auto gone = [&] {
    const Json j = Describe("web");
    for (const auto& a : j["allocations"])
      if (a.value("task", -1) == 1 && a.value("state", "") == "Stopping") return false;
    return true;
  };
  ASSERT_TRUE(Until(gone)) << Describe("web")["allocations"].dump();
  for (int i = 0; i < 30; ++i) {
    (void)cp_->RunCycle();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(State("web"), "Running");
  EXPECT_EQ(running(), 1);
  EXPECT_EQ(slurm_->JobState(42), "RUNNING");  // replica 0's Slurm job is left alone
  EXPECT_EQ(slurm_->Calls("scancel"), 1);
  const std::string events = Describe("web")["events"].dump();
  EXPECT_EQ(events.find("outside Tessera"), std::string::npos) << events;
}

// A journal entry from before entries named their tasks (it takes every task left) beside a
// replica's own Slurm job added since: after a restart the replica's entry keeps its task, so
// scaling down cancels that Slurm job alone. (The old entry's tag sorts first: it used to
// take both tasks, leaving the replica's Slurm job adopted with none and never cancelled.)
TEST_F(HookupTest, AnOldJournalEntryLeavesAReplicasOwnSlurmJobItsTask) {
  ASSERT_NO_FATAL_FAILURE(RunWebDeployment());
  ASSERT_TRUE(cp_->Scale(kAdmin, "web", 2).ok());
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 2; }));
  slurm_->SetAll("RUNNING");
  // The first entry as an older server wrote it: no task list.
  auto entries = cp_->store().Range("slurm/hpc/");
  ASSERT_TRUE(entries.ok());
  int rewritten = 0;
  for (const auto& kv : *entries) {
    Json e = Json::parse(kv.value);
    if (e["tasks"] != Json::array({0})) continue;
    e.erase("tasks");
    ASSERT_TRUE(cp_->store().Write({store::Op::Put(kv.key, e.dump())}).ok());
    ++rewritten;
  }
  ASSERT_EQ(rewritten, 1);
  Close();
  Open();
  ASSERT_TRUE(cp_->Scale(kAdmin, "web", 1).ok());
  ASSERT_TRUE(Until([&] { return slurm_->JobState(43) == "CANCELLED"; }))
      << Describe("web")["allocations"].dump();
  for (int i = 0; i < 30; ++i) {
    (void)cp_->RunCycle();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(slurm_->JobState(42), "RUNNING");  // replica 0's Slurm job is left alone
  EXPECT_EQ(State("web"), "Running");
}

// Submitted while slurmctld was down, then the server restarts: the sbatch never got an
// answer and Slurm has no job with its tag, so it is dispatched again, not written off as
// "failed with exit code 0".
TEST_F(HookupTest, AnUnansweredSubmitIsDispatchedAfterARestart) {
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  slurm_->SetCtldDown(true);
  Submit("down");
  ASSERT_TRUE(Until([&] { return slurm_->Calls("sbatch") >= 1; }));
  Close();  // (as kill -9: the journal entry stays, with no Slurm job id)
  slurm_->SetCtldDown(false);
  Open();
  EXPECT_EQ(hookup_->counts().lost, 0);
  EXPECT_EQ(hookup_->counts().redispatched, 1);
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return State("down") == "Running"; })) << State("down");
  slurm_->SetAll("COMPLETED");
  ASSERT_TRUE(Until([&] { return State("down") == "Succeeded"; })) << State("down");
  EXPECT_EQ(Describe("down").value("attempt", 0), 1);
  EXPECT_EQ(Describe("down")["events"].dump().find("exit code 0"), std::string::npos);
}

// A job being cancelled when the server restarts stays Terminating, its task held, until
// Slurm confirms the cancel: the restarted server's first heartbeats report it running.
TEST_F(HookupTest, AStopInFlightAtARestartHoldsUntilSlurmConfirms) {
  ASSERT_NO_FATAL_FAILURE(OpenAndRun("t"));
  slurm_->SetCtldDown(true);  // the scancel cannot get through
  ASSERT_TRUE(cp_->Cancel(kAdmin, "t").ok());
  ASSERT_TRUE(Until([&] { return slurm_->Calls("scancel") >= 1; }));
  Close();
  // Restarted with slurmctld still away: nodes heartbeat, Reconcile waits for squeue.
  ASSERT_NO_FATAL_FAILURE(Open(/*wait_reconciled=*/false));
  const int squeue_before = slurm_->Calls("squeue");
  ASSERT_TRUE(Until([&] { return slurm_->Calls("squeue") >= squeue_before + 2; }));
  EXPECT_EQ(State("t"), "Terminating");
  Json allocs = Describe("t")["allocations"];
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].value("state", ""), "Stopping") << allocs.dump();
  slurm_->SetCtldDown(false);
  ASSERT_TRUE(Until([&] { return State("t") == "Cancelled"; })) << State("t");
  EXPECT_NE(Describe("t")["allocations"][0].value("message", "").find("CANCELLED"),
            std::string::npos)
      << Describe("t")["allocations"].dump();
}

// Why Slurm keeps a job queued is on the job: its allocation's message and an event per
// change of reason.
TEST_F(HookupTest, SlurmsPendingReasonIsShown) {
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("p");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  slurm_->SetAll("PENDING", 0, "Resources");
  auto has = [&](const std::string& what) {
    return Describe("p")["events"].dump().find(what) != std::string::npos;
  };
  ASSERT_TRUE(Until([&] { return has("PENDING (Resources)"); })) << Describe("p").dump();
  EXPECT_TRUE(has("WaitingInPool"));
  EXPECT_EQ(Describe("p")["allocations"][0].value("message", ""),
            "slurm:42: Slurm job 42 PENDING (Resources)");
  slurm_->SetAll("PENDING", 0, "ReqNodeNotAvail");
  ASSERT_TRUE(Until([&] { return has("PENDING (ReqNodeNotAvail)"); })) << Describe("p").dump();
  EXPECT_EQ(State("p"), "Scheduled");
  EXPECT_EQ(Describe("p")["pendingReason"].value("code", ""), "WaitingInPool");  // get jobs' REASON
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return State("p") == "Running"; })) << State("p");
}

// A job Slurm keeps pending past the pool's pending timeout (its node taken by a job Tessera
// does not know) is cancelled in Slurm and placed again, a new attempt, with an event saying
// why; Tessera does not take the cancel for a user's scancel.
TEST_F(HookupTest, AJobPendingInSlurmTooLongIsPlacedAgain) {
  pending_timeout_ = std::chrono::milliseconds(300);
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("stuck");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  slurm_->SetAll("PENDING", 0, "Resources");
  ASSERT_TRUE(Until([&] { return slurm_->Calls("sbatch") >= 2; })) << Describe("stuck").dump();
  EXPECT_GE(slurm_->Calls("scancel"), 1);
  EXPECT_GE(Describe("stuck").value("attempt", 0), 2);
  EXPECT_NE(State("stuck"), "Cancelled");
  EXPECT_NE(State("stuck"), "Failed");
  const std::string events = Describe("stuck")["events"].dump();
  EXPECT_NE(events.find("\"StuckInSlurm\""), std::string::npos) << events;
  EXPECT_NE(events.find("slurm:42: Slurm job 42 PENDING (Resources) for "), std::string::npos)
      << events;
  EXPECT_NE(events.find("cancelled in Slurm, to be placed again"), std::string::npos) << events;
  EXPECT_EQ(events.find("scancel of"), std::string::npos) << events;
}

// NODE_FAIL is an eviction (onEviction: an sbatch job restarts), and says which node failed.
TEST_F(HookupTest, NodeFailIsAnEvictionNamingTheNode) {
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  auto r = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J nf\n#SBATCH -N 2\nsrun hostname\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  slurm_->SetJobNodes("node[1-2]");
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return State("nf") == "Running"; }));
  slurm_->SetNodeState("node2", "down");
  slurm_->SetAll("NODE_FAIL", 15, "NodeDown");
  ASSERT_TRUE(Until([&] { return Describe("nf").value("attempt", 0) == 2; })) << Describe("nf");
  EXPECT_NE(State("nf"), "Failed");
  std::string events = Describe("nf")["events"].dump();
  EXPECT_NE(events.find("NodeFailed"), std::string::npos) << events;
  EXPECT_NE(events.find("node node2 (down+NOT_RESPONDING) failed"), std::string::npos) << events;
  EXPECT_EQ(events.find("stopped by its agent"), std::string::npos) << events;
}

// sbatch -w/-x on a Slurm pool: Tessera places the job within them (node affinity on
// kubernetes.io/hostname), sbatch gets --nodelist of the node it chose, and the script's own
// -w/-x lines reach Slurm as comments, as the other placement directives.
TEST_F(HookupTest, SbatchNodelistAndExcludeChooseTheNodeSlurmIsGiven) {
  real_engine_ = true;
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("pinned", "#SBATCH -w node[2]\nsleep 60\n");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  std::vector<std::string> argv = slurm_->LastSbatch();
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--nodelist=node2"), argv.end())
      << ::testing::PrintToString(argv);
  EXPECT_NE(slurm_->LastScript().find("\n# [tessera] #SBATCH -w node[2]\n"), std::string::npos)
      << slurm_->LastScript();
  Submit("kept-out", "#SBATCH --exclude=node2\nsleep 60\n");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 2; }));
  argv = slurm_->LastSbatch();
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--nodelist=node1"), argv.end())
      << ::testing::PrintToString(argv);
  EXPECT_NE(slurm_->LastScript().find("\n# [tessera] #SBATCH --exclude=node2\n"), std::string::npos)
      << slurm_->LastScript();
}

// A job whose account every partition of the pool refuses stays Pending, saying which nodes
// refuse it and why (it is never sent to sbatch to fail there); an admitted one runs.
TEST_F(HookupTest, AJobEveryPartitionRefusesWaitsSayingWhy) {
  real_engine_ = true;
  slurm_->partitions =
      "PartitionName=debug AllowGroups=ALL AllowAccounts=ml,vision AllowQos=ALL Default=YES "
      "Hidden=NO MaxNodes=UNLIMITED MaxTime=UNLIMITED Nodes=node[1-2] PriorityTier=1 "
      "State=UP\n";
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("refused", "#SBATCH -A cv\nsleep 60\n");
  ASSERT_TRUE(Until([&] {
    return Describe("refused")
               .value("pendingReason", Json::object())
               .value("message", "")
               .find(
                   "Refused by its pool on node[1-2]: Slurm partition debug refuses account cv "
                   "(AllowAccounts=ml,vision)") != std::string::npos;
  })) << Describe("refused").dump();
  EXPECT_EQ(State("refused"), "Pending");
  EXPECT_EQ(slurm_->Calls("sbatch"), 0);
  Submit("admitted", "#SBATCH -A ml\nsleep 60\n");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; })) << Describe("admitted").dump();
  EXPECT_EQ(State("refused"), "Pending");
}

// sbatch refusing a job on a partition's rules (changed since discovery) is an eviction
// (`RefusedBySlurm`): the job is placed again, not failed.
TEST_F(HookupTest, AnSbatchAccessRefusalPlacesTheJobAgain) {
  slurm_->refuse_sbatch = 1;
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("again");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; })) << Describe("again").dump();
  EXPECT_EQ(slurm_->Calls("sbatch"), 2);
  EXPECT_EQ(Describe("again").value("attempt", 0), 2);
  const std::string events = Describe("again")["events"].dump();
  EXPECT_NE(events.find("\"RefusedBySlurm\""), std::string::npos) << events;
  EXPECT_NE(events.find("group not permitted to use this partition"), std::string::npos) << events;
  EXPECT_NE(State("again"), "Failed");
}

// Slurm is told to write each job attempt's output under the logs directory, and the
// server's logs endpoint is pointed at those files; a script's own -o stays the script's.
TEST_F(HookupTest, SlurmWritesOutputWhereTheServerReadsIt) {
  logs_dir_ = dir_ + "/logs/";
  Open();
  EXPECT_TRUE(std::filesystem::is_directory(dir_ + "/logs"));
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("out", "echo hello\n");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  std::vector<std::string> argv = slurm_->LastSbatch();
  const std::string out = dir_ + "/logs/out.1.out", err = dir_ + "/logs/out.1.err";
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--output=" + out), argv.end());
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--error=" + err), argv.end());
  auto src = cp_->LogsSourceOf(kAdmin, "out", 0, "", "stdout");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ(src->file, out);
  EXPECT_TRUE(src->url.empty());
  src = cp_->LogsSourceOf(kAdmin, "out", 0, "", "stderr");
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ(src->file, err);

  // The script names its own output: Slurm writes there (given as --output, %x being the
  // job's own name, docs/slurm.md), stderr with it, and the logs endpoint says so.
  auto r = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J own\n#SBATCH -o /tmp/%x-%j.out\ntrue\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 2; }));
  argv = slurm_->LastSbatch();
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--output=/tmp/own-%j.out"), argv.end());
  for (const auto& a : argv) EXPECT_NE(a.rfind("--error", 0), 0u) << a;
  src = cp_->LogsSourceOf(kAdmin, "own", 0, "", "stdout");
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(src.status().message().find("its script's own output file (#SBATCH -o)"),
            std::string::npos)
      << src.status().message();
}

TEST_F(HookupTest, ALogsDirectoryThatSlurmWouldExpandIsRefused) {
  auto cp = OpenControlPlane();
  ASSERT_NE(cp, nullptr);
  HookupOptions ho = Options();
  ho.logs_dir = dir_ + "/logs-%j";
  auto h = SlurmPoolHookup::Start(*cp, ho);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("must not contain '%'"), std::string::npos)
      << h.status().message();
}

}  // namespace
}  // namespace tessera::slurm
