// The agent against a fake server (httplib on 127.0.0.1:0) that speaks
// docs/agent-protocol.md: registration, heartbeats, desired-state reconciliation, fencing,
// server restarts, cut connections and agent crashes.
#include "agent/agent.h"
#include "agent/test_support.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "agent/inventory.h"
#include "agent/local_agents.h"

namespace tessera::agent {
namespace {

using testing::Running;
using testing::Slurp;
using testing::WaitFor;

namespace fs = std::filesystem;

// A failed assertion can leave an agent's tasks running (agents leave them for the next
// agent): kill every process group recorded under `dir`.
void KillLeftoverTasks(const fs::path& dir) {
  if (!fs::exists(dir)) return;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename() != "task.json") continue;
    Json j = Json::parse(Slurp(e.path().string()), nullptr, false);
    if (j.is_object() && j.value("pgid", 0) > 0) ::kill(-j.value("pgid", 0), SIGKILL);
  }
}

// A server that keeps, per node, an epoch and the desired allocations, and records what
// agents tell it. Restartable on the same port.
class FakeServer {
 public:
  explicit FakeServer(int port = 0) { Listen(port); }
  ~FakeServer() { Shutdown(); }

  void Listen(int port) {
    svr_ = std::make_unique<httplib::Server>();
    svr_->Post("/v1/agents/register", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization") != "Bearer t0ken") {
        res.status = 401;
        return;
      }
      Json body = Json::parse(req.body);
      std::lock_guard<std::mutex> lock(mu_);
      const std::string node = body["node"]["name"];
      registers_.push_back(body);
      Node& n = nodes_[node];
      if (hold_) {  // read-only: registers nothing, says hold
        res.set_content(Json({{"node", node},
                              {"epoch", n.epoch},
                              {"heartbeatSeconds", 1},
                              {"hold", true},
                              {"message", "disk full"}})
                            .dump(),
                        "application/json");
        return;
      }
      if (n.boot_id != body["bootId"].get<std::string>()) {
        n.boot_id = body["bootId"];
        ++n.epoch;
      }
      res.set_content(Json({{"node", node}, {"epoch", n.epoch}, {"heartbeatSeconds", 1}}).dump(),
                      "application/json");
    });
    svr_->Post(R"(/v1/agents/([^/]+)/heartbeat)",
               [this](const httplib::Request& req, httplib::Response& res) {
                 Json body = Json::parse(req.body);
                 std::unique_lock<std::mutex> lock(mu_);
                 // A frozen server (SIGSTOP, a wedged disk): the call hangs, no answer.
                 frozen_cv_.wait(lock, [this] { return !frozen_; });
                 auto it = nodes_.find(req.matches[1]);
                 if (it == nodes_.end()) {
                   res.status = 404;
                   return;
                 }
                 if (body["epoch"] != it->second.epoch) {
                   res.status = 409;
                   return;
                 }
                 heartbeats_.push_back(body);
                 if (hold_) {  // a read-only server: it takes no report, changes nothing
                   res.set_content(Json({{"hold", true}, {"message", "disk full"}}).dump(),
                                   "application/json");
                   return;
                 }
                 for (const auto& t : body["tasks"]) last_state_[t["allocation"]] = t;
                 Json allocs = Json::array();
                 for (const auto& [id, a] : it->second.desired) allocs.push_back(a);
                 res.set_content(Json({{"allocations", allocs}, {"heartbeatSeconds", 1}}).dump(),
                                 "application/json");
               });
    port_ = -1;
    for (int attempt = 0; attempt < 100 && port_ < 0; ++attempt) {  // a just-closed port may linger
      if (port == 0) {
        port_ = svr_->bind_to_any_port("127.0.0.1");
      } else if (svr_->bind_to_port("127.0.0.1", port)) {
        port_ = port;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    thread_ = std::thread([this] { svr_->listen_after_bind(); });
  }
  void Freeze(bool frozen) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      frozen_ = frozen;
    }
    frozen_cv_.notify_all();
  }
  void Hold(bool hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
  }
  void Shutdown() {
    Freeze(false);
    if (svr_) svr_->stop();
    if (thread_.joinable()) thread_.join();
    svr_.reset();
  }
  // A server restart forgets epochs (the store keeps the desired state).
  void Restart() {
    Shutdown();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [n, s] : nodes_) {
        s.boot_id.clear();
        s.epoch += 100;
      }
    }
    Listen(port_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  void Want(const std::string& node, const Json& alloc) {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_[node].desired[alloc["allocation"]] = alloc;
  }
  void Unwant(const std::string& node, const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_[node].desired.erase(id);
  }
  std::string StateOf(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = last_state_.find(id);
    return it == last_state_.end() ? "" : it->second["state"].get<std::string>();
  }
  Json LastStateOf(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return last_state_.count(id) ? last_state_[id] : Json();
  }
  Json LastHeartbeat() {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_.empty() ? Json() : heartbeats_.back();
  }
  size_t Heartbeats() {
    std::lock_guard<std::mutex> lock(mu_);
    return heartbeats_.size();
  }
  std::vector<Json> Registers() {
    std::lock_guard<std::mutex> lock(mu_);
    return registers_;
  }
  Json FirstRegister() {
    std::lock_guard<std::mutex> lock(mu_);
    return registers_.empty() ? Json() : registers_.front();
  }

 private:
  struct Node {
    int64_t epoch = 0;
    std::string boot_id;
    std::map<std::string, Json> desired;
  };
  std::unique_ptr<httplib::Server> svr_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable frozen_cv_;
  bool frozen_ = false;
  bool hold_ = false;
  std::map<std::string, Node> nodes_;
  std::vector<Json> registers_, heartbeats_;
  std::map<std::string, Json> last_state_;
};

