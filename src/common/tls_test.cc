#include "common/tls.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "common/test_pki.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// An HTTPS server on a loopback port of its own, answering GET /ping, and its files: copies
// of the test PKI's that a test overwrites as a renewal would.
class TlsReload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-tls-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    if (std::string why = pki_.Make((dir_ / "pki").string()); !why.empty()) GTEST_SKIP() << why;
    cert_ = (dir_ / "live.pem").string();
    key_ = (dir_ / "live.key").string();
    client_ca_ = (dir_ / "live-ca.pem").string();
    Put(pki_.server_cert, cert_);
    Put(pki_.server_key, key_);
    Put(pki_.ca_cert, client_ca_);
  }

  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
    fs::remove_all(dir_);
  }

  // Overwrites `to` in place with `from`'s bytes, as a renewal writing the file would.
  static void Put(const std::string& from, const std::string& to) {
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  }

  void Start(bool mutual) {
    TlsServerFiles files{cert_, key_, mutual ? client_ca_ : ""};
    auto server = NewHttpServer(files);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
    server_->Get("/ping", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("pong", "text/plain");
    });
    port_ = server_->bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    // Connections wait in the bound socket's backlog until the loop accepts them.
    thread_ = std::thread([this] { server_->listen_after_bind(); });
  }

  std::string Url() const { return "https://127.0.0.1:" + std::to_string(port_); }

  // GET /ping on a new connection; "" when it worked, else why not.
  std::string Ping(httplib::Client& c) {
    auto res = c.Get("/ping");
    if (res) return res->status == 200 ? "" : "status " + std::to_string(res->status);
    return "error: " + httplib::to_string(res.error());
  }
  // The same from a new client that trusts `ca`.
  std::string Ping(const std::string& ca) {
    httplib::Client c(Url());
    TlsClientOptions tls;
    tls.ca_file = ca;
    ApplyTls(c, tls);
    return Ping(c);
  }

  fs::path dir_;
  TestPki pki_;
  std::string cert_, key_, client_ca_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(TlsReload, ServerPresentsARenewedCertificateWithoutARestart) {
  Start(/*mutual=*/false);
  EXPECT_EQ(Ping(pki_.ca_cert), "");
  EXPECT_NE(Ping(pki_.other_ca_cert), "");

  // Half a renewal (the certificate written, its key not yet) does not load: the server keeps
  // presenting the previous pair.
  Put(pki_.other_server_cert, cert_);
  EXPECT_EQ(Ping(pki_.ca_cert), "");

  // Both written: new connections get the renewed certificate (from the other CA).
  Put(pki_.other_server_key, key_);
  EXPECT_EQ(Ping(pki_.other_ca_cert), "");
  EXPECT_NE(Ping(pki_.ca_cert), "");

  // Renamed over, as certbot and Kubernetes secrets do (a new inode): taken as well.
  const std::string next = cert_ + ".new", next_key = key_ + ".new";
  Put(pki_.server_cert, next);
  Put(pki_.server_key, next_key);
  fs::rename(next_key, key_);
  fs::rename(next, cert_);
  EXPECT_EQ(Ping(pki_.ca_cert), "");
}

TEST_F(TlsReload, MutualTlsTakesARenewedClientCaAndClientCertificate) {
  Start(/*mutual=*/true);
  const std::string client_cert = (dir_ / "client.pem").string();
  const std::string client_key = (dir_ / "client.key").string();
  Put(pki_.client_cert, client_cert);
  Put(pki_.client_key, client_key);
  // One client for every request, as an agent keeps its own for months.
  httplib::Client c(Url());
  TlsClientOptions tls;
  tls.ca_file = pki_.ca_cert;
  tls.cert_file = client_cert;
  tls.key_file = client_key;
  ApplyTls(c, tls);
  EXPECT_EQ(Ping(c), "");

  // The client's certificate renewed by the other CA: presented at the next handshake, and
  // refused, since the server trusts only the first CA.
  Put(pki_.other_client_cert, client_cert);
  Put(pki_.other_client_key, client_key);
  EXPECT_NE(Ping(c), "");

  // The server's client CA file now names the other CA: the same client is let in.
  Put(pki_.other_ca_cert, client_ca_);
  EXPECT_EQ(Ping(c), "");
}

}  // namespace
}  // namespace tessera
