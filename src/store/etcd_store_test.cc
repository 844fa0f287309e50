// What the etcd store adds to the contract (store_contract_test.cc): etcd's limits refused
// up front, etcd down and back, leader election and fencing (each test runs its own etcd);
// etcd over HTTPS with client certificates (one etcd for those tests).
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "store/etcd_store.h"
#include "store/etcd_test_process.h"

namespace tessera::store {
namespace {

using Clock = std::chrono::steady_clock;
using testing::EtcdProcess;

// jobs/0 .. jobs/<n-1>
std::vector<Op> Puts(int n) {
  std::vector<Op> ops;
  for (int i = 0; i < n; ++i) ops.push_back(Op::Put("jobs/" + std::to_string(i), "x"));
  return ops;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!EtcdProcess::Available())
      GTEST_SKIP() << "no etcd binary on PATH: install etcd-server (scripts/deps.d/etcd.list, "
                      "./scripts/install-deps.sh) to run the etcd store's tests";
    ASSERT_TRUE(etcd_.Start()) << "etcd did not start; see " << etcd_.log();
  }
  EtcdOptions Options(const std::string& id) {
    EtcdOptions o;
    o.endpoints = {etcd_.endpoint()};
    o.id = id;
    o.lease_seconds = 2;
    o.request_timeout_ms = 1000;
    o.standby_poll_ms = 50;
    return o;
  }
  EtcdProcess etcd_;
};

TEST(EtcdUrl, ParsesEndpointsAndRefusesOthers) {
  auto one = ParseEtcdUrl("etcd://127.0.0.1:2379");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<std::string>{"http://127.0.0.1:2379"});
  auto two = ParseEtcdUrl("etcd://a:1,b:2");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->size(), 2u);
  auto tls = ParseEtcdUrl("etcd+https://a:1,b:2");
  ASSERT_TRUE(tls.ok());
  EXPECT_EQ(*tls, (std::vector<std::string>{"https://a:1", "https://b:2"}));
  EXPECT_FALSE(ParseEtcdUrl("http://a:1").ok());
  EXPECT_FALSE(ParseEtcdUrl("https://a:1").ok());
  EXPECT_FALSE(ParseEtcdUrl("etcd://https://a:1").ok());
  EXPECT_FALSE(ParseEtcdUrl("etcd://a:1,").ok());
  EXPECT_FALSE(ParseEtcdUrl("etcd://noport").ok());
}

// Over etcd's --max-txn-ops (128) or --max-request-bytes (1.5 MiB): refused before sending,
// saying which limit and how to raise it, and nothing is written.
TEST_F(EtcdStoreTest, ATransactionOverEtcdsLimitsIsRefusedClearly) {
  auto s = OpenEtcdStore(Options("a"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Op> many = Puts(200);
  auto r = (*s)->Write(many);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("--max-txn-ops"), std::string::npos) << r.status().message();
  EXPECT_TRUE((*(*s)->Get("jobs/0")).has_value() == false);
  auto big = (*s)->Write({Op::Put("jobs/big", std::string(2 << 20, 'v'))});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("--max-request-bytes"), std::string::npos)
      << big.status().message();
  // Just under both limits goes through (127 writes and the election key's put), what the
  // store tells the server it may batch (Store::MaxWritesPerTxn).
  EXPECT_EQ((*s)->MaxWritesPerTxn(), 127u);
  many.resize(127);
  EXPECT_TRUE((*s)->Write(many).ok());
  EXPECT_TRUE((*s)->Write({Op::Put("jobs/big", std::string(1400 << 10, 'v'))}).ok());
}