Json Alloc(const std::string& id, const std::string& script, int grace = 5) {
  return {{"allocation", id},
          {"job", "job-" + id},
          {"task", 0},
          {"attempt", 1},
          {"command", {"/bin/sh", "-c", script}},
          {"env", {{"RANK", "0"}, {"WORLD_SIZE", "1"}}},
          {"devices", {{{"device", 3}, {"milli", 1000}, {"memory", "0"}}}},
          {"gracePeriodSeconds", grace}};
}

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-agent-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override {
    KillLeftoverTasks(dir_);
    fs::remove_all(dir_);
  }
  AgentOptions Options(const std::string& url, const std::string& boot = "boot-1") {
    auto nodes = LoadInventory("seed-minimal");
    AgentOptions o;
    o.server_url = url;
    o.token = "t0ken";
    o.node = (*nodes)[0];
    o.work_dir = dir_.string();
    o.boot_id = boot;
    o.log = [](const std::string&) {};
    return o;
  }
  // An agent with this lease (seconds), running one long task, "a-long".
  std::unique_ptr<Agent> StartLeasedTask(FakeServer& server, int64_t lease = 1);
  bool WaitForTaskEnd(Agent& agent);
  std::unique_ptr<Agent> StartAgent(AgentOptions o) {
    auto a = Agent::Create(std::move(o));
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_TRUE((*a)->Start().ok());
    return std::move(*a);
  }
  pid_t TaskPid(const std::string& id) {
    return std::atoi(Slurp(dir_.string() + "/tasks/" + id + "/pid").c_str());
  }
  fs::path dir_;
};

TEST_F(AgentTest, RegistersVirtualInventoryAndHeartbeatsVirtualSamples) {
  FakeServer server;
  auto agent = StartAgent(Options(server.url()));
  ASSERT_TRUE(WaitFor([&] { return server.Heartbeats() >= 2; }));
  Json reg = server.FirstRegister();
  EXPECT_EQ(reg["agentVersion"], kAgentVersion);
  EXPECT_EQ(reg["bootId"], "boot-1");
  EXPECT_EQ(reg["logsUrl"], agent->logs_url());
  EXPECT_EQ(reg["node"]["name"], "gpu-node-1");
  ASSERT_EQ(reg["node"]["devices"].size(), 8u);
  for (const auto& d : reg["node"]["devices"]) EXPECT_EQ(d["virtual"], true);
  Json hb = server.LastHeartbeat();
  EXPECT_EQ(hb["epoch"], 1);
  ASSERT_EQ(hb["devices"].size(), 8u);
  EXPECT_EQ(hb["devices"][0]["virtual"], true);
  EXPECT_EQ(hb["logsUrl"], agent->logs_url());
  EXPECT_EQ(agent->registrations(), 1);
  // No --logs-token: none to give the server.
  EXPECT_FALSE(reg.contains("logsToken"));
  EXPECT_FALSE(hb.contains("logsToken"));
}

