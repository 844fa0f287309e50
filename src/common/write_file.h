// WriteFileWhole: a small file (a token, a URL, a batch script) replaced whole or not at all.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/status.h"

namespace tessera {

// Writes `data` to PATH.tmp (mode `mode`), syncs it and renames it over `path`, so that a
// full disk or a crash leaves the old file or the new one, never an empty or cut one. The
// descriptor is close-on-exec: a concurrent fork cannot keep it open for writing, which would
// make executing the file fail with ETXTBSY. Unavailable "cannot write PATH: <errno text>".
//
// `kProcessCrash` leaves out the fsync, for files that only need to outlive the writing
// process, not the machine: an agent's batch script and record of a running task, which a
// power loss makes moot (the task dies with the machine), written at every task start.
enum class Durability { kMachineCrash, kProcessCrash };
Status WriteFileWhole(const std::string& path, const std::string& data, mode_t mode,
                      Durability durability = Durability::kMachineCrash);

}  // namespace tessera
