// SQLite implementation of Store: one file in WAL mode, one writer thread doing group commit.
//
// Callers hand their transaction to the writer queue and block on a future. The writer takes
// everything queued (up to max_batch), opens one SQLite transaction, applies each logical
// transaction inside its own SAVEPOINT (so a failed compare undoes only that one), commits
// once (one fsync), then completes every future. Under load many submissions share one
// fsync; alone, a transaction pays exactly one. When the previous commit was shared, the
// writer waits a short window (SqliteOptions::group_commit_window_us) for as many callers to
// queue again, so batches stay large instead of decaying to whoever arrived during the fsync.
// WAL checkpoints (copying pages into the database file and fsyncing it) run on a separate
// thread and connection, off the commit path.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>

#include "store/store.h"
#include "store/txn_internal.h"

namespace tessera::store {
namespace {

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return s_; }
  void Reset() {
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }
  void Text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Blob(int i, const std::string& v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }
  void Int(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); }

 private:
  sqlite3_stmt* s_ = nullptr;
  int rc_ = SQLITE_OK;
};

std::string ColumnString(sqlite3_stmt* s, int col) {
  const void* p = sqlite3_column_blob(s, col);
  int n = sqlite3_column_bytes(s, col);
  return p ? std::string(static_cast<const char*>(p), n) : std::string();
}

Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "unknown error";
    sqlite3_free(err);
    return Unavailable(std::string("sqlite: ") + sql + ": " + m);
  }
  return Status::Ok();
}

