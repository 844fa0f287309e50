// The Store contract (store.h), run against every implementation: SQLite and etcd, and etcd
// over HTTPS (one etcd for the suite, a key prefix per test). A revision is compared with the
// one the store started at (etcd's count from its own history, and taking leadership is
// itself a write).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "store/etcd_store.h"
#include "store/etcd_test_process.h"
#include "store/store.h"

namespace tessera::store {
namespace {

using testing::EtcdProcess;
using testing::TlsEtcd;

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  // Started by the first etcd_tls test, stopped after the suite.
  static TlsEtcd* tls_etcd_;
  static std::string tls_etcd_error_;
  static void TearDownTestSuite() {
    delete tls_etcd_;
    tls_etcd_ = nullptr;
  }

  void SetUp() override {
    if (GetParam() == "etcd_tls") {
      if (tls_etcd_ == nullptr) {
        tls_etcd_ = new TlsEtcd(/*client_cert_auth=*/false);
        tls_etcd_error_ = tls_etcd_->Start();
      }
      if (tls_etcd_->missing_tool()) GTEST_SKIP() << tls_etcd_error_;
      ASSERT_EQ(tls_etcd_error_, "");
      static int tests = 0;
      prefix_ = "/contract" + std::to_string(++tests) + "/";
    } else if (etcd()) {
      if (!EtcdProcess::Available())
        GTEST_SKIP() << "no etcd binary on PATH: install etcd-server (scripts/deps.d/etcd.list, "
                        "./scripts/install-deps.sh) to run the etcd store's tests";
      etcd_ = std::make_unique<EtcdProcess>();
      ASSERT_TRUE(etcd_->Start()) << "etcd did not start; see " << etcd_->log();
    } else {
      dir_ = (std::filesystem::temp_directory_path() /
              ("tessera_contract_" + std::to_string(::getpid())))
                 .string();
      std::filesystem::remove_all(dir_);
    }
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  bool etcd() const { return GetParam() != "sqlite"; }

  std::unique_ptr<Store> Open() {
    if (etcd()) {
      EtcdOptions o;
      o.endpoints = {etcd_ ? etcd_->endpoint() : tls_etcd_->etcd().endpoint()};
      if (!etcd_) {
        o.tls = tls_etcd_->Client();
        o.prefix = prefix_;
      }
      auto s = OpenEtcdStore(o);
      EXPECT_TRUE(s.ok()) << s.status().ToString();
      return s.ok() ? std::move(*s) : nullptr;
    }
    auto s = OpenSqliteStore(dir_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }

  std::unique_ptr<EtcdProcess> etcd_;
  std::string prefix_;  // etcd_tls: this test's keys, apart from the earlier tests'
  std::string dir_;
};
TlsEtcd* StoreContract::tls_etcd_ = nullptr;
std::string StoreContract::tls_etcd_error_;

TEST_P(StoreContract, PutGetRangeAndRevisions) {
  auto s = Open();
  ASSERT_TRUE(s);
  Store& st = *s;
  const int64_t base = st.Revision();
  auto r1 = st.Write({Op::Put("jobs/a", "1"), Op::Put("jobs/b", "2"), Op::Put("nodes/x", "n")});
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  EXPECT_EQ(r1->revision, base + 1);
  auto r2 = st.Write({Op::Put("jobs/c", "3"), Op::Delete("jobs/a")});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->revision, base + 2);
  EXPECT_EQ(st.Revision(), base + 2);

  auto b = st.Get("jobs/b");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->value, "2");
  EXPECT_EQ((*b)->mod_revision, r1->revision);
  auto a = st.Get("jobs/a");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());

  auto all = st.Range("jobs/");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "jobs/b");
  EXPECT_EQ((*all)[1].key, "jobs/c");
  EXPECT_EQ((*all)[1].mod_revision, r2->revision);
  auto page = st.Range("jobs/", "jobs/b", 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].key, "jobs/c");
  auto limited = st.Range("", "", 1);
  ASSERT_TRUE(limited.ok());
  ASSERT_EQ(limited->size(), 1u);
  EXPECT_EQ((*limited)[0].key, "jobs/b");
  auto everything = st.Range("");
  ASSERT_TRUE(everything.ok());
  EXPECT_EQ(everything->size(), 3u);  // nothing of the store's own (an election key) shows
}

// Pages of `limit` keys, each strictly after the last key of the one before, in byte order
// (bytes >= 0x80 after ASCII), with nothing outside the prefix.
TEST_P(StoreContract, RangePagesInByteOrder) {
  auto s = Open();
  ASSERT_TRUE(s);
  std::vector<std::string> keys = {"q/a", "q/b", "q/b0", "q/c\x01", "q/\x80z", "q/\xc3\xa9"};
  std::vector<Op> ops;
  for (const auto& k : keys) ops.push_back(Op::Put(k, "v" + k));
  ops.push_back(Op::Put("p/z", "other"));
  ops.push_back(Op::Put("r/a", "other"));
  ASSERT_TRUE(s->Write(ops).ok());
  std::vector<std::string> seen;
  std::string after;
  for (int i = 0; i < 10; ++i) {
    auto page = s->Range("q/", after, 4);
    ASSERT_TRUE(page.ok());
    EXPECT_LE(page->size(), 4u);
    for (const auto& kv : *page) {
      seen.push_back(kv.key);
      EXPECT_EQ(kv.value, "v" + kv.key);
    }
    if (page->size() < 4) break;
    after = page->back().key;
  }
  EXPECT_EQ(seen, keys);
  auto before_prefix = s->Range("q/", "a", 0);  // start_after before the prefix: from its start
  ASSERT_TRUE(before_prefix.ok());
  EXPECT_EQ(before_prefix->size(), keys.size());
}

