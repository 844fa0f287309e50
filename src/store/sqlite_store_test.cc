#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "store/store.h"

namespace tessera::store {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tessera_store_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

TEST(SqliteStore, PutGetRangeAndRevisions) {
  std::string dir = TempDir("basic");
  auto s = OpenSqliteStore(dir);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Store& st = **s;
  EXPECT_EQ(st.Revision(), 0);
  auto r1 = st.Write({Op::Put("jobs/a", "1"), Op::Put("jobs/b", "2"), Op::Put("nodes/x", "n")});
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->revision, 1);
  auto r2 = st.Write({Op::Put("jobs/c", "3"), Op::Delete("jobs/a")});
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->revision, 2);

  auto b = st.Get("jobs/b");
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ((*b)->value, "2");
  EXPECT_EQ((*b)->mod_revision, 1);
  auto a = st.Get("jobs/a");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->has_value());

  auto all = st.Range("jobs/");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].key, "jobs/b");
  EXPECT_EQ((*all)[1].key, "jobs/c");
  auto page = st.Range("jobs/", "jobs/b", 10);
  ASSERT_TRUE(page.ok());
  ASSERT_EQ(page->size(), 1u);
  EXPECT_EQ((*page)[0].key, "jobs/c");
  auto limited = st.Range("", "", 1);
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->size(), 1u);
  std::filesystem::remove_all(dir);
}

// One process per data dir: a second open is refused, naming the holder, until the first
// store is closed (a second server would overwrite what the first acknowledged).
TEST(SqliteStore, ASecondOpenOfTheDataDirIsRefused) {
  std::string dir = TempDir("lock");
  auto first = OpenSqliteStore(dir);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = OpenSqliteStore(dir);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("is in use by another process (pid " +
                                           std::to_string(::getpid()) + ")"),
            std::string::npos)
      << second.status().message();
  first->reset();
  EXPECT_TRUE(OpenSqliteStore(dir).ok());
  std::filesystem::remove_all(dir);
}

// The store holds jobs' environments: a new data dir and its files are its user's alone.
TEST(SqliteStore, ANewDataDirAndItsFilesAreTheUsersAlone) {
  namespace fs = std::filesystem;
  std::string dir = TempDir("modes");
  auto s = OpenSqliteStore(dir);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_TRUE((*s)->Write({Op::Put("jobs/a", "secret")}).ok());
  auto others = [](const std::string& p) {
    return fs::status(p).permissions() & (fs::perms::group_all | fs::perms::others_all);
  };
  EXPECT_EQ(others(dir), fs::perms::none);
  for (const char* f : {"/tessera.db", "/tessera.db-wal", "/tessera.db-shm"}) {
    ASSERT_TRUE(fs::exists(dir + f)) << f;
    EXPECT_EQ(others(dir + f), fs::perms::none) << f;
  }
  s->reset();
  fs::remove_all(dir);
}

// A data dir whose tessera.db was lost but whose -wal is there (all the state of a server
// killed before a checkpoint) is refused: SQLite would delete the log and start empty.
TEST(SqliteStore, AWalWithoutItsDatabaseIsRefused) {
  std::string dir = TempDir("walonly");
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tessera.db-wal") << "log";
  auto s = OpenSqliteStore(dir);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(
      s.status().message().find("tessera.db is missing but " + dir + "/tessera.db-wal is there"),
      std::string::npos)
      << s.status().message();
  EXPECT_TRUE(std::filesystem::exists(dir + "/tessera.db-wal"));  // nothing was dropped
  std::filesystem::remove_all(dir);
}