TEST_F(AgentTest, WrongTokenIsReportedAndRetried) {
  FakeServer server;
  AgentOptions o = Options(server.url());
  o.token = "wrong";
  auto agent = StartAgent(o);
  ASSERT_TRUE(WaitFor([&] { return !agent->last_error().empty(); }));
  EXPECT_NE(agent->last_error().find("HTTP 401"), std::string::npos) << agent->last_error();
  EXPECT_EQ(agent->registrations(), 0);
}

// The identity travels in the heartbeat answer (securityContext, submitter): one the agent
// cannot read fails that task alone, with the field's path, never running it as the agent.
TEST_F(AgentTest, RunsEachTaskAsItsAllocationSays) {
  FakeServer server;
  Json bad = Alloc("a-bad", "touch ran");
  bad["securityContext"] = {{"runAsUser", -1}};
  server.Want("gpu-node-1", bad);
  Json unknown = Alloc("a-unknown", "touch ran");
  unknown["submitter"] = "tessera-no-such-user";
  server.Want("gpu-node-1", unknown);
  Json nobody = Alloc("a-nobody", "id -u");
  nobody["securityContext"] = {{"runAsUser", 65534}};
  nobody["submitter"] = "tessera-no-such-user";  // (a listed runAsUser wins)
  if (::geteuid() == 0) server.Want("gpu-node-1", nobody);
  AgentOptions o = Options(server.url());
  o.identity.run_as_submitter = true;
  o.identity.allowed_uids = {{65534, 65534}};  // (--allow-run-as-uids 65534)
  auto agent = StartAgent(o);
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-bad") == "failed"; }));
  EXPECT_EQ(server.LastStateOf("a-bad")["message"],
            "allocations[0].securityContext.runAsUser: must be between 0 and 2147483647, "
            "inclusive, got -1");
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-unknown") == "failed"; }));
  EXPECT_NE(server.LastStateOf("a-unknown")["message"].get<std::string>().find(
                "user \"tessera-no-such-user\" (the job's submitter) does not exist on node "
                "gpu-node-1"),
            std::string::npos)
      << server.LastStateOf("a-unknown");
  EXPECT_FALSE(fs::exists(dir_ / "tasks/a-bad/ran"));
  EXPECT_FALSE(fs::exists(dir_ / "tasks/a-unknown/ran"));
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to check a task run as uid 65534";
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-nobody") == "succeeded"; }))
      << server.LastStateOf("a-nobody");
  EXPECT_EQ(Slurp(dir_.string() + "/tasks/a-nobody/stdout"), "65534\n");
}

TEST_F(AgentTest, RunsDesiredTasksReportsExitServesLogsAndSamplesUtilisation) {
  FakeServer server;
  server.Want("gpu-node-1", Alloc("a-1", "echo hello from $RANK; exit 7"));
  server.Want("gpu-node-1", Alloc("a-2", "sleep 60"));
  AgentOptions o = Options(server.url());
  o.logs_token = "t0ken";
  auto agent = StartAgent(o);
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-1") == "failed"; }));
  Json st = server.LastStateOf("a-1");
  EXPECT_EQ(st["exitCode"], 7);
  EXPECT_EQ(st["message"], "exited with code 7");
  // Virtual utilisation: a-2 holds GPU 3 wholly.
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-2") == "running"; }));
  Json hb = server.LastHeartbeat();
  EXPECT_EQ(hb["devices"][3]["utilPercent"], 100);
  EXPECT_EQ(hb["devices"][3]["memoryUsed"], int64_t{80} << 30);
  EXPECT_EQ(hb["devices"][0]["utilPercent"], 0);

  httplib::Client logs(agent->logs_url());
  logs.set_bearer_token_auth("t0ken");
  auto res = logs.Get("/v1/logs/a-1?stream=stdout&offset=0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "hello from 0\n");
  EXPECT_EQ(res->get_header_value("X-Tessera-Task-State"), "failed");
  res = logs.Get("/v1/logs/a-1?stream=stdout&offset=6");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "from 0\n");
  EXPECT_EQ(res->get_header_value("X-Tessera-Log-Size"), "13");
  EXPECT_EQ(logs.Get("/v1/logs/a-nope?stream=stdout")->status, 404);
  EXPECT_EQ(logs.Get("/v1/logs/a-1?stream=env")->status, 400);
  httplib::Client anon(agent->logs_url());
  EXPECT_EQ(anon.Get("/v1/logs/a-1")->status, 401);
  // The server is given the token, for its logs proxy: when the agent registers, and in every
  // heartbeat (a restarted server stores none and may not see the agent register again).
  EXPECT_EQ(server.FirstRegister().value("logsToken", ""), "t0ken");
  EXPECT_EQ(server.LastHeartbeat().value("logsToken", ""), "t0ken");

  // The server drops the finished allocation: the agent forgets it (it ran once, is not rerun).
  server.Unwant("gpu-node-1", "a-1");
  ASSERT_TRUE(WaitFor([&] { return !agent->executor().Has("a-1"); }));
  agent->Stop(true);
}

