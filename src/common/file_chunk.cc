#include "common/file_chunk.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tessera {

StatusOr<FileChunk> ReadFileChunk(const std::string& path, int64_t offset, int64_t limit,
                                  const FileId* expect) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return NotFound(path + " does not exist");
    return FailedPrecondition("cannot read " + path + ": " + std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return FailedPrecondition(path + " is not a regular file");
  }
  if (expect &&
      !(FileId{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)} == *expect)) {
    ::close(fd);
    return PermissionDenied(path + " is no longer the file the task was given (replaced " +
                            "after the task started): not read");
  }
  FileChunk out;
  out.size = st.st_size;
  offset = std::clamp<int64_t>(offset, 0, out.size);
  out.data.resize(static_cast<size_t>(std::min(out.size - offset, std::max<int64_t>(limit, 0))));
  size_t got = 0;
  while (got < out.data.size()) {
    const ssize_t n = ::pread(fd, out.data.data() + got, out.data.size() - got,
                              static_cast<off_t>(offset) + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      return FailedPrecondition("cannot read " + path + ": " + std::strerror(e));
    }
    if (n == 0) break;  // shrank meanwhile
    got += static_cast<size_t>(n);
  }
  out.data.resize(got);
  ::close(fd);
  return out;
}

}  // namespace tessera
