#include "metrics/cluster_metrics.h"

#include <gtest/gtest.h>

#include "metrics/test_util.h"
#include "model/codec.h"

namespace tessera::metrics {
namespace {

// Two GPU nodes that report samples, one silent node with a virtual device, one MIG node.
constexpr char kCluster[] = R"(
nodes:
  - name: gpu-a
    pool: own
    cpu: 64
    memory: 512Gi
    costPerGpuHour: 2
    devices:
      - {index: 0, uuid: GPU-a0, model: A100-80GB, memory: 80Gi, utilPercent: 95,
         memoryUsed: 40Gi, powerMilliwatts: 300500}
      - {index: 1, uuid: GPU-a1, model: A100-80GB, memory: 80Gi}
  - name: gpu-b
    pool: own
    ready: false
    cpu: 32
    memory: 256Gi
    devices:
      - {index: 0, uuid: GPU-b0, model: H100-80GB, memory: 80Gi, virtual: true, utilPercent: 50}
  - name: mig-c
    pool: slurm
    cpu: 16
    memory: 128Gi
    costPerGpuHour: 1
    devices:
      - index: 0
        uuid: GPU-c0
        model: A100-80GB
        memory: 80Gi
        virtual: true
        mig: [{profile: 3g.40gb}, {profile: 2g.20gb, start: 4}, {profile: 1g.10gb, start: 6},
              {profile: 1g.10gb, start: 6}]
queues:
  - {name: org, limit: {nvidia.com/gpu: 3}}
  - {name: ml, parent: org, weight: 2, guarantee: {nvidia.com/gpu: 2},
     limit: {nvidia.com/gpu: 4, cpu: 32}}
  - {name: infer}
jobs:
  - id: train
    queue: ml
    submitTime: 100
    startTime: 160
    tasks: [{resources: {cpu: 8, memory: 64Gi, nvidia.com/gpu: 2}}]
    running: [{task: 0, node: gpu-a, cpu: 8, memory: 64Gi, devices: [{device: 0}, {device: 1}]}]
  - id: small
    queue: infer
    startTime: 10
    tasks: [{resources: {cpu: 1, memory: 4Gi, nvidia.com/mig-1g.10gb: 1}}]
    running: [{task: 0, node: mig-c, cpu: 1, memory: 4Gi,
               devices: [{device: 0, milli: 142, memory: 10Gi, migInstance: 2}]}]
  - id: waiting
    queue: ml
    submitTime: 200
    tasks: [{resources: {cpu: 8, memory: 64Gi, nvidia.com/gpu: 8}}]
)";

Snapshot LoadCluster() {
  auto doc = ParseYaml(kCluster);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  auto s = SnapshotFromJson(*doc);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return *s;
}

// The value printed for one exact series, or "absent".
using testing::SeriesValue;

class ClusterMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    snapshot_ = LoadCluster();
    view_.snapshot = &snapshot_;
    view_.now = 1000;
    view_.jobs = {
        {"waiting", "ml", "pending", "Insufficient", 200, -1},
        {"held", "ml", "pending", "Held", 100, -1},  // a wait the user chose
        {"done", "ml", "succeeded", "", 50, -1},
    };
  }
  Snapshot snapshot_;
  ClusterView view_;
  ClusterMetrics m_;
};