// offset and limit are byte counts: a negative, garbled or out-of-int64 value is refused
// with a 400 that names the parameter (it was clamped to 0, cut at the first non-digit, or
// refused without saying which); a limit past 8 MiB reads 8 MiB.
TEST_F(AgentTest, TheLogsEndpointRefusesBadOffsetAndLimitNamingThem) {
  FakeServer server;
  server.Want("gpu-node-1", Alloc("a-1", "echo hello"));
  auto agent = StartAgent(Options(server.url()));
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-1") == "succeeded"; }));
  httplib::Client logs(agent->logs_url());
  const std::pair<const char*, const char*> kBad[] = {
      {"offset=-1", "offset: must be 0..9223372036854775807"},
      {"offset=2abc", "offset: expected an integer, got \"2abc\""},
      {"offset=99999999999999999999", "offset: expected an integer, got \"99999999999999999999\""},
      {"offset=", "offset: expected an integer, got \"\""},
      {"limit=-5", "limit: must be 0..9223372036854775807"},
      {"limit=x", "limit: expected an integer, got \"x\""},
      {"offset=0&limit=1e3", "limit: expected an integer, got \"1e3\""},
  };
  for (const auto& [query, why] : kBad) {
    auto res = logs.Get((std::string("/v1/logs/a-1?stream=stdout&") + query).c_str());
    ASSERT_TRUE(res) << query;
    EXPECT_EQ(res->status, 400) << query;
    EXPECT_EQ(Json::parse(res->body, nullptr, false).value("error", ""), why) << res->body;
  }
  // Good values, huge ones included: an offset past the end reads nothing and points at the end.
  auto part = logs.Get("/v1/logs/a-1?offset=1&limit=3");
  ASSERT_TRUE(part);
  EXPECT_EQ(part->status, 200);
  EXPECT_EQ(part->body, "ell");
  EXPECT_EQ(part->get_header_value("X-Next-Offset"), "4");
  auto all = logs.Get("/v1/logs/a-1?limit=9223372036854775807");
  ASSERT_TRUE(all);
  EXPECT_EQ(all->body, "hello\n");
  auto past = logs.Get("/v1/logs/a-1?offset=9223372036854775807");
  ASSERT_TRUE(past);
  EXPECT_EQ(past->status, 200);
  EXPECT_EQ(past->body, "");
  EXPECT_EQ(past->get_header_value("X-Next-Offset"), "6");
  agent->Stop(true);
}

// A finished task's folder goes after the retention, once the server no longer lists it
// (never before, however old), and the logs endpoint then says why (410), not "no logs".
TEST_F(AgentTest, FinishedTaskFoldersGoAfterTheRetentionAndTheirLogsSaySo) {
  FakeServer server;
  server.Want("gpu-node-1", Alloc("a-done", "echo done"));
  auto now = std::make_shared<std::atomic<int64_t>>(1733150000);
  AgentOptions o = Options(server.url());
  o.wall_clock = [now] { return now->load(); };
  o.task_retention_seconds = 600;
  auto agent = StartAgent(o);
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-done") == "succeeded"; }));
  const std::string folder = dir_.string() + "/tasks/a-done";
  *now += 3600;
  const size_t beats = server.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return server.Heartbeats() >= beats + 2; }));
  EXPECT_TRUE(fs::exists(folder + "/stdout")) << "removed while the server lists it";
  server.Unwant("gpu-node-1", "a-done");
  ASSERT_TRUE(WaitFor([&] { return !fs::exists(folder); }));
  httplib::Client logs(agent->logs_url());
  auto res = logs.Get("/v1/logs/a-done");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 410);
  EXPECT_EQ(Json::parse(res->body, nullptr, false).value("error", ""),
            "logs of job job-a-done task 0 (allocation a-done) were removed after 10m (the "
            "agent's --task-retention)");
  EXPECT_EQ(logs.Get("/v1/logs/a-nope")->status, 404);
  agent->Stop(true);
}

