// Google Benchmark: one engine cycle on synthetic clusters (binpack and fragmentation-aware),
// the hot loop behind `tessera bench cycle`. Not part of the test suite.
#include <benchmark/benchmark.h>

#include "engine/cluster_state.h"
#include "engine/engine.h"
#include "engine/synthetic.h"

namespace tessera {
namespace {

void RunCycle(benchmark::State& st, const char* score) {
  // Only these two plugins (the tiers form: no job order, no queue policies).
  Json conf = {{"actions", "enqueue, allocate"},
               {"tiers", Json::array({Json{{"plugins", Json::array({Json{{"name", "predicates"}},
                                                                    Json{{"name", score}}})}}})}};
  auto engine = Engine::Create(*ParseEngineConfig(conf));
  SyntheticSpec spec;
  spec.nodes = static_cast<int32_t>(st.range(0));
  spec.jobs = spec.nodes * 10;
  Snapshot snap = SyntheticSnapshot(spec);
  auto state = ClusterState::FromSnapshot(snap);
  int64_t placements = 0;
  for (auto _ : st) {
    Rng rng(1);
    Plan plan = (*engine)->Cycle(**state, 0, rng);
    placements += static_cast<int64_t>(plan.bindings.size());
  }
  st.counters["placements_per_second"] =
      benchmark::Counter(static_cast<double>(placements), benchmark::Counter::kIsRate);
}

void BM_CycleBinpack(benchmark::State& st) { RunCycle(st, "binpack"); }
void BM_CycleFragmentation(benchmark::State& st) { RunCycle(st, "fragmentation"); }
BENCHMARK(BM_CycleBinpack)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CycleFragmentation)->Arg(100)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera
