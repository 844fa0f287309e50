// What the Store implementations share (not part of the interface): a transaction waiting
// for its writer thread, and the words of a failed compare, so that every store names the
// key and the revisions alike.
#pragma once

#include <future>
#include <string>
#include <vector>

#include "store/store.h"

namespace tessera::store {

struct PendingTxn {
  std::vector<Compare> compares;
  std::vector<Op> ops;
  std::promise<StatusOr<TxnResult>> done;
};

// The compare `c` found the key at `have` (0: absent).
inline Status CompareFailed(const Compare& c, int64_t have) {
  return FailedPrecondition(c.mod_revision == 0 ? c.key + ": already exists"
                                                : c.key + ": modified concurrently (revision " +
                                                      std::to_string(have) + ", expected " +
                                                      std::to_string(c.mod_revision) + ")");
}

}  // namespace tessera::store
