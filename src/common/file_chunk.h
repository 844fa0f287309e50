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

// Which file a path led to when it was opened (st_dev, st_ino).
struct FileId {
  uint64_t dev = 0, ino = 0;
  friend bool operator==(const FileId&, const FileId&) = default;
};

// NotFound "PATH does not exist"; FailedPrecondition "PATH is not a regular file" or
// "cannot read PATH: <errno text>". With `expect`, PermissionDenied when the path now
// leads to another file (a task swapped the output file it was given for a link to one it
// may not read: the reader may be root). Never blocks on a FIFO put in a file's place.
StatusOr<FileChunk> ReadFileChunk(const std::string& path, int64_t offset, int64_t limit,
                                  const FileId* expect = nullptr);

}  // namespace tessera
