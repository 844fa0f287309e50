#include "server/observability_routes.h"

#include <gtest/gtest.h>

#include <filesystem>

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
  void TearDown() override {
    cp_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  testing::FakeClock clock_;
  std::unique_ptr<ControlPlane> cp_;
};

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
  ASSERT_TRUE(cp.RunCycle().ok());  // placed at once (observed by the next cycle: none runs)
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
  ASSERT_TRUE(cp.RunCycle().ok());  // (a cycle observes the states before its own plan)
  text = ProcessMetrics().RenderText();
  EXPECT_NE(text.find("tessera_job_queue_wait_seconds_sum{queue=\"requeues\"} 5\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_job_queue_wait_seconds_count{queue=\"requeues\"} 1\n"),
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

}  // namespace
}  // namespace tessera::server
