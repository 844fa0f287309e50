#include "sim/fgd.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include <gtest/gtest.h>

#include "engine/plugins/paper/paper_scores.h"

namespace tessera::sim {
namespace {

using paper::NodeFree;
using paper::PodShape;

PodShape ShapeOfPod(const FgdPod& p) {
  PodShape s;
  s.cpu_milli = p.cpu_milli;
  s.gpus = p.num_gpu;
  s.gpu_milli = p.gpu_milli;
  for (size_t i = 0; i < p.models.size(); ++i) s.gpu_type += (i ? "|" : "") + p.models[i];
  return s;
}

// A direct transcription of the paper simulator's loop (filter, score, argmax, lowest name)
// over the paper's score functions, without the engine: the yardstick that the engine-hosted
// runs must match.
class ReferencePlacer : public FgdPlacer {
 public:
  ReferencePlacer(const FgdWorkload& w, std::string policy) : policy_(std::move(policy)) {
    for (const Node& n : w.nodes) {
      NodeFree f;
      f.cpu_left = n.cpu_milli;
      f.gpu_left.assign(n.devices.size(), 1000);
      if (!n.devices.empty()) f.model = n.devices[0].model;
      nodes_.push_back(f);
      mem_left_.push_back(n.memory_bytes);
    }
    std::vector<std::pair<PodShape, int64_t>> counts;
    std::map<std::tuple<int64_t, int32_t, int32_t, std::string>, int64_t> hist;
    for (const FgdPod& p : w.originals) {
      PodShape s = ShapeOfPod(p);
      hist[{s.cpu_milli, s.gpu_milli, s.gpus, s.gpu_type}]++;
    }
    for (const auto& [k, c] : hist)
      counts.push_back({{std::get<0>(k), std::get<1>(k), std::get<2>(k), std::get<3>(k)}, c});
    typical_ = paper::SelectTypicalPods(counts);
  }

  StatusOr<bool> Place(const FgdPod& pod) override {
    const PodShape s = ShapeOfPod(pod);
    std::vector<int32_t> feasible;
    for (int32_t i = 0; i < static_cast<int32_t>(nodes_.size()); ++i) {
      const NodeFree& n = nodes_[i];
      if (n.cpu_left < s.cpu_milli || mem_left_[i] < pod.memory_mib * 1024 * 1024) continue;
      if (s.gpus > 0 && (!paper::Accessible(n, s) || !paper::GpuFits(n, s))) continue;
      feasible.push_back(i);
    }
    if (feasible.empty()) return false;
    std::vector<int64_t> scores;
    for (int32_t i : feasible) scores.push_back(Score(nodes_[i], s));
    if (policy_ == "bestfit") paper::NormalizeMinMax(scores);
    size_t best = 0;
    for (size_t k = 1; k < scores.size(); ++k)
      if (scores[k] > scores[best]) best = k;
    NodeFree& n = nodes_[feasible[best]];
    std::vector<int32_t> devs =
        policy_ == "fgd" ? paper::FgdScore(n, s, typical_).devices : paper::DevicesForPod(n, s);
    n.cpu_left -= s.cpu_milli;
    mem_left_[feasible[best]] -= pod.memory_mib * 1024 * 1024;
    for (int32_t d : devs) {
      n.gpu_left[d] -= s.gpu_milli;
      allocated_ += s.gpu_milli;
    }
    return true;
  }
  int64_t AllocatedGpuMilli() const override { return allocated_; }

