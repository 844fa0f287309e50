#include "model/codec.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

constexpr char kCluster[] = R"(
nodes:
  - name: gpu-b
    cpu: 64
    memory: 512Gi
    gpus: {model: A100-80GB, count: 8, domain: nvl0, shareable: false}
    taints: [{key: dedicated, value: infer, effect: NoSchedule}]
  - name: gpu-a
    cpu: "96"
    memory: 1Ti
    gpus: {model: A100-80GB, count: 2, mig: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
queues:
  - {name: ml, weight: 2, guarantee: {nvidia.com/gpu: 4}, limit: {nvidia.com/gpu: 12}}
priorityClasses:
  - {name: high, value: 1000}
jobs:
  - id: train
    queue: ml
    priorityClass: high
    minAvailable: 2
    oneTaskPerNode: true
    tasks:
      - {name: worker, replicas: 2, resources: {cpu: 8, memory: 64Gi, nvidia.com/gpu: 4}}
    running:
      - {task: 0, node: gpu-b, devices: [{device: 0}, {device: 1}, {device: 2}, {device: 3}]}
  - id: infer
    tasks:
      - resources: {cpu: 500m, memory: 4Gi, nvidia.com/mig-1g.10gb: 1}
)";

TEST(CodecTest, ReadsClusterShorthandsAndResolvesClasses) {
  auto doc = ParseYaml(kCluster);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto s = SnapshotFromJson(*doc);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->nodes.size(), 2u);
  EXPECT_EQ(s->nodes[0].name, "gpu-a");  // canonical order
  EXPECT_EQ(s->nodes[0].devices[0].mig.size(), 4u);
  EXPECT_EQ(s->nodes[0].devices[0].mig[1].start_slice, 3);
  EXPECT_EQ(s->nodes[1].devices.size(), 8u);
  EXPECT_EQ(s->nodes[1].devices[7].memory_bytes, 80LL << 30);
  EXPECT_FALSE(s->nodes[1].devices[7].shareable);
  EXPECT_TRUE(s->nodes[0].devices[0].shareable);  // by default
  EXPECT_EQ(SnapshotToJson(*s)["nodes"][1]["devices"][0]["shareable"], false);
  EXPECT_EQ(s->nodes[1].cpu_milli, 64000);
  const Job& train = s->jobs[1];
  EXPECT_EQ(train.id, "train");
  EXPECT_EQ(train.priority, 1000);
  EXPECT_EQ(train.groups[0].request.gpu.kind, GpuRequestKind::kWhole);
  EXPECT_EQ(train.RunningTasks(), 1);
  EXPECT_EQ(train.allocations[0]->cpu_milli, 8000);  // defaulted from the request
  EXPECT_TRUE(train.one_task_per_node);
  const Job& infer = s->jobs[0];
  EXPECT_EQ(infer.groups[0].request.gpu.kind, GpuRequestKind::kMig);
  EXPECT_EQ(infer.groups[0].request.gpu.mig_profile, "1g.10gb");
  EXPECT_EQ(infer.groups[0].request.cpu_milli, 500);
  // A quoted fraction is a fraction, as any other quoted quantity is.
  auto quoted = SnapshotFromJson(
      *ParseYaml("jobs: [{id: q, tasks: [{resources: {tessera.io/gpu-milli: \"300\"}}]}]"));
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  EXPECT_EQ(quoted->jobs[0].groups[0].request.gpu.milli, 300);
}

TEST(CodecTest, RoundTripIsStable) {
  auto s = SnapshotFromJson(*ParseYaml(kCluster));
  ASSERT_TRUE(s.ok());
  std::string once = SnapshotToJson(*s).dump();
  auto again = SnapshotFromJson(Json::parse(once));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(SnapshotToJson(*again).dump(), once);
}

TEST(CodecTest, ExclusiveIsReadWrittenAndOffByDefault) {
  auto s =
      SnapshotFromJson(*ParseYaml("jobs: [{id: x, exclusive: true, tasks: [{}]}, {id: y, "
                                  "tasks: [{}]}]"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->jobs[0].exclusive);
  EXPECT_FALSE(s->jobs[1].exclusive);
  const Json out = SnapshotToJson(*s);
  EXPECT_EQ(out["jobs"][0]["exclusive"], true);
  EXPECT_FALSE(out["jobs"][1].contains("exclusive"));  // written only when set
  auto again = SnapshotFromJson(out);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->jobs[0].exclusive);
}

