#include "server/observability_routes.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "metrics/test_util.h"
#include "server/test_util.h"

namespace tessera::server {
namespace {

const Principal kAdmin{"admin", Role::kAdmin, {"*"}};

std::string Job(const std::string& name, int gpus) {
  return "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: " + name +
         "}\nspec:\n  queue: default\n  tasks:\n    - name: w\n      replicas: 1\n"
         "      resources: {cpu: 1, memory: 1Gi, nvidia.com/gpu: " +
         std::to_string(gpus) + "}\n      command: [sleep, '1']\n";
}

// A Deployment of queue `infer`, each replica one GPU.
std::string Deployment(const std::string& name, int replicas) {
  return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: " + name +
         ", annotations: {tessera.io/queue: infer}}\nspec:\n  replicas: " +
         std::to_string(replicas) +
         "\n  template:\n    spec:\n      containers:\n      - name: s\n"
         "        command: [serve]\n        resources: {limits: {nvidia.com/gpu: 1}}\n";
}

// Whether the process's metrics now hold this exact sample line: "name{labels} value".
::testing::AssertionResult Exports(const std::string& sample) {
  const std::string text = ProcessMetrics().RenderText();
  if (text.find(sample + "\n") != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no \"" << sample << "\" in\n" << text;
}

// A control plane that reports its cycles to the process's metrics, with one queue.
class ObservabilityRoutes : public ::testing::Test {
 protected:
  void Open(const std::string& name, const std::string& queue) {
    dir_ = testing::TempDir(name);
    auto st = store::OpenSqliteStore(dir_);
    ASSERT_TRUE(st.ok());
    ControlPlaneOptions o;
    o.clock = clock_.fn();
    o.run_scheduler = false;
    o.on_cycle = ObserveCycleForMetrics;
    auto cp = ControlPlane::Open(std::move(*st), std::make_unique<testing::ScriptedEngine>(), o);
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
    ASSERT_TRUE(cp_->Apply(kAdmin,
                           "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                           "metadata: {name: " +
                               queue + "}\n")
                    .ok());
  }
  // Registers an agent node with one virtual GPU; returns its epoch.
  int64_t AddNode(const std::string& name) {
    const Json node = {{"node",
                        {{"name", name},
                         {"cpu", 8},
                         {"memory", "64Gi"},
                         {"gpus", {{"model", "A100-80GB"}, {"count", 1}, {"virtual", true}}}}},
                       {"agentVersion", "test"},
                       {"bootId", "b"}};
    auto reg = cp_->RegisterAgent(kAdmin, node);
    EXPECT_TRUE(reg.ok()) << reg.status().ToString();
    return reg.ok() ? (*reg)["epoch"].get<int64_t>() : 0;
  }
  // The node's agent reports its one task `state` ("running", "succeeded", "failed").
  void Report(const std::string& node, int64_t epoch, const std::string& state, int exit_code) {
    auto desired = cp_->Heartbeat(kAdmin, node, Json{{"epoch", epoch}, {"tasks", Json::array()}});
    ASSERT_TRUE(desired.ok()) << desired.status().ToString();
    ASSERT_EQ((*desired)["allocations"].size(), 1u) << desired->dump();
    const Json task = {{"allocation", (*desired)["allocations"][0]["allocation"]},
                       {"state", state},
                       {"exitCode", exit_code}};
    auto r = cp_->Heartbeat(kAdmin, node, Json{{"epoch", epoch}, {"tasks", Json::array({task})}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  }
  void TearDown() override {
    cp_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  testing::FakeClock clock_;
  std::unique_ptr<ControlPlane> cp_;
};

// The cost counters survive a restart of the server: stored every 10 s at most and as it
// stops, restored as it starts, and the time it was down is counted for the allocations it
// finds still held. They never show more than is stored (a restart would read as a reset).
TEST(DurableCostCounters, SurviveARestartWithTheTimeTheServerWasDown) {
  const std::string dir = testing::TempDir("obs_durable_cost");
  testing::FakeClock clock;
  std::unique_ptr<metrics::ClusterMetrics> m;
  std::unique_ptr<ControlPlane> cp;
  auto open = [&] {
    m = std::make_unique<metrics::ClusterMetrics>();
    auto st = store::OpenSqliteStore(dir);
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(MakeCostAccrualDurable(*m, **st, 10, 60).ok());
    ControlPlaneOptions o;
    o.clock = clock.fn();
    o.run_scheduler = false;
    o.on_cycle = [&m](const Snapshot& s, const Plan& p, const std::vector<JobSummary>& jobs,
                      const std::vector<JobBound>& bound, int64_t now,
                      double seconds) { ObserveCycleInto(*m, s, p, jobs, bound, now, seconds); };
    o.on_stop = [&m] { FlushCostAccrual(*m); };
    auto c = ControlPlane::Open(std::move(*st), std::make_unique<testing::ScriptedEngine>(), o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cp = std::move(*c);
  };
  auto value = [&](const std::string& series) {
    return metrics::testing::SeriesValue(m->RenderText(), series);
  };
  ASSERT_NO_FATAL_FAILURE(open());
  const Json node = {{"node",
                      {{"name", "n1"},
                       {"cpu", 8},
                       {"memory", "64Gi"},
                       {"costPerGpuHour", "3.6"},  // 0.001 a GPU-second
                       {"gpus", {{"model", "A100-80GB"}, {"count", 1}, {"virtual", true}}}}},
                     {"agentVersion", "test"},
                     {"bootId", "b"}};
  ASSERT_TRUE(cp->RegisterAgent(kAdmin, node).ok());
  ASSERT_TRUE(
      cp->Apply(
            kAdmin,
            "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: default}\n")
          .ok());
  ASSERT_TRUE(cp->Submit(kAdmin, Job("long", 1)).ok());
  ASSERT_TRUE(cp->RunCycle().ok());  // bound
  clock.now += 1;
  ASSERT_TRUE(cp->RunCycle().ok());  // seen holding 1 GPU
  clock.now += 100;
  ASSERT_TRUE(cp->RunCycle().ok());
  EXPECT_EQ(value("tessera_queue_gpu_seconds_total{queue=\"default\"}"), "100");
  clock.now += 5;
  ASSERT_TRUE(cp->RunCycle().ok());  // accrued 105, stored 100: 100 shown
  EXPECT_EQ(value("tessera_queue_gpu_seconds_total{queue=\"default\"}"), "100");
  cp.reset();  // a clean stop stores 105

  clock.now += 300;  // down for 5 minutes; the task ran on for at most 60 s (its agent's
                     // lease and grace in this test), then its agent stopped it
  ASSERT_NO_FATAL_FAILURE(open());
  EXPECT_EQ(value("tessera_queue_gpu_seconds_total{queue=\"default\"}"), "absent");
  ASSERT_TRUE(cp->RunCycle().ok());
  EXPECT_EQ(value("tessera_queue_gpu_seconds_total{queue=\"default\"}"), "165");
  EXPECT_EQ(value("tessera_queue_cost_total{queue=\"default\"}"), "0.165");
  auto stored = cp->store().Get(kCostAccrualKey);  // the gap filled is stored at once
  ASSERT_TRUE(stored.ok() && *stored);
  EXPECT_EQ(Json::parse((*stored)->value)["queues"]["default"]["gpuSeconds"], 165);
  cp.reset();
  std::filesystem::remove_all(dir);
}

// tessera_jobs counts every lifecycle state the server keeps, not only the live ones the
// engine sees: a cancelled job is still a job of its queue.
TEST_F(ObservabilityRoutes, TesseraJobsCountsFinishedJobsByState) {
  ASSERT_NO_FATAL_FAILURE(Open("obs_jobs_by_state", "default"));
  ControlPlane& cp = *cp_;
  for (const char* name : {"kept", "gone-1", "gone-2"}) {
    ASSERT_TRUE(cp.Submit(kAdmin, Job(name, 200)).ok());  // never fits: stays pending
  }
  ASSERT_TRUE(cp.Cancel(kAdmin, "gone-1").ok());
  ASSERT_TRUE(cp.Cancel(kAdmin, "gone-2").ok());
  ASSERT_TRUE(cp.RunCycle().ok());

  const std::string text = ProcessMetrics().RenderText();
  EXPECT_NE(text.find("tessera_jobs{queue=\"default\",state=\"cancelled\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_jobs{queue=\"default\",state=\"pending\"} 1\n"), std::string::npos)
      << text;
}

// A job requeued after an eviction waits from its requeue: the oldest pending age and the
// queue-wait histogram count from there, not from its submission an hour earlier.
TEST_F(ObservabilityRoutes, ARequeuedJobWaitsFromItsRequeue) {
  ASSERT_NO_FATAL_FAILURE(Open("obs_requeue", "requeues"));
  ControlPlane& cp = *cp_;
  const Json node = {{"node",
                      {{"name", "n1"},
                       {"cpu", 8},
                       {"memory", "64Gi"},
                       {"gpus", {{"model", "A100-80GB"}, {"count", 1}, {"virtual", true}}}}},
                     {"agentVersion", "test"},
                     {"bootId", "b"}};
  auto reg = cp.RegisterAgent(kAdmin, node);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const int64_t epoch = (*reg)["epoch"];
  std::string doc = Job("requeued", 1);
  doc.replace(doc.find("queue: default"), 14, "queue: requeues");
  ASSERT_TRUE(cp.Submit(kAdmin, doc).ok());
  ASSERT_TRUE(cp.RunCycle().ok());  // placed at once: waited 0 s
  clock_.now += 3600;
  ASSERT_TRUE(cp.DrainNode(kAdmin, "n1").ok());
  auto hb = cp.Heartbeat(kAdmin, "n1", Json{{"epoch", epoch}, {"tasks", Json::array()}});
  ASSERT_TRUE(hb.ok()) << hb.status().ToString();  // the task is gone: requeued
  clock_.now += 5;
  ASSERT_TRUE(cp.RunCycle().ok());  // cordoned: still pending
  std::string text = ProcessMetrics().RenderText();
  EXPECT_NE(text.find("tessera_queue_oldest_pending_job_age_seconds{queue=\"requeues\"} 5\n"),
            std::string::npos)
      << text;
  ASSERT_TRUE(cp.CordonNode(kAdmin, "n1", false).ok());
  ASSERT_TRUE(cp.RunCycle().ok());  // placed again, 5 s after its requeue
  text = ProcessMetrics().RenderText();
  EXPECT_NE(text.find("tessera_job_queue_wait_seconds_sum{queue=\"requeues\"} 5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_job_queue_wait_seconds_count{queue=\"requeues\"} 2\n"),
            std::string::npos)
      << text;
  // Its node goes silent: pending, waiting out the fence, and counted under that reason.
  clock_.now += 26;  // 31 s after its last heartbeat; the fence runs 52 s from it
  cp.CheckNodes();
  ASSERT_TRUE(cp.RunCycle().ok());
  text = ProcessMetrics().RenderText();
  EXPECT_NE(text.find("tessera_pending_jobs{queue=\"requeues\",reason=\"NodeLost\"} 1\n"),
            std::string::npos)
      << text;
}

// Every start is observed, however short the run: four quick jobs, each bound and done
// before the next cycle (a start inferred from what cycles saw was missed), count four.
TEST_F(ObservabilityRoutes, EveryStartIsObservedEvenWhenItEndsBeforeTheNextCycle) {
  ASSERT_NO_FATAL_FAILURE(Open("obs_quick_starts", "quick"));
  const int64_t epoch = AddNode("n1");
  for (int i = 0; i < 4; ++i) {
    std::string doc = Job("quick-" + std::to_string(i), 1);
    doc.replace(doc.find("queue: default"), 14, "queue: quick");
    ASSERT_TRUE(cp_->Submit(kAdmin, doc).ok());
    clock_.now += 2;
    ASSERT_TRUE(cp_->RunCycle().ok());  // bound 2 s after its submission
    ASSERT_NO_FATAL_FAILURE(Report("n1", epoch, "succeeded", 0));
    clock_.now += 1;
  }
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_job_queue_wait_seconds_count{queue=\"quick\"} 4"));
  EXPECT_TRUE(Exports("tessera_job_queue_wait_seconds_sum{queue=\"quick\"} 8"));  // 4 x 2 s
  EXPECT_TRUE(Exports("tessera_jobs{queue=\"quick\",state=\"succeeded\"} 4"));
}

// Each attempt of a restarted job is a start of its own, waited from its requeue: the
// crash-loop back-off (10 s, then 20 s) is part of the wait.
TEST_F(ObservabilityRoutes, EachRestartedAttemptIsObservedWithItsWaitFromItsRequeue) {
  ASSERT_NO_FATAL_FAILURE(Open("obs_restarts", "restarts"));
  const int64_t epoch = AddNode("n1");
  std::string doc = Job("flaky", 1);
  doc.replace(doc.find("  queue: default\n"), 17,
              "  queue: restarts\n  restartPolicy: {onFailure: RestartJob, maxRetries: 2}\n");
  ASSERT_TRUE(cp_->Submit(kAdmin, doc).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());                          // attempt 1, bound at once
  ASSERT_NO_FATAL_FAILURE(Report("n1", epoch, "failed", 1));  // requeued, back-off 10 s
  clock_.now += 5;
  ASSERT_TRUE(cp_->RunCycle().ok());  // still backing off
  clock_.now += 5;
  ASSERT_TRUE(cp_->RunCycle().ok());                          // attempt 2, 10 s after its requeue
  ASSERT_NO_FATAL_FAILURE(Report("n1", epoch, "failed", 1));  // back-off 20 s
  clock_.now += 20;
  ASSERT_TRUE(cp_->RunCycle().ok());  // attempt 3, 20 s after its requeue
  ASSERT_NO_FATAL_FAILURE(Report("n1", epoch, "succeeded", 0));
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_job_queue_wait_seconds_count{queue=\"restarts\"} 3"));
  EXPECT_TRUE(Exports("tessera_job_queue_wait_seconds_sum{queue=\"restarts\"} 30"));  // 0+10+20
}

// Every lifecycle state has its series in every queue, at 0 when no job is in it: a series
// that disappears reads as "no data" to Prometheus, not as 0.
TEST_F(ObservabilityRoutes, EveryJobStateIsExportedAtZeroWhenNoJobIsInIt) {
  ASSERT_NO_FATAL_FAILURE(Open("obs_zero_states", "zeros"));
  std::string doc = Job("gone", 200);
  doc.replace(doc.find("queue: default"), 14, "queue: zeros");
  ASSERT_TRUE(cp_->Submit(kAdmin, doc).ok());
  ASSERT_TRUE(cp_->Cancel(kAdmin, "gone").ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_jobs{queue=\"zeros\",state=\"cancelled\"} 1"));
  ASSERT_TRUE(cp_->DeleteJob(kAdmin, "gone").ok());  // finished: removed
  ASSERT_TRUE(cp_->RunCycle().ok());
  for (const char* state :
       {"pending", "scheduled", "running", "terminating", "succeeded", "failed", "cancelled"})
    EXPECT_TRUE(Exports("tessera_jobs{queue=\"zeros\",state=\"" + std::string(state) + "\"} 0"));
}

// A Deployment's replicas, asked and running, reach the metrics (ServiceUnderReplicated and
// ServiceDown compare them): one of two placed, then running; gone once it is cancelled.
TEST_F(ObservabilityRoutes, AServiceExportsItsReplicasAskedAndRunning) {
  ASSERT_NO_FATAL_FAILURE(Open("obs_service", "infer"));
  const int64_t epoch = AddNode("n1");  // room for one replica
  ASSERT_TRUE(cp_->Submit(kAdmin, Deployment("chat", 2)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_service_replicas{queue=\"infer\",service=\"chat\"} 2"));
  EXPECT_TRUE(Exports("tessera_service_replicas_running{queue=\"infer\",service=\"chat\"} 0"));
  ASSERT_NO_FATAL_FAILURE(Report("n1", epoch, "running", 0));
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_service_replicas_running{queue=\"infer\",service=\"chat\"} 1"));
  ASSERT_TRUE(cp_->Cancel(kAdmin, "chat").ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_FALSE(Exports("tessera_service_replicas{queue=\"infer\",service=\"chat\"} 2"));
}

// `tessera scale` reaches the metrics at the next cycle: the new count asked, and 0 (not no
// series) for a service scaled to zero, as kube_deployment_spec_replicas says 0.
TEST_F(ObservabilityRoutes, AScaledServiceExportsItsNewReplicaCount) {
  ASSERT_NO_FATAL_FAILURE(Open("obs_scaled", "infer"));
  ASSERT_TRUE(cp_->Submit(kAdmin, Deployment("grow", 2)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_service_replicas{queue=\"infer\",service=\"grow\"} 2"));
  ASSERT_TRUE(cp_->Scale(kAdmin, "grow", 4).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_service_replicas{queue=\"infer\",service=\"grow\"} 4"));
  ASSERT_TRUE(cp_->Scale(kAdmin, "grow", 0).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Exports("tessera_service_replicas{queue=\"infer\",service=\"grow\"} 0"));
  EXPECT_TRUE(Exports("tessera_service_replicas_running{queue=\"infer\",service=\"grow\"} 0"));
}

}  // namespace
}  // namespace tessera::server
