// End to end against a REAL Slurm 22.05 (scripts/slurm/up.sh: 4 emulated nodes x 32 CPUs x
// 8 fake a100 GPUs on loopback): the real `tessera server --slurm-pool hpc` binary, #SBATCH
// scripts submitted unchanged through the real `tessera submit` CLI, Slurm running them;
// exit codes, output, cancel, and a kill -9 of the server mid-run (no loss, no duplicate).
// Under ctest the cluster is the slurm_cluster fixture; run directly, this binary starts and
// stops it. Skips, saying why, where Slurm cannot run.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "backends/slurm/live_cluster.h"
#include "common/capture_command.h"

namespace tessera::slurm {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

using testing::ClusterDir;
using testing::ReadFile;
using testing::Shell;
using testing::SourceDir;

std::string Binary() {
  const char* b = std::getenv("TESSERA_BINARY");
  return b ? b : TESSERA_BINARY_DEFAULT;
}
std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new testing::LiveClusterEnvironment);

// `tessera server --slurm-pool hpc` as a subprocess; stderr goes to <work>/server.log.
class Server {
 public:
  Server(std::string data, std::string log) : data_(std::move(data)), log_(std::move(log)) {}
  ~Server() { Kill(SIGKILL); }
  bool Start() {
    fs::remove(data_ + "/server.url");
    std::vector<std::string> args = {Binary(),
                                     "server",
                                     "--data-dir",
                                     data_,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--bootstrap",
                                     SourceDir() + "/examples/seed",
                                     "--slurm-pool",
                                     "hpc",
                                     "--slurm-conf",
                                     ClusterDir() + "/slurm.conf",
                                     "--slurm-sync-seconds",
                                     "1"};
    pid_ = SpawnInBackground(std::move(args), log_);
    if (pid_ < 0) return false;
    for (int i = 0; i < 300; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      url_ = Trim(ReadFile(data_ + "/server.url"));
      if (url_.empty()) continue;
      httplib::Client c(url_);
      auto r = c.Get("/healthz");
      if (r && r->status == 200) return true;
    }
    return false;
  }
  void Kill(int sig) {
    if (pid_ <= 0) return;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  Json Get(const std::string& path) const {
    httplib::Client c(url_);
    auto r = c.Get(path.c_str(),
                   {{"Authorization", "Bearer " + Trim(ReadFile(data_ + "/admin.token"))}});
    if (!r || r->status != 200) return Json();
    return Json::parse(r->body, nullptr, false);
  }
  // A GET's status and body as they are (text endpoints, errors).
  std::pair<int, std::string> GetText(const std::string& path) const {
    httplib::Client c(url_);
    auto r = c.Get(path.c_str(),
                   {{"Authorization", "Bearer " + Trim(ReadFile(data_ + "/admin.token"))}});
    if (!r) return {0, ""};
    return {r->status, r->body};
  }
  // The `tessera` CLI against this server.
  std::pair<int, std::string> Cli(const std::string& args) const {
    return CaptureCommand("TESSERA_SERVER='" + url_ + "' TESSERA_TOKEN_FILE='" + data_ +
                          "/admin.token' '" + Binary() + "' " + args + " 2>&1");
  }

 private:
  std::string data_, log_, url_;
  pid_t pid_ = -1;
};

class SlurmServerE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string skip = ReadFile(ClusterDir() + "/skip");
    if (!skip.empty()) GTEST_SKIP() << "Slurm cannot run here: " << skip;
    if (!fs::exists(ClusterDir() + "/slurm.conf"))
      GTEST_SKIP() << "no cluster at " << ClusterDir() << " (scripts/slurm/up.sh not run)";
    if (!fs::exists(Binary())) GTEST_SKIP() << "no tessera binary at " << Binary();
    work_ = ClusterDir() + "/work/e2e-" + std::to_string(::getpid());
    fs::remove_all(work_);
    fs::create_directories(work_ + "/data");
    server_ = std::make_unique<Server>(work_ + "/data", work_ + "/server.log");
  }
  void TearDown() override {
    if (HasFailure() && fs::exists(work_ + "/server.log"))
      std::fprintf(stderr, "---- server.log\n%s\n", ReadFile(work_ + "/server.log").c_str());
  }

  // Writes an #SBATCH script and submits it with `tessera submit -f`.
  void Submit(const std::string& name, const std::string& script) {
    std::string path = work_ + "/" + name + ".sbatch";
    std::ofstream(path) << script;
    auto [rc, out] = server_->Cli("submit -f '" + path + "'");
    ASSERT_EQ(rc, 0) << out;
  }
  // Polls the job until `until` holds (<= 60 s); returns its last view.
  Json WaitJob(const std::string& name, const std::function<bool(const Json&)>& until) {
    Json j;
    for (int i = 0; i < 300; ++i) {
      j = server_->Get("/v1/jobs/" + name + "/describe");
      if (j.is_object() && until(j)) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ADD_FAILURE() << name << " did not get there; last: " << j.dump();
    return j;
  }
  Json WaitState(const std::string& name, const std::string& state) {
    return WaitJob(name, [&](const Json& j) { return j.value("state", "") == state; });
  }
  // Slurm jobs whose comment tags them with a Tessera job (finished ones included).
  int SlurmJobsOf(const std::string& job) {
    auto [rc, out] = CaptureCommand("SLURM_CONF='" + ClusterDir() +
                                    "/slurm.conf' squeue -h -t all -o '%k' 2>/dev/null");
    EXPECT_EQ(rc, 0);
    int n = 0;
    std::stringstream ss(out);
    for (std::string line; std::getline(ss, line);) n += line.rfind("tessera:" + job + ":", 0) == 0;
    return n;
  }
  static bool HasEvent(const Json& j, const std::string& reason, const std::string& text) {
    for (const auto& e : j["events"])
      if (e.value("reason", "") == reason && e.value("message", "").find(text) != std::string::npos)
        return true;
    return false;
  }

  // Job names are unique per run: squeue still lists a previous run's jobs for MinJobAge,
  // and a fresh data dir starts its allocation ids again.
  std::string N(const std::string& name) const { return name + "-" + std::to_string(::getpid()); }

  std::string work_;
  std::unique_ptr<Server> server_;
};