// One allocation the agent cannot run (no command: an older server accepted such jobs)
// fails alone; the answer is still taken, so the other tasks keep running and no lease
// runs out.
TEST_F(AgentTest, AnAllocationWithoutACommandFailsAloneAndOthersRun) {
  FakeServer server;
  Json bad = Alloc("a-bad", "");
  bad.erase("command");
  server.Want("gpu-node-1", Alloc("a-good", "sleep 30"));
  server.Want("gpu-node-1", bad);
  auto agent = StartAgent(Options(server.url()));
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-bad") == "failed"; }));
  EXPECT_NE(server.LastStateOf("a-bad")["message"].get<std::string>().find("command: empty"),
            std::string::npos)
      << server.LastStateOf("a-bad");
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-good") == "running"; }));
  EXPECT_TRUE(agent->last_error().empty()) << agent->last_error();
}

TEST_F(AgentTest, KillsEveryProcessWhoseAllocationIsNotListed) {
  FakeServer server;
  server.Want("gpu-node-1",
              Alloc("a-victim", "echo $$ > pid; trap 'exit 0' TERM; while :; do sleep 0.1; done"));
  auto agent = StartAgent(Options(server.url()));
  ASSERT_TRUE(
      WaitFor([&] { return server.StateOf("a-victim") == "running" && TaskPid("a-victim") > 0; }));
  const pid_t pid = TaskPid("a-victim");
  server.Unwant("gpu-node-1", "a-victim");  // preempted or cancelled
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-victim") == "killed"; }));
  EXPECT_FALSE(Running(pid));
  EXPECT_EQ(server.LastStateOf("a-victim")["message"],
            "stopped: allocation no longer assigned to this node: exited with code 0");
  agent->Stop(true);
}

TEST_F(AgentTest, ANewAttemptWaitsUntilThePreviousOneHasExited) {
  FakeServer server;
  const std::string order = dir_.string() + "/order";
  server.Want("gpu-node-1",
              Alloc("a-old", "echo old-start >> " + order + "; trap 'sleep 0.5; echo old-end >> " +
                                 order + "; exit 0' TERM; while :; do sleep 0.1; done"));
  auto agent = StartAgent(Options(server.url()));
  ASSERT_TRUE(
      WaitFor([&] { return server.StateOf("a-old") == "running" && !Slurp(order).empty(); }));
  Json next = Alloc("a-new", "echo new-start >> " + order + "; exec sleep 60");
  next["job"] = "job-a-old";  // the same job's next attempt, on the same GPU
  server.Unwant("gpu-node-1", "a-old");
  server.Want("gpu-node-1", next);
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-new") == "running"; }));
  EXPECT_EQ(Slurp(order), "old-start\nold-end\nnew-start\n");
  EXPECT_EQ(server.StateOf("a-old"), "killed");
  agent->Stop(true);
}

TEST_F(AgentTest, ServerRestartAndStaleEpochMeanRegisterAgainTasksKeepRunning) {
  FakeServer server;
  server.Want("gpu-node-1", Alloc("a-long", "echo $$ > pid; exec sleep 60"));
  auto agent = StartAgent(Options(server.url()));
  ASSERT_TRUE(
      WaitFor([&] { return server.StateOf("a-long") == "running" && TaskPid("a-long") > 0; }));
  const pid_t pid = TaskPid("a-long");
  server.Restart();  // new epochs: the agent's next heartbeat gets 409
  ASSERT_TRUE(WaitFor([&] { return agent->registrations() >= 2 && agent->epoch() > 100; }));
  const size_t before = server.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return server.Heartbeats() > before + 1; }));
  EXPECT_TRUE(Running(pid));
  EXPECT_EQ(server.StateOf("a-long"), "running");
  EXPECT_EQ(TaskPid("a-long"), pid);  // the same process: not restarted
  agent->Stop(true);
}

