// EtcdProcess (tests only): a single-member etcd on loopback, on free ports, with its own
// temporary data dir; killed (SIGTERM, then SIGKILL after a grace period) when destroyed.
// It serves plain HTTP, or HTTPS with a certificate (and then, optionally, only to clients
// with a certificate its CA signed: etcd's --client-cert-auth). Tests call Available() first
// and GTEST_SKIP when the etcd binary is not installed (scripts/deps.d/etcd.list).
// Not thread-safe.
#pragma once

#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/capture_command.h"
#include "common/test_pki.h"
#include "common/tls.h"
#include "store/etcd_store.h"

namespace tessera::store::testing {

// A port the kernel just handed out for loopback; free unless someone takes it meanwhile.
inline int FreeLoopbackPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

class EtcdProcess {
 public:
  // The etcd binary: $ETCD_BINARY, else etcd on PATH; "" when there is none.
  static std::string Binary() {
    if (const char* e = std::getenv("ETCD_BINARY"); e && std::filesystem::exists(e)) return e;
    const char* path = std::getenv("PATH");
    std::string p = path ? path : "/usr/bin:/bin";
    size_t start = 0;
    while (start <= p.size()) {
      size_t colon = p.find(':', start);
      std::string dir =
          p.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!dir.empty() && ::access((dir + "/etcd").c_str(), X_OK) == 0) return dir + "/etcd";
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
    return "";
  }
  static bool Available() { return !Binary().empty(); }

  // `extra`: more etcd flags (e.g. --max-txn-ops). `tls` given: HTTPS only, with its
  // certificate (etcd's --cert-file, --key-file) and, with a client_ca_file, only to clients
  // presenting a certificate that CA signed (--client-cert-auth --trusted-ca-file); `probe`
  // is how Start() then reaches it (the CA, and a client certificate if it wants one).
  explicit EtcdProcess(std::vector<std::string> extra = {}, TlsServerFiles tls = {},
                       TlsClientOptions probe = {})
      : extra_(std::move(extra)), tls_(std::move(tls)), probe_(std::move(probe)) {
    dir_ = (std::filesystem::temp_directory_path() /
            ("tessera_etcd_" + std::to_string(::getpid()) + "_" + std::to_string(++Counter())))
               .string();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    client_port_ = FreeLoopbackPort();
    peer_port_ = FreeLoopbackPort();
  }
  ~EtcdProcess() {
    Stop();
    std::filesystem::remove_all(dir_);
  }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // Starts etcd (again, on the same ports and data dir) and waits for /health; false when it
  // did not become healthy in 15 s (see log()).
  bool Start() {
    const std::string client = endpoint();
    const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::vector<std::string> args = {Binary(),
                                     "--name",
                                     "single",
                                     "--data-dir",
                                     dir_ + "/data.etcd",
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     "single=" + peer,
                                     "--initial-cluster-state",
                                     "new",
                                     "--logger",
                                     "zap",
                                     "--log-outputs",
                                     log()};
    if (tls_.enabled())
      args.insert(args.end(), {"--cert-file", tls_.cert_file, "--key-file", tls_.key_file});
    if (!tls_.client_ca_file.empty())
      args.insert(args.end(), {"--client-cert-auth", "--trusted-ca-file", tls_.client_ca_file});
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = SpawnInBackground(std::move(args), dir_ + "/stderr.log", "/dev/null");
    if (pid_ < 0) return false;
    httplib::Client c(client);
    c.set_connection_timeout(std::chrono::milliseconds(200));
    c.set_read_timeout(std::chrono::milliseconds(1000));
    ApplyTls(c, probe_);
    for (int i = 0; i < 300; ++i) {
      auto r = c.Get("/health");
      if (r && r->status == 200 && r->body.find("\"true\"") != std::string::npos) return true;
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // exited (a port taken?)
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // SIGTERM, then SIGKILL after `grace` (a lone member may take seconds to stop).
  void Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(1000)) {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + grace;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
  }
  void Kill() { Stop(std::chrono::milliseconds(0)); }

  std::string endpoint() const {
    return (tls_.enabled() ? "https://127.0.0.1:" : "http://127.0.0.1:") +
           std::to_string(client_port_);
  }
  std::string host_port() const { return "127.0.0.1:" + std::to_string(client_port_); }
  std::string log() const { return dir_ + "/etcd.log"; }

 private:
  static int& Counter() {
    static int n = 0;
    return n;
  }
  std::vector<std::string> extra_;
  TlsServerFiles tls_;
  TlsClientOptions probe_;
  std::string dir_;
  int client_port_ = -1, peer_port_ = -1;
  pid_t pid_ = -1;
};

// One etcd serving HTTPS for a whole test suite (a start costs about a second), with a
// throwaway CA (test_pki.h).
class TlsEtcd {
 public:
  // client_cert_auth: etcd takes only clients with a certificate the CA signed.
  explicit TlsEtcd(bool client_cert_auth) : client_cert_auth_(client_cert_auth) {}

  // "" when etcd is up; else why not. missing_tool(): etcd or openssl is not installed, and
  // the tests skip; otherwise they fail.
  std::string Start() {
    missing_tool_ = true;
    if (!EtcdProcess::Available())
      return "no etcd binary on PATH: install etcd-server (scripts/deps.d/etcd.list)";
    if (CaptureCommand("command -v openssl >/dev/null").first != 0)
      return "no openssl command on PATH: install openssl (scripts/deps.d/tls.list)";
    missing_tool_ = false;
    dir_ = (std::filesystem::temp_directory_path() /
            ("tessera_etcd_pki_" + std::to_string(::getpid()) + "_" +
             std::to_string(client_cert_auth_)))
               .string();
    if (std::string why = pki_.Make(dir_); !why.empty()) return why;
    etcd_ = std::make_unique<EtcdProcess>(
        std::vector<std::string>{},
        client_cert_auth_ ? TlsServerFiles{pki_.etcd_cert, pki_.etcd_key, pki_.ca_cert}
                          : TlsServerFiles{pki_.server_cert, pki_.server_key, ""},
        Client());
    return etcd_->Start() ? "" : "etcd with TLS did not start; see " + etcd_->log();
  }
  ~TlsEtcd() {
    etcd_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // What a store needs to reach it: the CA, and the client certificate when etcd wants one.
  TlsClientOptions Client() const {
    TlsClientOptions tls = EtcdTlsClientOptions();
    tls.ca_file = pki_.ca_cert;
    if (client_cert_auth_) {
      tls.cert_file = pki_.client_cert;
      tls.key_file = pki_.client_key;
    }
    return tls;
  }
  bool missing_tool() const { return missing_tool_; }
  const TestPki& pki() const { return pki_; }
  EtcdProcess& etcd() { return *etcd_; }

 private:
  bool client_cert_auth_;
  bool missing_tool_ = false;
  std::string dir_;
  TestPki pki_;
  std::unique_ptr<EtcdProcess> etcd_;
};

}  // namespace tessera::store::testing