// sbatch --array on Slurm: each element is a Slurm job of its own (not a Slurm array: the
// script's --array is a comment there), whose script still sees the array's SLURM_ARRAY_*
// (Tessera's ids, exported) and whose -o names its file with the array's %A and %a, which
// Slurm would otherwise expand as the element's own id and 4294967294.
TEST_F(SlurmServerE2ETest, AnArraysElementsRunAsSlurmJobsThatKnowTheirIndex) {
  ASSERT_TRUE(server_->Start()) << ReadFile(work_ + "/server.log");
  const std::string name = N("e2e-arr");
  Submit(name, "#!/bin/bash\n#SBATCH -J " + name + "\n#SBATCH --array=1-2\n#SBATCH -t 5\n" +
                   "#SBATCH -o " + work_ + "/arr-%A_%a.out\n" +
                   "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT\n");
  for (const char* index : {"1", "2"}) {
    const std::string element = name + "_" + index;
    Json j = WaitState(element, "Succeeded");
    const std::string id = std::to_string(j["array"].value("jobId", int64_t{0}));
    EXPECT_EQ(ReadFile(work_ + "/arr-" + id + "_" + index + ".out"), id + " " + index + " 2\n");
    EXPECT_EQ(SlurmJobsOf(element), 1) << element;
  }
}