 private:
  int64_t Score(const NodeFree& n, const PodShape& s) {
    if (policy_ == "bestfit") return paper::BestFitRawScore(n, s);
    // FGD, memoised on the node's free state: the score depends on nothing else.
    std::string key = std::to_string(n.cpu_left) + "/" + n.model + "/" +
                      std::to_string(s.cpu_milli) + "/" + std::to_string(s.gpus) + "/" +
                      std::to_string(s.gpu_milli) + "/" + s.gpu_type;
    for (int32_t l : n.gpu_left) key += "," + std::to_string(l);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    int64_t v = paper::FgdScore(n, s, typical_).score;
    memo_.emplace(std::move(key), v);
    return v;
  }
  std::string policy_;
  std::vector<NodeFree> nodes_;
  std::vector<int64_t> mem_left_;
  std::vector<paper::TypicalPod> typical_;
  std::unordered_map<std::string, int64_t> memo_;
  int64_t allocated_ = 0;
};

struct Seed42 {
  std::vector<OpenbNode> nodes;
  std::vector<OpenbPod> pods;
  FgdWorkloadOptions options;
};

bool LoadSeed42(Seed42& out) {
  std::string dir = FindTracesDir();
  if (dir.empty()) return false;
  auto nodes = LoadOpenbNodes(dir + "/openb/openb_node_list_gpu_node.csv");
  auto pods = LoadOpenbPods(dir + "/openb/openb_pod_list_default.csv");
  auto order = LoadArrivalOrder(dir + "/openb/fgd-seed42/default_ts42_arrival_order.csv");
  auto prefix = LoadNodePrefix(dir + "/openb/fgd-seed42/default_ts42_node_prefix.csv");
  if (!nodes.ok() || !pods.ok() || !order.ok() || !prefix.ok()) return false;
  out.nodes = *nodes;
  out.pods = *pods;
  out.options.arrival_order = *order;
  out.options.node_order = *prefix;
  return true;
}

// n pods "p0".."p<n-1>" of one CPU and gpu_milli of one GPU each.
std::vector<OpenbPod> OneGpuPods(int n, int32_t gpu_milli) {
  std::vector<OpenbPod> pods;
  for (int i = 0; i < n; ++i) {
    OpenbPod p;
    p.name = "p" + std::to_string(i);
    p.cpu_milli = 1000;
    p.num_gpu = 1;
    p.gpu_milli = gpu_milli;
    pods.push_back(p);
  }
  return pods;
}

TEST(FgdWorkload, SeededConstructionIsDeterministicAndReachesTheTarget) {
  std::vector<OpenbNode> nodes = {{"n1", 64000, 262144, 8, "T4"},
                                  {"n0", 96000, 262144, 2, "V100M16"}};
  std::vector<OpenbPod> pods = OneGpuPods(6, 500);
  FgdWorkloadOptions o;
  o.seed = 7;
  auto a = BuildFgdWorkload(nodes, pods, o);
  auto b = BuildFgdWorkload(nodes, pods, o);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->arrivals.size(), b->arrivals.size());
  for (size_t i = 0; i < a->arrivals.size(); ++i)
    EXPECT_EQ(a->arrivals[i].name, b->arrivals[i].name);
  // 10 GPUs at 130 % = 13,000 milli; 6 originals give 3,000, so 20 clones of 500 reach 13,000.
  int64_t total = 0;
  for (const auto& p : a->arrivals) total += p.GpuMilli();
  EXPECT_EQ(total, 13000);
  EXPECT_EQ(a->arrivals.size(), 26u);
  EXPECT_EQ(a->arrivals[6].name.find("-tuned-0"), 2u);
  // Nodes are renamed "NNNN-<name>" by a permutation and sorted by that name.
  ASSERT_EQ(a->nodes.size(), 2u);
  EXPECT_LT(a->nodes[0].name, a->nodes[1].name);
  EXPECT_EQ(a->nodes[0].name.size(), 7u);
}

// A load below the trace's own: the shuffled pods arrive only until it is reached, and the
// workload says what arrived. A pod list without GPU requests is refused (it would never
// reach any load).
TEST(FgdWorkload, ALoadBelowTheTracesOwnCutsTheArrivals) {
  std::vector<OpenbNode> nodes = {{"n0", 64000, 262144, 10, "T4"}};
  std::vector<OpenbPod> pods = OneGpuPods(12, 1000);
  FgdWorkloadOptions o;
  o.load_percent = 40;
  auto w = BuildFgdWorkload(nodes, pods, o);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->arrivals.size(), 4u);  // 4 of the 12 one-GPU pods: 40 % of 10 GPUs
  EXPECT_EQ(w->arrived_percent, 40);
  o.load_percent = 130;
  w = BuildFgdWorkload(nodes, pods, o);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->arrivals.size(), 13u);
  EXPECT_EQ(w->arrived_percent, 130);
  for (auto& p : pods) p.num_gpu = p.gpu_milli = 0;
  w = BuildFgdWorkload(nodes, pods, o);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("no pod requests a GPU"), std::string::npos);
}