TEST(SqliteStore, CompareGuardsTheWholeTransaction) {
  std::string dir = TempDir("cas");
  auto s = OpenSqliteStore(dir);
  ASSERT_TRUE(s.ok());
  Store& st = **s;
  ASSERT_TRUE(st.Txn({{"jobs/a", 0}}, {Op::Put("jobs/a", "v1")}).ok());
  // Create-if-absent fails the second time and writes nothing (not even the other key).
  auto again = st.Txn({{"jobs/a", 0}}, {Op::Put("jobs/a", "v2"), Op::Put("jobs/other", "x")});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("jobs/a"), std::string::npos);
  EXPECT_FALSE(st.Get("jobs/other")->has_value());
  EXPECT_EQ((*st.Get("jobs/a"))->value, "v1");
  // Optimistic update with the right revision succeeds, with a stale one fails.
  int64_t rev = (*st.Get("jobs/a"))->mod_revision;
  EXPECT_TRUE(st.Txn({{"jobs/a", rev}}, {Op::Put("jobs/a", "v3")}).ok());
  EXPECT_FALSE(st.Txn({{"jobs/a", rev}}, {Op::Put("jobs/a", "v4")}).ok());
  EXPECT_EQ((*st.Get("jobs/a"))->value, "v3");
  std::filesystem::remove_all(dir);
}

TEST(SqliteStore, ConcurrentWritersShareCommitsAndSurviveReopen) {
  std::string dir = TempDir("group");
  constexpr int kThreads = 16, kEach = 100;
  {
    auto s = OpenSqliteStore(dir);
    ASSERT_TRUE(s.ok());
    Store& st = **s;
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
    std::printf("group commit: %lld transactions in %lld physical commits\n",
                static_cast<long long>(stats.transactions), static_cast<long long>(stats.commits));
    EXPECT_EQ(st.Revision(), kThreads * kEach);
  }
  auto s = OpenSqliteStore(dir);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->Revision(), kThreads * kEach);
  auto all = (*s)->Range("jobs/");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), static_cast<size_t>(kThreads * kEach));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::store

namespace tessera::store {
namespace {

// The WAL is copied into the database file while the store serves (the background
// checkpoint), whatever the transactions did (a compare's read included), and the database
// file alone holds everything once the store is closed: a copy of tessera.db is a backup.
TEST(SqliteStore, TheWalIsCheckpointedWhileServingAndOnClose) {
  const std::string dir = TempDir("wal");
  const auto db = std::filesystem::path(dir) / "tessera.db";
  const auto wal = std::filesystem::path(dir) / "tessera.db-wal";
  SqliteOptions o;
  o.checkpoint_pages = 64;
  o.synchronous_full = false;
  {
    auto s = OpenSqliteStore(dir, o);
    ASSERT_TRUE(s.ok());
    Store& st = **s;
    ASSERT_TRUE(st.Txn({}, {Op::Put("counters/x", "1")}).ok());
    const std::string value(2000, 'v');
    for (int i = 0; i < 3000; ++i) {
      int64_t rev = (*st.Get("counters/x"))->mod_revision;
      ASSERT_TRUE(st.Txn({{"counters/x", rev}}, {Op::Put("counters/x", std::to_string(i)),
                                                 Op::Put("jobs/" + std::to_string(i), value)})
                      .ok());
    }
    // The checkpoints run on their own thread: wait for the file to hold the data.
    for (int i = 0; i < 500 && std::filesystem::file_size(db) < 3000u * 2000; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_GE(std::filesystem::file_size(db), 3000u * 2000) << "checkpointed while serving";
    // (How far the WAL grew meanwhile is not checked: it depends on how often the checkpoint
    // thread got a CPU while the writes went on, and on a loaded machine it may get none.)
  }
  EXPECT_FALSE(std::filesystem::exists(wal) && std::filesystem::file_size(wal) > 0)
      << "closing checkpoints the rest";
  const std::string copy = TempDir("wal_copy");
  std::filesystem::create_directories(copy);
  std::filesystem::copy_file(db, std::filesystem::path(copy) / "tessera.db");
  auto back = OpenSqliteStore(copy, o);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ((*(*back)->Get("counters/x"))->value, "2999");
  EXPECT_TRUE((*(*back)->Get("jobs/2999")).has_value());
  back->reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(copy);
}

}  // namespace
}  // namespace tessera::store
