#include "sim/replay.h"

#include <gtest/gtest.h>

#include "sim/cluster.h"

namespace tessera::sim {
namespace {

Snapshot TwoNodes() {
  auto doc = ParseYaml(R"(
nodeGroups:
  - {namePrefix: n, count: 2, node: {cpu: 32, memory: 128Gi, gpus: {model: T4, count: 4}}}
)");
  return *ClusterFromJson(*doc);
}

TraceJob J(std::string id, int64_t submit, int64_t duration, int32_t gpus, int32_t tasks = 1) {
  TraceJob j;
  j.id = std::move(id);
  j.submit = submit;
  j.duration = duration;
  j.gpus_per_task = gpus;
  j.tasks = tasks;
  return j;
}

TEST(Percentile, NearestRank) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 50), 3);
  EXPECT_EQ(Percentile({5, 1, 3, 2, 4}, 99), 5);
  EXPECT_EQ(Percentile({1, 2, 3, 4}, 50), 2);
}

// A long 8-GPU job holds the cluster; under FIFO the short jobs behind a blocked big job
// wait, under SJF (oracle runtimes) the short ones go first. Exact times: the engine runs a
// cycle at each instant something changed (interval 1 s).
TEST(Replay, FifoAndSjfOnATinyCluster) {
  std::vector<TraceJob> jobs = {J("a", 0, 100, 4, 2),  // the whole cluster for 100 s
                                J("b", 10, 1000, 4, 2), J("c", 20, 10, 1), J("d", 30, 10, 1)};
  ReplayOptions o;
  o.cycle_interval = 1;
  struct Case {
    const char* policy;
    int64_t b_start, c_start, d_start;
  } cases[] = {
      {"fifo", 100, 1100, 1100},  // b (whole cluster) blocks c and d: strict submit order
      {"sjf", 110, 100, 100},     // c, d (10 s) first, then b
  };
  for (const Case& c : cases) {
    auto config = ReplayBaselineConfig(c.policy);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    o.oracle_runtimes = BaselineUsesOracle(c.policy);
    auto r = RunReplay(TwoNodes(), jobs, *config, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->jobs.size(), 4u);
    EXPECT_EQ(r->jobs[0].start, 0) << c.policy;
    EXPECT_EQ(r->jobs[1].start, c.b_start) << c.policy;
    EXPECT_EQ(r->jobs[2].start, c.c_start) << c.policy;
    EXPECT_EQ(r->jobs[3].start, c.d_start) << c.policy;
    for (const auto& j : r->jobs)
      EXPECT_EQ(j.finish, j.start + j.duration) << c.policy << " " << j.id;
    ReplaySummary s = Summarise(*r);
    EXPECT_EQ(s.finished, 4);
    EXPECT_EQ(s.makespan, r->last_finish);
  }
}