// An arrival order file's request columns are a copy of the pod list's (the protocol takes
// requests from the pod list): a row that disagrees means the order was made for another pod
// list (the seed-42 order with openb_pod_list_gpushare100.csv, say), and is refused by file
// and line instead of replaying a mix of both.
TEST(FgdWorkload, ArrivalOrderRowsMustMatchThePodList) {
  std::vector<OpenbNode> nodes = {{"n0", 64000, 262144, 8, "T4"}};
  std::vector<OpenbPod> pods = OneGpuPods(2, 500);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tessera_order_" + std::to_string(::getpid())))
          .string();
  auto build = [&](const std::string& rows) {
    std::ofstream(path) << "idx,name,cpu_milli,num_gpu,gpu_milli\n" << rows;
    auto order = LoadArrivalOrder(path);
    EXPECT_TRUE(order.ok()) << order.status().ToString();
    FgdWorkloadOptions o;
    o.arrival_order = *order;
    return BuildFgdWorkload(nodes, pods, o);
  };
  auto ok = build("0,p1,1000,1,500\n1,p0,1000,1,500\n2,p0-tuned-0,1000,1,500\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->arrivals.size(), 3u);
  const std::string file = std::filesystem::path(path).filename().string();
  const std::pair<std::string, std::string> bad[] = {
      {"0,p1,1000,1,500\n1,p0,1000,1,1000\n",
       file + ":3: gpu_milli: pod \"p0\" has 1000 here but 500 in the pod list"},
      {"0,p1,2000,1,500\n", file + ":2: cpu_milli: pod \"p1\" has 2000 here but 1000"},
      {"0,p0-tuned-4,1000,2,500\n", file + ":2: num_gpu: pod \"p0-tuned-4\" has 2 here"},
      {"0,p9,1000,1,500\n", file + ":2: pod \"p9\" is not in the pod list"},
  };
  for (const auto& [rows, want] : bad) {
    auto w = build(rows);
    ASSERT_FALSE(w.ok()) << rows;
    EXPECT_EQ(w.status().message().rfind(want, 0), 0u) << w.status().message();
  }
  std::filesystem::remove(path);
}

// The exact-reproduction check on the paper's own seed-42 draws, with the direct transcription.
TEST(FgdReference, Seed42MatchesThePaper) {
  Seed42 s;
  if (!LoadSeed42(s))
    GTEST_SKIP() << "../shared/traces/openb not found (set TESSERA_TRACES); skipping";
  auto w = BuildFgdWorkload(s.nodes, s.pods, s.options);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  EXPECT_EQ(w->arrivals.size(), 10866u);
  struct Case {
    const char* policy;
    double unallocated;  // FGD-PROTOCOL.md s.5, seed 42 at 100 % arrived load
  } cases[] = {{"bestfit", 7.06}, {"fgd", 4.86}};
  for (const Case& c : cases) {
    ReferencePlacer placer(*w, c.policy);
    auto run = RunFgd(*w, placer);
    ASSERT_TRUE(run.ok());
    auto u = run->curve.UnallocatedAt(100);
    ASSERT_TRUE(u.has_value());
    EXPECT_NEAR(*u, c.unallocated, 0.05) << c.policy;
    std::printf("reference %s seed 42: %.2f %% unallocated at 100 %% load (paper %.2f)\n", c.policy,
                *u, c.unallocated);
  }
}

// The same runs hosted by the engine (paper-* score plugins): the acceptance check of issue 3.
TEST(FgdEngine, Seed42ThroughTheEngineMatchesThePaper) {
  Seed42 s;
  if (!LoadSeed42(s))
    GTEST_SKIP() << "../shared/traces/openb not found (set TESSERA_TRACES); skipping";
  auto w = BuildFgdWorkload(s.nodes, s.pods, s.options);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  struct Case {
    const char* policy;
    double unallocated;
  } cases[] = {{"bestfit", 7.06}, {"fgd", 4.86}};
  for (const Case& c : cases) {
    auto config = FgdPolicyConfig(c.policy, *w);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    auto placer = EnginePlacer::Create(*w, *config, 42);
    ASSERT_TRUE(placer.ok()) << placer.status().ToString();
    auto run = RunFgd(*w, **placer);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    auto u = run->curve.UnallocatedAt(100);
    ASSERT_TRUE(u.has_value());
    EXPECT_NEAR(*u, c.unallocated, 0.05) << c.policy;
    std::printf("engine %s seed 42: %.2f %% unallocated at 100 %% load (paper %.2f)\n", c.policy,
                *u, c.unallocated);
  }
}

// Every paper policy through the engine places exactly as the direct transcription does,
// pod for pod, on the first 3,000 arrivals of seed 42 (random aside: its draws differ).
TEST(FgdEngine, EngineHostedPoliciesMatchTheTranscription) {
  Seed42 s;
  if (!LoadSeed42(s))
    GTEST_SKIP() << "../shared/traces/openb not found (set TESSERA_TRACES); skipping";
  auto w = BuildFgdWorkload(s.nodes, s.pods, s.options);
  ASSERT_TRUE(w.ok());
  w->arrivals.resize(3000);
  for (const char* policy : {"bestfit", "fgd"}) {
    auto config = FgdPolicyConfig(policy, *w);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    auto engine = EnginePlacer::Create(*w, *config, 42);
    ASSERT_TRUE(engine.ok());
    ReferencePlacer ref(*w, policy);
    for (const FgdPod& p : w->arrivals) {
      auto a = (*engine)->Place(p);
      auto b = ref.Place(p);
      ASSERT_TRUE(a.ok() && b.ok());
      ASSERT_EQ(*a, *b) << policy << " " << p.name;
      ASSERT_EQ((*engine)->AllocatedGpuMilli(), ref.AllocatedGpuMilli()) << policy << " " << p.name;
    }
  }
}

// A small mixed cluster (T4 and V100 nodes of 2 and 8 GPUs) and 60 pods: whole, shared
// and model-specific GPU requests and CPU-only ones.
StatusOr<FgdWorkload> MixedWorkload(uint64_t seed) {
  std::vector<OpenbNode> nodes;
  for (int i = 0; i < 12; ++i)
    nodes.push_back({"n" + std::to_string(i), 64000 + 32000 * (i % 3), 262144, i % 2 ? 8 : 2,
                     i % 4 ? "T4" : "V100M16"});
  std::vector<OpenbPod> pods;
  for (int i = 0; i < 60; ++i) {
    OpenbPod p;
    p.name = "p" + std::to_string(100 + i);
    p.cpu_milli = 2000 + 1000 * (i % 7);
    p.memory_mib = 4096;
    p.num_gpu = i % 9 == 0 ? 0 : i % 11 == 0 ? 2 : 1;
    p.gpu_milli = p.num_gpu == 1 ? 100 + (i * 137) % 900 : p.num_gpu ? 1000 : 0;
    if (i % 13 == 0) p.gpu_spec = {"V100M16"};
    pods.push_back(p);
  }
  FgdWorkloadOptions o;
  o.seed = seed;
  return BuildFgdWorkload(nodes, pods, o);
}

// Of a configuration's actions the protocol runs enqueue and allocate only (it never evicts
// and has no clock): the default configuration places exactly as its allocate-only self,
// and a configuration without allocate is refused with a message that says so.
TEST(FgdEngine, RunsOnlyTheActionsTheProtocolAllows) {
  auto w = MixedWorkload(42);
  ASSERT_TRUE(w.ok());
  auto run = [&](const EngineConfig& c) {
    auto placer = EnginePlacer::Create(*w, c, 42);
    EXPECT_TRUE(placer.ok()) << placer.status().ToString();
    std::vector<AllocSample> out;
    if (placer.ok())
      if (auto r = RunFgd(*w, **placer); r.ok()) out = r->samples;
    return out;
  };
  auto full = FgdPolicyConfig("tessera", *w);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(full->actions.size(), 5u);  // enqueue, allocate, preempt, reclaim, backfill
  EngineConfig allocate_only = *full;
  allocate_only.actions = {"enqueue", "allocate"};
  auto a = run(*full), b = run(allocate_only);
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_EQ(a[i].allocated_milli, b[i].allocated_milli) << "pod " << i;

  EngineConfig no_allocate = *full;
  no_allocate.actions = {"enqueue", "backfill"};
  auto refused = EnginePlacer::Create(*w, no_allocate, 42);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("allocate action"), std::string::npos)
      << refused.status().ToString();
}

TEST(FgdEngine, EveryPolicyRunsAndIsDeterministic) {
  auto w = MixedWorkload(5);
  ASSERT_TRUE(w.ok());
  for (const std::string& policy : FgdPolicyNames()) {
    double first = -1;
    for (int k = 0; k < 2; ++k) {
      auto config = FgdPolicyConfig(policy, *w);
      ASSERT_TRUE(config.ok()) << policy << ": " << config.status().ToString();
      auto placer = EnginePlacer::Create(*w, *config, 5);
      ASSERT_TRUE(placer.ok()) << placer.status().ToString();
      auto run = RunFgd(*w, **placer);
      ASSERT_TRUE(run.ok()) << policy << ": " << run.status().ToString();
      EXPECT_GT(run->placed, 0) << policy;
      EXPECT_LE((*placer)->AllocatedGpuMilli(), w->total_gpu_milli) << policy;
      double u = run->curve.UnallocatedAt(100).value_or(-1);
      if (k == 0)
        first = u;
      else
        EXPECT_EQ(u, first) << policy;
    }
  }
}

}  // namespace
}  // namespace tessera::sim