class SqliteStore final : public Store {
 public:
  ~SqliteStore() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (writer_.joinable()) writer_.join();
    {
      std::lock_guard<std::mutex> l(ckpt_mu_);
      ckpt_stopping_ = true;
    }
    ckpt_cv_.notify_all();
    if (checkpointer_.joinable()) checkpointer_.join();
    // The last connection to close checkpoints the WAL into the database file and removes
    // it (tessera.db alone is then the whole store): it must be a writable one.
    sqlite3_close(cdb_);
    sqlite3_close(rdb_);
    sqlite3_close(wdb_);
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  }

  Status Open(const std::string& dir, const SqliteOptions& options) {
    options_ = options;
    std::error_code ec;
    // The store holds every job's environment: its own dir and files are for its user alone
    // (as etcd's). A dir that was there already keeps its mode (it may be shared).
    if (std::filesystem::create_directories(dir, ec) && !ec) ::chmod(dir.c_str(), 0700);
    if (ec) return Unavailable("cannot create data dir " + dir + ": " + ec.message());
    // One process per data dir: a second server on the same store would overwrite what the
    // first acknowledged (each keeps its state in memory). flock: released when the process
    // dies, however it dies.
    const std::string lock = dir + "/tessera.lock";
    lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ < 0)
      return Unavailable("cannot open " + lock + ": " + std::strerror(errno) +
                         " (is the data dir writable?)");
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
      char holder[32] = {0};
      ssize_t n = ::pread(lock_fd_, holder, sizeof holder - 1, 0);
      std::string pid = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return FailedPrecondition("data dir " + dir + " is in use by another process" +
                                (pid.empty() ? "" : " (pid " + pid + ")") + ": it holds " + lock +
                                "; one server per data dir");
    }
    const std::string me = std::to_string(::getpid()) + "\n";
    if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) < 0) {
      // Only the message of a later refusal loses the pid; the lock itself holds.
    }
    std::string path = dir + "/tessera.db";
    // A write-ahead log without its database is a state whose main file was lost (deleted,
    // not restored from a backup): SQLite would drop the log and start empty, and an empty
    // server has every agent stop every task. Refused, naming both files.
    std::error_code no_db, wal;
    if (!std::filesystem::exists(path, no_db) && !no_db &&
        std::filesystem::exists(path + "-wal", wal))
      return FailedPrecondition(
          path + " is missing but " + path +
          "-wal is there: the database file was lost (restore it, with the -wal beside it); "
          "refusing to start an empty cluster over it (move the -wal away to start afresh)");
    // Created 0600 before SQLite opens it: its -wal and -shm take the database file's mode.
    if (int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600); fd >= 0) ::close(fd);
    if (sqlite3_open_v2(path.c_str(), &wdb_,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        nullptr) != SQLITE_OK)
      return Unavailable("cannot open " + path + ": " + sqlite3_errmsg(wdb_));
    if (Status wal = Exec(wdb_, "PRAGMA journal_mode=WAL"); !wal.ok())
      return wal.WithContext(path + " (is the data dir writable?)");
    TESSERA_RETURN_IF_ERROR(Exec(
        wdb_, options.synchronous_full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL"));
    TESSERA_RETURN_IF_ERROR(Exec(wdb_, "PRAGMA busy_timeout=5000"));
    TESSERA_RETURN_IF_ERROR(
        Exec(wdb_,
             "CREATE TABLE IF NOT EXISTS kv (key BLOB PRIMARY KEY, value BLOB NOT NULL,"
             " mod_revision INTEGER NOT NULL) WITHOUT ROWID;"
             "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
             "INSERT OR IGNORE INTO meta VALUES ('revision', 0);"));
    if (sqlite3_open_v2(path.c_str(), &rdb_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) !=
        SQLITE_OK)
      return Unavailable("cannot open " + path + " for reading: " + sqlite3_errmsg(rdb_));
    TESSERA_RETURN_IF_ERROR(Exec(rdb_, "PRAGMA busy_timeout=5000"));
    {
      Stmt s(wdb_, "SELECT value FROM meta WHERE name='revision'");
      if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW)
        return Internal("sqlite: cannot read revision");
      revision_ = sqlite3_column_int64(s.get(), 0);
    }
    if (options.checkpoint_pages > 0) {
      if (sqlite3_open_v2(path.c_str(), &cdb_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
                          nullptr) != SQLITE_OK)
        return Unavailable("cannot open " + path + " for checkpoints: " + sqlite3_errmsg(cdb_));
      TESSERA_RETURN_IF_ERROR(Exec(cdb_, "PRAGMA busy_timeout=5000"));
      // A connection learns that the database is in WAL mode when it first reads it; until
      // then every checkpoint it runs is a no-op (log and done -1), and the WAL never stops
      // growing.
      TESSERA_RETURN_IF_ERROR(Exec(cdb_, "SELECT count(*) FROM meta"));
      // Replaces SQLite's automatic checkpoint (itself a WAL hook) on the writer connection.
      sqlite3_wal_hook(wdb_, &SqliteStore::OnWalCommit, this);
      checkpointer_ = std::thread([this] { CheckpointLoop(); });
    }
    writer_ = std::thread([this] { WriterLoop(); });
    return Status::Ok();
  }

  void Announce() override {
    std::lock_guard<std::mutex> l(mu_);
    ++announced_;
  }
  void Withdraw() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      --announced_;
    }
    cv_.notify_one();
  }
  std::future<StatusOr<TxnResult>> TxnAsyncAnnounced(std::vector<Compare> compares,
                                                     std::vector<Op> ops) override {
    return Queue(std::move(compares), std::move(ops), true);
  }
  std::future<StatusOr<TxnResult>> TxnAsync(std::vector<Compare> compares,
                                            std::vector<Op> ops) override {
    return Queue(std::move(compares), std::move(ops), false);
  }

  std::future<StatusOr<TxnResult>> Queue(std::vector<Compare> compares, std::vector<Op> ops,
                                         bool announced) {
    return QueueForWriter(mu_, cv_, stopping_, queue_, std::move(compares), std::move(ops), [&] {
      if (announced) --announced_;
    });
  }

  StatusOr<std::optional<KeyValue>> Get(const std::string& key) override {
    std::lock_guard<std::mutex> l(rmu_);
    Stmt s(rdb_, "SELECT value, mod_revision FROM kv WHERE key=?1");
    s.Blob(1, key);
    int rc = sqlite3_step(s.get());
    if (rc == SQLITE_DONE) return std::optional<KeyValue>();
    if (rc != SQLITE_ROW) return Unavailable(std::string("sqlite get: ") + sqlite3_errmsg(rdb_));
    return std::optional<KeyValue>(
        KeyValue{key, ColumnString(s.get(), 0), sqlite3_column_int64(s.get(), 1)});
  }

  StatusOr<std::vector<KeyValue>> Range(const std::string& prefix, const std::string& start_after,
                                        size_t limit) override {
    std::lock_guard<std::mutex> l(rmu_);
    // Keys are compared as blobs (memcmp order): prefix <= key < prefix+0xFF...
    std::string lo = start_after.empty() ? prefix : start_after;
    std::string hi = prefix + std::string(1, '\xff');
    Stmt s(rdb_, start_after.empty() ? "SELECT key, value, mod_revision FROM kv WHERE key >= ?1 "
                                       "AND key < ?2 ORDER BY key LIMIT ?3"
                                     : "SELECT key, value, mod_revision FROM kv WHERE key > ?1 AND "
                                       "key < ?2 ORDER BY key LIMIT ?3");
    s.Blob(1, lo);
    s.Blob(2, hi);
    s.Int(3, limit == 0 ? -1 : static_cast<int64_t>(limit));
    std::vector<KeyValue> out;
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      std::string k = ColumnString(s.get(), 0);
      if (k.compare(0, prefix.size(), prefix) != 0) continue;
      out.push_back({std::move(k), ColumnString(s.get(), 1), sqlite3_column_int64(s.get(), 2)});
    }
    if (rc != SQLITE_DONE) return Unavailable(std::string("sqlite range: ") + sqlite3_errmsg(rdb_));
    return out;
  }

  int64_t Revision() override {
    std::lock_guard<std::mutex> l(mu_);
    return revision_;
  }

  Stats GetStats() override {
    std::lock_guard<std::mutex> l(mu_);
    return stats_;
  }

 private:
  // Applies one logical transaction inside the open physical one. Returns FailedPrecondition
  // on a failed compare (caller rolls back to the savepoint).
  Status ApplyOne(PendingTxn& p, int64_t revision, Stmt& get_rev, Stmt& put, Stmt& del) {
    for (const Compare& c : p.compares) {
      get_rev.Reset();
      get_rev.Blob(1, c.key);
      int rc = sqlite3_step(get_rev.get());
      int64_t have = 0;
      if (rc == SQLITE_ROW)
        have = sqlite3_column_int64(get_rev.get(), 0);
      else if (rc != SQLITE_DONE)
        return Unavailable(std::string("sqlite compare: ") + sqlite3_errmsg(wdb_));
      // A statement left on its row keeps its read transaction open past COMMIT: the snapshot
      // it pins stops every checkpoint, and the WAL grows for ever.
      get_rev.Reset();
      if (have != c.mod_revision) {
        return CompareFailed(c, have);
      }
    }
    for (const Op& op : p.ops) {
      Stmt& s = op.kind == Op::Kind::kPut ? put : del;
      s.Reset();
      s.Blob(1, op.key);
      if (op.kind == Op::Kind::kPut) {
        s.Blob(2, op.value);
        s.Int(3, revision);
      }
      if (sqlite3_step(s.get()) != SQLITE_DONE)
        return Unavailable(std::string("sqlite write ") + op.key + ": " + sqlite3_errmsg(wdb_));
    }
    return Status::Ok();
  }

  // Runs on the writer thread after each commit with the WAL's size in pages. Under writes
  // that never pause, the background (passive) checkpoint never catches up, and the WAL
  // would grow without bound (a FULL or TRUNCATE one from its own thread is starved by the
  // writer): at 4x the threshold the writer itself empties it, holding the next commit back.
  static int OnWalCommit(void* self, sqlite3* db, const char*, int pages) {
    auto* s = static_cast<SqliteStore*>(self);
    if (pages >= 4 * s->options_.checkpoint_pages) {
      int rc = sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_TRUNCATE, nullptr, nullptr);
      if (rc != SQLITE_OK && rc != SQLITE_BUSY)
        std::fprintf(stderr, "tessera store: checkpoint: %s\n", sqlite3_errmsg(db));
      return SQLITE_OK;
    }
    if (pages >= s->options_.checkpoint_pages) {
      {
        std::lock_guard<std::mutex> l(s->ckpt_mu_);
        if (s->ckpt_wanted_) return SQLITE_OK;
        s->ckpt_wanted_ = true;
      }
      s->ckpt_cv_.notify_one();
    }
    return SQLITE_OK;
  }

  // PASSIVE checkpoints never block the writer; the WAL restarts from its beginning at the
  // next commit once every frame is in the database file. One that could not copy every
  // frame (commits or a reader in the way) is tried again shortly, commits or not: else the
  // last writes before a quiet spell would stay in the WAL until the next burst.
  void CheckpointLoop() {
    bool behind = false;
    for (;;) {
      {
        std::unique_lock<std::mutex> l(ckpt_mu_);
        auto asked = [&] { return ckpt_stopping_ || ckpt_wanted_; };
        if (behind)
          ckpt_cv_.wait_for(l, std::chrono::milliseconds(100), asked);
        else
          ckpt_cv_.wait(l, asked);
        if (ckpt_stopping_) return;
        ckpt_wanted_ = false;  // a commit from now on asks again
      }
      int log = 0, done = 0;
      int rc = sqlite3_wal_checkpoint_v2(cdb_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log, &done);
      if (rc != SQLITE_OK && rc != SQLITE_BUSY)
        std::fprintf(stderr, "tessera store: checkpoint: %s\n", sqlite3_errmsg(cdb_));
      behind = rc == SQLITE_BUSY || (rc == SQLITE_OK && done < log);
    }
  }

  static bool Step(Stmt& s) {
    s.Reset();
    return sqlite3_step(s.get()) == SQLITE_DONE;
  }

  void WriterLoop() {
    Stmt get_rev(wdb_, "SELECT mod_revision FROM kv WHERE key=?1");
    Stmt put(
        wdb_,
        "INSERT INTO kv(key, value, mod_revision) VALUES (?1, ?2, ?3)"
        " ON CONFLICT(key) DO UPDATE SET value=excluded.value, mod_revision=excluded.mod_revision");
    Stmt del(wdb_, "DELETE FROM kv WHERE key=?1");
    Stmt set_rev(wdb_, "UPDATE meta SET value=?1 WHERE name='revision'");
    Stmt savepoint(wdb_, "SAVEPOINT t"), release(wdb_, "RELEASE t"),
        rollback_to(wdb_, "ROLLBACK TO t");
    const auto window = std::chrono::microseconds(options_.group_commit_window_us);
    size_t last_batch = 1;
    for (;;) {
      std::vector<std::unique_ptr<PendingTxn>> batch;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty() && stopping_) return;
        const size_t want = std::min(last_batch, options_.max_batch);
        if (window.count() > 0 && (announced_ > 0 || queue_.size() < want)) {
          // Concurrent callers: give the ones still preparing their transaction a moment to
          // queue, so they share this fsync instead of paying for the next one.
          cv_.wait_for(l, window, [&] {
            return stopping_ || queue_.size() >= options_.max_batch ||
                   (announced_ <= 0 && queue_.size() >= want);
          });
        }
        while (!queue_.empty() && batch.size() < options_.max_batch) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      int64_t revision = revision_;
      std::vector<StatusOr<TxnResult>> results;
      results.reserve(batch.size());
      Status st = Exec(wdb_, "BEGIN IMMEDIATE");
      for (auto& p : batch) {
        if (!st.ok()) {
          results.push_back(st);
          continue;
        }
        if (!Step(savepoint)) {
          st = Unavailable(std::string("sqlite savepoint: ") + sqlite3_errmsg(wdb_));
          results.push_back(st);
          continue;
        }
        Status one = ApplyOne(*p, revision + 1, get_rev, put, del);
        if (one.ok()) {
          ++revision;
          (void)Step(release);
          results.push_back(TxnResult{revision});
        } else {
          (void)Step(rollback_to);
          (void)Step(release);
          results.push_back(one);
        }
      }
      last_batch = batch.size();
      if (st.ok()) {
        set_rev.Reset();
        set_rev.Int(1, revision);
        sqlite3_step(set_rev.get());
        st = Exec(wdb_, "COMMIT");
        if (!st.ok()) (void)Exec(wdb_, "ROLLBACK");
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        if (st.ok()) {
          revision_ = revision;
          stats_.commits += 1;
          stats_.transactions += static_cast<int64_t>(batch.size());
        }
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        // A failed physical commit fails every transaction of the batch: none is acknowledged.
        batch[i]->done.set_value(st.ok() ? std::move(results[i]) : StatusOr<TxnResult>(st));
      }
    }
  }

  SqliteOptions options_;
  sqlite3* wdb_ = nullptr;
  sqlite3* rdb_ = nullptr;
  std::mutex rmu_;  // guards rdb_
  std::mutex mu_;   // guards queue_, revision_, stats_, stopping_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<PendingTxn>> queue_;
  int64_t revision_ = 0;
  int64_t announced_ = 0;  // transactions announced and not yet queued (or withdrawn)
  Stats stats_;
  bool stopping_ = false;
  std::thread writer_;
  // Background checkpoints (checkpoint_pages > 0).
  sqlite3* cdb_ = nullptr;
  std::mutex ckpt_mu_;  // guards the three below
  std::condition_variable ckpt_cv_;
  bool ckpt_wanted_ = false, ckpt_stopping_ = false;
  std::thread checkpointer_;
  int lock_fd_ = -1;  // <dir>/tessera.lock, flock'ed while the store is open
};

}  // namespace

StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& dir,
                                                 const SqliteOptions& options) {
  auto s = std::make_unique<SqliteStore>();
  TESSERA_RETURN_IF_ERROR(s->Open(dir, options));
  return std::unique_ptr<Store>(std::move(s));
}

}  // namespace tessera::store
