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
