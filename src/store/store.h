// Store: the durable state of the control plane, as a revisioned key-value space.
//
// The interface is deliberately etcd-shaped (keys, a global revision that every committed
// transaction bumps, per-key mod revisions, compare-and-swap transactions, prefix ranges) so
// that a distributed store can implement it later without changing the server. Values are
// opaque bytes; the server stores canonical JSON.
//
// Durability contract: Txn() returns only after the transaction is durable (for SQLite:
// committed in WAL mode with synchronous=FULL, i.e. fsync'd). Implementations may batch
// concurrent transactions into one physical commit (group commit); each logical
// transaction still commits or fails on its own. Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tessera::store {

struct KeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;  // revision of the transaction that last wrote this key
};

// One write of a transaction.
struct Op {
  enum class Kind { kPut, kDelete };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;
  static Op Put(std::string k, std::string v) { return {Kind::kPut, std::move(k), std::move(v)}; }
  static Op Delete(std::string k) { return {Kind::kDelete, std::move(k), {}}; }
};

// A guard of a transaction: the key's mod revision must equal `mod_revision`
// (0 means: the key must not exist). Used for create-if-absent and optimistic updates.
struct Compare {
  std::string key;
  int64_t mod_revision = 0;
};

struct TxnResult {
  int64_t revision = 0;  // the revision this transaction committed at
};

class Store {
 public:
  virtual ~Store() = default;

  // Applies every op if every compare holds, durably; FailedPrecondition (naming the key)
  // when a compare fails, in which case nothing is written.
  StatusOr<TxnResult> Txn(std::vector<Compare> compares, std::vector<Op> ops) {
    return TxnAsync(std::move(compares), std::move(ops)).get();
  }
  StatusOr<TxnResult> Write(std::vector<Op> ops) { return Txn({}, std::move(ops)); }
  // Queues the transaction and returns at once; the future completes when it is durable
  // (or failed). Transactions queued by one thread commit in the order they were queued.
  virtual std::future<StatusOr<TxnResult>> TxnAsync(std::vector<Compare> compares,
                                                    std::vector<Op> ops) = 0;

  // Group-commit hint. A caller that is preparing a transaction says so (Announce) and then
  // either queues it with TxnAsyncAnnounced or gives up (Withdraw). While announced
  // transactions are on their way the writer may hold its commit briefly so that they share
  // its fsync. Never affects durability; the default ignores the hint.
  virtual void Announce() {}
  virtual void Withdraw() {}
  virtual std::future<StatusOr<TxnResult>> TxnAsyncAnnounced(std::vector<Compare> compares,
                                                             std::vector<Op> ops) {
    return TxnAsync(std::move(compares), std::move(ops));
  }

  virtual StatusOr<std::optional<KeyValue>> Get(const std::string& key) = 0;
  // Keys with the prefix, in byte order, strictly after `start_after` ("" = from the first),
  // at most `limit` (0 = all).
  virtual StatusOr<std::vector<KeyValue>> Range(const std::string& prefix,
                                                const std::string& start_after = "",
                                                size_t limit = 0) = 0;
  // The revision of the last committed transaction.
  virtual int64_t Revision() = 0;
  // The most writes one transaction may carry (etcd's --max-txn-ops, less what the store adds
  // itself); 0 = no limit. Deletes and compactions that may be split go in batches this size.
  virtual size_t MaxWritesPerTxn() { return 0; }

  // Counters of physical commits, for the benchmark and tests of group commit.
  struct Stats {
    int64_t transactions = 0;
    int64_t commits = 0;  // physical (fsync'd) commits; <= transactions under group commit
  };
  virtual Stats GetStats() = 0;
};

struct SqliteOptions {
  // FULL: fsync the WAL on every commit (a crash of the machine loses nothing
  // acknowledged). NORMAL survives process crashes (kill -9) but not power loss.
  bool synchronous_full = true;
  // Upper bound on logical transactions folded into one physical commit.
  size_t max_batch = 1024;
  // Group commit window: the writer waits up to this long after the first queued transaction
  // while announced ones (Store::Announce) are still being prepared, or, when the previous
  // physical commit was shared, until as many are queued as it carried; so that one fsync
  // serves them all. A lone caller never waits. 0 = commit whatever is queued at once.
  int64_t group_commit_window_us = 400;
  // WAL checkpoints run on their own thread and connection once the WAL holds this many
  // pages, so no commit waits for the database file's fsync. 0 = SQLite's own automatic
  // checkpoints inside commits.
  int64_t checkpoint_pages = 4000;
};

// Opens (creating if needed) `<dir>/tessera.db`. The writer thread that performs group
// commit lives as long as the returned store.
StatusOr<std::unique_ptr<Store>> OpenSqliteStore(const std::string& dir,
                                                 const SqliteOptions& options = {});

}  // namespace tessera::store