TEST_F(ClusterMetricsTest, ExportsDevicesNodesQueuesAndJobs) {
  m_.Update(view_);
  const std::string text = "\n" + m_.RenderText();
  const std::string a0 =
      "{gpu=\"0\",UUID=\"GPU-a0\",device=\"nvidia0\",modelName=\"A100-80GB\","
      "Hostname=\"gpu-a\",node=\"gpu-a\",virtual=\"false\"}";
  const std::string c0 =
      "{gpu=\"0\",UUID=\"GPU-c0\",device=\"nvidia0\",modelName=\"A100-80GB\","
      "Hostname=\"mig-c\",node=\"mig-c\",virtual=\"true\"}";
  struct Case {
    std::string series;
    std::string want;
  };
  const Case cases[] = {
      // DCGM names and units: %, MiB (40Gi = 40960 MiB; 80Gi - 40Gi free), W.
      {"DCGM_FI_DEV_GPU_UTIL" + a0, "95"},
      {"DCGM_FI_DEV_FB_USED" + a0, "40960"},
      {"DCGM_FI_DEV_FB_FREE" + a0, "40960"},
      {"DCGM_FI_DEV_POWER_USAGE" + a0, "300.5"},
      {"DCGM_FI_DEV_GPU_UTIL" + c0, "0"},  // virtual devices are marked, not hidden
      // gpu-b is NotReady: its last samples are stale, so none are shown.
      {"DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-b0\",device=\"nvidia0\",modelName=\"H100-80GB\","
       "Hostname=\"gpu-b\",node=\"gpu-b\",virtual=\"true\"}",
       "absent"},
      {"tessera_node_ready{node=\"gpu-b\",pool=\"own\"}", "0"},
      {"tessera_node_ready{node=\"gpu-a\",pool=\"own\"}", "1"},
      {"tessera_node_schedulable{node=\"gpu-a\",pool=\"own\"}", "1"},
      // Allocation: whole devices count 1, a 1g MIG instance 142 milli-GPU (1/7).
      {"tessera_gpu_allocated_ratio{node=\"gpu-a\",gpu=\"1\",UUID=\"GPU-a1\"}", "1"},
      {"tessera_gpu_allocated_ratio{node=\"mig-c\",gpu=\"0\",UUID=\"GPU-c0\"}", "0.142"},
      {"tessera_gpu_mig_instances{node=\"mig-c\",gpu=\"0\",profile=\"1g.10gb\",allocated=\"true\"}",
       "1"},
      {"tessera_gpu_mig_instances{node=\"mig-c\",gpu=\"0\",profile=\"1g.10gb\",allocated="
       "\"false\"}",
       "1"},
      {"tessera_gpu_mig_instances{node=\"mig-c\",gpu=\"0\",profile=\"3g.40gb\",allocated="
       "\"false\"}",
       "1"},
      {"tessera_node_capacity_gpus{node=\"gpu-a\",pool=\"own\"}", "2"},
      {"tessera_node_allocated_gpus{node=\"gpu-a\",pool=\"own\"}", "2"},
      {"tessera_node_allocated_cpu_cores{node=\"gpu-a\",pool=\"own\"}", "8"},
      {"tessera_node_capacity_memory_bytes{node=\"gpu-a\",pool=\"own\"}", "549755813888"},
      {"tessera_node_allocated_memory_bytes{node=\"gpu-a\",pool=\"own\"}", "68719476736"},
      {"tessera_allocated_gpus{node=\"gpu-a\",queue=\"ml\"}", "2"},
      {"tessera_allocated_gpus{node=\"mig-c\",queue=\"infer\"}", "0.142"},
      // Queues: use vs guarantee and limit; no limit series where there is no limit.
      {"tessera_queue_allocated_gpus{queue=\"ml\"}", "2"},
      {"tessera_queue_guarantee_gpus{queue=\"ml\"}", "2"},
      {"tessera_queue_limit_gpus{queue=\"ml\"}", "4"},
      {"tessera_queue_limit_cpu_cores{queue=\"ml\"}", "32"},
      {"tessera_queue_limit_gpus{queue=\"infer\"}", "absent"},
      {"tessera_queue_limit_memory_bytes{queue=\"ml\"}", "absent"},  // caps GPUs and CPUs only
      // A parent queue: no jobs of its own; its subtree's use is what its limit caps.
      {"tessera_queue_allocated_gpus{queue=\"org\"}", "0"},
      {"tessera_queue_subtree_allocated_gpus{queue=\"org\"}", "2"},
      {"tessera_queue_subtree_allocated_gpus{queue=\"ml\"}", "2"},
      {"tessera_queue_limit_gpus{queue=\"org\"}", "3"},
      {"tessera_queue_weight{queue=\"ml\"}", "2"},
      // Cost rate: 2 GPUs x 2/h = 4/h; 0.142 GPU x 1/h = 0.142/h.
      {"tessera_queue_cost_per_hour{queue=\"ml\"}", "4"},
      {"tessera_queue_cost_per_hour{queue=\"infer\"}", "0.142"},
      {"tessera_queue_cost_total{queue=\"ml\"}", "0"},
      // Jobs by state (lifecycle from the server, the rest derived), pending by reason.
      {"tessera_jobs{queue=\"ml\",state=\"running\"}", "1"},
      {"tessera_jobs{queue=\"ml\",state=\"pending\"}", "2"},
      {"tessera_jobs{queue=\"ml\",state=\"succeeded\"}", "1"},
      {"tessera_jobs{queue=\"infer\",state=\"running\"}", "1"},
      {"tessera_jobs{queue=\"infer\",state=\"pending\"}", "0"},
      {"tessera_pending_jobs{queue=\"ml\",reason=\"Insufficient\"}", "1"},
      {"tessera_pending_jobs{queue=\"ml\",reason=\"Held\"}", "1"},
      {"tessera_queue_oldest_pending_job_age_seconds{queue=\"ml\"}", "800"},  // not held's 900
      {"tessera_queue_oldest_pending_job_age_seconds{queue=\"infer\"}", "0"},
      // Waits are observed when jobs are bound (ObserveJobStart), never inferred from a view.
      {"tessera_job_queue_wait_seconds_count{queue=\"ml\"}", "absent"},
      {"tessera_build_info{version=\"0.1.0\"}", "1"},
  };
  for (const Case& c : cases) EXPECT_EQ(SeriesValue(text, c.series), c.want) << c.series;
  EXPECT_TRUE(Validate(m_.registry().Collect()).ok())
      << Validate(m_.registry().Collect()).ToString();
}

