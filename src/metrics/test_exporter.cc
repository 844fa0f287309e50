// tessera_metrics_test_exporter: serves ClusterMetrics for a fixed cluster document on
// loopback, so that the Prometheus integration test can scrape real exposition output
// without a server. Usage: tessera_metrics_test_exporter PORT SNAPSHOT.yaml
// Runs until SIGTERM. Test support only; not installed.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <httplib.h>

#include "metrics/cluster_metrics.h"
#include "model/codec.h"

namespace {
httplib::Server* g_server = nullptr;
void Stop(int) {
  if (g_server) g_server->stop();
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PORT SNAPSHOT.yaml\n", argv[0]);
    return 2;
  }
  auto doc = tessera::LoadYamlFile(argv[2]);
  if (!doc.ok()) {
    std::fprintf(stderr, "%s\n", doc.status().ToString().c_str());
    return 1;
  }
  auto snapshot = tessera::SnapshotFromJson(*doc);
  if (!snapshot.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[2], snapshot.status().ToString().c_str());
    return 1;
  }
  tessera::metrics::ClusterMetrics metrics;
  std::mutex mu;
  httplib::Server server;
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard lock(mu);
    tessera::metrics::ClusterView view;
    view.now = static_cast<int64_t>(std::time(nullptr));
    view.snapshot = &*snapshot;
    metrics.Update(view);
    res.set_content(metrics.RenderText(), tessera::metrics::kTextContentType);
  });
  g_server = &server;
  std::signal(SIGTERM, Stop);
  std::signal(SIGINT, Stop);
  if (!server.listen("127.0.0.1", std::atoi(argv[1]))) {
    std::fprintf(stderr, "cannot listen on 127.0.0.1:%s\n", argv[1]);
    return 1;
  }
  return 0;
}