// tessera scale on a Slurm pool: the added replica runs as a Slurm job of its own, and scaling
// back down cancels that one alone; the Deployment runs on with its first replica.
TEST_F(SlurmServerE2ETest, ADeploymentScalesOnTheSlurmPool) {
  ASSERT_TRUE(server_->Start()) << ReadFile(work_ + "/server.log");
  const std::string name = N("e2e-web");
  const std::string path = work_ + "/web.yaml";
  std::ofstream(path) << "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: " << name
                      << "}\nspec:\n  replicas: 1\n  template:\n    spec:\n      containers:\n"
                         "      - name: web\n        command: [sleep, '3000']\n"
                         "        resources: {requests: {cpu: 1, memory: 100Mi}}\n";
  auto [rc, out] = server_->Cli("submit -f '" + path + "'");
  ASSERT_EQ(rc, 0) << out;
  WaitState(name, "Running");
  // Tagged Slurm jobs of the Deployment in this Slurm state.
  auto in_slurm = [&](const std::string& state) {
    auto [qrc, q] = CaptureCommand("SLURM_CONF='" + ClusterDir() +
                                   "/slurm.conf' squeue -h -t all -o '%k %T' 2>/dev/null");
    int n = 0;
    std::stringstream ss(q);
    for (std::string line; std::getline(ss, line);)
      n += line.rfind("tessera:" + name + ":", 0) == 0 && line.ends_with(" " + state);
    return n;
  };
  auto running = [](const Json& j) {
    int n = 0;
    for (const auto& a : j["allocations"]) n += a.value("state", "") == "Running";
    return n;
  };
  auto [s2, o2] = server_->Cli("scale " + name + " --replicas 2");
  ASSERT_EQ(s2, 0) << o2;
  WaitJob(name, [&](const Json& j) { return running(j) == 2 && in_slurm("RUNNING") == 2; });
  EXPECT_EQ(in_slurm("RUNNING"), 2);

  auto [s1, o1] = server_->Cli("scale " + name + " --replicas 1");
  ASSERT_EQ(s1, 0) << o1;
  Json j = WaitJob(name, [&](const Json& j) {
    bool stopping = false;
    for (const auto& a : j["allocations"])
      stopping = stopping || a.value("state", "") == "Stopping";
    return !stopping && running(j) == 1 && in_slurm("CANCELLED") == 1;
  });
  std::this_thread::sleep_for(std::chrono::seconds(3));  // (a wrong cancel would show by now)
  j = server_->Get("/v1/jobs/" + name + "/describe");
  EXPECT_EQ(j.value("state", ""), "Running") << j.dump();
  EXPECT_EQ(running(j), 1) << j.dump();
  EXPECT_EQ(in_slurm("RUNNING"), 1);
  EXPECT_EQ(in_slurm("CANCELLED"), 1);
  EXPECT_FALSE(HasEvent(j, "Cancelling", "outside Tessera")) << j["events"].dump();
  auto [crc, cout] = server_->Cli("cancel " + name);
  EXPECT_EQ(crc, 0) << cout;
  WaitState(name, "Cancelled");
}

