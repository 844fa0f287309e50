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

// tessera_jobs counts every lifecycle state the server keeps, not only the live ones the
// engine sees: a cancelled job is still a job of its queue.
TEST(ObservabilityRoutes, TesseraJobsCountsFinishedJobsByState) {
  const std::string dir = testing::TempDir("obs_jobs_by_state");
  testing::FakeClock clock;
  auto st = store::OpenSqliteStore(dir);
  ASSERT_TRUE(st.ok());
  ControlPlaneOptions o;
  o.clock = clock.fn();
  o.run_scheduler = false;
  o.on_cycle = ObserveCycleForMetrics;
  auto cp = ControlPlane::Open(std::move(*st), std::make_unique<testing::ScriptedEngine>(), o);
  ASSERT_TRUE(cp.ok()) << cp.status().ToString();
  ASSERT_TRUE((*cp)
                  ->Apply(kAdmin,
                          "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                          "metadata: {name: default}\n")
                  .ok());
  for (const char* name : {"kept", "gone-1", "gone-2"}) {
    ASSERT_TRUE((*cp)->Submit(kAdmin, Job(name, 200)).ok());  // never fits: stays pending
  }
  ASSERT_TRUE((*cp)->Cancel(kAdmin, "gone-1").ok());
  ASSERT_TRUE((*cp)->Cancel(kAdmin, "gone-2").ok());
  ASSERT_TRUE((*cp)->RunCycle().ok());

  const std::string text = ProcessMetrics().RenderText();
  EXPECT_NE(text.find("tessera_jobs{queue=\"default\",state=\"cancelled\"} 2\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("tessera_jobs{queue=\"default\",state=\"pending\"} 1\n"), std::string::npos)
      << text;
  cp->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::server