// A store told larger limits than its etcd has: etcd's refusal comes back ResourceExhausted,
// saying what the store was told.
TEST_F(EtcdStoreTest, AnEtcdWithLowerLimitsThanToldRefusesClearly) {
  EtcdOptions o = Options("a");
  o.max_txn_ops = 1000;
  auto s = OpenEtcdStore(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Op> many = Puts(200);
  auto r = (*s)->Write(many);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("too many operations"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("--etcd-max-txn-ops 1000"), std::string::npos)
      << r.status().message();
  EXPECT_TRUE((*s)->Leading());
  EXPECT_TRUE((*s)->Write({Op::Put("jobs/a", "1")}).ok());
}

// With the limits docs/store.md asks for (etcd --max-txn-ops 20064 --max-request-bytes
// 32 MiB, and the same told to the store), a transaction as big as the server's compactions
// (20000 deletes and a few puts) goes through.
TEST(EtcdStoreRaisedLimits, ACompactionSizedTransactionGoesThrough) {
  if (!EtcdProcess::Available()) GTEST_SKIP() << "no etcd binary on PATH";
  EtcdProcess etcd({"--max-txn-ops", "20064", "--max-request-bytes", "33554432"});
  ASSERT_TRUE(etcd.Start()) << "etcd did not start; see " << etcd.log();
  EtcdOptions o;
  o.endpoints = {etcd.endpoint()};
  o.max_txn_ops = 20064;
  o.max_request_bytes = 33554432;
  auto s = OpenEtcdStore(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<Op> ops;
  for (int i = 0; i < 20000; ++i)
    ops.push_back(Op::Delete("events/" + std::to_string(1000000 + i)));
  ops.push_back(Op::Put("counters/events", "21000"));
  auto r = (*s)->Write(ops);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*(*s)->Get("counters/events"))->value, "21000");
}

// etcd down: a transaction fails Unavailable (retryable), naming the endpoint; nothing is
// acknowledged. etcd back on its data: the same store writes again.
TEST_F(EtcdStoreTest, EtcdDownIsUnavailableThenWorksWhenBack) {
  EtcdOptions o = Options("a");
  o.lease_seconds = 5;
  auto s = OpenEtcdStore(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE((*s)->Write({Op::Put("jobs/a", "1")}).ok());
  etcd_.Kill();
  auto r = (*s)->Write({Op::Put("jobs/b", "2")});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(r.status().retryable());
  EXPECT_NE(r.status().message().find(etcd_.endpoint()), std::string::npos) << r.status().message();
  auto g = (*s)->Get("jobs/a");
  EXPECT_EQ(g.status().code(), StatusCode::kUnavailable);
  ASSERT_TRUE(etcd_.Start()) << "etcd did not restart; see " << etcd_.log();
  auto again = (*s)->Write({Op::Put("jobs/b", "2")});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*(*s)->Get("jobs/a"))->value, "1");
  EXPECT_TRUE((*s)->Leading());
}

