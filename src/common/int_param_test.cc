#include "common/int_param.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ParseIntParam, TakesDecimalIntegersInRange) {
  EXPECT_EQ(*ParseIntParam("offset", "0", 0, 10), 0);
  EXPECT_EQ(*ParseIntParam("offset", "10", 0, 10), 10);
  EXPECT_EQ(*ParseIntParam("after", "-3", -5, 5), -3);
  EXPECT_EQ(*ParseIntParam("offset", "9223372036854775807", 0, INT64_MAX), INT64_MAX);
}

TEST(ParseIntParam, RefusesWhatIsNotOneNamingTheParameter) {
  // Each was taken by std::stoll (as 12, 12, 12, 5) or threw without saying which parameter.
  for (const char* bad : {"12abc", " 12", "12 ", "+5", "", "abc", "1e3", "0x10",
                          "99999999999999999999", "-99999999999999999999"}) {
    auto r = ParseIntParam("limit", bad, 0, INT64_MAX);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), std::string("limit: expected an integer, got \"") + bad + "\"");
  }
}

TEST(ParseIntParam, RefusesValuesOutOfRange) {
  auto neg = ParseIntParam("offset", "-1", 0, INT64_MAX);
  ASSERT_FALSE(neg.ok());
  EXPECT_EQ(neg.status().message(), "offset: must be 0..9223372036854775807");
  auto big = ParseIntParam("task", "1000001", 0, 1000000);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().message(), "task: must be 0..1000000");
}

}  // namespace
}  // namespace tessera
