#include "agent/inventory.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "agent/nvml.h"

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

// tessera agent --node-labels / --register-with-taints / --pool / --cost-per-gpu-hour: on a
// node NVML discovered and on top of an inventory node alike.
TEST(InventoryTest, OperatorAdditionsGoOnDiscoveredAndInventoryNodes) {
  NodeAdditionFlags f;
  f.node_labels = {"rack=r7,topology.tessera.io/block=b2", "tier=gold,rack=r8"};
  f.taints = {"dedicated=infer:NoSchedule,maintenance:PreferNoSchedule",
              "dedicated=train:NoSchedule"};  // same key and effect: the last
  f.pool = "gpu-east";
  f.cost_per_gpu_hour = "2.5";
  f.max_tasks = 250;
  auto add = ParseNodeAdditions(f);
  ASSERT_TRUE(add.ok()) << add.status().ToString();
  EXPECT_EQ(add->cost_micros_per_gpu_hour, 2500000);

  auto nvml = NvmlGpus::Open(TESSERA_FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.status().ToString();
  auto real = DiscoverHostNode("gpu-real", nvml->get());
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  ApplyNodeAdditions(*add, *real);
  EXPECT_EQ(real->labels, (std::map<std::string, std::string>{
                              {"nvidia.com/gpu.product", "A100-80GB"},  // NVML's, kept
                              {"rack", "r8"},
                              {"tier", "gold"},
                              {"topology.tessera.io/block", "b2"}}));
  ASSERT_EQ(real->taints.size(), 2u);
  EXPECT_EQ(real->taints[0], (Taint{"dedicated", "train", TaintEffect::kNoSchedule}));
  EXPECT_EQ(real->taints[1], (Taint{"maintenance", "", TaintEffect::kPreferNoSchedule}));
  EXPECT_EQ(real->pool, "gpu-east");
  EXPECT_EQ(real->cost_micros_per_gpu_hour, 2500000);
  EXPECT_EQ(real->max_tasks, 250);
  EXPECT_EQ(NodeToJson(*real)["maxTasks"], 250);
  EXPECT_FALSE(real->devices.empty());
  EXPECT_FALSE(real->devices[0].is_virtual);
  // Registered as the JSON the server reads: the price as an inventory writes it.
  EXPECT_EQ(NodeToJson(*real)["costPerGpuHour"], "2.5");
  // Prices to the millionth (32.7726 a node-hour over 8 GPUs), as their accumulator keeps them;
  // they used to be refused past the third decimal.
  NodeAdditionFlags priced;
  priced.cost_per_gpu_hour = "4.096575";
  auto fine = ParseNodeAdditions(priced);
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  Node p = *real;
  ApplyNodeAdditions(*fine, p);
  EXPECT_EQ(p.cost_micros_per_gpu_hour, 4096575);
  EXPECT_EQ(NodeToJson(p)["costPerGpuHour"], "4.096575");
  auto back = NodeFromJson(NodeToJson(p), "node");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cost_micros_per_gpu_hour, 4096575);

  // An inventory node: the flags go over the file's labels and taints, key by key.
  auto doc = ParseYaml(
      "nodes: [{name: v1, pool: lab, cpu: 8, memory: 64Gi, costPerGpuHour: 1, labels: {rack: r1, "
      "zone: z1}, taints: [{key: dedicated, value: old, effect: NoSchedule}, {key: gpu, effect: "
      "NoExecute}], gpus: {model: A100-80GB, count: 2}}]");
  ASSERT_TRUE(doc.ok());
  auto inv = ParseInventory(*doc);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  Node v = (*inv)[0];
  ApplyNodeAdditions(*add, v);
  EXPECT_EQ(v.labels.at("rack"), "r8");
  EXPECT_EQ(v.labels.at("zone"), "z1");
  EXPECT_EQ(v.labels.at(kVirtualLabel), "true");
  ASSERT_EQ(v.taints.size(), 3u);
  EXPECT_EQ(v.taints[0].value, "train");
  EXPECT_EQ(v.taints[1].key, "gpu");
  EXPECT_EQ(v.taints[2].key, "maintenance");
  EXPECT_EQ(v.pool, "gpu-east");
  EXPECT_EQ(v.cost_micros_per_gpu_hour, 2500000);

  // No flags: the node as it was.
  auto none = ParseNodeAdditions({});
  ASSERT_TRUE(none.ok());
  Node same = (*inv)[0];
  ApplyNodeAdditions(*none, same);
  EXPECT_EQ(same.pool, "lab");
  EXPECT_EQ(same.cost_micros_per_gpu_hour, 1000000);
  EXPECT_EQ(same.labels, (*inv)[0].labels);
}

TEST(InventoryTest, BadOperatorAdditionsNameTheFlagAndThePart) {
  struct Case {
    NodeAdditionFlags flags;
    const char* want;
  } cases[] = {
      {{{"rack"}, {}, "", ""}, "--node-labels: \"rack\": expected key=value"},
      {{{"a=b,,c=d"}, {}, "", ""}, "--node-labels: an empty item in \"a=b,,c=d\""},
      {{{"=x"}, {}, "", ""}, "--node-labels: \"=x\": key \"\": a key's name must be"},
      {{{"Example.COM/x=1"}, {}, "", ""},
       "--node-labels: \"Example.COM/x=1\": key \"Example.COM/x\": the prefix before '/'"},
      {{{"rack=r 1"}, {}, "", ""}, "--node-labels: \"rack=r 1\": value \"r 1\": a value must be"},
      {{{"x=-a"}, {}, "", ""}, "value \"-a\""},
      {{{"kubernetes.io/hostname=gpu-9"}, {}, "", ""},
       "--node-labels: \"kubernetes.io/hostname=gpu-9\": kubernetes.io/hostname is set by "
       "Tessera to the node's name"},
      {{{"tessera.io/virtual-gpus=false"}, {}, "", ""},
       "tessera.io/virtual-gpus is set by Tessera"},
      {{{"nvidia.com/gpu.product=H100"}, {}, "", ""},
       "nvidia.com/gpu.product is set by Tessera from the node's GPUs"},
      {{{}, {"dedicated=infer"}, "", ""},
       "--register-with-taints: \"dedicated=infer\": expected key=value:Effect or key:Effect"},
      {{{}, {"dedicated=infer:NoRun"}, "", ""},
       "--register-with-taints: \"dedicated=infer:NoRun\": unknown effect \"NoRun\""},
      {{{}, {"bad key:NoSchedule"}, "", ""},
       "--register-with-taints: \"bad key:NoSchedule\": key \"bad key\""},
      {{{}, {"k=v v:NoExecute"}, "", ""}, "value \"v v\""},
      {{{}, {"a:NoSchedule,"}, "", ""}, "--register-with-taints: an empty item"},
      {{{}, {}, "GPU East", ""}, "--pool: \"GPU East\": a pool name must be"},
      {{{}, {}, "", "cheap"}, "--cost-per-gpu-hour: \"cheap\": not a price"},
      {{{}, {}, "", "-1"}, "--cost-per-gpu-hour: \"-1\""},
      {{{}, {}, "", "", -5}, "--max-tasks: -5: between 1 and 1000000"},
  };
  for (const auto& c : cases) {
    auto got = ParseNodeAdditions(c.flags);
    ASSERT_FALSE(got.ok()) << c.want;
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find(c.want), std::string::npos)
        << got.status().message() << "\nwanted: " << c.want;
  }
}

}  // namespace
}  // namespace tessera::agent