// A second store on the same etcd waits while the first leads, and takes over at once when
// the first is closed (its lease revoked).
TEST_F(EtcdStoreTest, AStandbyWaitsAndTakesOverWhenTheLeaderCloses) {
  auto a = OpenEtcdStore(Options("server-a"));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->Write({Op::Put("jobs/a", "1")}).ok());
  std::atomic<bool> b_open{false};
  std::unique_ptr<EtcdStore> b;
  std::thread standby([&] {
    auto s = OpenEtcdStore(Options("server-b"));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    b = std::move(*s);
    b_open = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // longer than a lease TTL
  EXPECT_FALSE(b_open.load()) << "the standby took over while the leader was alive";
  EXPECT_TRUE((*a)->Write({Op::Put("jobs/a", "2")}).ok());
  const auto closed = Clock::now();
  a->reset();
  standby.join();
  ASSERT_TRUE(b_open.load());
  EXPECT_LT(SecondsSince(closed), 1.0) << "a closed leader hands over at once";
  EXPECT_EQ((*b->Get("jobs/a"))->value, "2");
  EXPECT_TRUE(b->Write({Op::Put("jobs/a", "3")}).ok());
}

// The leader stops renewing (as if it had crashed or hung): a standby takes over within
// about a lease TTL, and the old leader's next transaction is refused (fencing), even
// though it has not noticed it lost its lease.
TEST_F(EtcdStoreTest, ADeposedLeaderCannotWrite) {
  std::atomic<int> a_lost{0};
  EtcdOptions ao = Options("server-a");
  ao.on_lost_leadership = [&](const Status&) { a_lost++; };
  auto a = OpenEtcdStore(ao);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  (*a)->StopKeepaliveForTesting();
  const auto stopped = Clock::now();
  auto b = OpenEtcdStore(Options("server-b"));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  const double took = SecondsSince(stopped);
  EXPECT_LT(took, 2 + 1.5) << "lease TTL 2 s";
  std::printf("standby took over %.2f s after the leader stopped renewing\n", took);
  EXPECT_TRUE((*a)->Leading()) << "(it has not noticed yet)";
  auto r = (*a)->Write({Op::Put("jobs/x", "from the deposed leader")});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("not the leader"), std::string::npos) << r.status().message();
  EXPECT_FALSE((*b)->Get("jobs/x")->has_value());
  EXPECT_FALSE((*a)->Leading());
  EXPECT_EQ(a_lost.load(), 1);
  EXPECT_TRUE((*b)->Write({Op::Put("jobs/x", "from the leader")}).ok());
  // Closing the deposed store does not disturb the new leader.
  a->reset();
  EXPECT_TRUE((*b)->Write({Op::Put("jobs/y", "still leading")}).ok());
}

