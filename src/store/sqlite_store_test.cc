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
