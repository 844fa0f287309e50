#include "backends/slurm/command_runner.h"

#include <gtest/gtest.h>

namespace tessera::slurm {
namespace {

TEST(SubprocessRunner, ExitCodeOutputAndError) {
  SubprocessRunner r;
  auto got = r.Run({"sh", "-c", "echo out; echo err >&2; exit 3"}, "");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->exit_code, 3);
  EXPECT_EQ(got->out, "out\n");
  EXPECT_EQ(got->err, "err\n");
}

TEST(SubprocessRunner, LargeInputRoundTrips) {
  std::string big(1 << 20, 'x');  // more than a pipe buffer, both ways
  SubprocessRunner r;
  auto got = r.Run({"cat"}, big);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->out.size(), big.size());
  EXPECT_EQ(got->exit_code, 0);
}

TEST(SubprocessRunner, ChildThatIgnoresStdinDoesNotKillUs) {
  std::string big(1 << 20, 'x');
  SubprocessRunner r;
  auto got = r.Run({"true"}, big);  // SIGPIPE would end this test binary
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->exit_code, 0);
}

TEST(SubprocessRunner, EnvironmentIsAddedTo) {
  SubprocessRunner r(std::map<std::string, std::string>{{"TESSERA_TEST_VAR", "a b"}});
  auto got = r.Run({"sh", "-c", "printf '%s|%s' \"$TESSERA_TEST_VAR\" \"${PATH:+path}\""}, "");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->out, "a b|path");
}

TEST(SubprocessRunner, TimeoutAndMissingProgramAreUnavailable) {
  SubprocessRunner fast({}, std::chrono::milliseconds(200));
  auto slow = fast.Run({"sleep", "5"}, "");
  EXPECT_EQ(slow.status().code(), StatusCode::kUnavailable) << slow.status().ToString();
  auto missing = fast.Run({"/nonexistent/sbatch"}, "");
  EXPECT_EQ(missing.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(fast.Run({}, "").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::slurm
