#include "agent/inventory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace tessera::agent {
namespace {

TEST(InventoryTest, SeedMinimalIsTwoNodesOfEightVirtualA100s) {
  auto nodes = LoadInventory("seed-minimal");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 2u);
  for (const Node& n : *nodes) {
    EXPECT_EQ(n.labels.at(kVirtualLabel), "true") << n.name;
    ASSERT_EQ(n.devices.size(), 8u);
    for (const Device& d : n.devices) {
      EXPECT_EQ(d.model, "A100-80GB");
      EXPECT_EQ(d.memory_bytes, int64_t{80} << 30);
      EXPECT_TRUE(d.is_virtual);
      EXPECT_EQ(d.uuid, "GPU-VIRTUAL-" + n.name + "-" + std::to_string(d.index));
    }
    // Every output marks them virtual: the JSON the agent registers says so per device.
    Json j = NodeToJson(n);
    for (const auto& d : j["devices"]) EXPECT_EQ(d.value("virtual", false), true);
  }
  EXPECT_EQ((*nodes)[0].name, "gpu-node-1");
  EXPECT_EQ((*nodes)[1].name, "gpu-node-2");
}

TEST(InventoryTest, ExampleFileEqualsTheBuiltInSeed) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  if (src == nullptr) GTEST_SKIP() << "TESSERA_SOURCE_DIR is not set (run through ctest)";
  std::ifstream in(std::string(src) + "/examples/inventory/seed-minimal.yaml");
  ASSERT_TRUE(in) << "examples/inventory/seed-minimal.yaml is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), SeedMinimalInventoryYaml());
}

TEST(InventoryTest, DeclaredGpusAreVirtualEvenWhenTheFileSaysOtherwiseAndMigGetsUuids) {
  auto doc = ParseYaml(R"(
nodes:
  - name: n1
    cpu: 8
    memory: 64Gi
    devices:
      - {index: 0, model: A100-80GB, virtual: false, mig: [{profile: 3g.40gb, start: 0}, {profile: 3g.40gb, start: 4}]}
  - {name: cpu-only, cpu: 4, memory: 8Gi}
)");
  ASSERT_TRUE(doc.ok());
  auto nodes = ParseInventory(*doc);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  const Device& d = (*nodes)[0].devices[0];
  EXPECT_TRUE(d.is_virtual);
  EXPECT_EQ(d.mig[1].uuid, "MIG-VIRTUAL-n1-0-1");
  EXPECT_EQ((*nodes)[1].labels.count(kVirtualLabel), 0u);  // no GPUs, nothing virtual
}

TEST(InventoryTest, ErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* want;
  };
  const Case cases[] = {
      {"nodes: []", "nodes: must be a non-empty list"},
      {"nodez: []", "nodez"},
      {"nodes: [{name: a, cpu: 1, memory: 1Gi}, {name: a, cpu: 1, memory: 1Gi}]",
       "nodes[1].name: \"a\" appears twice"},
      {"nodes: [{name: a, cpu: 1, memory: 1Gi, gpus: {model: A100-80GB, count: -1}}]",
       "nodes[0].gpus.count"},
  };
  for (const auto& c : cases) {
    auto doc = ParseYaml(c.yaml);
    ASSERT_TRUE(doc.ok()) << c.yaml;
    auto nodes = ParseInventory(*doc);
    ASSERT_FALSE(nodes.ok()) << c.yaml;
    EXPECT_NE(nodes.status().message().find(c.want), std::string::npos)
        << nodes.status().ToString();
  }
}

TEST(InventoryTest, MissingFileNamesThePath) {
  auto nodes = LoadInventory("/nonexistent/inventory.yaml");
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("/nonexistent/inventory.yaml"), std::string::npos);
}

TEST(InventoryTest, HostDiscoveryWithoutNvmlHasNoGpus) {
  auto n = DiscoverHostNode("", nullptr);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_FALSE(n->name.empty());
  EXPECT_GE(n->cpu_milli, 1000);
  EXPECT_TRUE(n->devices.empty());
}

}  // namespace
}  // namespace tessera::agent