TEST_F(ClusterMetricsTest, CostAndGpuSecondsAccrueExactlyInIntegers) {
  m_.Update(view_);
  view_.now += 1800;  // half an hour at 4/h and 0.142/h
  m_.Update(view_);
  std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_queue_cost_total{queue=\"ml\"}"), "2");
  EXPECT_EQ(SeriesValue(text, "tessera_queue_cost_total{queue=\"infer\"}"), "0.071");
  EXPECT_EQ(SeriesValue(text, "tessera_queue_gpu_seconds_total{queue=\"ml\"}"), "3600");
  // 142 milli-GPU x 1800 s = 255.6 GPU-seconds: 255 now, 0.6 carried.
  EXPECT_EQ(SeriesValue(text, "tessera_queue_gpu_seconds_total{queue=\"infer\"}"), "255");
  for (int i = 0; i < 3; ++i) {  // 0.6 + 3 x 0.142 = 1.026: one more whole second
    view_.now += 1;
    m_.Update(view_);
  }
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_queue_gpu_seconds_total{queue=\"infer\"}"), "256");
}

// Restored counters go on from what was stored. The first update counts the time since then
// for the allocations it shows (still held at a restart), each job from its start where that
// is later; with a persister, the counters show only what it took.
TEST_F(ClusterMetricsTest, RestoredCountersFillTheGapAndShowWhatIsStored) {
  for (Job& j : snapshot_.jobs)
    if (j.id == "small") j.start_time = 800;  // bound while the server was down
  m_.RestoreAccrual(
      {.to = 500, .queues = {{"ml", {.cost_micros = 7'000'000, .gpu_seconds = 100}}}});
  std::vector<Accrual> stored;
  m_.PersistAccrualWith(
      [&stored](const Accrual& a) {
        stored.push_back(a);
        return true;
      },
      10);
  m_.Update(view_);  // now 1000
  std::string text = "\n" + m_.RenderText();
  // train: 2 GPUs x 500 s = 1000 GPU-s at 2/GPU-h = 0.555555; small: 0.142 GPU x 200 s.
  EXPECT_EQ(SeriesValue(text, "tessera_queue_gpu_seconds_total{queue=\"ml\"}"), "1100");
  EXPECT_EQ(SeriesValue(text, "tessera_queue_cost_total{queue=\"ml\"}"), "7.555555");
  EXPECT_EQ(SeriesValue(text, "tessera_queue_gpu_seconds_total{queue=\"infer\"}"), "28");
  ASSERT_EQ(stored.size(), 1u);  // the gap filled is stored at once
  EXPECT_EQ(stored[0].to, 1000);
  EXPECT_EQ(stored[0].queues["ml"].gpu_seconds, 1100);
  EXPECT_EQ(stored[0].queues["ml"].cost_carry, 2000);  // 4/h x 500 s = 555555 + 2000/3600
  view_.now += 5;
  m_.Update(view_);  // 10 GPU-s more, not stored yet (every 10 s): not shown
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_queue_gpu_seconds_total{queue=\"ml\"}"), "1100");
  ASSERT_TRUE(m_.FlushAccrual());
  EXPECT_EQ(stored.back().to, 1005);
  EXPECT_EQ(stored.back().queues["ml"].gpu_seconds, 1110);
}