// Tiresias-like LAS: a long 8-GPU gang has 40,000 GPU-s of service (level 2 of thresholds
// 3,600 / 36,000) when a 1-GPU job arrives at t=5,000: the engine evicts the gang, the short
// jobs run at once, and the gang restarts with its service kept (checkpoint/restart): it
// finishes 95,000 s after it restarts, plus the restart cost when one is modelled. FIFO
// would start c at 100,000.
TEST(Replay, LasPreemptsTheLongJobForShortOnesAndKeepsItsService) {
  std::vector<TraceJob> jobs = {J("a", 0, 100000, 4, 2), J("c", 5000, 10, 1), J("d", 5010, 10, 1)};
  auto config = ReplayBaselineConfig("las");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  for (int64_t cost : {0, 300}) {
    ReplayOptions o;
    o.cycle_interval = 1;
    o.restart_cost_seconds = cost;
    auto r = RunReplay(TwoNodes(), jobs, *config, o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    // The cycle at 5,000 evicts a; the follow-up at the same instant binds c (as the server
    // runs a cycle once evicted tasks exit; it used to wait for the next period, 5,001).
    EXPECT_EQ(r->jobs[1].start, 5000);
    EXPECT_EQ(r->jobs[2].start, 5010);  // level 0 before a (level 2); 7 GPUs are free
    EXPECT_EQ(r->jobs[1].finish, 5010) << "a first start costs nothing";
    EXPECT_EQ(r->jobs[0].start, 0);  // first start
    EXPECT_EQ(r->jobs[0].preemptions, 1);
    EXPECT_EQ(r->jobs[0].finish, 5020 + cost + 95000);  // restarted when d finished
    // Its first wait was 0, but it waited 5,000..5,020 after the preemption: pending counts it.
    EXPECT_EQ(r->jobs[0].pending, 20);
    EXPECT_EQ(r->jobs[1].pending, 0);
    EXPECT_EQ(Summarise(*r).max_pending, 20);
    EXPECT_EQ(Summarise(*r).max_wait, 0);
    EXPECT_EQ(r->restart_gpu_milli_seconds, cost * 8000);  // one restart of 8 GPUs
    EXPECT_EQ(r->preemptions, 1);
    EXPECT_EQ(r->stale_evictions, 0);
  }
}

// The freed capacity is reused at once whatever the period: with the default 60 s, c used
// to wait a whole period after the eviction made room for it (5,060).
TEST(Replay, AFollowUpCycleReusesEvictedCapacityAtOnce) {
  std::vector<TraceJob> jobs = {J("a", 0, 100000, 4, 2), J("c", 5000, 10, 1)};
  auto config = ReplayBaselineConfig("las");
  ASSERT_TRUE(config.ok());
  auto r = RunReplay(TwoNodes(), jobs, *config, ReplayOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[0].preemptions, 1);
  EXPECT_EQ(r->jobs[1].start, 5000);
  EXPECT_EQ(r->jobs[1].finish, 5010);
}

// LAS levels move while jobs run, with no arrival or completion: a (8 GPUs) reaches level 1
// at 3,600 GPU-s, t = 450. b (1 GPU, level 0) waits behind a in level 0 from t = 100; the
// periodic cycles (every 60 s while work waits: 100, 160, ..., 460) see a cross the threshold
// and b preempts it at 460 (a follow-up cycle binds it). Cycles only at events left b waiting
// for a's completion (100,000).
TEST(Replay, CyclesRunPeriodicallyWhileWorkWaits) {
  std::vector<TraceJob> jobs = {J("a", 0, 100000, 4, 2), J("b", 100, 10, 1)};
  auto config = ReplayBaselineConfig("las");
  ASSERT_TRUE(config.ok());
  ReplayOptions o;  // cycle_interval 60
  auto r = RunReplay(TwoNodes(), jobs, *config, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[1].start, 460);
  EXPECT_EQ(r->jobs[0].preemptions, 1);
  // b finishes at 470, but the cycle after 460 is due at 520: a runs again then, with 460 s
  // of service kept.
  EXPECT_EQ(r->jobs[0].finish, 520 + 100000 - 460);
  // FIFO's order does not move with time: the same periodic cycles change nothing.
  auto fifo = ReplayBaselineConfig("fifo");
  ASSERT_TRUE(fifo.ok());
  r = RunReplay(TwoNodes(), jobs, *fifo, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->jobs[1].start, 100000);
}

// A job evicted again while it is still restarting made no progress in that run: every
// restart pays the full cost again, and nothing it held counts as progress.
TEST(Replay, AnEvictionDuringARestartKeepsNoProgress) {
  // a: 8 GPUs for 100,000 s. c arrives at 5,000 (evicts a at 5,000; the follow-up cycle
  // runs c 5,000..5,010, a restarts at 5,010 with 1,000 s of restart time); e arrives at
  // 5,500, during a's restart: a has held 8 GPUs for ~5,500 s (restarts count: LAS orders by
  // GPU time held), still level 2, so it is evicted again; e runs 5,500..5,510.
  std::vector<TraceJob> jobs = {J("a", 0, 100000, 4, 2), J("c", 5000, 10, 1), J("e", 5500, 10, 1)};
  auto config = ReplayBaselineConfig("las");
  ASSERT_TRUE(config.ok());
  ReplayOptions o;
  o.cycle_interval = 1;
  o.restart_cost_seconds = 1000;
  auto r = RunReplay(TwoNodes(), jobs, *config, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[0].preemptions, 2);
  EXPECT_EQ(r->jobs[2].start, 5500);
  // a restarts at 5,510 with 95,000 s of work left, after another 1,000 s of restart.
  EXPECT_EQ(r->jobs[0].finish, 5510 + 1000 + 95000);
  // Restarting: 5,010..5,500 (cut short) and 5,510..6,510, 8 GPUs each time.
  EXPECT_EQ(r->restart_gpu_milli_seconds, (490 + 1000) * 8000);
}

TEST(Replay, InfeasibleJobsAreDroppedAndCounted) {
  // big: 8-GPU tasks on 4-GPU nodes; gang: three 4-GPU tasks, each fits a node, 12 GPUs in
  // all on 8: neither can ever run.
  std::vector<TraceJob> jobs = {J("big", 0, 10, 8, 4), J("ok", 1, 10, 1), J("gang", 2, 10, 4, 3)};
  auto config = ReplayBaselineConfig("fifo");
  ASSERT_TRUE(config.ok());
  auto r = RunReplay(TwoNodes(), jobs, *config, {});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[0].outcome, "infeasible");
  EXPECT_EQ(r->jobs[1].outcome, "finished");
  EXPECT_EQ(r->jobs[2].outcome, "infeasible");
  EXPECT_EQ(Summarise(*r).infeasible, 2);
  EXPECT_EQ(Summarise(*r).unfinished, 0);
  // Each says why, in the engine's words.
  EXPECT_NE(r->jobs[0].why.find("can never fit on this cluster as it is"), std::string::npos)
      << r->jobs[0].why;
  EXPECT_TRUE(r->jobs[1].why.empty());
  // The queue's figures are over the job that could run: not starved by the dropped ones
  // (they would wait until the end), no demand of theirs.
  ASSERT_EQ(r->queues.size(), 1u);
  EXPECT_EQ(r->queues[0].max_wait, r->jobs[1].start - r->jobs[1].submit);
  EXPECT_EQ(r->queues[0].demand_gpu_milli_seconds, 1000 * 10);
}

TEST(Replay, CapacityIsNeverExceededAndEverythingFinishes) {
  std::vector<TraceJob> jobs;
  for (int i = 0; i < 200; ++i)
    jobs.push_back(J("j" + std::to_string(1000 + i), i * 7, 30 + (i * 37) % 500, 1 << (i % 3),
                     1 + (i % 5 == 0)));
  for (const std::string& p : ReplayBaselineNames()) {
    auto config = ReplayBaselineConfig(p);
    ASSERT_TRUE(config.ok()) << p << ": " << config.status().ToString();
    ReplayOptions o;
    o.oracle_runtimes = BaselineUsesOracle(p);
    o.cycle_interval = 10;
    auto r = RunReplay(TwoNodes(), jobs, *config, o);
    ASSERT_TRUE(r.ok()) << p << ": " << r.status().ToString();
    ReplaySummary s = Summarise(*r);
    EXPECT_EQ(s.finished, 200) << p;
    for (const SeriesPoint& pt : r->series) EXPECT_LE(pt.allocated_gpu_milli, 8000) << p;
    for (const auto& j : r->jobs) EXPECT_GE(j.finish - j.start, j.duration) << p << " " << j.id;
  }
}

}  // namespace
}  // namespace tessera::sim
