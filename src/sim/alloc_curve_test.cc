#include "sim/alloc_curve.h"

#include <gtest/gtest.h>

namespace tessera::sim {
namespace {

TEST(AllocCurve, RoundHalfEvenLikeNumpy) {
  EXPECT_EQ(RoundHalfEven(0.5, 0), 0.0);
  EXPECT_EQ(RoundHalfEven(1.5, 0), 2.0);
  EXPECT_EQ(RoundHalfEven(2.5, 0), 2.0);
  EXPECT_DOUBLE_EQ(RoundHalfEven(92.9449, 2), 92.94);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 2, 3}), 2.5);
}

TEST(AllocCurve, ColumnsAverageTheirSamplesAndFallBackToNeighbours) {
  // 10 GPUs = 10,000 milli: 1 % of load = 100 milli.
  std::vector<AllocSample> s = {
      {0, 0},      // arrive 0
      {250, 250},  // 2.5 -> 2 (half to even)
      {260, 200},  // 2.6 -> 3
      {350, 300},  // 3.5 -> 4
      {449, 400},  // 4.49 -> 4
  };
  AllocCurve c = DiscretiseAllocCurve(s, 10, 6);
  ASSERT_EQ(c.allocated.size(), 7u);
  EXPECT_EQ(*c.allocated[0], 0.0);
  EXPECT_EQ(*c.allocated[1], (0.0 + 2.5) / 2);  // empty: rows of 0..2
  EXPECT_EQ(*c.allocated[2], 2.5);
  EXPECT_EQ(*c.allocated[3], 2.0);
  EXPECT_EQ(*c.allocated[4], 3.5);           // (3 + 4) / 2
  EXPECT_EQ(*c.allocated[5], 3.5);           // empty: rows of 4..6
  EXPECT_FALSE(c.allocated[6].has_value());  // nothing within 5..7
  EXPECT_EQ(*c.UnallocatedAt(4), 96.5);
  EXPECT_FALSE(c.UnallocatedAt(6).has_value());
}

}  // namespace
}  // namespace tessera::sim
