#include "model/resources.h"

#include <gtest/gtest.h>

#include "model/gpu.h"
#include "model/job.h"

namespace tessera {
namespace {

TEST(QuantityTest, MilliTable) {
  struct Case {
    const char* in;
    int64_t want;
  } cases[] = {{"4", 4000}, {"500m", 500}, {"1.5", 1500}, {"0.25", 250}, {"2k", 2000000}};
  for (const auto& c : cases) {
    auto v = ParseMilliQuantity(c.in);
    ASSERT_TRUE(v.ok()) << c.in << ": " << v.status().ToString();
    EXPECT_EQ(*v, c.want) << c.in;
  }
}

TEST(QuantityTest, BytesTable) {
  EXPECT_EQ(*ParseByteQuantity("64Gi"), 64LL << 30);
  EXPECT_EQ(*ParseByteQuantity("1.5Gi"), 3LL << 29);
  EXPECT_EQ(*ParseByteQuantity("10G"), 10000000000LL);
  EXPECT_EQ(*ParseByteQuantity("1024"), 1024);
  // Kubernetes' decimal exponent form, as tools write it.
  EXPECT_EQ(*ParseByteQuantity("1e9"), 1000000000);
  EXPECT_EQ(*ParseByteQuantity("129E6"), 129000000);
  EXPECT_EQ(*ParseMilliQuantity("5e-3"), 5);
  EXPECT_EQ(*ParseMilliQuantity("2000u"), 2);
}

TEST(QuantityTest, RejectsBadInputWithTheInputQuoted) {
  for (const char* bad : {"-1", "", "abc", "4x", "0.5m", "1e-3", "1e", "1e3x", "1e99"}) {
    auto v = bad == std::string("0.5m") ? ParseMilliQuantity(bad) : ParseByteQuantity(bad);
    EXPECT_FALSE(v.ok()) << bad;
    if (!v.ok()) {
      EXPECT_NE(v.status().message().find(std::string("\"") + bad + "\""), std::string::npos);
    }
  }
  EXPECT_FALSE(ParseByteQuantity("0.5").ok());  // half a byte
  EXPECT_FALSE(ParseByteQuantity("99999999999Pi").ok());
  // Huge mantissas with big exponents are too large, not wrapped (found under UBSan).
  EXPECT_FALSE(ParseMilliQuantity("200000000000000000e18").ok());
  EXPECT_FALSE(ParseMicroQuantity("200000000000000000e18").ok());
  EXPECT_FALSE(ParseByteQuantity("99999999999999999999999999999E18").ok());
}

TEST(QuantityTest, FormatRoundTrips) {
  EXPECT_EQ(FormatBytes(64LL << 30), "64Gi");
  EXPECT_EQ(FormatBytes(1000), "1000");
  EXPECT_EQ(FormatMilli(4000), "4");
  EXPECT_EQ(FormatMilli(500), "500m");
}

// A fraction of a device is charged the larger of its compute and its share of the device's
// memory (rounded up, at most the device); whole devices, MIG instances and fractions without
// memory are charged their compute.
TEST(ChargeTest, AFractionIsChargedAtLeastItsShareOfTheDevicesMemory) {
  Node n;
  n.cpu_milli = 32000;
  n.devices = {Device{}, Device{}};
  n.devices[0].memory_bytes = 80LL << 30;
  n.devices[1].memory_bytes = 0;  // unknown
  auto fraction = [](int32_t device, int32_t milli, int64_t memory) {
    return DeviceAssignment{device, milli, memory, -1};
  };
  EXPECT_EQ(DeviceCharge(fraction(0, 100, 60LL << 30), n), 750);
  EXPECT_EQ(DeviceCharge(fraction(0, 500, 8LL << 30), n), 500);        // compute is larger
  EXPECT_EQ(DeviceCharge(fraction(0, 100, (8LL << 30) + 1), n), 101);  // rounded up
  EXPECT_EQ(DeviceCharge(fraction(0, 100, 200LL << 30), n), 1000);     // never past the device
  EXPECT_EQ(DeviceCharge(fraction(0, 100, 0), n), 100);
  EXPECT_EQ(DeviceCharge(fraction(1, 100, 60LL << 30), n), 100);  // device memory unknown
  EXPECT_EQ(DeviceCharge(fraction(7, 100, 60LL << 30), n), 100);  // no such device
  EXPECT_EQ(DeviceCharge(DeviceAssignment{0, 428, 40LL << 30, 2}, n), 428);  // MIG
  EXPECT_EQ(DeviceCharge(DeviceAssignment{0, 1000, 0, -1}, n), 1000);
  TaskAllocation a;
  a.cpu_milli = 2000;
  a.memory_bytes = 1LL << 30;
  a.devices = {fraction(0, 100, 60LL << 30)};
  const ResourceVector shared = ChargeOf(a, n, false, false);
  EXPECT_EQ(shared.gpu_milli, 750);
  EXPECT_EQ(shared.cpu_milli, 2000);
  EXPECT_EQ(AllocationVector(a).gpu_milli, 100);  // what it holds of the device's compute
}

TEST(MigProfilesTest, TablesFollowNvidiaGuide) {
  // A100-40GB: 7 x 1g.5gb, 1 x 7g.40gb.
  const MigProfile* p = FindMigProfile("A100-40GB", "1g.5gb");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->max_instances, 7);
  EXPECT_EQ(FindMigProfile("a100-80gb", "3g.40gb")->compute_slices, 3);
  EXPECT_EQ(FindMigProfile("H100-80GB", "7g.80gb")->memory_bytes, 80LL << 30);
  EXPECT_EQ(FindMigProfile("H200-141GB", "1g.18gb")->max_instances, 7);
  EXPECT_EQ(FindMigProfile("T4", "1g.5gb"), nullptr);
  EXPECT_EQ(MigProfileMilli(*FindMigProfile("A100-80GB", "7g.80gb")), 1000);
  EXPECT_EQ(MigProfileMilli(*FindMigProfile("A100-80GB", "3g.40gb")), 428);  // 3000/7
}

}  // namespace
}  // namespace tessera
