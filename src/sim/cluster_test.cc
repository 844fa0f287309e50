#include "sim/cluster.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

TEST(Cluster, NodeGroupsExpandWithPaddedNames) {
  auto doc = ParseYaml(R"(
nodeGroups:
  - {namePrefix: gpu-, count: 12, node: {cpu: 48, memory: 256Gi, gpus: {model: P100, count: 8}}}
nodes:
  - {name: cpu-0, cpu: 16, memory: 64Gi}
queues:
  - {name: a, weight: 2, guarantee: {nvidia.com/gpu: 8}}
)");
  ASSERT_TRUE(doc.ok());
  auto c = ClusterFromJson(*doc);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->nodes.size(), 13u);
  EXPECT_EQ(c->nodes[0].name, "cpu-0");
  EXPECT_EQ(c->nodes[1].name, "gpu-00");
  EXPECT_EQ(c->nodes[12].name, "gpu-11");
  EXPECT_EQ(c->nodes[12].devices.size(), 8u);
  ASSERT_EQ(c->queues.size(), 1u);
  EXPECT_EQ(c->queues[0].guarantee.gpu_milli, 8000);
}

TEST(Cluster, ErrorsNameThePath) {
  struct Case {
    const char* yaml;
    const char* want;
  } cases[] = {
      {"nodeGroups: [{namePrefix: g, count: 0, node: {cpu: 1, memory: 1Gi}}]",
       "nodeGroups[0].count"},
      {"nodeGroups: [{namePrefix: g, count: 2, node: {cpu: 1}}]", "nodeGroups[0].node"},
      {"nodeGroups: [{namePrefix: g, count: 2, node: {name: x, cpu: 1, memory: 1Gi}}]",
       "nodeGroups[0].node.name"},
      {"nodeGroups: [{namePrefix: g, count: 2, node: {cpu: 1, memory: 1Gi}, extra: 1}]",
       "nodeGroups[0].extra"},
      {"nodz: []", "nodz"},
      {"queues: [{name: a}]", "no nodes"},
      {"nodes: [{name: n, cpu: 1, memory: 1Gi}]\nqueues: [{name: a}, {name: b}, {name: a}]",
       "queues: duplicate name \"a\""},
      // Guarantees nothing can honour: more than the cluster, more than the parent.
      {"nodes: [{name: n, cpu: 8, memory: 1Gi, gpus: {model: T4, count: 4}}]\n"
       "queues: [{name: a, guarantee: {nvidia.com/gpu: 3}}, {name: b, guarantee: "
       "{nvidia.com/gpu: 2}}]",
       "queues: the guarantees of the top-level queues add up to 5 nvidia.com/gpu; the cluster "
       "has 4"},
      {"nodes: [{name: n, cpu: 8, memory: 1Gi, gpus: {model: T4, count: 4}}]\n"
       "queues: [{name: org, guarantee: {cpu: 4}}, {name: a, parent: org, guarantee: {cpu: "
       "3}}, {name: b, parent: org, guarantee: {cpu: 2}}]",
       "queues: queue org: its children are guaranteed 5 cpu together; it is guaranteed 4"},
      // A tree: a queue under an unknown parent would escape the top-level sum above.
      {"nodes: [{name: n, cpu: 8, memory: 1Gi, gpus: {model: T4, count: 4}}]\n"
       "queues: [{name: a, parent: nosuch, guarantee: {nvidia.com/gpu: 1000}}]",
       "queues: queue a: parent: unknown queue \"nosuch\""},
      {"nodes: [{name: n, cpu: 1, memory: 1Gi}]\n"
       "queues: [{name: a, parent: b}, {name: b, parent: a}]",
       "queues: queue a: parent: \"b\" makes a loop (a -> b -> a)"},
  };
  for (const Case& c : cases) {
    auto doc = ParseYaml(c.yaml);
    ASSERT_TRUE(doc.ok()) << c.yaml;
    auto s = ClusterFromJson(*doc);
    ASSERT_FALSE(s.ok()) << c.yaml;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status().message();
  }
}

TEST(Cluster, ShippedExamplesLoad) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  std::string root = src ? src : ".";
  for (const char* f : {"philly.yaml", "philly-loaded.yaml", "small-8gpu.yaml", "openb.yaml"}) {
    auto c = LoadCluster(root + "/examples/clusters/" + f);
    ASSERT_TRUE(c.ok()) << f << ": " << c.status().ToString();
    EXPECT_FALSE(c->nodes.empty());
  }
  // The loaded what-if is philly.yaml with 20 % fewer machines and the same queues.
  auto full = LoadCluster(root + "/examples/clusters/philly.yaml");
  auto loaded = LoadCluster(root + "/examples/clusters/philly-loaded.yaml");
  ASSERT_TRUE(full.ok() && loaded.ok());
  EXPECT_EQ(full->nodes.size(), 80u);
  EXPECT_EQ(loaded->nodes.size(), 64u);
  ASSERT_EQ(loaded->queues.size(), full->queues.size());
}

}  // namespace
}  // namespace tessera::sim
