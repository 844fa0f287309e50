// What the Store implementations share (not part of the interface): a transaction waiting
// for its writer thread and how it is queued there, and the words of a failed compare, so
// that every store names the key and the revisions alike.
#pragma once

#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/store.h"

namespace tessera::store {

struct PendingTxn {
  std::vector<Compare> compares;
  std::vector<Op> ops;
  std::promise<StatusOr<TxnResult>> done;
};

// Hands a transaction to a store's writer thread: its `queue`, guarded by `mu`, the thread
// woken by `cv`; refused at once when the store is `stopping`. `locked` runs first with `mu`
// held (SQLite counts its announced transactions there).
template <typename Locked>
std::future<StatusOr<TxnResult>> QueueForWriter(std::mutex& mu, std::condition_variable& cv,
                                                const bool& stopping,
                                                std::deque<std::unique_ptr<PendingTxn>>& queue,
                                                std::vector<Compare> compares, std::vector<Op> ops,
                                                Locked locked) {
  auto p = std::make_unique<PendingTxn>();
  p->compares = std::move(compares);
  p->ops = std::move(ops);
  auto fut = p->done.get_future();
  {
    std::lock_guard<std::mutex> l(mu);
    locked();
    if (stopping) {
      p->done.set_value(Unavailable("store is closing"));
      return fut;
    }
    queue.push_back(std::move(p));
  }
  cv.notify_one();
  return fut;
}

// The compare `c` found the key at `have` (0: absent).
inline Status CompareFailed(const Compare& c, int64_t have) {
  return FailedPrecondition(c.mod_revision == 0 ? c.key + ": already exists"
                                                : c.key + ": modified concurrently (revision " +
                                                      std::to_string(have) + ", expected " +
                                                      std::to_string(c.mod_revision) + ")");
}

}  // namespace tessera::store
