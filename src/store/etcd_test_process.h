// EtcdProcess (tests only): a single-member etcd on loopback, on free ports, with its own
// temporary data dir; killed (SIGTERM, then SIGKILL after a grace period) when destroyed.
// Tests call Available() first and GTEST_SKIP when the etcd binary is not installed
// (scripts/deps.d/etcd.list). Not thread-safe.
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
#include <string>
#include <thread>
#include <vector>

#include "common/capture_command.h"

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

  // `extra`: more etcd flags (e.g. --max-txn-ops).
  explicit EtcdProcess(std::vector<std::string> extra = {}) : extra_(std::move(extra)) {
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
    const std::string client = "http://127.0.0.1:" + std::to_string(client_port_);
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
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = SpawnInBackground(std::move(args), dir_ + "/stderr.log", "/dev/null");
    if (pid_ < 0) return false;
    httplib::Client c(client);
    c.set_connection_timeout(std::chrono::milliseconds(200));
    c.set_read_timeout(std::chrono::milliseconds(1000));
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

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  std::string host_port() const { return "127.0.0.1:" + std::to_string(client_port_); }
  std::string log() const { return dir_ + "/etcd.log"; }

 private:
  static int& Counter() {
    static int n = 0;
    return n;
  }
  std::vector<std::string> extra_;
  std::string dir_;
  int client_port_ = -1, peer_port_ = -1;
  pid_t pid_ = -1;
};

}  // namespace tessera::store::testing