TEST_F(ClusterMetricsTest, EachJobStartIsObservedOnceWithItsWait) {
  m_.Update(view_);
  m_.ObserveJobStart("ml", 200, 2500);  // "waiting" bound 2300 s after its submission
  view_.now = 2600;
  view_.jobs[0] = {"waiting", "ml", "running", "", 200, -1};
  m_.Update(view_);
  view_.now = 2700;
  m_.Update(view_);  // a view is no start: still running, not observed again
  std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_job_queue_wait_seconds_count{queue=\"ml\"}"), "1");
  EXPECT_EQ(SeriesValue(text, "tessera_job_queue_wait_seconds_sum{queue=\"ml\"}"), "2300");
  EXPECT_EQ(SeriesValue(text, "tessera_job_queue_wait_seconds_bucket{queue=\"ml\",le=\"1800\"}"),
            "0");
  EXPECT_EQ(SeriesValue(text, "tessera_job_queue_wait_seconds_bucket{queue=\"ml\",le=\"3600\"}"),
            "1");
  EXPECT_EQ(SeriesValue(text, "tessera_queue_oldest_pending_job_age_seconds{queue=\"ml\"}"), "0");
  // Requeued after preemption and bound again: a new start, waited from the requeue. Two
  // attempts that start and end between updates count too (no view ever shows them running).
  m_.ObserveJobStart("ml", 2800, 2830);
  m_.ObserveJobStart("ml", 2840, 2840);
  m_.ObserveJobStart("ml", 2850, 2860);
  view_.now = 2900;
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_job_queue_wait_seconds_count{queue=\"ml\"}"), "4");
  EXPECT_EQ(SeriesValue(text, "tessera_job_queue_wait_seconds_sum{queue=\"ml\"}"), "2340");
}

// Prometheus reads a vanished series as "no data": every state given stays exported in every
// queue, at 0 when no job is in it.
TEST_F(ClusterMetricsTest, EveryJobStateIsExportedInEveryQueue) {
  view_.job_states = {"pending",   "scheduled", "running",  "terminating",
                      "succeeded", "failed",    "cancelled"};
  m_.Update(view_);
  std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_jobs{queue=\"ml\",state=\"succeeded\"}"), "1");
  EXPECT_EQ(SeriesValue(text, "tessera_jobs{queue=\"ml\",state=\"failed\"}"), "0");
  EXPECT_EQ(SeriesValue(text, "tessera_jobs{queue=\"infer\",state=\"succeeded\"}"), "0");
  view_.jobs.pop_back();  // "done" is deleted: its state drops to 0, it does not vanish
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  for (const std::string& state : view_.job_states) {
    for (const char* queue : {"ml", "infer"}) {
      const std::string series =
          "tessera_jobs{queue=\"" + std::string(queue) + "\",state=\"" + state + "\"}";
      EXPECT_NE(SeriesValue(text, series), "absent") << series;
    }
  }
  EXPECT_EQ(SeriesValue(text, "tessera_jobs{queue=\"ml\",state=\"succeeded\"}"), "0");
}

TEST_F(ClusterMetricsTest, PlaceholdersOfOneJobCountOnce) {
  // A job in transition appears as one placeholder per allocation: "<job>#<allocation>".
  auto train = std::find_if(snapshot_.jobs.begin(), snapshot_.jobs.end(),
                            [](const Job& j) { return j.id == "train"; });
  ASSERT_NE(train, snapshot_.jobs.end());
  train->id = "train#a-1";  // running on gpu-a
  Job ph = *train;
  ph.id = "train#a-2";
  ph.allocations[0]->devices = {};
  ph.allocations[0]->cpu_milli = 1000;
  snapshot_.jobs.push_back(ph);
  m_.Update(view_);
  const std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_jobs{queue=\"ml\",state=\"running\"}"), "1");
  EXPECT_EQ(SeriesValue(text, "tessera_node_allocated_cpu_cores{node=\"gpu-a\",pool=\"own\"}"),
            "9");
}