TEST_P(StoreContract, CompareGuardsTheWholeTransaction) {
  auto s = Open();
  ASSERT_TRUE(s);
  Store& st = *s;
  ASSERT_TRUE(st.Txn({{"jobs/a", 0}}, {Op::Put("jobs/a", "v1")}).ok());
  const int64_t rev_before = st.Revision();
  // Create-if-absent fails the second time and writes nothing (not even the other key).
  auto again = st.Txn({{"jobs/a", 0}}, {Op::Put("jobs/a", "v2"), Op::Put("jobs/other", "x")});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("jobs/a: already exists"), std::string::npos)
      << again.status().message();
  EXPECT_FALSE(st.Get("jobs/other")->has_value());
  EXPECT_EQ((*st.Get("jobs/a"))->value, "v1");
  EXPECT_EQ(st.Revision(), rev_before);  // a failed transaction commits nothing
  // Optimistic update with the right revision succeeds, with a stale one fails.
  int64_t rev = (*st.Get("jobs/a"))->mod_revision;
  EXPECT_TRUE(st.Txn({{"jobs/a", rev}}, {Op::Put("jobs/a", "v3")}).ok());
  auto stale = st.Txn({{"jobs/a", rev}}, {Op::Put("jobs/a", "v4")});
  ASSERT_FALSE(stale.ok());
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("jobs/a: modified concurrently"), std::string::npos)
      << stale.status().message();
  EXPECT_EQ((*st.Get("jobs/a"))->value, "v3");
  // Several compares: the one that fails is named.
  auto second = st.Txn({{"jobs/a", (*st.Get("jobs/a"))->mod_revision}, {"jobs/b", 7}},
                       {Op::Put("jobs/c", "x")});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("jobs/b"), std::string::npos);
  // A compare on a key that must not exist, after it was deleted, holds again.
  ASSERT_TRUE(st.Write({Op::Delete("jobs/a")}).ok());
  EXPECT_TRUE(st.Txn({{"jobs/a", 0}}, {Op::Put("jobs/a", "again")}).ok());
}

// Ops apply in order: the last one on a key wins; every committed transaction, even one that
// changes nothing, takes a revision of its own.
TEST_P(StoreContract, TheLastOpOnAKeyWinsAndEveryCommitTakesARevision) {
  auto s = Open();
  ASSERT_TRUE(s);
  auto r = s->Write({Op::Put("k/1", "a"), Op::Put("k/1", "b"), Op::Put("k/2", "x"),
                     Op::Delete("k/2"), Op::Delete("k/3"), Op::Put("k/3", "c")});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*s->Get("k/1"))->value, "b");
  EXPECT_FALSE(s->Get("k/2")->has_value());
  EXPECT_EQ((*s->Get("k/3"))->value, "c");
  auto none = s->Write({Op::Delete("k/absent")});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->revision, r->revision + 1);
}

// TxnAsync from one thread commits in the order queued.
TEST_P(StoreContract, AsyncTransactionsOfOneThreadCommitInOrder) {
  auto s = Open();
  ASSERT_TRUE(s);
  std::vector<std::future<StatusOr<TxnResult>>> futures;
  for (int i = 0; i < 30; ++i)
    futures.push_back(s->TxnAsync({}, {Op::Put("counter", std::to_string(i))}));
  int64_t last = 0;
  for (auto& f : futures) {
    auto r = f.get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_GT(r->revision, last);
    last = r->revision;
  }
  EXPECT_EQ((*s->Get("counter"))->value, "29");
  EXPECT_EQ((*s->Get("counter"))->mod_revision, last);
}

TEST_P(StoreContract, ConcurrentWritersAllCommitAndSurviveReopen) {
  const int kThreads = 16, kEach = etcd() ? 10 : 100;  // etcd: one fsync'd round trip each
  int64_t end_revision = 0;
  {
    auto s = Open();
    ASSERT_TRUE(s);
    Store& st = *s;
    const int64_t base = st.Revision();
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kEach; ++i) {
          std::string k = "jobs/t" + std::to_string(t) + "-" + std::to_string(i);
          if (!st.Txn({{k, 0}}, {Op::Put(k, "x")}).ok()) failures++;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(failures.load(), 0);
    auto stats = st.GetStats();
    EXPECT_EQ(stats.transactions, kThreads * kEach);
    EXPECT_LE(stats.commits, stats.transactions);
    std::printf("%s: %lld transactions in %lld physical commits\n", GetParam().c_str(),
                static_cast<long long>(stats.transactions), static_cast<long long>(stats.commits));
    EXPECT_EQ(st.Revision(), base + kThreads * kEach);
    end_revision = st.Revision();
  }
  auto s = Open();
  ASSERT_TRUE(s);
  EXPECT_GE(s->Revision(), end_revision);
  auto all = s->Range("jobs/");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kThreads * kEach));
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract, ::testing::Values("sqlite", "etcd", "etcd_tls"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tessera::store
