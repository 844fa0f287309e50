#include "model/queue.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(QueueAncestors, ParentFirstAndBoundedByTheTree) {
  std::map<std::string, Queue> queues;
  auto add = [&](const std::string& name, const std::string& parent) {
    queues[name].name = name;
    queues[name].parent = parent;
  };
  add("org", "");
  add("team", "org");
  add("x", "team");
  EXPECT_EQ(QueueAncestors(queues, "x"), (std::vector<std::string>{"team", "org"}));
  EXPECT_TRUE(QueueAncestors(queues, "org").empty());
  EXPECT_TRUE(QueueAncestors(queues, "nope").empty());
  // A parent that is not (yet) a queue ends the walk; a loop (refused by apply, maybe stored
  // by an older version) ends after as many steps as there are queues.
  add("orphan", "gone");
  EXPECT_EQ(QueueAncestors(queues, "orphan"), (std::vector<std::string>{"gone"}));
  queues["org"].parent = "x";
  EXPECT_EQ(QueueAncestors(queues, "x").size(), queues.size());
}

}  // namespace
}  // namespace tessera