TEST(CodecTest, ErrorsNameTheFieldPath) {
  struct Case {
    const char* doc;
    const char* want;
  } cases[] = {
      {"nodes: [{name: a, cpu: 4, memory: 1Gi, colour: red}]", "nodes[0].colour: unknown field"},
      {"nodes: [{name: a, cpu: -4, memory: 1Gi}]", "nodes[0].cpu: must not be negative"},
      {"jobs: [{id: j, tasks: [{replicas: 0}]}]", "jobs[0].tasks[0].replicas: must be >= 1"},
      {"jobs: [{id: j, tasks: [{resources: {nvidia.com/gpu: 0.5}}]}]",
       "jobs[0].tasks[0].resources.nvidia.com/gpu: whole GPUs only"},
      // Counts that would wrap in 32 bits (2^31, 2^32 + 1) are refused, not run as others.
      {"jobs: [{id: j, tasks: [{resources: {nvidia.com/gpu: 2147483648}}]}]",
       "jobs[0].tasks[0].resources.nvidia.com/gpu: 2147483648 is too large (at most 4096"},
      {"jobs: [{id: j, tasks: [{resources: {nvidia.com/mig-1g.10gb: 4294967297}}]}]",
       "resources.nvidia.com/mig-1g.10gb: 4294967297 is too large"},
      {"jobs: [{id: j, tasks: [{resources: {tessera.io/gpu-milli: \"1000\"}}]}]",
       "tessera.io/gpu-milli: thousandths of one GPU, an integer 1..999, got \"1000\""},
      {"jobs: [{id: j, tasks: [{resources: {gpus: 1}}]}]",
       "jobs[0].tasks[0].resources.gpus: unknown resource"},
      {"jobs: [{id: j, priorityClass: nope, tasks: [{}]}]",
       "jobs[0].priorityClass: unknown priority class \"nope\""},
      {"nodes: [{name: a, cpu: 4, memory: 1Gi, gpus: {model: A100-80GB, count: 1, mig: [4g.40gb, "
       "4g.40gb]}}]",
       "uses 8 of 7 compute slices"},
      {"jobs: [{id: j, tasks: []}]", "jobs[0].tasks: a job needs at least one task group"},
      {"jobs: [{id: j, oneTaskPerNode: 2, tasks: [{}]}]",
       "jobs[0].oneTaskPerNode: expected true or false"},
      {"nodes: [{name: a, cpu: 4, memory: 1Gi}]\n"
       "jobs: [{id: j, oneTaskPerNode: true, tasks: [{replicas: 2}],\n"
       "        running: [{task: 0, node: a}, {task: 1, node: a}]}]",
       "jobs[0].running[1].node: task 0 already runs on \"a\" and the job has oneTaskPerNode"},
  };
  for (const auto& c : cases) {
    auto doc = ParseYaml(c.doc);
    ASSERT_TRUE(doc.ok()) << c.doc;
    auto s = SnapshotFromJson(*doc);
    ASSERT_FALSE(s.ok()) << c.doc;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos)
        << "got: " << s.status().message() << "\nwant: " << c.want;
  }
}

// A repeated key would silently replace the first block (yaml-cpp keeps the last one).
TEST(CodecTest, RejectsRepeatedKeysNamingBothLines) {
  auto doc = ParseYaml("nodeGroups: [a]\nqueues: []\nnodeGroups: [b]\n");
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("line 3"), std::string::npos) << doc.status().message();
  EXPECT_NE(doc.status().message().find("key \"nodeGroups\" repeats the one at line 1"),
            std::string::npos)
      << doc.status().message();
  auto nested = ParseYaml("a: {b: 1, c: 2, b: 3}");
  EXPECT_FALSE(nested.ok());
  EXPECT_TRUE(ParseYaml("a: {b: 1}\nc: {b: 2}").ok());  // same key in two maps is fine
}

TEST(CodecTest, RejectsDeepNesting) {
  std::string deep(200, '[');
  deep += std::string(200, ']');
  EXPECT_FALSE(ParseYaml(deep).ok());
}

// "Billion laughs": each anchor repeats the one before ten times. Eight such lines (a few
// hundred bytes) would expand into 10^8 values; refused before anything is built, while
// an alias used a few times stays fine.
TEST(CodecTest, RefusesAliasesThatMultiplyTheDocument) {
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 8; ++i) {
    std::string prev = "*a" + std::to_string(i - 1);
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", " : "") + prev;
    bomb += "]\n";
  }
  auto doc = ParseYaml(bomb);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("document expands to more than"), std::string::npos)
      << doc.status().message();
  auto fine = ParseYaml("base: &b {cpu: 1, memory: 1Gi}\na: *b\nc: *b\n");
  ASSERT_TRUE(fine.ok()) << fine.status().ToString();
  EXPECT_EQ((*fine)["c"]["cpu"], 1);
}

}  // namespace
}  // namespace tessera