TEST_F(SlurmServerE2ETest, SbatchScriptsRunOnTheSlurmPoolThroughTheServer) {
  ASSERT_TRUE(server_->Start()) << ReadFile(work_ + "/server.log");

  // 1. Discovery: the 4 Slurm nodes, in pool hpc, 8 GRES GPUs each, partitions as labels.
  Json nodes;
  for (int i = 0; i < 100; ++i) {
    nodes = server_->Get("/v1/nodes");
    if (nodes.is_object() && nodes["items"].size() == 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(nodes["items"].size(), 4u) << nodes.dump();
  for (const auto& n : nodes["items"]) {
    EXPECT_EQ(n.value("pool", ""), "hpc");
    EXPECT_TRUE(n.value("ready", false));
    EXPECT_EQ(n["devices"].size(), 8u);
    EXPECT_EQ(n["labels"].value("slurm.partition", ""), "debug") << n.dump();
  }
  auto [grc, table] = server_->Cli("get nodes");
  EXPECT_EQ(grc, 0);
  EXPECT_NE(table.find("hpc"), std::string::npos) << table;

  // 2. Two #SBATCH scripts, unchanged: a 2-node GPU job that succeeds with its output, and
  //    one that exits 3.
  std::string ok = work_ + "/ok-%j.out";
  Submit(N("e2e-ok"), "#!/bin/bash\n#SBATCH -J " + N("e2e-ok") +
                          "\n#SBATCH -N 2\n#SBATCH --ntasks-per-node=2\n"
                          "#SBATCH -c 2\n#SBATCH --gres=gpu:a100:2\n#SBATCH -t 5\n#SBATCH -o " +
                          ok +
                          "\n"
                          "echo \"nodes=$SLURM_JOB_NUM_NODES ntasks=$SLURM_NTASKS\"\n"
                          "srun bash -c 'echo task' | wc -l\n");
  Submit(N("e2e-exit3"), "#!/bin/bash\n#SBATCH -J " + N("e2e-exit3") +
                             "\n#SBATCH -t 5\n#SBATCH -o " + work_ +
                             "/exit3.out\necho about to fail\nexit 3\n");
  Json j = WaitState(N("e2e-ok"), "Succeeded");
  EXPECT_TRUE(HasEvent(j, "Completed", "")) << j.dump();
  EXPECT_EQ(j["nodes"].size(), 0u);  // nothing live any more
  std::string slurm_id;
  for (const auto& a : j["allocations"]) {
    EXPECT_EQ(a.value("state", ""), "Succeeded");
    std::string m = a.value("message", "");
    if (m.rfind("slurm:", 0) == 0) slurm_id = m.substr(6, m.find(':', 6) - 6);
  }
  ASSERT_FALSE(slurm_id.empty()) << j.dump();
  std::string out = ok;
  out.replace(out.find("%j"), 2, slurm_id);
  // Slurm ran exactly where Tessera placed the job's 2 tasks: one per #SBATCH node, on two
  // distinct nodes (-N 2 is oneTaskPerNode to the engine).
  std::set<std::string> placed;
  for (const auto& al : j["allocations"]) placed.insert(al["placement"].value("node", ""));
  EXPECT_EQ(placed.size(), 2u) << j.dump();
  EXPECT_EQ(ReadFile(out), "nodes=2 ntasks=4\n4\n");
  j = WaitState(N("e2e-exit3"), "Failed");
  EXPECT_TRUE(HasEvent(j, "TaskFailed", "exit code 3")) << j.dump();
  EXPECT_EQ(ReadFile(work_ + "/exit3.out"), "about to fail\n");

  // 2b. Output through the API: a script without -o writes where the server told Slurm to
  //     (<data-dir>/slurm-logs), and `GET /v1/jobs/NAME/logs` serves stdout and stderr.
  Submit(N("e2e-logs"), "#!/bin/bash\n#SBATCH -J " + N("e2e-logs") +
                            "\n#SBATCH -t 5\necho hello from slurm\necho oops >&2\n");
  WaitState(N("e2e-logs"), "Succeeded");
  auto [ls, lout] = server_->GetText("/v1/jobs/" + N("e2e-logs") + "/logs?task=0");
  EXPECT_EQ(ls, 200) << lout;
  EXPECT_EQ(lout, "hello from slurm\n");
  auto [es, eout] = server_->GetText("/v1/jobs/" + N("e2e-logs") + "/logs?task=0&stream=stderr");
  EXPECT_EQ(es, 200) << eout;
  EXPECT_EQ(eout, "oops\n");
  auto [lrc, lcli] = server_->Cli("logs " + N("e2e-logs"));
  EXPECT_EQ(lrc, 0) << lcli;
  EXPECT_NE(lcli.find("hello from slurm"), std::string::npos) << lcli;
  // A script that names its own output keeps it; the logs endpoint says where it is not.
  auto [os, oout] = server_->GetText("/v1/jobs/" + N("e2e-exit3") + "/logs?task=0");
  EXPECT_EQ(os, 409) << oout;
  EXPECT_NE(oout.find("#SBATCH -o"), std::string::npos) << oout;

  // 3. Cancel through the CLI -> scancel; the job ends Cancelled and Slurm says CANCELLED.
  Submit(N("e2e-cancel"),
         "#!/bin/bash\n#SBATCH -J " + N("e2e-cancel") + "\n#SBATCH -o /dev/null\nsleep 300\n");
  WaitState(N("e2e-cancel"), "Running");
  auto [crc, cout] = server_->Cli("cancel " + N("e2e-cancel"));
  EXPECT_EQ(crc, 0) << cout;
  WaitState(N("e2e-cancel"), "Cancelled");
  auto [src, states] =
      CaptureCommand("SLURM_CONF='" + ClusterDir() + "/slurm.conf' squeue -h -t all -o '%k %T'");
  bool cancelled = false;
  std::stringstream lines(states);
  for (std::string line; std::getline(lines, line);)
    cancelled = cancelled || (line.rfind("tessera:" + N("e2e-cancel") + ":", 0) == 0 &&
                              line.find(" CANCELLED") != std::string::npos);
  EXPECT_TRUE(cancelled) << states;

  // 4. kill -9 the server while a job runs on Slurm; the restarted server adopts it: it
  //    succeeds once, with one Slurm job, and nothing is submitted twice.
  std::string once = work_ + "/once.out";
  Submit(N("e2e-restart"), "#!/bin/bash\n#SBATCH -J " + N("e2e-restart") +
                               "\n#SBATCH -o /dev/null\nsleep 6\n"
                               "echo ran >>" +
                               once + "\n");
  WaitState(N("e2e-restart"), "Running");
  server_->Kill(SIGKILL);
  ASSERT_TRUE(server_->Start()) << ReadFile(work_ + "/server.log");
  j = WaitState(N("e2e-restart"), "Succeeded");
  EXPECT_EQ(j.value("attempt", 0), 1) << j.dump();
  EXPECT_EQ(ReadFile(once), "ran\n");
  EXPECT_EQ(SlurmJobsOf(N("e2e-restart")), 1);
  EXPECT_EQ(SlurmJobsOf(N("e2e-ok")), 1);
  EXPECT_NE(ReadFile(work_ + "/server.log").find("1 adopted"), std::string::npos)
      << ReadFile(work_ + "/server.log");
  // A job submitted after the restart runs too (the pool is live again).
  Submit(N("e2e-after"),
         "#!/bin/bash\n#SBATCH -J " + N("e2e-after") + "\n#SBATCH -o /dev/null\ntrue\n");
  WaitState(N("e2e-after"), "Succeeded");

  // 5. A drained Slurm node takes no work and `get nodes` says so, in kubectl's words.
  const std::string conf = "SLURM_CONF='" + ClusterDir() + "/slurm.conf' ";
  auto [drc, dout] =
      CaptureCommand(conf + "scontrol update nodename=node4 state=drain reason=tessera-e2e 2>&1");
  ASSERT_EQ(drc, 0) << dout;
  struct Resume {  // whatever happens: the cluster is shared with the other tests
    std::string conf;
    ~Resume() { (void)CaptureCommand(conf + "scontrol update nodename=node4 state=resume 2>&1"); }
  } resume{conf};
  auto status_of = [](const std::string& table, const std::string& node) {
    std::stringstream lines(table);
    for (std::string line; std::getline(lines, line);) {
      std::stringstream words(line);
      std::string name, status;
      words >> name >> status;
      if (name == node) return status;
    }
    return std::string();
  };
  std::string table2;
  for (int i = 0; i < 100 && status_of(table2, "node4") != "Ready,SchedulingDisabled"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    table2 = server_->Cli("get nodes").second;
  }
  EXPECT_EQ(status_of(table2, "node4"), "Ready,SchedulingDisabled") << table2;
  EXPECT_EQ(status_of(table2, "node1"), "Ready") << table2;
  server_->Kill(SIGTERM);
}

}  // namespace
}  // namespace tessera::slurm