// Accepts connections and closes them at once: a network cut mid-request.
class ConnectionKiller {
 public:
  explicit ConnectionKiller(int port) {
    // The port was just closed; the sandbox may need a moment to release it.
    for (int attempt = 0; attempt < 100 && !ok_; ++attempt) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
      int one = 1;
      ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      ::setsockopt(fd_, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);  // as httplib does
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0;
      if (!ok_) {
        bind_errno_ = errno;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    thread_ = std::thread([this] {
      while (true) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        ++killed_;
        char buf[256];
        (void)::recv(c, buf, sizeof buf, MSG_DONTWAIT);
        ::close(c);
      }
    });
  }
  ~ConnectionKiller() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  bool ok() const { return ok_; }
  int bind_errno() const { return bind_errno_; }
  int killed() const { return killed_.load(); }

 private:
  int fd_ = -1;
  bool ok_ = false;
  int bind_errno_ = 0;
  std::atomic<int> killed_{0};
  std::thread thread_;
};

TEST_F(AgentTest, KilledConnectionsAreRetriedAndTheAgentReconnects) {
  FakeServer server;
  server.Want("gpu-node-1", Alloc("a-long", "echo $$ > pid; exec sleep 60"));
  AgentOptions o = Options(server.url());
  o.lease_seconds = 0;  // this test is about reconnecting, not self-fencing
  auto agent = StartAgent(o);
  ASSERT_TRUE(
      WaitFor([&] { return server.StateOf("a-long") == "running" && TaskPid("a-long") > 0; }));
  const pid_t pid = TaskPid("a-long");
  const int port = server.port();
  server.Shutdown();
  {
    ConnectionKiller killer(port);
    ASSERT_TRUE(killer.ok()) << std::strerror(killer.bind_errno());
    ASSERT_TRUE(WaitFor([&] { return killer.killed() >= 3; }));
    EXPECT_FALSE(agent->last_error().empty());
  }
  server.Listen(port);
  const size_t before = server.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return server.Heartbeats() > before && agent->last_error().empty(); }));
  EXPECT_TRUE(Running(pid));
  EXPECT_EQ(server.StateOf("a-long"), "running");
  agent->Stop(true);
}

// An agent with a lease of 1 s, running task a-long.
std::unique_ptr<Agent> AgentTest::StartLeasedTask(FakeServer& server, int64_t lease) {
  server.Want("gpu-node-1", Alloc("a-long", "echo $$ > pid; exec sleep 60"));
  AgentOptions o = Options(server.url());
  o.lease_seconds = lease;
  auto agent = StartAgent(o);
  EXPECT_TRUE(
      WaitFor([&] { return server.StateOf("a-long") == "running" && TaskPid("a-long") > 0; }));
  return agent;
}

bool AgentTest::WaitForTaskEnd(Agent& agent) {
  return WaitFor([&] {
    auto st = agent.executor().Statuses();
    return st.size() == 1 && st[0].state != TaskState::kRunning;
  });
}

TEST_F(AgentTest, LeaseExpiryStopsTasksWhenTheServerIsGone) {
  FakeServer server;
  auto agent = StartLeasedTask(server);
  const pid_t pid = TaskPid("a-long");
  ASSERT_GT(pid, 0);
  server.Shutdown();  // a partition: the server may already be restarting the job elsewhere
  ASSERT_TRUE(WaitForTaskEnd(*agent));
  EXPECT_TRUE(WaitFor([&] { return !Running(pid); }));
  auto st = agent->executor().Statuses();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].state, TaskState::kKilled);
  EXPECT_EQ(st[0].message.rfind("stopped: agent lost contact with the server", 0), 0u)
      << st[0].message;
  agent->Stop(true);
}

