#include "common/write_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A disk that fills up mid-write (here: a file size limit, which fails writes as ENOSPC
// would) leaves the old file as it was, not an empty one, and says why; with or without the
// fsync.
TEST(WriteFileWhole, ReplacesWholeOrLeavesTheOldFile) {
  for (Durability durability : {Durability::kMachineCrash, Durability::kProcessCrash}) {
    SCOPED_TRACE(durability == Durability::kMachineCrash ? "machine crash" : "process crash");
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("tessera-write-" + std::to_string(::getpid())))
            .string();
    std::filesystem::create_directories(dir);
    const std::string path = dir + "/admin.token";
    ASSERT_TRUE(WriteFileWhole(path, "old-token\n", 0600, durability).ok());
    EXPECT_EQ(Slurp(path), "old-token\n");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);

    struct sigaction ignore {
    }, old_action{};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGXFSZ, &ignore, &old_action);  // EFBIG instead of a signal
    rlimit old_limit{};
    ::getrlimit(RLIMIT_FSIZE, &old_limit);
    rlimit tiny = old_limit;
    tiny.rlim_cur = 4;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &tiny), 0);
    const Status full =
        WriteFileWhole(path, "new-token-longer-than-four-bytes\n", 0600, durability);
    ::setrlimit(RLIMIT_FSIZE, &old_limit);
    ::sigaction(SIGXFSZ, &old_action, nullptr);

    ASSERT_FALSE(full.ok());
    EXPECT_NE(full.message().find("cannot write " + path + ": "), std::string::npos)
        << full.message();
    EXPECT_EQ(Slurp(path), "old-token\n");
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    ASSERT_TRUE(WriteFileWhole(path, "new\n", 0600, durability).ok());
    EXPECT_EQ(Slurp(path), "new\n");
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace tessera
