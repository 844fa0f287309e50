#include "metrics/promql_names.h"

#include <gtest/gtest.h>

namespace tessera::metrics {
namespace {

TEST(PromQLMetricNamesTest, FindsSelectedNamesOnly) {
  struct Case {
    const char* expr;
    std::set<std::string> want;
  };
  const Case cases[] = {
      {"up", {"up"}},
      {"DCGM_FI_DEV_GPU_UTIL > 80", {"DCGM_FI_DEV_GPU_UTIL"}},
      {"sum by (queue) (tessera_jobs{state=\"pending\", queue=~\"$queue\"})", {"tessera_jobs"}},
      {"sum(tessera_jobs) by (queue, state)", {"tessera_jobs"}},
      {"histogram_quantile(0.99, sum by (le) (rate(tessera_scheduling_cycle_duration_seconds_bucket"
       "[$__rate_interval])))",
       {"tessera_scheduling_cycle_duration_seconds_bucket"}},
      {"tessera_gpu_allocated_ratio > 0 and on(node, gpu) DCGM_FI_DEV_GPU_UTIL < 5",
       {"tessera_gpu_allocated_ratio", "DCGM_FI_DEV_GPU_UTIL"}},
      {"a * on (node) group_left(modelName) b", {"a", "b"}},
      {"rate(x_total[5m] offset 1h) / ignoring(code) y", {"x_total", "y"}},
      {"label_replace(m, \"dst\", \"$1\", \"src\", \"(.*)\")", {"m"}},
      {"count without (gpu) (m == bool 1e3) or vector(0)", {"m"}},
      {"max_over_time(m[1h:5m]) unless ${var} > .5", {"m"}},
      {"{__name__=\"hidden\"}", {}},
      {"sum(rate(a[5m])) / sum(rate(b[5m])) > Inf", {"a", "b"}},
  };
  for (const Case& c : cases) {
    auto got = PromQLMetricNames(c.expr);
    ASSERT_TRUE(got.ok()) << c.expr << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.want) << c.expr;
  }
}

TEST(PromQLMetricNamesTest, RejectsUnterminatedInput) {
  for (const char* expr : {"m{a=\"b}", "rate(m[5m)", "m{a=\"b\"", "x == \"open"}) {
    auto got = PromQLMetricNames(expr);
    EXPECT_FALSE(got.ok()) << expr;
  }
}

}  // namespace
}  // namespace tessera::metrics
