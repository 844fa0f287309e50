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

#include "server/control_plane.h"
#include "server/test_util.h"

namespace tessera::slurm {
namespace {

using server::ControlPlane;

// Slurm's clients, scripted; thread-safe (the hookup calls from several threads).
class FakeSlurm : public CommandRunner {
 public:
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv, const std::string&) override {
    std::lock_guard<std::mutex> l(mu_);
    calls_[argv.at(0)]++;
    const std::string& p = argv.at(0);
    if (p == "sinfo") return CommandResult{0, Sinfo(), ""};
    if (p == "squeue") return CommandResult{0, Squeue(), ""};
    if (p == "sbatch") {
      int64_t id = next_id_++;
      std::string comment;
      for (size_t i = 0; i + 1 < argv.size(); ++i)
        if (argv[i] == "--comment") comment = argv[i + 1];
      jobs_[id] = {comment, "PENDING", 0};
      last_sbatch_ = argv;
      return CommandResult{0, std::to_string(id) + "\n", ""};
    }
    if (p == "scancel") {
      for (size_t i = 1; i < argv.size(); ++i) jobs_[std::stoll(argv[i])].state = "CANCELLED";
      return CommandResult{0, "", ""};
    }
    if (p == "scontrol") return CommandResult{1, "", "slurm_load_jobs error: Invalid job id"};
    return Internal("FakeSlurm: unexpected " + p);
  }
  int Calls(const std::string& p) {
    std::lock_guard<std::mutex> l(mu_);
    return calls_[p];
  }
  // Sets the state of every job (the test runs one at a time).
  void SetAll(const std::string& state, int64_t exit_status = 0) {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [id, j] : jobs_) j.state = state, j.exit = exit_status;
  }
  void Forget() {  // slurmctld purged everything (MinJobAge passed)
    std::lock_guard<std::mutex> l(mu_);
    jobs_.clear();
  }
  size_t Count() {
    std::lock_guard<std::mutex> l(mu_);
    return jobs_.size();
  }
  std::vector<std::string> LastSbatch() {
    std::lock_guard<std::mutex> l(mu_);
    return last_sbatch_;
  }
  std::string drained;  // a node to show drained (set before Start)

 private:
  struct J {
    std::string comment, state;
    int64_t exit = 0;
  };
  std::string Sinfo() {
    nlohmann::json doc = {{"errors", nlohmann::json::array()}, {"nodes", nlohmann::json::array()}};
    for (int i = 1; i <= 2; ++i) {
      std::string name = "node" + std::to_string(i);
      doc["nodes"].push_back({{"name", name},
                              {"state", name == drained ? "drained" : "idle"},
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
                             {"state_reason", "None"},
                             {"exit_code", j.exit},
                             {"nodes", "node1"},
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
  int64_t next_id_ = 42;
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
  void Open() {
    auto st = store::OpenSqliteStore(dir_);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    server::ControlPlaneOptions o;
    o.run_scheduler = false;
    auto cp =
        ControlPlane::Open(std::move(*st), std::make_unique<server::testing::ScriptedEngine>(), o);
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
    ASSERT_TRUE(cp_->Apply(kAdmin,
                           "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                           "metadata: {name: default}\n",
                           true)
                    .ok());
    HookupOptions ho;
    ho.pool = "hpc";
    ho.runner = slurm_;
    ho.sync = std::chrono::milliseconds(50);
    ho.heartbeat = std::chrono::milliseconds(20);
    ho.poll = std::chrono::milliseconds(20);
    ho.logs_dir = logs_dir_;
    auto h = SlurmPoolHookup::Start(*cp_, ho);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    hookup_ = std::move(*h);
    ASSERT_TRUE(hookup_->WaitReconciled(std::chrono::seconds(10)));
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

  std::string dir_;
  std::string logs_dir_;  // HookupOptions::logs_dir
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
  EXPECT_FALSE(nodes[0].value("unschedulable", false));
  EXPECT_TRUE(nodes[1].value("unschedulable", false)) << nodes[1].dump();
  EXPECT_EQ(cp_->ListPools()["items"][0].value("backend", ""), "slurm");
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
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("c");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return State("c") == "Running"; }));
  ASSERT_TRUE(cp_->Cancel(kAdmin, "c").ok());
  ASSERT_TRUE(Until([&] { return State("c") == "Cancelled"; })) << State("c");
  EXPECT_GE(slurm_->Calls("scancel"), 1);
}

TEST_F(HookupTest, RestartAdoptsWhatSlurmStillRuns) {
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("r");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return State("r") == "Running"; }));
  Close();
  Open();
  EXPECT_EQ(hookup_->counts().adopted, 1);
  slurm_->SetAll("COMPLETED");
  ASSERT_TRUE(Until([&] { return State("r") == "Succeeded"; })) << State("r");
  EXPECT_EQ(slurm_->Calls("sbatch"), 1);  // never submitted twice
  EXPECT_EQ(Describe("r").value("attempt", 0), 1);
}

TEST_F(HookupTest, RestartWritesOffWhatSlurmLostAndTheJobPolicyDecides) {
  Open();
  ASSERT_TRUE(Until([&] { return cp_->ListNodes(kAdmin)["items"].size() == 2; }));
  Submit("lost");
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 1; }));
  slurm_->SetAll("RUNNING");
  ASSERT_TRUE(Until([&] { return State("lost") == "Running"; }));
  Close();
  slurm_->Forget();
  Open();
  EXPECT_EQ(hookup_->counts().lost, 1);
  // An sbatch job fails on task failure (FailJob), with the reason in its events.
  ASSERT_TRUE(Until([&] { return State("lost") == "Failed"; })) << State("lost");
  EXPECT_NE(Describe("lost").dump().find("gone from Slurm"), std::string::npos);
  EXPECT_EQ(slurm_->Calls("sbatch"), 1);
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

  // The script names its own output: Slurm writes there, and the logs endpoint says so.
  auto r = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J own\n#SBATCH -o /tmp/own.out\ntrue\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(Until([&] { return slurm_->Count() == 2; }));
  argv = slurm_->LastSbatch();
  for (const auto& a : argv) {
    EXPECT_NE(a.rfind("--output", 0), 0u) << a;
    EXPECT_NE(a.rfind("--error", 0), 0u) << a;
  }
  src = cp_->LogsSourceOf(kAdmin, "own", 0, "", "stdout");
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(src.status().message().find("its script's own output file (#SBATCH -o)"),
            std::string::npos)
      << src.status().message();
}

TEST_F(HookupTest, ALogsDirectoryThatSlurmWouldExpandIsRefused) {
  auto st = store::OpenSqliteStore(dir_);
  ASSERT_TRUE(st.ok());
  server::ControlPlaneOptions o;
  o.run_scheduler = false;
  auto cp =
      ControlPlane::Open(std::move(*st), std::make_unique<server::testing::ScriptedEngine>(), o);
  ASSERT_TRUE(cp.ok());
  HookupOptions ho;
  ho.pool = "hpc";
  ho.runner = slurm_;
  ho.logs_dir = dir_ + "/logs-%j";
  auto h = SlurmPoolHookup::Start(**cp, ho);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("must not contain '%'"), std::string::npos)
      << h.status().message();
}

}  // namespace
}  // namespace tessera::slurm
