#include "metrics/registry.h"

#include <thread>

#include <gtest/gtest.h>

namespace tessera::metrics {
namespace {

TEST(RegistryTest, CountersGaugesAndSortedScrape) {
  Registry r;
  auto requests =
      r.AddCounter("z_requests_total", "Requests.", std::array<std::string, 2>{"code", "method"});
  auto temp = r.AddGauge("a_temperature_celsius", "Temp.", std::array<std::string, 0>{});
  ASSERT_TRUE(requests.ok() && temp.ok());
  (*requests)->Add({"500", "GET"});
  (*requests)->Add({"200", "GET"}, 2);
  (*requests)->Add({"200", "GET"}, -5);   // ignored: counters never go down
  (*requests)->Reach({"200", "GET"}, 1);  // ignored: lower than the value
  (*temp)->Set({}, 21.5);
  EXPECT_EQ((*requests)->Get({"200", "GET"}), 2);
  EXPECT_EQ(r.RenderText(),
            "# HELP a_temperature_celsius Temp.\n"
            "# TYPE a_temperature_celsius gauge\n"
            "a_temperature_celsius 21.5\n"
            "# HELP z_requests_total Requests.\n"
            "# TYPE z_requests_total counter\n"
            "z_requests_total{code=\"200\",method=\"GET\"} 2\n"  // children sorted by labels
            "z_requests_total{code=\"500\",method=\"GET\"} 1\n");
  EXPECT_TRUE(Validate(r.Collect()).ok());
}

TEST(RegistryTest, HistogramBucketsAreCumulative) {
  Registry r;
  auto h = r.AddHistogram("wait_seconds", "Wait.", std::array<std::string, 1>{"queue"}, {1, 10});
  ASSERT_TRUE(h.ok());
  for (double v : {0.5, 1.0, 3.0, 100.0}) (*h)->Observe({"ml"}, v);
  HistogramData d = (*h)->Get({"ml"});
  EXPECT_EQ(d.counts, (std::vector<uint64_t>{2, 1, 1}));  // le=1 is inclusive: 0.5 and 1.0
  EXPECT_EQ(d.count, 4u);
  EXPECT_DOUBLE_EQ(d.sum, 104.5);
  EXPECT_EQ(r.RenderText(),
            "# HELP wait_seconds Wait.\n"
            "# TYPE wait_seconds histogram\n"
            "wait_seconds_bucket{queue=\"ml\",le=\"1\"} 2\n"
            "wait_seconds_bucket{queue=\"ml\",le=\"10\"} 3\n"
            "wait_seconds_bucket{queue=\"ml\",le=\"+Inf\"} 4\n"
            "wait_seconds_sum{queue=\"ml\"} 104.5\n"
            "wait_seconds_count{queue=\"ml\"} 4\n");
  EXPECT_TRUE(Validate(r.Collect()).ok());
}

TEST(RegistryTest, RejectsBadRegistrations) {
  Registry r;
  ASSERT_TRUE(r.AddGauge("x", "", std::array<std::string, 0>{}).ok());
  struct Case {
    const char* what;
    Status status;
    const char* want;
  };
  const Case cases[] = {
      {"duplicate", r.AddCounter("x", "", std::array<std::string, 0>{}).status(),
       "already registered"},
      {"bad name", r.AddGauge("1x", "", std::array<std::string, 0>{}).status(),
       "not a valid Prometheus metric name"},
      {"bad label", r.AddGauge("y", "", std::array<std::string, 1>{"a-b"}).status(),
       "label \"a-b\""},
      {"repeated label", r.AddGauge("y", "", std::array<std::string, 2>{"a", "a"}).status(),
       "\"a\" twice"},
      {"le on histogram", r.AddHistogram("h", "", std::array<std::string, 1>{"le"}, {1}).status(),
       "label \"le\""},
      {"bounds not increasing",
       r.AddHistogram("h", "", std::array<std::string, 0>{}, {1, 1}).status(), "bounds[1]"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.what;
    EXPECT_NE(c.status.message().find(c.want), std::string::npos)
        << c.what << ": " << c.status.message();
  }
}

TEST(RegistryTest, ConcurrentObservationsAreAllCounted) {
  Registry r;
  auto c = r.AddCounter("events_total", "", std::array<std::string, 1>{"kind"});
  ASSERT_TRUE(c.ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) (*c)->Add({t % 2 ? "odd" : "even"});
      (void)r.RenderText();  // a scrape racing the writers must not tear
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ((*c)->Get({"odd"}) + (*c)->Get({"even"}), 40000);
}

}  // namespace
}  // namespace tessera::metrics
