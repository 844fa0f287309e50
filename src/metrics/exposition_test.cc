#include "metrics/exposition.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace tessera::metrics {
namespace {

TEST(FormatValueTest, SpellsValuesAsPrometheusReadsThem) {
  struct Case {
    double v;
    const char* want;
  };
  const Case cases[] = {
      {0, "0"},
      {42, "42"},
      {-3, "-3"},
      {0.5, "0.5"},
      {0.1, "0.1"},  // shortest spelling that round-trips, not 0.10000000000000001
      {1.0 / 3, "0.3333333333333333"},
      {68719476736.0, "68719476736"},  // 64Gi in bytes: integral, no exponent
      {std::numeric_limits<double>::infinity(), "+Inf"},
      {-std::numeric_limits<double>::infinity(), "-Inf"},
      {std::nan(""), "NaN"},
  };
  for (const Case& c : cases) EXPECT_EQ(FormatValue(c.v), c.want) << c.v;
}

TEST(EscapeTest, LabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(EscapeHelp("say \"x\"\\\n"), "say \"x\"\\\\\\n");  // quotes stay in HELP
}

TEST(NamesTest, MetricAndLabelNames) {
  EXPECT_TRUE(IsValidMetricName("DCGM_FI_DEV_GPU_UTIL"));
  EXPECT_TRUE(IsValidMetricName("job:rate5m:sum"));
  EXPECT_FALSE(IsValidMetricName(""));
  EXPECT_FALSE(IsValidMetricName("9lives"));
  EXPECT_FALSE(IsValidMetricName("a-b"));
  EXPECT_TRUE(IsValidLabelName("UUID"));
  EXPECT_FALSE(IsValidLabelName("__name__"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
  EXPECT_FALSE(IsValidLabelName("1a"));
}

TEST(RenderTextTest, GoldenOutput) {
  std::vector<MetricFamily> families = {
      {"tessera_jobs",
       "Jobs by queue and state.",
       MetricType::kGauge,
       {{"", {{"queue", "ml"}, {"state", "pending"}}, 2},
        {"", {{"queue", "a\"b"}, {"state", "running"}}, 1}}},
      {"tessera_wait_seconds",
       "Waits.",
       MetricType::kHistogram,
       {{"_bucket", {{"le", "1"}}, 1},
        {"_bucket", {{"le", "+Inf"}}, 3},
        {"_sum", {}, 12.5},
        {"_count", {}, 3}}},
      {"tessera_empty_total", "Nothing yet.", MetricType::kCounter, {}},
  };
  EXPECT_EQ(RenderText(families),
            "# HELP tessera_jobs Jobs by queue and state.\n"
            "# TYPE tessera_jobs gauge\n"
            "tessera_jobs{queue=\"ml\",state=\"pending\"} 2\n"
            "tessera_jobs{queue=\"a\\\"b\",state=\"running\"} 1\n"
            "# HELP tessera_wait_seconds Waits.\n"
            "# TYPE tessera_wait_seconds histogram\n"
            "tessera_wait_seconds_bucket{le=\"1\"} 1\n"
            "tessera_wait_seconds_bucket{le=\"+Inf\"} 3\n"
            "tessera_wait_seconds_sum 12.5\n"
            "tessera_wait_seconds_count 3\n"
            "# HELP tessera_empty_total Nothing yet.\n"
            "# TYPE tessera_empty_total counter\n");
  EXPECT_TRUE(Validate(families).ok());
}

TEST(ValidateTest, NamesTheFirstProblem) {
  struct Case {
    const char* name;
    std::vector<MetricFamily> families;
    const char* want;  // substring of the message
  };
  const Case cases[] = {
      {"bad name", {{"a-b", "", MetricType::kGauge, {}}}, "families[0] (a-b).name"},
      {"twice",
       {{"x", "", MetricType::kGauge, {}}, {"x", "", MetricType::kCounter, {}}},
       "families[1] (x).name: appears twice"},
      {"bad label",
       {{"x", "", MetricType::kGauge, {{"", {{"ok", "1"}, {"__bad", "2"}}, 1}}}},
       "families[0] (x).samples[0].labels[1]"},
      {"suffix on gauge",
       {{"x", "", MetricType::kGauge, {{"_sum", {}, 1}}}},
       "does not fit a gauge"},
      {"bucket without le",
       {{"h", "", MetricType::kHistogram, {{"_bucket", {}, 1}}}},
       "only _bucket samples carry \"le\""},
      {"negative counter", {{"c", "", MetricType::kCounter, {{"", {}, -1}}}}, "cannot be negative"},
  };
  for (const Case& c : cases) {
    Status st = Validate(c.families);
    EXPECT_FALSE(st.ok()) << c.name;
    EXPECT_NE(st.message().find(c.want), std::string::npos) << c.name << ": " << st.message();
  }
}

}  // namespace
}  // namespace tessera::metrics