// etcd drops the lease (revoked, or expired while etcd was unreachable): the keepalive
// notices, the store calls on_lost_leadership and refuses every later transaction.
TEST_F(EtcdStoreTest, ALostLeaseIsNoticedAndReported) {
  std::atomic<int> lost{0};
  EtcdOptions o = Options("server-a");
  o.on_lost_leadership = [&](const Status&) { lost++; };
  auto s = OpenEtcdStore(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  httplib::Client c(etcd_.endpoint());
  auto leases = c.Post("/v3/lease/leases", "{}", "application/json");
  ASSERT_TRUE(leases && leases->status == 200);
  int revoked = 0;
  const nlohmann::json listed = nlohmann::json::parse(leases->body);
  for (const auto& l : listed["leases"]) {
    nlohmann::json body = {{"ID", l["ID"]}};
    auto r = c.Post("/v3/lease/revoke", body.dump(), "application/json");
    ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    ++revoked;
  }
  ASSERT_EQ(revoked, 1) << leases->body;
  for (int i = 0; i < 60 && lost.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(lost.load(), 1) << "the keepalive (every TTL/3) did not notice";
  EXPECT_FALSE((*s)->Leading());
  auto r = (*s)->Write({Op::Put("jobs/a", "1")});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not the leader"), std::string::npos);
}

// etcd unreachable for longer than the lease TTL: the keepalive gives up (etcd will have
// dropped the lease, and a standby may lead), reports it, and every later write is refused
// even once etcd is back.
TEST_F(EtcdStoreTest, NoRenewalForATtlLosesTheLeadership) {
  std::atomic<int> lost{0};
  std::string why;
  EtcdOptions o = Options("server-a");
  o.on_lost_leadership = [&](const Status& s) {
    why = s.message();
    lost++;
  };
  auto s = OpenEtcdStore(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  etcd_.Kill();
  const auto killed = Clock::now();
  for (int i = 0; i < 100 && lost.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(lost.load(), 1);
  EXPECT_LT(SecondsSince(killed), 2 + 1.5) << "lease TTL 2 s";
  EXPECT_NE(why.find("could not be renewed for 2 s"), std::string::npos) << why;
  ASSERT_TRUE(etcd_.Start()) << "etcd did not restart; see " << etcd_.log();
  auto r = (*s)->Write({Op::Put("jobs/a", "1")});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("not the leader"), std::string::npos);
}

// A standby can be told to stop waiting (the server, on SIGTERM while standing by).
TEST_F(EtcdStoreTest, AStandbyCanStopWaiting) {
  auto a = OpenEtcdStore(Options("server-a"));
  ASSERT_TRUE(a.ok());
  EtcdOptions o = Options("server-b");
  const auto start = Clock::now();
  o.stop_waiting = [&] { return SecondsSince(start) > 0.3; };
  auto b = OpenEtcdStore(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("waiting to lead"), std::string::npos);
}

TEST(EtcdStoreUnreachable, OpenIsUnavailableNamingTheEndpoint) {
  EtcdOptions o;
  const std::string ep = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  o.endpoints = {ep};
  o.request_timeout_ms = 500;
  auto s = OpenEtcdStore(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(s.status().message().find(ep), std::string::npos) << s.status().message();
}

// etcd serving HTTPS only to clients with a certificate its CA signed (--client-cert-auth),
// one for the suite. Each test takes its own key prefix.
class EtcdStoreTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Under TLS 1.3 etcd refuses a client certificate after the handshake and closes the
    // connection: writing to it must fail, not end the test binary (the server ignores it too).
    ::signal(SIGPIPE, SIG_IGN);
    etcd_ = new testing::TlsEtcd(/*client_cert_auth=*/true);
    error_ = etcd_->Start();
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override {
    if (etcd_->missing_tool()) GTEST_SKIP() << error_;
    ASSERT_EQ(error_, "");
  }
  EtcdOptions Options(const std::string& id) {
    static int tests = 0;
    EtcdOptions o;
    o.endpoints = {etcd_->etcd().endpoint()};
    o.tls = etcd_->Client();
    o.prefix = "/tls" + std::to_string(++tests) + "/";
    o.id = id;
    o.lease_seconds = 2;
    o.request_timeout_ms = 1000;
    o.standby_poll_ms = 50;
    return o;
  }
  // Open fails at once (no retrying), naming the endpoint; its message.
  std::string OpenFails(const EtcdOptions& o) {
    const auto start = Clock::now();
    auto s = OpenEtcdStore(o);
    EXPECT_FALSE(s.ok());
    EXPECT_LT(SecondsSince(start), 2.0);
    if (s.ok()) return "";
    EXPECT_NE(s.status().message().find(o.endpoints[0]), std::string::npos) << s.status().message();
    return s.status().message();
  }
  static testing::TlsEtcd* etcd_;
  static std::string error_;
};
testing::TlsEtcd* EtcdStoreTlsTest::etcd_ = nullptr;
std::string EtcdStoreTlsTest::error_;

// With etcd's CA and a client certificate, every path works over HTTPS: reads and writes, the
// keepalive (past two lease TTLs), and a standby's wait for the election key.
TEST_F(EtcdStoreTlsTest, WithTheCaAndAClientCertificateEveryCallPathWorks) {
  EtcdOptions ao = Options("server-a");
  std::atomic<int> a_lost{0};
  ao.on_lost_leadership = [&](const Status&) { a_lost++; };
  auto a = OpenEtcdStore(ao);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE((*a)->Write({Op::Put("jobs/a", "1")}).ok());
  EtcdOptions bo = ao;
  bo.id = "server-b";
  bo.on_lost_leadership = nullptr;
  std::atomic<bool> b_open{false};
  std::unique_ptr<EtcdStore> b;
  std::thread standby([&] {
    auto s = OpenEtcdStore(bo);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    b = std::move(*s);
    b_open = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));  // two lease TTLs
  EXPECT_FALSE(b_open.load()) << "the standby took over while the leader was alive";
  EXPECT_EQ(a_lost.load(), 0) << "the keepalive did not renew the lease over HTTPS";
  EXPECT_TRUE((*a)->Leading());
  auto w = (*a)->Write({Op::Put("jobs/a", "2")});
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  a->reset();
  standby.join();
  ASSERT_TRUE(b_open.load());
  auto got = b->Get("jobs/a");
  ASSERT_TRUE(got.ok() && got->has_value()) << got.status().ToString();
  EXPECT_EQ((*got)->value, "2");
  EXPECT_TRUE(b->Write({Op::Put("jobs/a", "3")}).ok());
}

// Checked against another CA, or against the system's: refused, saying why and what to set.
TEST_F(EtcdStoreTlsTest, AnUntrustedEtcdCertificateIsRefusedClearly) {
  EtcdOptions o = Options("a");
  o.tls.ca_file = etcd_->pki().other_ca_cert;
  std::string m = OpenFails(o);
  EXPECT_NE(m.find("is not trusted"), std::string::npos) << m;
  EXPECT_NE(m.find(o.tls.ca_file + " (--etcd-cacert)"), std::string::npos) << m;
  o.tls.ca_file = "";
  m = OpenFails(o);
  EXPECT_NE(m.find("is not trusted"), std::string::npos) << m;
  EXPECT_NE(m.find("with --etcd-cacert FILE"), std::string::npos) << m;
}

// etcd with --client-cert-auth refuses a store with no certificate, or with one its CA did
// not sign; the error says so and names our flags.
TEST_F(EtcdStoreTlsTest, ClientCertAuthRefusesAStoreWithoutAGoodCertificate) {
  EtcdOptions o = Options("a");
  o.tls.cert_file = o.tls.key_file = "";
  std::string m = OpenFails(o);
  EXPECT_NE(m.find("wants a client certificate"), std::string::npos) << m;
  EXPECT_NE(m.find("--etcd-cert and --etcd-key"), std::string::npos) << m;
  o.tls.cert_file = etcd_->pki().other_ca_cert;  // its own CA, not etcd's
  o.tls.key_file = etcd_->pki().other_key;
  m = OpenFails(o);
  EXPECT_NE(m.find("TLS"), std::string::npos) << m;
  EXPECT_NE(m.find(o.tls.cert_file), std::string::npos) << m;
}

// Plain HTTP to an etcd that serves HTTPS: etcd closes the connection without a word; the
// store says what is likely and what to write instead.
TEST_F(EtcdStoreTlsTest, PlainHttpToATlsEtcdFailsClearly) {
  EtcdOptions o = Options("a");
  o.endpoints = {"http://" + etcd_->etcd().host_port()};
  std::string m = OpenFails(o);
  EXPECT_NE(m.find("etcd+https://"), std::string::npos) << m;
}

// etcd with --client-cert-auth and a certificate for servers only: its JSON gateway cannot
// reach etcd itself, and every request fails with HTTP 503; the error says what to change.
TEST_F(EtcdStoreTlsTest, AnEtcdCertificateWithoutClientAuthIsExplained) {
  const testing::TlsEtcd& shared = *etcd_;
  EtcdProcess etcd({}, {shared.pki().server_cert, shared.pki().server_key, shared.pki().ca_cert},
                   shared.Client());
  ASSERT_TRUE(etcd.Start()) << "etcd did not start; see " << etcd.log();
  EtcdOptions o = Options("a");
  o.endpoints = {etcd.endpoint()};
  std::string m = OpenFails(o);
  EXPECT_NE(m.find("needs extendedKeyUsage clientAuth"), std::string::npos) << m;
}

// Bad files are refused before any request, naming the flag and the file.
TEST_F(EtcdStoreTlsTest, BadFilesAreRefusedNamingFlagAndFile) {
  EtcdOptions o = Options("a");
  o.tls.ca_file = "/nonexistent/ca.pem";
  auto s = OpenEtcdStore(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--etcd-cacert /nonexistent/ca.pem"), std::string::npos)
      << s.status().message();
  o = Options("a");
  o.tls.key_file = etcd_->pki().other_key;  // another certificate's key
  s = OpenEtcdStore(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--etcd-key " + o.tls.key_file), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace tessera::store
