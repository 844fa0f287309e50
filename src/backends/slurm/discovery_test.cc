#include "backends/slurm/discovery.h"

#include <gtest/gtest.h>

#include "backends/slurm/test_support.h"

namespace tessera::slurm {
namespace {

SlurmNode MakeNode(std::string name, std::string state, std::vector<std::string> flags = {}) {
  SlurmNode n;
  n.name = std::move(name);
  n.state = std::move(state);
  n.state_flags = std::move(flags);
  n.partitions = {"debug"};
  n.cpus = 32;
  n.real_memory_mib = 256000;
  n.gres = {{"gpu", "a100", 8}};
  return n;
}

TEST(Discovery, StatesToReadyAndSchedulable) {
  struct Case {
    std::string state;
    std::vector<std::string> flags;
    bool ready, schedulable;
  } cases[] = {
      {"idle", {}, true, true},
      {"mixed", {"PLANNED"}, true, true},
      {"allocated", {}, true, true},
      {"idle", {"DRAIN"}, true, false},   // drained: running jobs go on, no new ones
      {"mixed", {"DRAIN"}, true, false},  // draining
      {"idle", {"MAINTENANCE"}, true, false},
      {"idle", {"REBOOT_REQUESTED"}, true, false},
      {"down", {}, false, false},
      {"idle", {"NOT_RESPONDING"}, false, false},
      {"unknown", {}, false, false},
      {"future", {}, false, false},
      {"idle", {"POWERED_DOWN"}, false, false},
  };
  for (const Case& c : cases) {
    SlurmNode n = MakeNode("n", c.state, c.flags);
    std::string what = c.state + (c.flags.empty() ? "" : "+" + c.flags[0]);
    EXPECT_EQ(SlurmNodeReady(n), c.ready) << what;
    EXPECT_EQ(SlurmNodeSchedulable(n), c.schedulable) << what;
    auto nodes = NodesFromSlurm({n}, {}, {});
    ASSERT_EQ(nodes.size(), 1u);
    EXPECT_EQ(nodes[0].ready, c.ready) << what;
    EXPECT_EQ(nodes[0].unschedulable, !c.schedulable) << what;
  }
}

TEST(Discovery, NodeShapeLabelsAndGpus) {
  SlurmNode n = MakeNode("node2", "idle");
  n.partitions = {"gpu", "debug"};
  n.features = {"ib", "hopper"};
  n.gres = {{"gpu", "a100", 2}, {"gpu", "v100", 1}};
  DiscoveryOptions opt;
  opt.gpu_models = {{"a100", "A100-80GB"}};
  opt.gpu_memory_bytes = {{"a100", int64_t{80} << 30}};
  auto nodes = NodesFromSlurm({n}, opt, {});
  ASSERT_EQ(nodes.size(), 1u);
  const Node& got = nodes[0];
  EXPECT_EQ(got.name, "node2");
  EXPECT_EQ(got.pool, "slurm");
  EXPECT_EQ(got.cpu_milli, 32000);
  EXPECT_EQ(got.memory_bytes, int64_t{256000} << 20);
  EXPECT_EQ(got.labels.at("slurm.partition"), "debug,gpu");  // sorted
  EXPECT_EQ(got.labels.at("slurm.partition.gpu"), "true");
  EXPECT_EQ(got.labels.at("slurm.feature.ib"), "true");
  EXPECT_EQ(got.labels.at("slurm.state"), "idle");
  ASSERT_EQ(got.devices.size(), 3u);
  EXPECT_EQ(got.devices[0].model, "A100-80GB");  // mapped
  EXPECT_EQ(got.devices[0].memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(got.devices[1].index, 1);
  EXPECT_EQ(got.devices[2].model, "V100");  // unmapped: the GRES type upper-cased
  EXPECT_EQ(got.devices[2].uuid, "SLURM-node2-gpu2");
  EXPECT_TRUE(got.devices[2].healthy);
}

TEST(Discovery, PartitionFilterAndOrder) {
  SlurmNode a = MakeNode("b", "idle"), b = MakeNode("a", "idle"), c = MakeNode("c", "idle");
  c.partitions = {"other"};
  DiscoveryOptions opt;
  opt.partitions = {"debug"};
  auto nodes = NodesFromSlurm({a, b, c}, opt, {});
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name, "a");
  EXPECT_EQ(nodes[1].name, "b");
}

// A node whose every partition is DOWN, DRAIN or INACTIVE takes no new work: unschedulable,
// saying which; one UP partition is enough.
TEST(Discovery, NodesWithNoUpPartitionAreUnschedulable) {
  SlurmNode a = MakeNode("a", "idle"), b = MakeNode("b", "idle"), c = MakeNode("c", "idle");
  a.partitions = {"debug", "gpu"};
  b.partitions = {"debug", "batch"};
  c.partitions = {"new"};  // not in scontrol's answer (yet): as UP
  std::map<std::string, SlurmPartition> parts;
  for (const auto& [name, state] :
       {std::pair<std::string, std::string>{"debug", "DOWN"}, {"gpu", "DRAIN"}, {"batch", "UP"}}) {
    parts[name].name = name;
    parts[name].state = state;
  }
  auto nodes = NodesFromSlurm({a, b, c}, {}, {}, parts);
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_TRUE(nodes[0].unschedulable);
  EXPECT_EQ(nodes[0].labels.at("slurm.partition.down"), "debug=DOWN,gpu=DRAIN");
  EXPECT_TRUE(nodes[0].ready);  // its running jobs go on
  EXPECT_FALSE(nodes[1].unschedulable);
  EXPECT_EQ(nodes[1].labels.count("slurm.partition.down"), 0u);
  EXPECT_FALSE(nodes[2].unschedulable);
}

TEST(Discovery, ForeignUsageIsSubtractedOwnIsNot) {
  // Captured: node1 runs a foreign job (1 CPU, 100 MiB, 3 GPUs); node4 is drained.
  auto sinfo = ParseSinfoJson(testing::Testdata("sinfo_drain_foreign.json"));
  ASSERT_TRUE(sinfo.ok());
  auto nodes = NodesFromSlurm(*sinfo, {}, {});
  ASSERT_EQ(nodes.size(), 4u);
  const Node& n1 = nodes[0];
  EXPECT_EQ(n1.cpu_milli, 31000);                     // 32 - 1 foreign
  EXPECT_EQ(n1.memory_bytes, int64_t{255900} << 20);  // 256000 - 100
  int healthy = 0;
  for (const Device& d : n1.devices) {
    healthy += d.healthy;
    EXPECT_FALSE(d.shareable);  // GRES gives whole GPUs: no fractional task may land here
  }
  EXPECT_EQ(healthy, 5);                // 8 - 3 foreign
  EXPECT_FALSE(n1.devices[7].healthy);  // highest indices go first
  EXPECT_TRUE(n1.devices[4].healthy);
  EXPECT_EQ(n1.labels.at("slurm.gpus.foreign"), "3");
  EXPECT_TRUE(nodes[3].unschedulable);
  EXPECT_TRUE(nodes[3].ready);

  // If that job were Tessera's own, nothing is subtracted: the snapshot already has it.
  std::map<std::string, NodeUsage> own = {{"node1", {1, 100, 3}}};
  auto mine = NodesFromSlurm(*sinfo, {}, own);
  EXPECT_EQ(mine[0].cpu_milli, 32000);
  EXPECT_EQ(mine[0].memory_bytes, int64_t{256000} << 20);
  for (const Device& d : mine[0].devices) EXPECT_TRUE(d.healthy);
}

}  // namespace
}  // namespace tessera::slurm
