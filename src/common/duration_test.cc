#include "common/duration.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(ParseDuration, TakesGoNotationInWholeSeconds) {
  EXPECT_EQ(*ParseDuration("24h"), 86400);
  EXPECT_EQ(*ParseDuration("1h30m"), 5400);
  EXPECT_EQ(*ParseDuration("90s"), 90);
  EXPECT_EQ(*ParseDuration("2m5s"), 125);
  EXPECT_EQ(*ParseDuration("0"), 0);
  EXPECT_EQ(*ParseDuration("0s"), 0);
}

TEST(ParseDuration, RefusesWhatItCannotReadSayingWhy) {
  const std::pair<const char*, const char*> kBad[] = {
      {"", "empty duration (e.g. 24h, 90m, 30s)"},
      {"24", "\"24\": missing unit after 24 (h, m or s)"},
      {"3d", "\"3d\": unknown unit \"d\" (h, m or s)"},
      {"1.5h", "\"1.5h\": unknown unit \".\" (h, m or s)"},
      {"-1h", "\"-1h\": expected a number at \"-1h\" (e.g. 24h, 90m, 30s)"},
      {"h", "\"h\": expected a number at \"h\" (e.g. 24h, 90m, 30s)"},
      {"9999999999999999999h", "\"9999999999999999999h\": too long"},
      {"3000000000000000h", "\"3000000000000000h\": too long"},
  };
  for (const auto& [text, why] : kBad) {
    auto d = ParseDuration(text);
    ASSERT_FALSE(d.ok()) << text;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(d.status().message(), why);
  }
}

TEST(FormatDuration, LargestUnitsFirstZeroPartsLeftOut) {
  EXPECT_EQ(FormatDuration(86400), "24h");
  EXPECT_EQ(FormatDuration(5400), "1h30m");
  EXPECT_EQ(FormatDuration(125), "2m5s");
  EXPECT_EQ(FormatDuration(3601), "1h1s");
  EXPECT_EQ(FormatDuration(0), "0s");
  for (int64_t s : {1, 59, 60, 3599, 3600, 90061, 864000})
    EXPECT_EQ(*ParseDuration(FormatDuration(s)), s);
}

}  // namespace
}  // namespace tessera
