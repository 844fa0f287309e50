#include "common/hostlist.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(Hostlist, ExpandAndJoin) {
  struct Case {
    std::string expr;
    std::vector<std::string> want;
  } cases[] = {
      {"", {}},
      {"node1", {"node1"}},
      {"node[1-3]", {"node1", "node2", "node3"}},
      {"node[1-2,5],gpu7", {"node1", "node2", "node5", "gpu7"}},
      {"n[08-10]", {"n08", "n09", "n10"}},
      {"a[1-2]-ib", {"a1-ib", "a2-ib"}},
      {"gpu-node-[1-3]", {"gpu-node-1", "gpu-node-2", "gpu-node-3"}},
      {"b,a,,c", {"b", "a", "c"}},  // as written; empty items skipped
  };
  for (const Case& c : cases) {
    auto got = ExpandHostlist(c.expr);
    ASSERT_TRUE(got.ok()) << c.expr;
    EXPECT_EQ(*got, c.want) << c.expr;
  }
  EXPECT_EQ(JoinHostlist({"node1", "node3"}), "node1,node3");
}

// SLURM_JOB_NODELIST's form: neighbours share a bracket, order kept, and it reads back.
TEST(Hostlist, CompressesInOrderAndReadsBack) {
  struct Case {
    std::vector<std::string> hosts;
    std::string want;
  } cases[] = {
      {{}, ""},
      {{"node1"}, "node1"},
      {{"gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-5"}, "gpu-node-[1-3,5]"},
      {{"n9", "n10", "n11"}, "n[9-11]"},
      {{"n08", "n09", "n10", "n7"}, "n[08-10],n7"},  // a different width starts a new name
      {{"n3", "n1", "n2"}, "n[3,1-2]"},              // the first stays first
      {{"login", "gpu1", "gpu2", "cpu1"}, "login,gpu[1-2],cpu1"},
      {{"a1-ib", "a2-ib"}, "a1-ib,a2-ib"},  // only a trailing number is shared
      {{"x1234567890123456789", "x1234567890123456790"},
       "x1234567890123456789,x1234567890123456790"},  // too long for a number: kept whole
  };
  for (const Case& c : cases) {
    const std::string got = CompressHostlist(c.hosts);
    EXPECT_EQ(got, c.want);
    auto back = ExpandHostlist(got);
    ASSERT_TRUE(back.ok()) << got;
    EXPECT_EQ(*back, c.hosts) << got;
  }
}

TEST(Hostlist, RefusesWhatItCannotRead) {
  struct Case {
    std::string expr, words;
  } cases[] = {
      {"node[1-", "unbalanced '['"},
      {"node]1", "unbalanced ']'"},
      {"node[3-1]", "bad range \"3-1\""},
      {"node[a-b]", "bad range \"a-b\""},
      {"node[1,]", "bad range \"\""},
      {"r[1-2]n[1-2]", "more than one range per name"},
      {"n[0-99999],m[0-1]", "more than 100000 names"},
      {"n[0-100000]", "more than 100000 names"},
      {std::string(251, 'x') + "[1-100]", "a name longer than 253 characters"},
  };
  for (const Case& c : cases) {
    auto got = ExpandHostlist(c.expr);
    ASSERT_FALSE(got.ok()) << c.expr;
    EXPECT_NE(got.status().message().find(c.words), std::string::npos)
        << c.expr << ": " << got.status().message();
    EXPECT_NE(got.status().message().find("\"" + c.expr + "\""), std::string::npos)
        << got.status().message();
  }
}

}  // namespace
}  // namespace tessera
