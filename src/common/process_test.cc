#include "common/process.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>

namespace tessera {
namespace {

TEST(QuoteArgv, ShellSafe) {
  EXPECT_EQ(QuoteArgv({"sbatch", "--comment", "tessera:j:a-1", "a b", "it's", ""}),
            "sbatch --comment tessera:j:a-1 'a b' 'it'\\''s' ''");
}

TEST(Environ, AsAMapAndWithOverrides) {
  ::setenv("TESSERA_PROCESS_TEST", "one", 1);
  EXPECT_EQ(EnvironMap().at("TESSERA_PROCESS_TEST"), "one");
  const auto env = EnvironWith({{"TESSERA_PROCESS_TEST", "two"}, {"TESSERA_PROCESS_NEW", "x"}});
  EXPECT_EQ(std::count(env.begin(), env.end(), "TESSERA_PROCESS_TEST=two"), 1);
  EXPECT_EQ(std::count(env.begin(), env.end(), "TESSERA_PROCESS_TEST=one"), 0);
  EXPECT_EQ(std::count(env.begin(), env.end(), "TESSERA_PROCESS_NEW=x"), 1);
  ::unsetenv("TESSERA_PROCESS_TEST");
}

}  // namespace
}  // namespace tessera
