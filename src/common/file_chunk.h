// ReadFileChunk: a piece of a file that may still be growing (a task's output), for the
// agent's and the server's logs endpoints.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace tessera {

struct FileChunk {
  std::string data;  // at most `limit` bytes from `offset` (clamped to the file)
  int64_t size = 0;  // the file's size when it was read
};

// NotFound "PATH does not exist"; FailedPrecondition "PATH is not a regular file" or
// "cannot read PATH: <errno text>".
StatusOr<FileChunk> ReadFileChunk(const std::string& path, int64_t offset, int64_t limit);

}  // namespace tessera
