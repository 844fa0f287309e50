#include "common/file_chunk.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tessera {
namespace {

TEST(ReadFileChunk, ReadsFromTheOffsetUpToTheLimitAndReportsTheSize) {
  const std::string path = testing::TempDir() + "/chunk.txt";
  std::ofstream(path) << "hello world\n";
  auto a = ReadFileChunk(path, 6, 5);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->data, "world");
  EXPECT_EQ(a->size, 12);
  auto past = ReadFileChunk(path, 100, 5);  // offsets clamp to the file
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->data, "");
  auto before = ReadFileChunk(path, -3, 5);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(before->data, "hello");
}

TEST(ReadFileChunk, MissingFilesAndDirectoriesAreNamedErrors) {
  const std::string missing = testing::TempDir() + "/no-such-file";
  auto m = ReadFileChunk(missing, 0, 10);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m.status().message(), missing + " does not exist");
  const std::string dir = testing::TempDir() + "/chunk-dir";
  std::filesystem::create_directories(dir);
  auto d = ReadFileChunk(dir, 0, 10);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(d.status().message(), dir + " is not a regular file");
}

}  // namespace
}  // namespace tessera
