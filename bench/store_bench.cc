// Store transactions/s: SQLite (group commit, fsync) vs etcd (one member on loopback, via its
// JSON gateway). One Txn = a create-if-absent compare and one 200-byte put, the shape of a
// job submission. The etcd case starts its own etcd (etcd_test_process.h); it is skipped
// when there is no etcd binary. Results in docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <atomic>
#include <filesystem>
#include <memory>

#include "store/etcd_store.h"
#include "store/etcd_test_process.h"
#include "store/store.h"

namespace tessera::store {
namespace {

std::atomic<int64_t> next_key{0};

Store* Sqlite() {
  static std::unique_ptr<Store> s = []() -> std::unique_ptr<Store> {
    auto dir = std::filesystem::temp_directory_path() /
               ("tessera_store_bench_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    auto st = OpenSqliteStore(dir.string());
    return st.ok() ? std::move(*st) : nullptr;
  }();
  return s.get();
}

Store* Etcd() {
  // Destroyed in reverse order: the store (revoking its lease) before its etcd is stopped.
  static testing::EtcdProcess etcd;
  static std::unique_ptr<Store> s = []() -> std::unique_ptr<Store> {
    if (!testing::EtcdProcess::Available() || !etcd.Start()) return nullptr;
    EtcdOptions o;
    o.endpoints = {etcd.endpoint()};
    auto st = OpenEtcdStore(o);
    return st.ok() ? std::unique_ptr<Store>(std::move(*st)) : nullptr;
  }();
  return s.get();
}

void Txn(benchmark::State& state, Store* s) {
  if (s == nullptr) {
    state.SkipWithError("the store did not open (etcd: no etcd binary, or it did not start)");
    return;
  }
  const std::string value(200, 'v');
  for (auto _ : state) {
    const std::string k = "jobs/" + std::to_string(next_key++);
    auto r = s->Txn({{k, 0}}, {Op::Put(k, value)});
    if (!r.ok()) state.SkipWithError(r.status().ToString().c_str());
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_SqliteTxn(benchmark::State& state) { Txn(state, Sqlite()); }
void BM_EtcdTxn(benchmark::State& state) { Txn(state, Etcd()); }
BENCHMARK(BM_SqliteTxn)->Threads(1)->Threads(16)->UseRealTime();
BENCHMARK(BM_EtcdTxn)->Threads(1)->Threads(16)->UseRealTime();

}  // namespace
}  // namespace tessera::store
