#include "agent/nvml.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "agent/inventory.h"
#include "model/codec.h"

namespace tessera::agent {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(NvmlNamesTest, MapsNvmlNamesToModelKeys) {
  struct Case {
    const char* name;
    int64_t memory;
    const char* want;
  };
  const Case cases[] = {
      {"NVIDIA A100-SXM4-80GB", 80 * kGiB, "A100-80GB"},
      {"NVIDIA A100-SXM4-40GB", 40 * kGiB, "A100-40GB"},
      {"NVIDIA A100 80GB PCIe", 80 * kGiB, "A100-80GB"},
      {"NVIDIA A100-PCIE-40GB", 40 * kGiB, "A100-40GB"},
      {"NVIDIA A100-SXM4", 80 * kGiB, "A100-80GB"},  // size from memory when the name lacks it
      {"NVIDIA H100 80GB HBM3", 80 * kGiB, "H100-80GB"},
      {"NVIDIA H100 NVL", 94 * kGiB, "H100-94GB"},
      {"NVIDIA H200", 141 * kGiB, "H200-141GB"},
      {"NVIDIA H200 NVL", 141 * kGiB, "H200-141GB"},
      {"Tesla T4", 15 * kGiB, "T4"},
      {"NVIDIA L40S", 45 * kGiB, "L40S"},
      {"NVIDIA GeForce RTX 4090", 24 * kGiB, "GeForce-RTX-4090"},
  };
  for (const auto& c : cases) EXPECT_EQ(ModelKeyFromNvmlName(c.name, c.memory), c.want) << c.name;
}

TEST(NvmlNamesTest, MigProfileFromName) {
  EXPECT_EQ(MigProfileFromNvmlName("NVIDIA A100-SXM4-80GB MIG 3g.40gb"), "3g.40gb");
  EXPECT_EQ(MigProfileFromNvmlName("NVIDIA H200 MIG 1g.18gb+me"), "1g.18gb");
  EXPECT_EQ(MigProfileFromNvmlName("NVIDIA H200"), "");
}

TEST(NvmlGpusTest, MissingLibraryIsUnavailableAndNamesThePath) {
  auto g = NvmlGpus::Open("/nonexistent/libnvidia-ml.so.1");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(g.status().message().find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
}

TEST(NvmlGpusTest, InitFailureIsUnavailable) {
  setenv("FAKE_NVML_INIT_FAILS", "1", 1);
  auto g = NvmlGpus::Open(TESSERA_FAKE_NVML_PATH);
  unsetenv("FAKE_NVML_INIT_FAILS");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("Driver Not Loaded"), std::string::npos)
      << g.status().ToString();
}

TEST(NvmlGpusTest, DiscoversModelsUuidsMemoryAndMigInstances) {
  auto g = NvmlGpus::Open(TESSERA_FAKE_NVML_PATH);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->driver_version(), "999.99-fake");
  auto devs = (*g)->Discover();
  ASSERT_TRUE(devs.ok()) << devs.status().ToString();
  ASSERT_EQ(devs->size(), 2u);
  const Device& a100 = (*devs)[0];
  EXPECT_EQ(a100.index, 0);
  EXPECT_EQ(a100.model, "A100-80GB");
  EXPECT_EQ(a100.uuid, "GPU-fake-a100-0000");
  EXPECT_EQ(a100.memory_bytes, 80 * kGiB);
  EXPECT_FALSE(a100.is_virtual);
  ASSERT_EQ(a100.mig.size(), 2u);  // sorted by placement although NVML listed 4 before 0
  EXPECT_EQ(a100.mig[0].profile, "3g.40gb");
  EXPECT_EQ(a100.mig[0].start_slice, 0);
  EXPECT_EQ(a100.mig[0].uuid, "MIG-fake-a100-0000-gi1");
  EXPECT_EQ(a100.mig[1].start_slice, 4);
  EXPECT_EQ(a100.mig[1].uuid, "MIG-fake-a100-0000-gi2");
  const Device& h200 = (*devs)[1];
  EXPECT_EQ(h200.model, "H200-141GB");
  EXPECT_EQ(h200.memory_bytes, int64_t{143771} << 20);
  EXPECT_TRUE(h200.mig.empty());
  EXPECT_TRUE(h200.healthy);

  // What the agent registers must read back through the strict codec (MIG profiles included).
  auto node = DiscoverHostNode("gpu-host", g->get());
  ASSERT_TRUE(node.ok()) << node.status().ToString();
  auto back = NodeFromJson(NodeToJson(*node), "node");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->devices.size(), 2u);
  EXPECT_EQ(back->devices[0].mig[1].uuid, "MIG-fake-a100-0000-gi2");
  EXPECT_FALSE(back->devices[1].is_virtual);
}

TEST(NvmlGpusTest, SamplesUtilisationMemoryAndPower) {
  auto g = NvmlGpus::Open(TESSERA_FAKE_NVML_PATH);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto s = (*g)->Sample();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].util_percent, 0);  // MIG mode: utilisation not supported
  EXPECT_EQ(s[0].power_milliwatts, 90000);
  EXPECT_EQ(s[1].util_percent, 35);
  EXPECT_EQ(s[1].memory_used_bytes, int64_t{1234} << 20);
  EXPECT_EQ(s[1].power_milliwatts, 250000);
  EXPECT_TRUE(s[1].healthy);
}

TEST(NvmlGpusTest, CriticalXidMakesTheDeviceUnhealthyApplicationXidDoesNot) {
  struct Case {
    const char* xid;
    bool healthy;
  };
  for (const Case c : {Case{"79", false}, Case{"48", false}, Case{"13", true}, Case{"43", true}}) {
    setenv("FAKE_NVML_XID", c.xid, 1);
    auto g = NvmlGpus::Open(TESSERA_FAKE_NVML_PATH);
    unsetenv("FAKE_NVML_XID");
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    auto s = (*g)->Sample();
    ASSERT_EQ(s.size(), 2u);
    EXPECT_TRUE(s[0].healthy) << c.xid;
    EXPECT_EQ(s[1].healthy, c.healthy) << c.xid;
    if (!c.healthy) {
      EXPECT_EQ(s[1].health_message, std::string("XID ") + c.xid);
      // Sticky: a later sample and discovery still say so.
      EXPECT_FALSE((*g)->Sample()[1].healthy);
      auto devs = (*g)->Discover();
      ASSERT_TRUE(devs.ok());
      EXPECT_FALSE((*devs)[1].healthy);
    }
  }
}

}  // namespace
}  // namespace tessera::agent