// An exclusive job holds its nodes whole: the engine charges it every healthy GPU and every
// core of each (what `get queues` shows), and so do the queue, node and cost figures; the
// device gauges show the devices its tasks were bound.
TEST_F(ClusterMetricsTest, AnExclusiveJobIsChargedItsNodesWhole) {
  auto train = std::find_if(snapshot_.jobs.begin(), snapshot_.jobs.end(),
                            [](const Job& j) { return j.id == "train"; });
  ASSERT_NE(train, snapshot_.jobs.end());
  train->exclusive = true;
  train->id = "train#a-1";  // in transition: one placeholder per allocation, one job
  train->allocations[0]->devices = {{.device = 0}};
  Job second = *train;
  second.id = "train#a-2";  // a second task on the same node, without a GPU
  second.allocations[0]->devices = {};
  second.allocations[0]->cpu_milli = 1000;
  snapshot_.jobs.push_back(second);
  m_.Update(view_);
  view_.now += 1800;
  m_.Update(view_);
  const std::string text = "\n" + m_.RenderText();
  const std::pair<std::string, std::string> cases[] = {
      // gpu-a (2 GPUs, 64 cores, 2/GPU-h) once, whatever its tasks were bound.
      {"tessera_queue_allocated_gpus{queue=\"ml\"}", "2"},
      {"tessera_queue_subtree_allocated_gpus{queue=\"ml\"}", "2"},
      {"tessera_queue_subtree_allocated_gpus{queue=\"org\"}", "2"},
      {"tessera_queue_allocated_cpu_cores{queue=\"ml\"}", "64"},
      {"tessera_node_allocated_gpus{node=\"gpu-a\",pool=\"own\"}", "2"},
      {"tessera_node_allocated_cpu_cores{node=\"gpu-a\",pool=\"own\"}", "64"},
      {"tessera_allocated_gpus{node=\"gpu-a\",queue=\"ml\"}", "2"},
      {"tessera_queue_cost_per_hour{queue=\"ml\"}", "4"},
      {"tessera_queue_gpu_seconds_total{queue=\"ml\"}", "3600"},  // 2 GPUs x 1800 s
      {"tessera_queue_cost_total{queue=\"ml\"}", "2"},
      // The device no task was bound: not in use, though nobody else may have it.
      {"tessera_gpu_allocated_ratio{node=\"gpu-a\",gpu=\"0\",UUID=\"GPU-a0\"}", "1"},
      {"tessera_gpu_allocated_ratio{node=\"gpu-a\",gpu=\"1\",UUID=\"GPU-a1\"}", "0"},
  };
  for (const auto& [series, want] : cases) EXPECT_EQ(SeriesValue(text, series), want) << series;
}

TEST_F(ClusterMetricsTest, APendingJobWithLingeringAllocationsIsPendingOnce) {
  // Requeued "train": pending again while its old allocation still holds GPUs.
  auto train = std::find_if(snapshot_.jobs.begin(), snapshot_.jobs.end(),
                            [](const Job& j) { return j.id == "train"; });
  ASSERT_NE(train, snapshot_.jobs.end());
  Job ph = *train;
  ph.id = "train#a-7";
  train->allocations[0].reset();
  snapshot_.jobs.push_back(ph);
  m_.Update(view_);
  const std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_jobs{queue=\"ml\",state=\"running\"}"), "0");
  EXPECT_EQ(SeriesValue(text, "tessera_jobs{queue=\"ml\",state=\"pending\"}"),
            "3");  // + waiting, held
  EXPECT_EQ(SeriesValue(text, "tessera_queue_allocated_gpus{queue=\"ml\"}"), "2");  // still held
}

TEST_F(ClusterMetricsTest, PendingReasonFallsBackToThePlan) {
  view_.jobs.clear();  // the snapshot alone: "waiting" is pending, its reason from the plan
  Plan plan;
  JobDecision d;
  d.job = "waiting";
  d.outcome = Outcome::kWaiting;
  d.reason = std::make_shared<const PendingReason>(PendingReason{"QueueOverLimit", "", "", {}});
  plan.decisions.push_back(d);
  view_.plan = &plan;
  m_.Update(view_);
  std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"ml\",reason=\"QueueOverLimit\"}"), "1");
  view_.plan = nullptr;
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  // A reason no job waits for any more reads 0 rather than vanishing (an alert over the
  // series would read "no data").
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"ml\",reason=\"QueueOverLimit\"}"), "0");
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"ml\",reason=\"NotYetScheduled\"}"),
            "1");
  // One that can never fit is counted apart, whatever resource it lacks.
  plan.decisions[0].outcome = Outcome::kInfeasible;
  plan.decisions[0].reason =
      std::make_shared<const PendingReason>(PendingReason{"Insufficient", "", "", {}});
  view_.plan = &plan;
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"ml\",reason=\"Infeasible\"}"), "1");
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"ml\",reason=\"Insufficient\"}"),
            "absent");
}

