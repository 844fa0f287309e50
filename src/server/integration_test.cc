// The real `tessera server` binary as a subprocess: kill -9 at random points while 16
// clients submit; after every restart each acknowledged job must be there, and no device
// may be allocated twice.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "common/capture_command.h"
#include "common/rng.h"
#include "common/test_pki.h"
#include "common/tls.h"
#include "model/codec.h"
#include "store/etcd_test_process.h"

namespace tessera::server {
namespace {

std::string ReadFile(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

class ServerProcess {
 public:
  ServerProcess(std::string binary, std::string dir, std::vector<std::string> extra = {})
      : binary_(std::move(binary)), dir_(std::move(dir)), extra_(std::move(extra)) {}
  ~ServerProcess() { Kill(SIGKILL); }

  // Starts the server and waits until it answers; returns false on timeout.
  bool Start() { return Spawn() && WaitReady(); }
  // Starts the server process without waiting (a standby does not answer until it leads).
  bool Spawn() {
    std::filesystem::remove(dir_ + "/server.url");
    std::string src = std::getenv("TESSERA_SOURCE_DIR") ? std::getenv("TESSERA_SOURCE_DIR") : ".";
    std::vector<std::string> args = {
        binary_,    "server",      "--data-dir",  dir_,
        "--listen", "127.0.0.1:0", "--bootstrap", src + "/examples/seed"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    // stderr beside the data dir
    pid_ = SpawnInBackground(std::move(args),
                             (std::filesystem::path(dir_).parent_path() / "server.log").string());
    return pid_ > 0;
  }
  bool WaitReady() {
    for (int i = 0; i < 300; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      url_ = ReadFile(dir_ + "/server.url");
      if (url_.empty()) continue;
      httplib::Client c(url_);
      ApplyTls(c, tls_);
      auto r = c.Get("/healthz");
      if (r && r->status == 200) {
        token_ = ReadFile(dir_ + "/admin.token");
        return true;
      }
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
  // The exit status once the process has exited by itself within `ms`; -1 otherwise.
  int WaitExit(int ms) {
    for (int i = 0; pid_ > 0 && i < ms / 20; ++i) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  const std::string& url() const { return url_; }
  const std::string& token() const { return token_; }
  // How WaitReady checks a server started with --tls-cert-file.
  void set_tls(TlsClientOptions tls) { tls_ = std::move(tls); }

 private:
  std::string binary_, dir_, url_, token_;
  TlsClientOptions tls_;
  std::vector<std::string> extra_;  // more flags
  pid_t pid_ = -1;
};

Json Get(const ServerProcess& s, const std::string& path) {
  httplib::Client c(s.url());
  c.set_read_timeout(60, 0);
  auto r = c.Get(path.c_str(), {{"Authorization", "Bearer " + s.token()}});
  if (!r || r->status != 200) {
    ADD_FAILURE() << "GET " << path << " failed: "
                  << (r ? r->body : "no answer (did the server crash? see server.log)");
    return Json();
  }
  return Json::parse(r->body);
}

std::set<std::string> AllJobNames(const ServerProcess& s) {
  std::set<std::string> names;
  std::string cont;
  for (;;) {
    Json page = Get(s, "/v1/jobs?limit=10000" + (cont.empty() ? "" : "&continue=" + cont));
    if (!page.contains("items")) return names;
    for (const auto& j : page["items"]) names.insert(j["name"].get<std::string>());
    if (!page.contains("continue")) return names;
    cont = page["continue"];
  }
}

// Every device holds at most 1000 milli-GPU, every MIG instance one task.
void ExpectNoDoubleAllocation(const ServerProcess& s, int& placed) {
  Json nodes = Get(s, "/v1/nodes?allocations=true");
  ASSERT_TRUE(nodes.contains("items"));
  for (const auto& n : nodes["items"]) {
    std::map<int, int64_t> milli;
    std::set<std::pair<int, int>> mig;
    for (const auto& a : n["allocations"]) {
      ++placed;
      for (const auto& d : a["placement"]["devices"]) {
        int dev = d["device"];
        milli[dev] += d["milli"].get<int64_t>();
        EXPECT_LE(milli[dev], 1000) << "device " << n["name"] << "/" << dev << " allocated twice";
        if (d.contains("migInstance")) {
          EXPECT_TRUE(mig.insert({dev, d["migInstance"].get<int>()}).second)
              << "MIG instance allocated twice";
        }
      }
    }
  }
}

void RegisterNodes(const ServerProcess& s, const std::string& boot) {
  httplib::Client c(s.url());
  for (const char* n : {"node-a", "node-b"}) {
    Json body = {{"node",
                  {{"name", n},
                   {"cpu", 96},
                   {"memory", "1Ti"},
                   {"gpus", {{"model", "A100-80GB"}, {"count", 8}, {"virtual", true}}}}},
                 {"bootId", boot},
                 {"agentVersion", "integration-test"}};
    auto r = c.Post("/v1/agents/register", {{"Authorization", "Bearer " + s.token()}}, body.dump(),
                    "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  }
}

// A token in --auth-config for a queue that does not exist is refused at start, as
// POST /v1/tokens refuses it (a typo would otherwise leave that team without its queue).
TEST(ServerIntegration, AuthConfigNamingAnUnknownQueueIsRefusedAtStart) {
  const char* binary = std::getenv("TESSERA_BINARY");
  if (binary == nullptr || !std::filesystem::exists(binary))
    GTEST_SKIP() << "TESSERA_BINARY not set or missing";
  const std::string src =
      std::getenv("TESSERA_SOURCE_DIR") ? std::getenv("TESSERA_SOURCE_DIR") : ".";
  auto base =
      std::filesystem::temp_directory_path() / ("tessera_authcfg_" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  const std::string cfg = (base / "tokens.yaml").string();
  std::ofstream(cfg) << "tokens:\n  - {name: alice, role: member, queues: [debug, nosuchq], "
                        "token: alice-secret-token-1234}\n";
  const std::string cmd = std::string("timeout 60 ") + binary + " server --data-dir " +
                          (base / "data").string() + " --listen 127.0.0.1:0 --bootstrap " + src +
                          "/examples/seed --auth-config " + cfg + " 2>&1";
  const auto [status, out] = CaptureCommand(cmd);  // -1: did not exit normally
  EXPECT_TRUE(status > 0 && status != 124) << out;
  EXPECT_NE(out.find("token \"alice\": queues: unknown queue \"nosuchq\" (known: "),
            std::string::npos)
      << out;
  // A file that names an admin: the server starts and mints no admin token of its own.
  const std::string good = (base / "good.yaml").string();
  std::ofstream(good) << "tokens:\n  - {name: ops, role: admin, token: ops-secret-token-1234}\n"
                         "  - {name: alice, role: member, queues: [debug], "
                         "token: alice-secret-token-1234}\n";
  ServerProcess server(binary, (base / "good-data").string(), {"--auth-config", good});
  ASSERT_TRUE(server.Start()) << "did not start with a valid --auth-config";
  EXPECT_FALSE(std::filesystem::exists(base / "good-data" / "admin.token"));
  server.Kill(SIGKILL);
  std::filesystem::remove_all(base);
}

TEST(ServerIntegration, KillNineUnderConcurrentSubmissionsLosesNothingAcknowledged) {
  const char* binary = std::getenv("TESSERA_BINARY");
  if (binary == nullptr || !std::filesystem::exists(binary))
    GTEST_SKIP() << "TESSERA_BINARY not set or missing";
  auto base =
      std::filesystem::temp_directory_path() / ("tessera_kill9_" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  std::string dir = (base / "data").string();
  ServerProcess server(binary, dir);
  Rng rng(20261202);
  std::mutex mu;
  std::set<std::string> acknowledged;
  int total_placed = 0;
  constexpr int kRounds = 4, kClients = 16;
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(server.Start()) << "server did not come up in round " << round;
    RegisterNodes(server, "boot-" + std::to_string(round));
    // Everything acknowledged before the previous kill is still there.
    auto names = AllJobNames(server);
    for (const auto& n : acknowledged)
      ASSERT_TRUE(names.count(n)) << "acknowledged job " << n << " lost";
    ExpectNoDoubleAllocation(server, total_placed);
    std::atomic<bool> stop{false};
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        httplib::Client cli(server.url());
        cli.set_keep_alive(true);
        cli.set_read_timeout(10, 0);
        for (int i = 0; !stop; ++i) {
          std::string name =
              "r" + std::to_string(round) + "-c" + std::to_string(c) + "-" + std::to_string(i);
          std::string queue = (i % 2) ? "training" : "debug";
          std::string body =
              R"({"apiVersion":"tessera.io/v1","kind":"Job","metadata":{"name":")" + name +
              R"("},"spec":{"queue":")" + queue +
              R"(","tasks":[{"replicas":1,"resources":{"cpu":1,"memory":"1Gi","nvidia.com/gpu":1},"command":["sleep","60"]}]}})";
          auto r = cli.Post("/v1/jobs", {{"Authorization", "Bearer " + server.token()}}, body,
                            "application/json");
          if (!r) {
            if (stop) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            continue;
          }
          if (r->status == 201) {
            std::lock_guard<std::mutex> l(mu);
            acknowledged.insert(name);
          }
        }
      });
    }
    // Kill at a random point, 300..1500 ms into the storm.
    std::this_thread::sleep_for(std::chrono::milliseconds(300 + rng.Below(1200)));
    server.Kill(SIGKILL);
    stop = true;
    for (auto& t : clients) t.join();
  }
  ASSERT_TRUE(server.Start());
  auto names = AllJobNames(server);
  size_t missing = 0;
  for (const auto& n : acknowledged) missing += names.count(n) == 0;
  std::printf(
      "kill -9 x%d: %zu acknowledged submissions, %zu present after restart, %zu jobs stored in "
      "total, "
      "%d allocations checked\n",
      kRounds, acknowledged.size(), acknowledged.size() - missing, names.size(), total_placed);
  EXPECT_EQ(missing, 0u);
  EXPECT_GT(acknowledged.size(), 0u);
  // Placements after the restarts: nodes were registered each round, so with a real engine
  // jobs were placed; none of their devices may be shared.
  RegisterNodes(server, "boot-final");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ExpectNoDoubleAllocation(server, total_placed);
  server.Kill(SIGTERM);
  std::filesystem::remove_all(base);
}

// Two servers on one etcd (--store etcd://): the second waits as a standby while the first
// leads; the first is killed -9 and the second takes over, with the job the first accepted,
// after at most the lease TTL. Then the first comes back on its own data dir and finds it too.
TEST(ServerIntegration, EtcdStoreFailsOverToAStandbyAfterKillNine) {
  const char* binary = std::getenv("TESSERA_BINARY");
  if (binary == nullptr || !std::filesystem::exists(binary))
    GTEST_SKIP() << "TESSERA_BINARY not set or missing";
  if (!store::testing::EtcdProcess::Available())
    GTEST_SKIP() << "no etcd binary on PATH: install etcd-server (scripts/deps.d/etcd.list)";
  store::testing::EtcdProcess etcd;
  ASSERT_TRUE(etcd.Start()) << "etcd did not start; see " << etcd.log();
  auto base =
      std::filesystem::temp_directory_path() / ("tessera_etcd_srv_" + std::to_string(::getpid()));
  std::filesystem::remove_all(base);
  std::filesystem::create_directories(base);
  const std::vector<std::string> flags = {"--store", "etcd://" + etcd.host_port(),
                                          "--etcd-lease-seconds", "2"};
  ServerProcess a(binary, (base / "a").string(), flags);
  ASSERT_TRUE(a.Start()) << "server a did not come up; see " << (base / "server.log");
  const std::string token = a.token();
  ASSERT_FALSE(token.empty());
  httplib::Client ca(a.url());
  auto r = ca.Post(
      "/v1/jobs", {{"Authorization", "Bearer " + token}},
      R"({"apiVersion":"tessera.io/v1","kind":"Job","metadata":{"name":"kept"},)"
      R"("spec":{"queue":"debug","tasks":[{"replicas":1,"resources":{"cpu":1,"memory":"1Gi"},)"
      R"("command":["sleep","60"]}]}})",
      "application/json");
  ASSERT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");

  ServerProcess b(binary, (base / "b").string(), flags);
  ASSERT_TRUE(b.Spawn());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_NE(ReadFile((base / "server.log").string()).find("waiting to lead: held by "),
            std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(base / "b" / "server.url")) << "a standby serves nothing";
  a.Kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(b.WaitReady()) << "the standby did not take over; see " << (base / "server.log");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::printf("standby serving %.2f s after the leader was killed -9 (lease TTL 2 s)\n", took);
  EXPECT_LT(took, 6.0);
  // The admin token's hash is in etcd; the file is only in a's data dir.
  EXPECT_FALSE(std::filesystem::exists(base / "b" / "admin.token"));
  httplib::Client cb(b.url());
  auto job = cb.Get("/v1/jobs/kept", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(job && job->status == 200) << (job ? job->body : "no answer");

  b.Kill(SIGKILL);
  ASSERT_TRUE(a.Start()) << "server a did not come back; see " << (base / "server.log");
  httplib::Client ca2(a.url());
  auto again = ca2.Get("/v1/jobs/kept", {{"Authorization", "Bearer " + token}});
  EXPECT_TRUE(again && again->status == 200) << (again ? again->body : "no answer");
  // etcd down: the first write that fails makes the leader exit (status 75) rather than stay
  // read-only holding the leadership; with etcd back it leads again and has the job.
  etcd.Kill();
  (void)ca2.Post("/v1/jobs/kept/cancel", {{"Authorization", "Bearer " + token}}, "{}",
                 "application/json");
  EXPECT_EQ(a.WaitExit(5000), 75);
  EXPECT_NE(ReadFile((base / "server.log").string()).find("the etcd store failed a write"),
            std::string::npos);
  ASSERT_TRUE(etcd.Start()) << "etcd did not restart; see " << etcd.log();
  ASSERT_TRUE(a.Start()) << "server a did not come back after etcd; see " << (base / "server.log");
  httplib::Client ca3(a.url());
  auto back = ca3.Get("/v1/jobs/kept", {{"Authorization", "Bearer " + token}});
  EXPECT_TRUE(back && back->status == 200) << (back ? back->body : "no answer");
  // Its lease gone (revoked here, as etcd does when renewals stop getting through): the
  // server exits at once, status 75, for its supervisor to restart it as a standby.
  httplib::Client ce(etcd.endpoint());
  auto leases = ce.Post("/v3/lease/leases", "{}", "application/json");
  ASSERT_TRUE(leases && leases->status == 200);
  const Json listed = Json::parse(leases->body);
  for (const auto& l : listed["leases"])
    ce.Post("/v3/lease/revoke", Json{{"ID", l["ID"]}}.dump(), "application/json");
  EXPECT_EQ(a.WaitExit(5000), 75);
  EXPECT_NE(ReadFile((base / "server.log").string()).find("lost the leadership"),
            std::string::npos);
  std::filesystem::remove_all(base);
}

// A throwaway CA and server certificate in a fresh folder, for the tests of TLS.
class TlsIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* binary = std::getenv("TESSERA_BINARY");
    if (binary == nullptr || !std::filesystem::exists(binary))
      GTEST_SKIP() << "TESSERA_BINARY not set or missing";
    binary_ = binary;
    base_ = std::filesystem::temp_directory_path() /
            ("tessera_tls_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(base_);
    if (std::string why = pki_.Make((base_ / "pki").string()); !why.empty()) GTEST_SKIP() << why;
  }
  void TearDown() override {
    if (!HasFailure() && !base_.empty()) std::filesystem::remove_all(base_);
  }
  // `tessera ARGS` as a user runs it (with `env`, e.g. "TESSERA_CACERT=..."): its exit
  // status and output.
  std::pair<int, std::string> Tessera(const std::string& args, const std::string& env = "") {
    return CaptureCommand("timeout 60 env " + env + " " + binary_ + " " + args + " 2>&1");
  }
  // `server` with a data dir under base_ and the seed, listening on any port; flags follow.
  std::string ServerArgs(const std::string& data_dir) const {
    const char* src = std::getenv("TESSERA_SOURCE_DIR");
    return "server --data-dir " + (base_ / data_dir).string() +
           " --listen 127.0.0.1:0 --bootstrap " + std::string(src ? src : ".") + "/examples/seed ";
  }

  std::string binary_;
  std::filesystem::path base_;
  TestPki pki_;
};

// --tls-cert-file/--tls-key-file: the API (and /healthz, /metrics) is served over HTTPS only,
// and the CLI checks the server's certificate: with --cacert or $TESSERA_CACERT it works;
// without (the system's CAs) or with another CA it fails with exit 3, naming the URL and why;
// --insecure-skip-tls-verify works and says so.
TEST_F(TlsIntegration, ServesHttpsOnlyAndTheCliChecksTheCertificate) {
  ServerProcess server(binary_, (base_ / "data").string(),
                       {"--tls-cert-file", pki_.server_cert, "--tls-key-file", pki_.server_key});
  TlsClientOptions tls;
  tls.ca_file = pki_.ca_cert;
  server.set_tls(tls);
  ASSERT_TRUE(server.Start()) << ReadFile((base_ / "server.log").string());
  const std::string url = server.url();
  ASSERT_EQ(url.rfind("https://127.0.0.1:", 0), 0u) << url;

  httplib::Client c(url);
  ApplyTls(c, tls);
  for (const char* path : {"/healthz", "/metrics"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path << ": " << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200) << path;
  }
  // No plain HTTP beside it.
  const std::string port = url.substr(url.rfind(':') + 1);
  httplib::Client plain("http://127.0.0.1:" + port);
  plain.set_read_timeout(5, 0);
  auto r = plain.Get("/healthz");
  EXPECT_FALSE(r && r->status == 200) << "plain HTTP answered on the TLS port";

  const std::string get = "get jobs --server " + url + " --token " + server.token();
  auto [ok, ok_out] = Tessera(get + " --cacert " + pki_.ca_cert);
  EXPECT_EQ(ok, 0) << ok_out;
  auto [env, env_out] = Tessera(get, "TESSERA_CACERT=" + pki_.ca_cert);
  EXPECT_EQ(env, 0) << env_out;
  auto [before, before_out] = Tessera("--cacert " + pki_.ca_cert + " " + get);  // as kubectl
  EXPECT_EQ(before, 0) << before_out;
  auto [host, host_out] = Tessera("get jobs --server https://localhost:" + port + " --token " +
                                  server.token() + " --cacert " + pki_.ca_cert);
  EXPECT_EQ(host, 0) << host_out;

  auto [untrusted, untrusted_out] = Tessera(get);
  EXPECT_EQ(untrusted, 3) << untrusted_out;
  EXPECT_NE(untrusted_out.find("error: TLS: the certificate of " + url + " is not trusted: "),
            std::string::npos)
      << untrusted_out;
  EXPECT_NE(untrusted_out.find("with --cacert FILE"), std::string::npos) << untrusted_out;
  auto [wrong, wrong_out] = Tessera(get + " --cacert " + pki_.other_ca_cert);
  EXPECT_EQ(wrong, 3) << wrong_out;
  EXPECT_NE(wrong_out.find("is not trusted: "), std::string::npos) << wrong_out;
  EXPECT_NE(wrong_out.find("the CA in " + pki_.other_ca_cert + " (--cacert)"), std::string::npos)
      << wrong_out;
  auto [missing, missing_out] = Tessera(get + " --cacert " + (base_ / "nope.pem").string());
  EXPECT_EQ(missing, 2) << missing_out;  // a usage error
  EXPECT_NE(missing_out.find("--cacert " + (base_ / "nope.pem").string() + ": cannot read"),
            std::string::npos)
      << missing_out;

  auto [skip, skip_out] = Tessera(get + " --insecure-skip-tls-verify");
  EXPECT_EQ(skip, 0) << skip_out;
  EXPECT_NE(skip_out.find("WARNING: --insecure-skip-tls-verify"), std::string::npos) << skip_out;

  auto [http, http_out] =
      Tessera("get jobs --server http://127.0.0.1:" + port + " --token " + server.token());
  EXPECT_EQ(http, 3) << http_out;
  EXPECT_NE(http_out.find("use an https:// URL"), std::string::npos) << http_out;
  server.Kill(SIGKILL);
}

// Bad TLS files stop the server at start with an error naming the flag and the file; it
// never serves plain HTTP instead.
TEST_F(TlsIntegration, FilesThatCannotServeStopTheServerAtStart) {
  const std::string missing = (base_ / "missing.pem").string();
  const std::string server = ServerArgs("data");
  const struct {
    std::string flags, error;
  } cases[] = {
      {"--tls-cert-file " + missing + " --tls-key-file " + pki_.server_key,
       "--tls-cert-file " + missing + ": cannot read: No such file or directory"},
      {"--tls-cert-file " + pki_.server_cert + " --tls-key-file " + missing,
       "--tls-key-file " + missing + ": cannot read: No such file or directory"},
      {"--tls-cert-file " + pki_.server_cert + " --tls-key-file " + pki_.other_key,
       "--tls-key-file " + pki_.other_key + ": not the private key of the certificate in " +
           pki_.server_cert},
      {"--tls-cert-file " + pki_.server_key + " --tls-key-file " + pki_.server_key,
       "--tls-cert-file " + pki_.server_key + ": no PEM certificate in it"},
      {"--tls-cert-file " + pki_.server_cert,
       "--tls-cert-file and --tls-key-file: HTTPS needs both"},
      {"--tls-cert-file " + pki_.server_cert + " --tls-key-file " + pki_.server_key +
           " --agent-cacert " + missing,
       "--agent-cacert " + missing + ": cannot read"},
  };
  for (const auto& c : cases) {
    auto [status, out] = Tessera(server + c.flags);
    EXPECT_EQ(status, 1) << c.flags << "\n" << out;
    EXPECT_NE(out.find("tessera server: InvalidArgument: " + c.error), std::string::npos)
        << c.flags << "\n"
        << out;
    EXPECT_FALSE(std::filesystem::exists(base_ / "data" / "server.url")) << c.flags;
  }
}

// --tls-client-ca-file: a client without a certificate that CA signed is refused, and the CLI
// says the server wants one; with --client-certificate (or $TESSERA_CLIENT_CERT) it gets in.
TEST_F(TlsIntegration, MutualTlsNeedsAClientCertificateTheCaSigned) {
  ServerProcess server(binary_, (base_ / "data").string(),
                       {"--tls-cert-file", pki_.server_cert, "--tls-key-file", pki_.server_key,
                        "--tls-client-ca-file", pki_.ca_cert});
  TlsClientOptions tls;
  tls.ca_file = pki_.ca_cert;
  tls.cert_file = pki_.client_cert;
  tls.key_file = pki_.client_key;
  server.set_tls(tls);
  ASSERT_TRUE(server.Start()) << ReadFile((base_ / "server.log").string());
  const std::string get = "get jobs --server " + server.url() + " --token " + server.token() +
                          " --cacert " + pki_.ca_cert;
  auto [ok, ok_out] = Tessera(get + " --client-certificate " + pki_.client_cert + " --client-key " +
                              pki_.client_key);
  EXPECT_EQ(ok, 0) << ok_out;
  auto [env, env_out] = Tessera(
      get, "TESSERA_CLIENT_CERT=" + pki_.client_cert + " TESSERA_CLIENT_KEY=" + pki_.client_key);
  EXPECT_EQ(env, 0) << env_out;

  auto [none, none_out] = Tessera(get);
  EXPECT_EQ(none, 3) << none_out;
  EXPECT_NE(none_out.find("error: TLS: " + server.url() +
                          " wants a client certificate, and none was given"),
            std::string::npos)
      << none_out;
  // The server's own certificate is not one for a client (extendedKeyUsage serverAuth). (How
  // it fails depends on timing under TLS 1.3: the refusal, or the connection closed first.)
  auto [server_cert, server_cert_out] = Tessera(get + " --client-certificate " + pki_.server_cert +
                                                " --client-key " + pki_.server_key);
  EXPECT_EQ(server_cert, 3) << server_cert_out;
  auto [half, half_out] = Tessera(get + " --client-certificate " + pki_.client_cert);
  EXPECT_EQ(half, 2) << half_out;
  EXPECT_NE(half_out.find("--client-certificate and --client-key: a client certificate needs "
                          "both"),
            std::string::npos)
      << half_out;
  server.Kill(SIGKILL);

  auto [local, local_out] =
      Tessera("server --data-dir " + (base_ / "local").string() +
              " --listen 127.0.0.1:0 --local-agent --tls-cert-file " + pki_.server_cert +
              " --tls-key-file " + pki_.server_key + " --tls-client-ca-file " + pki_.ca_cert);
  EXPECT_EQ(local, 1) << local_out;
  EXPECT_NE(local_out.find("--local-agent with --tls-client-ca-file"), std::string::npos)
      << local_out;
}

// --store etcd+https:// against an etcd with --client-cert-auth: with --etcd-cacert,
// --etcd-cert and --etcd-key the server leads and serves; bad files, a plain etcd:// given TLS
// files, no client certificate, or the wrong CA stop it at start (exit 1), saying why.
TEST_F(TlsIntegration, EtcdStoreOverTlsWithAClientCertificate) {
  if (!store::testing::EtcdProcess::Available())
    GTEST_SKIP() << "no etcd binary on PATH: install etcd-server (scripts/deps.d/etcd.list)";
  ::signal(SIGPIPE, SIG_IGN);  // the probe's client certificate refused would end this binary
  TlsClientOptions tls = store::EtcdTlsClientOptions();
  tls.ca_file = pki_.ca_cert;
  tls.cert_file = pki_.client_cert;
  tls.key_file = pki_.client_key;
  store::testing::EtcdProcess etcd({}, {pki_.etcd_cert, pki_.etcd_key, pki_.ca_cert}, tls);
  ASSERT_TRUE(etcd.Start()) << "etcd did not start; see " << etcd.log();
  const std::string https = "--store etcd+https://" + etcd.host_port() + " ";
  const std::string ca = " --etcd-cacert " + pki_.ca_cert;
  const std::string cert = " --etcd-cert " + pki_.client_cert + " --etcd-key " + pki_.client_key;
  const std::string missing = (base_ / "missing.pem").string();
  const struct {
    std::string flags, error;
  } cases[] = {
      {https + "--etcd-cacert " + missing + cert, "InvalidArgument: --store etcd+https://" +
                                                      etcd.host_port() + ": --etcd-cacert " +
                                                      missing + ": cannot read"},
      {https + ca + " --etcd-cert " + pki_.client_cert,
       "--etcd-cert and --etcd-key: a client certificate needs both"},
      {"--store etcd://" + etcd.host_port() + ca + cert,
       "InvalidArgument: --etcd-cacert, --etcd-cert, --etcd-key: given for etcd://"},
      {https + ca, "TLS: " + etcd.endpoint() + " wants a client certificate"},
      {https + "--etcd-cacert " + pki_.other_ca_cert + cert,
       "TLS: the certificate of " + etcd.endpoint() + " is not trusted"},
      {"--store etcd://" + etcd.host_port(), "use --store etcd+https://"},
  };
  for (const auto& c : cases) {
    auto [status, out] = Tessera(ServerArgs("refused") + c.flags);
    EXPECT_EQ(status, 1) << c.flags << "\n" << out;
    EXPECT_NE(out.find(c.error), std::string::npos) << c.flags << "\n" << out;
    EXPECT_FALSE(std::filesystem::exists(base_ / "refused" / "server.url")) << c.flags;
  }
  ServerProcess server(
      binary_, (base_ / "data").string(),
      {"--store", "etcd+https://" + etcd.host_port(), "--etcd-cacert", pki_.ca_cert, "--etcd-cert",
       pki_.client_cert, "--etcd-key", pki_.client_key});
  ASSERT_TRUE(server.Start()) << "see " << (base_ / "server.log");
  const std::string log = ReadFile((base_ / "server.log").string());
  EXPECT_NE(log.find("etcd " + etcd.endpoint() + ")"), std::string::npos) << log;
  server.Kill(SIGTERM);
}

}  // namespace
}  // namespace tessera::server