// A server that answers "hold" (read-only after its store failed) keeps the agent's lease:
// tasks run on past it, and the answer changes nothing (here the allocation is no longer
// wanted, which a normal answer would stop at once).
TEST_F(AgentTest, AHoldAnswerKeepsTasksRunningAndTheLease) {
  FakeServer server;
  // (A 1 s lease, one heartbeat, would lapse with any jitter on a busy machine.)
  auto agent = StartLeasedTask(server, 3);
  const pid_t pid = TaskPid("a-long");
  server.Hold(true);
  server.Unwant("gpu-node-1", "a-long");
  const size_t beats = server.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return server.Heartbeats() >= beats + 5; }));  // 5 s: past the lease
  EXPECT_TRUE(Running(pid));
  EXPECT_EQ(agent->executor().Statuses()[0].state, TaskState::kRunning);
  server.Hold(false);  // the restarted server's answer: not wanted, so stopped
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-long") == "killed"; }));
  EXPECT_EQ(server.LastStateOf("a-long").value("message", "").rfind("stopped: allocation no", 0),
            0u)
      << server.LastStateOf("a-long").dump();
  agent->Stop(true);
}

// An agent restarted while the server is read-only adopts its task, is told to hold when it
// registers, and keeps the task and its lease (past the lease, 4 s here) until the server is
// back.
TEST_F(AgentTest, AnAgentRestartedDuringAHoldKeepsItsTasks) {
  FakeServer server;
  auto agent = StartLeasedTask(server, 4);
  const pid_t pid = TaskPid("a-long");
  server.Hold(true);
  server.Unwant("gpu-node-1", "a-long");
  agent->Stop(false);  // the agent restarts; its task does not
  agent.reset();
  AgentOptions o = Options(server.url(), "boot-2");
  o.lease_seconds = 4;
  agent = StartAgent(o);
  const size_t beats = server.Heartbeats();
  ASSERT_TRUE(WaitFor([&] { return server.Heartbeats() >= beats + 6; }));  // 6 s: past the lease
  EXPECT_TRUE(Running(pid));
  const size_t registers = server.Registers().size();
  server.Hold(false);
  // Registered for real once the server is back, as the agent it now is (its new boot, what
  // it adopted), then told what it should run.
  ASSERT_TRUE(WaitFor([&] { return server.Registers().size() > registers; }));
  EXPECT_EQ(server.Registers().back()["bootId"], "boot-2");
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-long") == "killed"; }));
  agent->Stop(true);
}

// The lease runs on its own clock: a heartbeat call hanging on a frozen server (up to the
// client's 5 s read timeout) does not hold the self-fencing back past the lease, which the
// server counts on before it runs the task elsewhere.
TEST_F(AgentTest, LeaseExpiresWhileAHeartbeatCallHangs) {
  FakeServer server;
  auto agent = StartLeasedTask(server);
  ASSERT_GT(TaskPid("a-long"), 0);
  server.Freeze(true);
  ASSERT_TRUE(WaitForTaskEnd(*agent));
  EXPECT_EQ(agent->last_error(), "") << "stopped only after the hanging call gave up";
  server.Freeze(false);
  agent->Stop(true);
}

TEST_F(AgentTest, AgentCrashThenRestartAdoptsTasksAndFencesRescheduledOnes) {
  FakeServer server;
  server.Want("gpu-node-1",
              Alloc("a-kept", "echo $$ > pid; echo started >> ../../starts; exec sleep 60"));
  server.Want("gpu-node-1", Alloc("a-moved", "echo $$ > pid; exec sleep 60"));
  auto first = StartAgent(Options(server.url(), "boot-1"));
  ASSERT_TRUE(WaitFor([&] {
    return server.StateOf("a-kept") == "running" && server.StateOf("a-moved") == "running" &&
           TaskPid("a-kept") > 0 && TaskPid("a-moved") > 0;
  }));
  const pid_t kept = TaskPid("a-kept"), moved = TaskPid("a-moved");
  first->Stop(false);  // the agent dies; its tasks do not
  first.reset();
  EXPECT_TRUE(Running(kept));
  EXPECT_TRUE(Running(moved));
  server.Unwant("gpu-node-1", "a-moved");  // meanwhile the server moved it to another node

  auto second = StartAgent(Options(server.url(), "boot-2"));
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-moved") == "killed"; }));
  EXPECT_TRUE(WaitFor([&] { return !Running(moved); }));
  EXPECT_TRUE(Running(kept));
  EXPECT_EQ(server.StateOf("a-kept"), "running");
  EXPECT_EQ(Slurp(dir_.string() + "/starts"), "started\n");  // adopted, never started twice
  EXPECT_EQ(second->epoch(), 2);
  second->Stop(true);
  EXPECT_FALSE(Running(kept));
}