// A service's replicas, asked and running, per job (an alert compares them); other jobs
// and finished services have no series.
TEST_F(ClusterMetricsTest, ServicesExportTheirReplicasAskedAndRunning) {
  JobStatus svc{"small", "infer", "running", "", 10, -1};
  svc.service = true;
  svc.service_replicas = 3;
  svc.service_running = 1;
  view_.jobs.push_back(svc);
  m_.Update(view_);
  std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_service_replicas{queue=\"infer\",service=\"small\"}"), "3");
  EXPECT_EQ(SeriesValue(text, "tessera_service_replicas_running{queue=\"infer\",service=\"small\"}"),
            "1");
  EXPECT_EQ(SeriesValue(text, "tessera_service_replicas{queue=\"ml\",service=\"waiting\"}"), "absent");
  // Scaled to zero (tessera scale): asked 0, as kube_deployment_spec_replicas says 0.
  view_.jobs.back().service_replicas = 0;
  view_.jobs.back().service_running = 0;
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_service_replicas{queue=\"infer\",service=\"small\"}"), "0");
  view_.jobs.back() = {"small", "infer", "cancelled", "", 10, -1};
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_service_replicas{queue=\"infer\",service=\"small\"}"), "absent");
}

TEST_F(ClusterMetricsTest, PendingReasonsReadZeroUntilTheirQueueGoes) {
  view_.jobs.push_back({"serve", "scratch", "pending", "Insufficient", 900, -1});
  m_.Update(view_);
  std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"scratch\",reason=\"Insufficient\"}"),
            "1");
  view_.jobs.back().state = "running";
  view_.jobs.back().pending_reason = "";
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"scratch\",reason=\"Insufficient\"}"),
            "0");
  view_.jobs.pop_back();  // its job and queue are gone: no series left behind for ever
  m_.Update(view_);
  text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"scratch\",reason=\"Insufficient\"}"),
            "absent");
  EXPECT_EQ(SeriesValue(text, "tessera_pending_jobs{queue=\"ml\",reason=\"Held\"}"), "1");
}

TEST_F(ClusterMetricsTest, ObserveCycleCountsBindingsEvictionsAndLatency) {
  Plan plan;
  plan.bindings.resize(3);
  Eviction e;
  e.reason = "Preempted";
  plan.evictions = {e, e};
  m_.ObserveCycle(plan, 0.003);
  m_.ObserveCycle(Plan{}, 0.0002);
  const std::string text = "\n" + m_.RenderText();
  EXPECT_EQ(SeriesValue(text, "tessera_scheduling_bindings_total"), "3");
  EXPECT_EQ(SeriesValue(text, "tessera_scheduling_evictions_total{reason=\"Preempted\"}"), "2");
  EXPECT_EQ(SeriesValue(text, "tessera_scheduling_cycle_duration_seconds_count"), "2");
  EXPECT_EQ(SeriesValue(text, "tessera_scheduling_cycle_duration_seconds_bucket{le=\"0.00025\"}"),
            "1");
  EXPECT_EQ(SeriesValue(text, "tessera_scheduling_cycle_duration_seconds_bucket{le=\"0.005\"}"),
            "2");
}

TEST_F(ClusterMetricsTest, EqualViewsRenderEqualBytes) {
  ClusterMetrics other;
  m_.Update(view_);
  other.Update(view_);
  EXPECT_EQ(m_.RenderText(), other.RenderText());
}

TEST(ExportedNamesTest, ListsEveryFamilyOnceSortedWithHelpInEveryScrape) {
  const std::vector<std::string> names = ClusterMetrics::ExportedNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const char* want :
       {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "tessera_jobs",
        "tessera_pending_jobs", "tessera_job_queue_wait_seconds",
        "tessera_scheduling_cycle_duration_seconds", "tessera_queue_cost_total"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  ClusterMetrics m;  // an empty cluster still lists every name
  const std::string text = m.RenderText();
  for (const std::string& n : names) {
    EXPECT_NE(text.find("# TYPE " + n + " "), std::string::npos) << n;
  }
}

}  // namespace
}  // namespace tessera::metrics
