#include "common/write_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tessera {

Status WriteFileWhole(const std::string& path, const std::string& data, mode_t mode,
                      Durability durability) {
  const std::string tmp = path + ".tmp";
  auto fail = [&](int err) {
    ::unlink(tmp.c_str());
    return Unavailable("cannot write " + path + ": " + std::strerror(err));
  };
  ::unlink(tmp.c_str());  // a leftover may have other permissions
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Unavailable("cannot write " + tmp + ": " + std::strerror(errno));
  int err = 0;
  for (size_t done = 0; done < data.size() && err == 0;) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n > 0)
      done += static_cast<size_t>(n);
    else if (n < 0 && errno != EINTR)
      err = errno;
    else if (n == 0)
      err = EIO;
  }
  if (err == 0 && durability == Durability::kMachineCrash && ::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) return fail(err);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(errno);
  return Status::Ok();
}

}  // namespace tessera