// `tessera server --local-agent`. Their logs endpoints want a bearer token, as a `tessera
// agent --logs-token` does (they served every local user who found the port), and each
// gives the server its own (random) token for the logs proxy.
TEST_F(AgentTest, LocalAgentsRunOneAgentPerSeedNodeAndGuardTheirLogs) {
  FakeServer server;
  LocalAgentsOptions o;
  o.server_url = server.url();
  o.token = "t0ken";
  o.work_dir = dir_.string();
  o.seed = 42;
  o.log = [](const std::string&) {};
  server.Want("gpu-node-2", Alloc("a-n2", "echo on $TESSERA_NODE with $CUDA_VISIBLE_DEVICES"));
  auto la = LocalAgents::Start(o);
  ASSERT_TRUE(la.ok()) << la.status().ToString();
  EXPECT_EQ((*la)->nodes(), (std::vector<std::string>{"gpu-node-1", "gpu-node-2"}));
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-n2") == "succeeded"; }));
  EXPECT_EQ(Slurp(dir_.string() + "/gpu-node-2/tasks/a-n2/stdout"), "on gpu-node-2 with 3\n");
  EXPECT_NE((*la)->agent("gpu-node-1"), nullptr);

  std::map<std::string, std::string> tokens;  // node -> the logsToken it registered with
  for (const Json& r : server.Registers()) tokens[r["node"]["name"]] = r.value("logsToken", "");
  ASSERT_EQ(tokens.size(), 2u);
  EXPECT_EQ(tokens["gpu-node-2"].size(), 32u);
  EXPECT_NE(tokens["gpu-node-1"], tokens["gpu-node-2"]);
  EXPECT_EQ(server.LastHeartbeat().value("logsToken", "").size(), 32u);
  httplib::Client anon((*la)->agent("gpu-node-2")->logs_url());
  auto refused = anon.Get("/v1/logs/a-n2");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 401);
  EXPECT_EQ(refused->body.find("gpu-node-2"), std::string::npos);
  httplib::Client proxy((*la)->agent("gpu-node-2")->logs_url());
  proxy.set_bearer_token_auth(tokens["gpu-node-2"].c_str());
  auto read = proxy.Get("/v1/logs/a-n2");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->status, 200);
  EXPECT_EQ(read->body, "on gpu-node-2 with 3\n");
  (*la)->Stop();
}

TEST_F(AgentTest, CrashOfTheRealAgentProcess) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !fs::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY is not set (run through ctest)";
  FakeServer server;
  server.Want("gpu-node-1", Alloc("a-orphan", "echo $$ > pid; exec sleep 60"));
  auto spawn = [&] {
    pid_t p = ::fork();
    if (p == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 2);
      const std::string url = server.url(), wd = dir_.string();
      ::execl(bin, bin, "agent", "--server", url.c_str(), "--token", "t0ken", "--inventory",
              "seed-minimal", "--node", "gpu-node-1", "--work-dir", wd.c_str(), "--lease-seconds",
              "0", nullptr);
      ::_exit(127);
    }
    return p;
  };
  pid_t agent = spawn();
  ASSERT_TRUE(
      WaitFor([&] { return server.StateOf("a-orphan") == "running" && TaskPid("a-orphan") > 0; }));
  const pid_t task = TaskPid("a-orphan");
  ::kill(agent, SIGKILL);  // a real crash: no cleanup at all
  ::waitpid(agent, nullptr, 0);
  EXPECT_TRUE(Running(task));
  server.Unwant("gpu-node-1", "a-orphan");
  agent = spawn();
  ASSERT_TRUE(WaitFor([&] { return server.StateOf("a-orphan") == "killed"; }));
  EXPECT_TRUE(WaitFor([&] { return !Running(task); }));
  ::kill(agent, SIGTERM);
  ::waitpid(agent, nullptr, 0);
}

}  // namespace
}  // namespace tessera::agent
