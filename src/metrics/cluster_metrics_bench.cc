// How long ClusterMetrics::Update and a scrape take on a large cluster (Google Benchmark).
// Update runs after every scheduling cycle in the server, so it must stay small next to the
// cycle itself. Results: docs/observability.md.
#include <benchmark/benchmark.h>

#include "metrics/cluster_metrics.h"

namespace tessera::metrics {
namespace {

// nodes x 8 A100s in 4 pools; jobs in 16 queues, one in ten running one task on one GPU.
Snapshot BigCluster(int nodes, int jobs) {
  Snapshot s;
  for (int n = 0; n < nodes; ++n) {
    Node node;
    node.name = "node-" + std::to_string(n);
    node.pool = "pool-" + std::to_string(n % 4);
    node.cpu_milli = 128000;
    node.memory_bytes = int64_t{1} << 40;
    node.cost_micros_per_gpu_hour = 2000000;
    for (int d = 0; d < 8; ++d) {
      Device dev;
      dev.index = d;
      dev.uuid = "GPU-" + std::to_string(n) + "-" + std::to_string(d);
      dev.model = "A100-80GB";
      dev.memory_bytes = int64_t{80} << 30;
      dev.util_percent = (n * 8 + d) % 100;
      node.devices.push_back(dev);
    }
    s.nodes.push_back(node);
  }
  for (int q = 0; q < 16; ++q) {
    Queue queue;
    queue.name = "queue-" + std::to_string(q);
    queue.guarantee.gpu_milli = 8000;
    s.queues.push_back(queue);
  }
  for (int j = 0; j < jobs; ++j) {
    Job job;
    job.id = "job-" + std::to_string(j);
    job.queue = "queue-" + std::to_string(j % 16);
    job.groups.push_back(TaskGroup{"main", 1, {}, {}});
    job.allocations.resize(1);
    if (j % 10 == 0 && j / 10 < nodes * 8) {
      TaskAllocation a;
      a.node = "node-" + std::to_string((j / 10) / 8);
      a.cpu_milli = 8000;
      a.devices.push_back({(j / 10) % 8, 1000, 0, -1});
      job.allocations[0] = a;
      job.start_time = 100;
    }
    s.jobs.push_back(std::move(job));
  }
  return s;
}

void BM_Update(benchmark::State& state) {
  const Snapshot s = BigCluster(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  ClusterMetrics m;
  ClusterView view;
  view.snapshot = &s;
  for (auto _ : state) {
    view.now += 1;
    m.Update(view);
  }
}
BENCHMARK(BM_Update)->Args({100, 10000})->Args({1000, 100000})->Unit(benchmark::kMillisecond);

void BM_RenderText(benchmark::State& state) {
  const Snapshot s = BigCluster(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  ClusterMetrics m;
  ClusterView view;
  view.snapshot = &s;
  m.Update(view);
  size_t bytes = 0;
  for (auto _ : state) bytes = m.RenderText().size();
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_RenderText)->Args({100, 10000})->Args({1000, 100000})->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera::metrics

BENCHMARK_MAIN();
