#include "spec/spec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "model/codec.h"

namespace tessera::spec {
namespace {

std::string SeedFile(const std::string& name) {
  const char* root = std::getenv("TESSERA_SOURCE_DIR");
  std::ifstream in(std::string(root ? root : ".") + "/examples/seed/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Spec, SeedDocumentsParseUnchanged) {
  struct Case {
    const char* file;
    size_t docs;
  } cases[] = {{"priority-classes.yaml", 3},
               {"queues.yaml", 4},
               {"training-gang.yaml", 1},
               {"debug-fill.yaml", 1},
               {"inference-deployment.yaml", 1},
               {"batch-job.yaml", 1},
               {"mig-pod.yaml", 1},
               {"train.sbatch", 1}};
  for (const auto& c : cases) {
    std::string text = SeedFile(c.file);
    ASSERT_FALSE(text.empty()) << c.file;
    auto docs = ParseDocuments(text);
    ASSERT_TRUE(docs.ok()) << c.file << ": " << docs.status().ToString();
    EXPECT_EQ(docs->size(), c.docs) << c.file;
  }
}

TEST(Spec, VolcanoGangMapsToJob) {
  auto docs = ParseDocuments(SeedFile("training-gang.yaml"));
  ASSERT_TRUE(docs.ok());
  const JobSpec& s = (*docs)[0].job;
  EXPECT_EQ(s.job.id, "llama-finetune");
  EXPECT_EQ(s.job.queue, "training");
  EXPECT_EQ(s.job.priority_class, "p1-training");
  EXPECT_EQ(s.job.min_available, 4);
  ASSERT_EQ(s.job.groups.size(), 1u);
  EXPECT_EQ(s.job.groups[0].replicas, 4);
  EXPECT_EQ(s.job.groups[0].request.cpu_milli, 8000);
  EXPECT_EQ(s.job.groups[0].request.memory_bytes, int64_t{64} << 30);
  EXPECT_EQ(s.job.groups[0].request.gpu.kind, GpuRequestKind::kWhole);
  EXPECT_EQ(s.job.groups[0].request.gpu.count, 2);
  EXPECT_EQ(s.job.placement.affinity.preferred.size(), 1u);
  EXPECT_EQ(s.restart.on_eviction, FailureAction::kRestartJob);
  EXPECT_EQ(s.restart.on_failure, FailureAction::kRestartJob);
  EXPECT_EQ(s.restart.max_retries, 3);
  ASSERT_EQ(s.templates.size(), 1u);
  EXPECT_EQ(s.templates[0].command.front(), "torchrun");
  EXPECT_EQ(s.templates[0].command.back(), "3");
  EXPECT_EQ(s.templates[0].env.at("NCCL_DEBUG"), "WARN");
}

// Volcano places each task by its own template: a CPU launcher without the GPU nodes'
// toleration, workers with it and a selector. The first task's placement is the job's; a
// later task's that differs is its group's own, and both survive the stored form.
TEST(Spec, VolcanoTasksKeepTheirOwnPlacement) {
  const char* doc = R"(
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi}
spec:
  tasks:
  - name: launcher
    replicas: 1
    template: {spec: {containers: [{name: c, command: [mpirun]}]}}
  - name: worker
    replicas: 2
    template:
      spec:
        nodeSelector: {pool: gpu}
        tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
        containers: [{name: c, command: [w], resources: {limits: {nvidia.com/gpu: 1}}}]
  - name: sidecar
    replicas: 1
    template: {spec: {containers: [{name: c, command: [x]}]}}
)";
  auto d = ParseDocuments(doc);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const Job& j = (*d)[0].job.job;
  EXPECT_TRUE(j.placement.empty());
  ASSERT_EQ(j.groups.size(), 3u);
  EXPECT_FALSE(j.groups[0].placement);
  ASSERT_TRUE(j.groups[1].placement);
  EXPECT_EQ(j.groups[1].placement->node_selector.at("pool"), "gpu");
  ASSERT_EQ(j.groups[1].placement->tolerations.size(), 1u);
  EXPECT_FALSE(j.groups[2].placement);  // the same as the job's
  EXPECT_TRUE(j.PlacementOfTask(0).empty());
  EXPECT_EQ(j.PlacementOfTask(2).tolerations[0].key, "nvidia.com/gpu");
  EXPECT_TRUE(j.PlacementOfTask(3).empty());
  EXPECT_FALSE(j.Unconstrained());
  auto back = JobFromJson(JobToJson(j), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->groups[1].placement, j.groups[1].placement);
  EXPECT_FALSE(back->groups[0].placement);

  // The other way round: tolerating workers first, then a launcher without any. Its empty
  // placement still replaces the job's, also once stored.
  const char* reversed = R"(
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {name: mpi}
spec:
  tasks:
  - name: worker
    replicas: 2
    template:
      spec:
        tolerations: [{key: nvidia.com/gpu, operator: Exists}]
        containers: [{name: c, command: [x]}]
  - name: launcher
    replicas: 1
    template: {spec: {containers: [{name: c, command: [x]}]}}
)";
  auto r = ParseDocuments(reversed);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const Job& k = (*r)[0].job.job;
  EXPECT_EQ(k.placement.tolerations.size(), 1u);
  ASSERT_TRUE(k.groups[1].placement);
  EXPECT_TRUE(k.groups[1].placement->empty());
  auto stored = JobFromJson(JobToJson(k), "");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_TRUE(stored->groups[1].placement);
  EXPECT_TRUE(stored->PlacementOfTask(2).empty());
  EXPECT_EQ(stored->PlacementOfTask(1).tolerations.size(), 1u);

  // Tessera's own shape says it per task.
  const char* own = R"(
apiVersion: tessera.io/v1
kind: Job
metadata: {name: t}
spec:
  nodeSelector: {zone: a}
  tasks:
  - {name: ps, replicas: 1, command: [ps]}
  - {name: w, replicas: 1, command: [w], nodeSelector: {zone: b}, tolerations: [{key: g, operator: Exists}]}
)";
  auto o = ParseDocuments(own);
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  const Job& t = (*o)[0].job.job;
  EXPECT_EQ(t.PlacementOfTask(0).node_selector.at("zone"), "a");
  EXPECT_EQ(t.PlacementOfTask(1).node_selector.at("zone"), "b");
  EXPECT_EQ(t.PlacementOfTask(1).tolerations.size(), 1u);
}

// A Pod whose spec also has `field` (one line of YAML at the spec's indentation).
StatusOr<std::vector<Document>> PodWith(const std::string& field) {
  return ParseDocuments(
      "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, "
      "command: [x]}]\n  " +
      field + "\n");
}

// A Pod that requires nodes matching one term of `expressions`.
StatusOr<std::vector<Document>> PodRequiring(const std::string& expressions) {
  return PodWith(
      "affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
      "{nodeSelectorTerms: [{matchExpressions: [" +
      expressions + "]}]}}}");
}

constexpr char kRequired[] =
    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
constexpr char kPreferred[] =
    "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution";

// `r` is refused as invalid with an error that says `words`; `what` names the case.
void ExpectRefused(const StatusOr<std::vector<Document>>& r, const std::string& words,
                   const std::string& what) {
  ASSERT_FALSE(r.ok()) << what;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << what;
  EXPECT_NE(r.status().message().find(words), std::string::npos)
      << what << ": got \"" << r.status().message() << "\", want \"" << words << "\"";
}

// Node affinity as Kubernetes' API validation takes it: each operator with the values it
// needs, label keys, at least one term of at least one requirement, weights 1-100, and
// objects where Kubernetes has objects. Each refusal names the field at fault.
TEST(Spec, NodeAffinityRefusedAsKubernetesRefusesIt) {
  const std::string term0 = std::string(kRequired) + "[0].matchExpressions[0]";
  struct Case {
    std::string expressions, words;
  } cases[] = {
      {"{key: a, operator: Inn, values: [x]}",
       term0 + ".operator: unknown \"Inn\" (In, NotIn, Exists, DoesNotExist, Gt, Lt)"},
      {"{key: a, operator: In}", term0 + ".values: required when operator is In or NotIn"},
      {"{key: a, operator: NotIn, values: []}",
       term0 + ".values: required when operator is In or NotIn"},
      {"{key: a, operator: Exists, values: [x]}",
       term0 + ".values: must be empty when operator is Exists or DoesNotExist"},
      {"{key: a, operator: DoesNotExist, values: [x]}",
       term0 + ".values: must be empty when operator is Exists or DoesNotExist"},
      {"{key: a, operator: Gt, values: [\"1\", \"2\"]}",
       term0 + ".values: must be a single integer when operator is Gt or Lt, got [\"1\",\"2\"]"},
      {"{key: a, operator: Lt}", term0 + ".values: must be a single integer"},
      {"{key: a, operator: Lt, values: [ten]}",
       term0 + ".values[0]: \"ten\" is not an integer (Gt and Lt compare"},
      {"{key: a, operator: Gt, values: [\"+-1\"]}", term0 + ".values[0]: \"+-1\" is not an"},
      {"{key: a, operator: Gt, values: [\"99999999999999999999\"]}",
       term0 + ".values[0]: \"99999999999999999999\" is not an integer"},
      {"{key: \"bad key\", operator: Exists}",
       term0 + ".key: \"bad key\" is not a label key: a key's name must be"},
      {"{key: \"\", operator: Exists}", term0 + ".key: \"\" is not a label key"},
      {"{key: Example.com/a, operator: Exists}",
       term0 + ".key: \"Example.com/a\" is not a label key: the prefix"},
      {"{key: a, operator: Exists, value: x}", term0 + ".value: unknown field"},
      {"{key: a, operator: Exists}, {key: b, operator: In}",
       std::string(kRequired) + "[0].matchExpressions[1].values: required"},
  };
  for (const auto& c : cases) ExpectRefused(PodRequiring(c.expressions), c.words, c.expressions);

  struct Affinity {
    std::string node_affinity, words;
  } affinities[] = {
      {"requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: []}",
       std::string(kRequired) + ": must have at least one node selector term"},
      {"requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: "
       "[]}]}",
       std::string(kRequired) + "[0].matchExpressions: must have at least one node selector "
                                "requirement"},
      {"requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [[{key: a, "
       "operator: Exists}]]}",
       std::string(kRequired) + "[0]: expected an object with matchExpressions, got array"},
      {"requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: "
       "[{key: a, operator: Exists}], matchLabels: {a: b}}]}",
       std::string(kRequired) + "[0].matchLabels: unknown field"},
      {"requiredDuringScheduling: {}",
       "spec.affinity.nodeAffinity.requiredDuringScheduling: unknown field"},
      {"preferredDuringSchedulingIgnoredDuringExecution: [{weight: 101, preference: "
       "{matchExpressions: [{key: a, operator: Exists}]}}]",
       std::string(kPreferred) + "[0].weight: must be in the range 1-100, got 101"},
      {"preferredDuringSchedulingIgnoredDuringExecution: [{weight: 0, preference: "
       "{matchExpressions: [{key: a, operator: Exists}]}}]",
       std::string(kPreferred) + "[0].weight: must be >= 1"},
      {"preferredDuringSchedulingIgnoredDuringExecution: [{weight: 5, preference: "
       "{matchExpressions: [{key: a, operator: Exists, values: [b]}]}}]",
       std::string(kPreferred) +
           "[0].preference.matchExpressions[0].values: must be empty when operator is Exists"},
      {"preferredDuringSchedulingIgnoredDuringExecution: [{weight: 5, preference: [{key: a, "
       "operator: Exists}]}]",
       std::string(kPreferred) + "[0].preference: expected an object with matchExpressions"},
      {"preferredDuringSchedulingIgnoredDuringExecution: [{weight: 5, preference: "
       "{matchExpressions: []}}]",
       std::string(kPreferred) + "[0].preference.matchExpressions: must have at least one"},
  };
  for (const auto& a : affinities)
    ExpectRefused(PodWith("affinity: {nodeAffinity: {" + a.node_affinity + "}}"), a.words,
                  a.node_affinity);

  // What Kubernetes accepts is still accepted.
  for (const char* ok :
       {"{key: a, operator: In, values: [x, y]}",
        "{key: a, operator: NotIn, "
        "values: [x]}",
        "{key: tessera.io/pool, operator: Exists}", "{key: a, operator: DoesNotExist, values: []}",
        "{key: a, operator: Gt, values: [\"-5\"]}", "{key: a, operator: Lt, values: [\"+10\"]}"}) {
    auto r = PodRequiring(ok);
    EXPECT_TRUE(r.ok()) << ok << ": " << r.status().ToString();
  }
  auto weighted = PodWith(
      "affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 100, "
      "preference: {matchExpressions: [{key: a, operator: Exists}]}}]}}");
  ASSERT_TRUE(weighted.ok()) << weighted.status().ToString();
  EXPECT_EQ((*weighted)[0].job.job.placement.affinity.preferred[0].weight, 100);
}

// Tolerations and node selectors as Kubernetes' API validation takes them: an empty key only
// with Exists, no value with Exists, tolerationSeconds only with NoExecute, label syntax.
TEST(Spec, TolerationsAndNodeSelectorRefusedAsKubernetesRefusesThem) {
  struct Case {
    std::string field, words;
  } cases[] = {
      {"tolerations: [{operator: Equal, value: x}]",
       "spec.tolerations[0].operator: must be Exists when key is empty (which tolerates every "
       "taint), got Equal"},
      {"tolerations: [{value: x}]", "spec.tolerations[0].operator: must be Exists when key"},
      {"tolerations: [{key: a, operator: Exists}, {key: b, operator: Exists, value: x}]",
       "spec.tolerations[1].value: must be empty when operator is Exists (it tolerates every "
       "value of the key), got \"x\""},
      {"tolerations: [{key: a, operator: Exists, effect: NoSchedule, tolerationSeconds: 60}]",
       "spec.tolerations[0].effect: must be NoExecute when tolerationSeconds is set (how long a "
       "NoExecute taint is tolerated), got \"NoSchedule\""},
      {"tolerations: [{key: a, operator: Exists, tolerationSeconds: 60}]",
       "spec.tolerations[0].effect: must be NoExecute when tolerationSeconds is set"},
      {"tolerations: [{key: a, operator: Exists, effect: NoExecute, tolerationSeconds: soon}]",
       "spec.tolerations[0].tolerationSeconds: expected an integer (seconds), got string"},
      {"tolerations: [{key: a, operator: Exists, tolerationSecond: 60}]",
       "spec.tolerations[0].tolerationSecond: unknown field"},
      {"tolerations: [{key: a, operator: Equals, value: x}]",
       "spec.tolerations[0].operator: unknown \"Equals\" (Equal, Exists)"},
      {"tolerations: [{key: a, operator: Exists, effect: NoRun}]", "spec.tolerations[0].effect"},
      {"tolerations: [{key: \"a b\", operator: Exists}]",
       "spec.tolerations[0].key: \"a b\" is not a label key"},
      {"tolerations: [{key: a, value: \"-x\"}]",
       "spec.tolerations[0].value: \"-x\" is not a label value"},
      {"tolerations: {key: a}", "spec.tolerations: expected a list"},
      {"nodeSelector: {\"gpu type\": a100}", "spec.nodeSelector: \"gpu type\" is not a label key"},
      {"nodeSelector: {zone: \"eu west\"}", "spec.nodeSelector.zone: \"eu west\" is not a label"},
  };
  for (const auto& c : cases) ExpectRefused(PodWith(c.field), c.words, c.field);

  // What Kubernetes accepts is still accepted: tolerationSeconds with NoExecute (dropped:
  // Tessera does not evict for taints), an empty operator (Equal), an empty value.
  auto ok = PodWith(
      "tolerations: [{key: a, operator: Exists, effect: NoExecute, tolerationSeconds: 300}, "
      "{operator: Exists}, {key: b, operator: \"\", value: v}, {key: c, value: \"\"}]");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  const auto& tolerations = (*ok)[0].job.job.placement.tolerations;
  ASSERT_EQ(tolerations.size(), 4u);
  EXPECT_EQ(tolerations[0].effect, TaintEffect::kNoExecute);
  EXPECT_TRUE(tolerations[1].key.empty());
  EXPECT_EQ(tolerations[2].op, Toleration::Op::kEqual);
  EXPECT_EQ(tolerations[2].value, "v");
  auto selector = PodWith("nodeSelector: {tessera.io/pool: gpu, zone: \"\"}");
  ASSERT_TRUE(selector.ok()) << selector.status().ToString();
}

// The same rules in every shape that carries a placement, each naming its own path.
TEST(Spec, PlacementChecksNameEachShapesPath) {
  const std::string pod = "{spec: {containers: [{name: c, command: [x]}]}}";
  struct Case {
    std::string name, text, words;
  } cases[] = {
      {"volcano second task",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
       "  - {name: a, template: " +
           pod +
           "}\n"
           "  - {name: b, template: {spec: {tolerations: [{value: x}], containers: [{name: c, "
           "command: [x]}]}}}\n",
       "spec.tasks[1].template.spec.tolerations[0].operator: must be Exists when key is empty"},
      {"deployment",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template: {spec: "
       "{nodeSelector: {\"a b\": c}, containers: [{name: c, command: [x]}]}}\n",
       "spec.template.spec.nodeSelector: \"a b\" is not a label key"},
      {"batch job",
       "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\nspec:\n  template: {spec: "
       "{restartPolicy: Never, affinity: {nodeAffinity: "
       "{requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: "
       "[{key: a, operator: In}]}]}}}, containers: [{name: c, command: [x]}]}}\n",
       "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
       "nodeSelectorTerms[0].matchExpressions[0].values: required"},
      {"tessera job",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {tolerations: [{key: "
       "a, operator: Exists, value: x}], tasks: [{command: [x]}]}\n",
       "spec.tolerations[0].value: must be empty when operator is Exists"},
      {"tessera task",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {tasks: [{command: "
       "[x]}, {command: [y], affinity: {required: [{matchExpressions: [{key: a, operator: "
       "Exists, values: [b]}]}]}}]}\n",
       "spec.tasks[1].affinity.required[0].matchExpressions[0].values: must be empty"},
      {"tessera weight",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {affinity: {preferred: "
       "[{weight: 500, preference: {matchExpressions: [{key: a, operator: Exists}]}}]}, tasks: "
       "[{command: [x]}]}\n",
       "spec.affinity.preferred[0].weight: must be in the range 1-100, got 500"},
  };
  for (const auto& c : cases) ExpectRefused(ParseDocuments(c.text), c.words, c.name);
}

// topologySpreadConstraints on every pod-template shape, validated as Kubernetes validates
// them, with the one simplification said in docs/model.md: a constraint counts its own
// task group's pods, so its selector must select them (and no other task's of the job).
std::string SpreadDeployment(const std::string& constraints,
                             const std::string& labels = "{app: web}") {
  return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 3\n"
         "  template:\n    metadata: {labels: " +
         labels +
         "}\n    spec:\n      containers: [{name: c, command: [x]}]\n"
         "      topologySpreadConstraints: " +
         constraints + "\n";
}

TEST(Spec, TopologySpreadConstraintsParse) {
  auto d = ParseDocuments(SpreadDeployment(
      "[{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: "
      "DoNotSchedule, minDomains: 3, nodeTaintsPolicy: Honor, labelSelector: {matchLabels: "
      "{app: web}}, matchLabelKeys: [pod-template-hash]}, {maxSkew: 2, topologyKey: "
      "kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, nodeAffinityPolicy: Ignore, "
      "labelSelector: {matchExpressions: [{key: app, operator: In, values: [web]}]}}]"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const Job& job = (*d)[0].job.job;
  EXPECT_TRUE(job.service);  // a Deployment: spread by default when it says nothing
  ASSERT_EQ(job.groups[0].spread.size(), 2u);
  const TopologySpreadConstraint& zone = job.groups[0].spread[0];
  EXPECT_EQ(zone.max_skew, 1);
  EXPECT_EQ(zone.topology_key, "topology.kubernetes.io/zone");
  EXPECT_FALSE(zone.schedule_anyway);
  EXPECT_EQ(zone.min_domains, 3);
  EXPECT_TRUE(zone.honor_node_affinity);
  EXPECT_TRUE(zone.honor_taints);
  const TopologySpreadConstraint& host = job.groups[0].spread[1];
  EXPECT_TRUE(host.schedule_anyway);
  EXPECT_FALSE(host.honor_node_affinity);
  EXPECT_FALSE(host.honor_taints);
  // Stored and read back as the server keeps it.
  auto back = JobSpecFromJson(JobSpecToJson((*d)[0].job), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->job.groups[0].spread, job.groups[0].spread);
  EXPECT_TRUE(back->job.service);

  const std::string c =
      "{maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: "
      "DoNotSchedule, labelSelector: {matchLabels: {app: a}}}";
  const std::string pod =
      "{containers: [{name: c, command: [x]}], topologySpreadConstraints: [" + c + "]}";
  const std::string volcano =
      "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
      "  - {name: a, replicas: 2, template: {metadata: {labels: {app: a}}, spec: " +
      pod + "}}\n";
  // Each shape: one constraint on its one task group; a service (an Always Pod too) is
  // spread by default when it gives none.
  auto one = [](const std::string& text, bool service) {
    auto d = ParseDocuments(text);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->at(0).job.job.service, service) << text;
    EXPECT_EQ(d->at(0).job.job.groups[0].spread.size(), 1u) << text;
  };
  one(volcano, false);
  one("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: a}}\nspec: " + pod + "\n",
      true);
  one("apiVersion: batch/v1\nkind: Job\nmetadata: {name: b}\nspec:\n  parallelism: 2\n"
      "  template: {metadata: {labels: {app: a}}, spec: {restartPolicy: Never, containers: "
      "[{name: c, command: [x]}], topologySpreadConstraints: [" +
          c + "]}}\n",
      false);
  one("apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {service: true, tasks: "
      "[{replicas: 2, command: [x], topologySpreadConstraints: [{maxSkew: 1, topologyKey: "
      "kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule}]}]}\n",
      true);
}

TEST(Spec, TopologySpreadConstraintsRefusedAsKubernetesRefusesThem) {
  const std::string at = "spec.template.spec.topologySpreadConstraints[0]";
  const std::string sel = ", labelSelector: {matchLabels: {app: web}}";
  struct Case {
    std::string constraints, words;
  } cases[] = {
      {"[{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule" + sel + "}]",
       at + ".maxSkew: must be >= 1"},
      {"[{maxSkew: 1, whenUnsatisfiable: DoNotSchedule" + sel + "}]", at + ".topologyKey"},
      {"[{maxSkew: 1, topologyKey: \"a b\", whenUnsatisfiable: DoNotSchedule" + sel + "}]",
       at + ".topologyKey: \"a b\" is not a label key"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes" + sel + "}]",
       at + ".whenUnsatisfiable: unknown \"Sometimes\" (DoNotSchedule, ScheduleAnyway)"},
      {"[{maxSkew: 1, topologyKey: zone" + sel + "}]", at + ".whenUnsatisfiable"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway, minDomains: 2" + sel +
           "}]",
       at + ".minDomains: can only be used with whenUnsatisfiable: DoNotSchedule"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, minDomains: 0" + sel +
           "}]",
       at + ".minDomains: must be >= 1"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, nodeTaintsPolicy: "
       "Maybe" +
           sel + "}]",
       at + ".nodeTaintsPolicy: unknown \"Maybe\" (Honor, Ignore)"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, colour: red" + sel +
           "}]",
       at + ".colour: unknown field"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
       at + ".labelSelector: required here"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: "
       "{matchLabels: {app: db}}}]",
       at + ".labelSelector: selects none of this template's own pods"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: "
       "{matchExpressions: [{key: app, operator: In}]}}]",
       at + ".labelSelector.matchExpressions[0].values: required when operator is In or NotIn"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: "
       "{matchExpressions: [{key: app, operator: Near}]}}]",
       at + ".labelSelector.matchExpressions[0].operator: unknown \"Near\""},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule" + sel +
           ", matchLabelKeys: [app]}]",
       at + ".matchLabelKeys[0]: \"app\" exists in both matchLabelKeys and labelSelector"},
      {"[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule" + sel +
           "}, {maxSkew: 2, topologyKey: zone, whenUnsatisfiable: DoNotSchedule" + sel + "}]",
       "spec.template.spec.topologySpreadConstraints[1]: duplicate {topologyKey, "
       "whenUnsatisfiable} of [0]"},
  };
  for (const auto& c : cases)
    ExpectRefused(ParseDocuments(SpreadDeployment(c.constraints)), c.words, c.constraints);

  // A Volcano task's selector that takes in another task's pods too.
  const std::string pod =
      "{containers: [{name: c, command: [x]}], topologySpreadConstraints: "
      "[{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, "
      "labelSelector: {matchLabels: {job: v}}}]}";
  ExpectRefused(
      ParseDocuments("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\n"
                     "spec:\n  tasks:\n  - {name: a, template: {metadata: {labels: {job: v, "
                     "role: a}}, spec: " +
                     pod +
                     "}}\n  - {name: b, template: {metadata: {labels: {job: v, role: b}}, "
                     "spec: {containers: [{name: c, command: [x]}]}}}\n"),
      "spec.tasks[0].template.spec.topologySpreadConstraints[0].labelSelector: also selects the "
      "pods of spec.tasks[1].template",
      "volcano");
  // Tessera's own Job: the model's checks, naming its path.
  ExpectRefused(ParseDocuments("apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: "
                               "{tasks: [{command: [x], topologySpreadConstraints: [{maxSkew: 1, "
                               "topologyKey: zone, whenUnsatisfiable: Never}]}]}\n"),
                "spec.tasks[0].topologySpreadConstraints[0].whenUnsatisfiable: unknown \"Never\"",
                "tessera");
}

// securityContext: the container's runAsUser/runAsGroup/runAsNonRoot over the pod's, the
// pod's supplementalGroups, as Kubernetes merges them; the other fields accepted and ignored.
// The identity is kept with the job as stored, and the Volcano and Tessera shapes carry it.
TEST(Spec, SecurityContextGivesTheTasksIdentity) {
  auto r = ParseDocuments(
      "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
      "  securityContext: {runAsUser: 1000, runAsGroup: 2000, supplementalGroups: [3000, 3001], "
      "fsGroup: 7}\n"
      "  containers:\n"
      "  - {name: a, command: [x], securityContext: {runAsUser: 65534, runAsNonRoot: true, "
      "allowPrivilegeEscalation: false}}\n"
      "  - {name: b, command: [y], securityContext: {runAsUser: 5}}\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const RunAs want{65534, 2000, true, {3000, 3001}};
  EXPECT_EQ((*r)[0].job.templates[0].run_as, want);  // the first container's, which runs
  auto back = JobSpecFromJson(JobSpecToJson((*r)[0].job), "spec");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->templates[0].run_as, want);

  // Without one the agent decides; the stored job says nothing.
  auto plain = PodWith("restartPolicy: Never");
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE((*plain)[0].job.templates[0].run_as.empty());
  EXPECT_FALSE(JobSpecToJson((*plain)[0].job)["templates"][0].contains("securityContext"));

  auto volcano = ParseDocuments(
      "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n"
      "  tasks:\n  - {name: w, replicas: 1, template: {spec: {securityContext: {runAsUser: 42}, "
      "containers: [{name: c, command: [x]}]}}}\n");
  ASSERT_TRUE(volcano.ok()) << volcano.status().ToString();
  EXPECT_EQ((*volcano)[0].job.templates[0].run_as.user, 42);
  auto own = ParseDocuments(
      "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec:\n"
      "  tasks:\n  - {name: w, replicas: 1, command: [x], securityContext: {runAsUser: 7, "
      "supplementalGroups: [8]}}\n");
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_EQ((*own)[0].job.templates[0].run_as, (RunAs{7, std::nullopt, false, {8}}));
}

// Refused as Kubernetes refuses them, naming the field: ids outside 0..2147483647, ids that
// are not integers, runAsNonRoot with runAsUser 0 (also across the pod and its container),
// supplementalGroups on a container (a pod's field), unknown fields.
TEST(Spec, SecurityContextRefusedAsKubernetesRefusesIt) {
  const std::string sc = "spec.securityContext";
  const std::string csc = "spec.containers[0].securityContext";
  auto pod = [](const std::string& pod_sc, const std::string& container_sc) {
    return ParseDocuments(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        "  securityContext: " +
        pod_sc + "\n  containers: [{name: c, command: [x], securityContext: " + container_sc +
        "}]\n");
  };
  ExpectRefused(pod("{runAsUser: -1}", "{}"),
                sc + ".runAsUser: must be between 0 and 2147483647, inclusive, got -1", "negative");
  ExpectRefused(pod("{}", "{runAsGroup: 2147483648}"),
                csc + ".runAsGroup: must be between 0 and 2147483647, inclusive", "too large");
  ExpectRefused(pod("{supplementalGroups: [1, -5]}", "{}"),
                sc + ".supplementalGroups[1]: must be between 0 and 2147483647", "group");
  ExpectRefused(pod("{runAsUser: \"1000\"}", "{}"), sc + ".runAsUser: expected an integer",
                "a string");
  ExpectRefused(pod("{runAsNonRoot: true, runAsUser: 0}", "{}"),
                sc + ".runAsNonRoot: true, but " + sc + ".runAsUser is 0 (root)", "pod level");
  ExpectRefused(pod("{runAsNonRoot: true}", "{runAsUser: 0}"),
                sc + ".runAsNonRoot: true, but " + csc + ".runAsUser is 0 (root)",
                "container's user under the pod's runAsNonRoot");
  ExpectRefused(pod("{runAsUser: 0}", "{runAsNonRoot: true}"),
                csc + ".runAsNonRoot: true, but " + sc + ".runAsUser is 0 (root)",
                "pod's user under the container's runAsNonRoot");
  ExpectRefused(pod("{}", "{supplementalGroups: [1]}"),
                csc + ".supplementalGroups: unknown field (a pod's", "container groups");
  ExpectRefused(pod("{runAsUsr: 1}", "{}"), sc + ".runAsUsr: unknown field", "typo");
  // A container's user overrides the pod's: runAsNonRoot holds over a non-root container.
  EXPECT_TRUE(pod("{runAsNonRoot: true, runAsUser: 1}", "{runAsUser: 2}").ok());
  // Every container is checked, not only the one that runs, as Kubernetes would refuse to
  // start any of them.
  ExpectRefused(ParseDocuments("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
                               "  securityContext: {runAsNonRoot: true}\n"
                               "  containers:\n  - {name: a, command: [x], securityContext: "
                               "{runAsUser: 1}}\n"
                               "  - {name: b, command: [y], securityContext: {runAsUser: 0}}\n"),
                "spec.securityContext.runAsNonRoot: true, but "
                "spec.containers[1].securityContext.runAsUser is 0",
                "second container");
}

TEST(Spec, KubernetesWorkloads) {
  auto dep = ParseDocuments(SeedFile("inference-deployment.yaml"));
  ASSERT_TRUE(dep.ok());
  const JobSpec& d = (*dep)[0].job;
  EXPECT_TRUE(d.service);
  EXPECT_EQ(d.job.queue, "inference");
  EXPECT_EQ(d.job.priority_class, "p0-production-inference");
  EXPECT_EQ(d.job.groups[0].replicas, 2);
  EXPECT_EQ(d.job.min_available, 1);
  EXPECT_EQ(d.job.groups[0].request.cpu_milli, 4000);  // requests win over limits for cpu
  EXPECT_EQ(d.restart.max_retries, -1);
  // Limits are kept for the agent's cgroup (the kubelet caps there, not at the request),
  // summed over containers; one container without a limit leaves that resource to the request.
  auto lim = ParseDocuments(
      "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
      "  - {name: a, command: [x], resources: {requests: {cpu: 2, memory: 4Gi}, limits: {cpu: 4, "
      "memory: 8Gi}}}\n"
      "  - {name: b, command: [y], resources: {requests: {cpu: 1, memory: 1Gi}, limits: {memory: "
      "2Gi}}}\n");
  ASSERT_TRUE(lim.ok()) << lim.status().ToString();
  const JobSpec& l = (*lim)[0].job;
  EXPECT_EQ(l.job.groups[0].request.memory_bytes, 5LL << 30);
  EXPECT_EQ(l.templates[0].memory_limit_bytes, 10LL << 30);
  EXPECT_EQ(l.templates[0].cpu_limit_milli, 0);  // b has no CPU limit
  auto kept = JobSpecFromJson(JobSpecToJson(l), "");
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(kept->templates[0], l.templates[0]);

  // Newer profile names carry suffixes (+me, -me, +gfx, +me.all): accepted.
  for (const char* profile : {"1g.10gb+me", "1g.24gb+gfx", "4g.96gb-me", "7g.141gb+me.all"}) {
    auto p =
        ParseDocuments(std::string("apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\n"
                                   "spec: {tasks: [{command: [x], resources: {nvidia.com/mig-") +
                       profile + ": 1}}]}\n");
    EXPECT_TRUE(p.ok()) << profile << ": " << p.status().ToString();
  }
  auto mig = ParseDocuments(SeedFile("mig-pod.yaml"));
  ASSERT_TRUE(mig.ok());
  const GpuRequest& g = (*mig)[0].job.job.groups[0].request.gpu;
  EXPECT_EQ(g.kind, GpuRequestKind::kMig);
  EXPECT_EQ(g.mig_profile, "1g.10gb");
  EXPECT_EQ(g.count, 1);
  EXPECT_EQ((*mig)[0].job.restart.on_failure, FailureAction::kFailJob);

  auto bj = ParseDocuments(SeedFile("batch-job.yaml"));
  ASSERT_TRUE(bj.ok());
  EXPECT_EQ((*bj)[0].job.restart.max_retries, 2);
  EXPECT_EQ((*bj)[0].job.source, "batch/v1 Job");
  EXPECT_FALSE((*bj)[0].job.ttl_seconds_after_finished);
  EXPECT_FALSE((*bj)[0].job.indexed);
  // completionMode: Indexed is kept (the server sets JOB_COMPLETION_INDEX); others refused.
  const std::string batch =
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: b}\nspec:\n  parallelism: 2\n"
      "  template: {spec: {restartPolicy: Never, containers: [{name: c, command: [x]}]}}\n";
  auto indexed = ParseDocuments(batch + "  completionMode: Indexed\n");
  ASSERT_TRUE(indexed.ok()) << indexed.status().ToString();
  EXPECT_TRUE((*indexed)[0].job.indexed);
  EXPECT_TRUE(JobSpecFromJson(JobSpecToJson((*indexed)[0].job), "")->indexed);
  // activeDeadlineSeconds is a limit on the whole job (through its retries), and stored.
  auto deadline = ParseDocuments(batch + "  activeDeadlineSeconds: 600\n");
  ASSERT_TRUE(deadline.ok()) << deadline.status().ToString();
  EXPECT_EQ((*deadline)[0].job.time_limit_seconds, 600);
  EXPECT_TRUE((*deadline)[0].job.time_limit_whole_job);
  auto stored = JobSpecFromJson(JobSpecToJson((*deadline)[0].job), "");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->time_limit_seconds, 600);
  EXPECT_TRUE(stored->time_limit_whole_job);
  EXPECT_FALSE((*indexed)[0].job.time_limit_seconds);
  auto tessera = ParseDocuments(
      "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\n"
      "spec: {activeDeadlineSeconds: 0, tasks: [{command: [x]}]}\n");
  ASSERT_FALSE(tessera.ok());
  EXPECT_NE(tessera.status().message().find("spec.activeDeadlineSeconds"), std::string::npos)
      << tessera.status().ToString();
  auto odd = ParseDocuments(batch + "  completionMode: Sparse\n");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("spec.completionMode"), std::string::npos);

  // ttlSecondsAfterFinished is kept (Volcano and batch/v1 alike) and stored.
  auto ttl = ParseDocuments(
      "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n"
      "  ttlSecondsAfterFinished: 600\n"
      "  tasks: [{replicas: 1, template: {spec: {containers: [{name: c, command: [x]}]}}}]\n");
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_EQ((*ttl)[0].job.ttl_seconds_after_finished, 600);
  auto back = JobSpecFromJson(JobSpecToJson((*ttl)[0].job), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->ttl_seconds_after_finished, 600);
  EXPECT_FALSE(ParseDocuments("apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\n"
                              "spec: {ttlSecondsAfterFinished: -1, tasks: [{command: [x]}]}\n")
                   .ok());
}

// activeDeadlineSeconds, where Kubernetes counts it from: a bare Pod's from its start, through
// in-place restarts (here: from the job's first start); a batch/v1 Job's own for the whole job,
// never replaced by its template's; a template's alone, per attempt.
TEST(Spec, ActiveDeadlineScopes) {
  auto job = [](const std::string& job_deadline, const std::string& pod_deadline) {
    return ParseDocuments("apiVersion: batch/v1\nkind: Job\nmetadata: {name: b}\nspec:\n" +
                          job_deadline + "  template:\n    spec:\n      restartPolicy: Never\n" +
                          pod_deadline + "      containers: [{name: c, command: [x]}]\n");
  };
  struct Case {
    const char* name;
    StatusOr<std::vector<Document>> docs;
    int64_t limit;
    bool whole_job;
  } cases[] = {
      {"pod",
       ParseDocuments("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
                      "  activeDeadlineSeconds: 300\n  containers: [{name: c, command: [x]}]\n"),
       300, true},
      {"job's own", job("  activeDeadlineSeconds: 600\n", ""), 600, true},
      {"job's and a longer pod's",
       job("  activeDeadlineSeconds: 600\n", "      activeDeadlineSeconds: 900\n"), 600, true},
      {"job's and an equal pod's",
       job("  activeDeadlineSeconds: 600\n", "      activeDeadlineSeconds: 600\n"), 600, true},
      {"template's alone", job("", "      activeDeadlineSeconds: 300\n"), 300, false},
      {"deployment template's",
       ParseDocuments("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n"
                      "  template: {spec: {activeDeadlineSeconds: 300, containers: [{name: c, "
                      "command: [x]}]}}\n"),
       300, false},
  };
  for (const auto& c : cases) {
    ASSERT_TRUE(c.docs.ok()) << c.name << ": " << c.docs.status().ToString();
    const JobSpec& s = (*c.docs)[0].job;
    EXPECT_EQ(s.time_limit_seconds, c.limit) << c.name;
    EXPECT_EQ(s.job.runtime_estimate_seconds, c.limit) << c.name;
    EXPECT_EQ(s.time_limit_whole_job, c.whole_job) << c.name;
  }
  // A shorter pod deadline would need a second, per-pod limit: refused, not dropped.
  ExpectRefused(job("  activeDeadlineSeconds: 600\n", "      activeDeadlineSeconds: 300\n"),
                "spec.template.spec.activeDeadlineSeconds: 300 is less than the Job's "
                "spec.activeDeadlineSeconds 600",
                "job 600, pod 300");
}

// Kubernetes' $(VAR) expansion, case by case as its expansion package does it.
TEST(Spec, KubernetesReferencesExpandAsTheKubeletDoes) {
  const std::map<std::string, std::string> vars = {{"A", "x"}, {"B", "$(A)"}, {"", "empty"}};
  auto lookup = [&](const std::string& name) -> const std::string* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : &it->second;
  };
  const std::pair<const char*, const char*> cases[] = {
      {"$(A)", "x"},         {"--a=$(A)/$(A)", "--a=x/x"},
      {"$(B)", "$(A)"},  // not again
      {"$$(A)", "$(A)"},     {"$$$(A)", "$x"},
      {"$(C)", "$(C)"},  // unknown: kept
      {"$(A", "$(A"},        {"$A", "$A"},
      {"a$", "a$"},          {"$$", "$"},
      {"$()", "empty"},      {"$(A)$(A", "x$(A"},
      {"no refs", "no refs"}};
  for (const auto& [in, want] : cases) EXPECT_EQ(ExpandKubeReferences(in, lookup), want) << in;
}

// Kubernetes containers keep their env's order and are marked for expansion (stored so);
// sbatch scripts and Tessera Jobs are not, and their values are used as written.
TEST(Spec, KubernetesTemplatesExpandTheirReferences) {
  auto k = ParseDocuments(
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: k}\nspec:\n  completionMode: "
      "Indexed\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n"
      "      - name: c\n        command: [/bin/sh, -c]\n"
      "        args: ['echo rank=$(JOB_COMPLETION_INDEX) greet=$GREETING shard=$SHARD']\n"
      "        env:\n        - {name: BASE, value: data}\n"
      "        - {name: SHARD, value: '$(BASE)-$(JOB_COMPLETION_INDEX)'}\n"
      "        - {name: GREETING, value: 'hello $$(BASE)'}\n"
      "        - {name: AFTER, value: '$(ZED)'}\n        - {name: ZED, value: z}\n");
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const TaskTemplate& t = (*k)[0].job.templates[0];
  EXPECT_TRUE(t.expand_references);
  EXPECT_EQ(t.env_order, (std::vector<std::string>{"BASE", "SHARD", "GREETING", "AFTER", "ZED"}));
  auto stored = JobSpecFromJson(JobSpecToJson((*k)[0].job), "");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ(stored->templates[0], t);
  std::vector<std::string> command = t.command;
  auto env = TaskEnvironment(t, {{"JOB_COMPLETION_INDEX", "0"}, {"RANK", "0"}}, &command);
  EXPECT_EQ(command, (std::vector<std::string>{"/bin/sh", "-c",
                                               "echo rank=0 greet=$GREETING shard=$SHARD"}));
  EXPECT_EQ(env["SHARD"], "data-0");
  EXPECT_EQ(env["GREETING"], "hello $(BASE)");
  EXPECT_EQ(env["AFTER"], "$(ZED)");  // ZED is declared after it
  // The server's variables win over the template's of the same name, as before.
  TaskTemplate mine = t;
  mine.env["RANK"] = "7";
  mine.env_order.push_back("RANK");
  EXPECT_EQ(TaskEnvironment(mine, {{"RANK", "0"}}, nullptr)["RANK"], "0");

  for (const char* doc :
       {"#!/bin/bash\n#SBATCH -J s\necho $(hostname)\n",
        "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {tasks: [{command: "
        "[echo, '$(RANK)'], env: {A: '$(RANK)'}}]}\n"}) {
    auto d = ParseDocuments(doc);
    ASSERT_TRUE(d.ok()) << doc << d.status().ToString();
    const TaskTemplate& plain = (*d)[0].job.templates[0];
    EXPECT_FALSE(plain.expand_references) << doc;
    std::vector<std::string> cmd = plain.command;
    auto e = TaskEnvironment(plain, {{"RANK", "0"}}, &cmd);
    EXPECT_EQ(cmd, plain.command) << doc;
    if (plain.env.count("A")) {
      EXPECT_EQ(e["A"], "$(RANK)");
    }
  }
}

TEST(Spec, QueuesAndPriorityClasses) {
  auto q = ParseDocuments(SeedFile("queues.yaml"));
  ASSERT_TRUE(q.ok());
  const Queue& training = (*q)[2].queue;
  EXPECT_EQ(training.name, "training");
  EXPECT_EQ(training.weight, 3);
  EXPECT_EQ(training.guarantee.gpu_milli, 8000);
  ASSERT_TRUE(training.limit.has_value());
  EXPECT_EQ(training.limit->gpu_milli, 16000);
  auto pcs = ParseDocuments(SeedFile("priority-classes.yaml"));
  ASSERT_TRUE(pcs.ok());
  EXPECT_EQ((*pcs)[0].priority_class.value, 1000000);
  EXPECT_FALSE((*pcs)[2].priority_class.preempt_lower);
  EXPECT_TRUE((*pcs)[2].priority_class.global_default);
}

// Volcano's deserved is the share a queue reclaims back to (Tessera's guarantee), also when a
// guarantee floor is given beside it; a GPU capability of 0 ("no GPUs" in Volcano) is refused,
// not read as uncapped; CPU and memory capabilities of 0 are uncapped in both.
TEST(Spec, VolcanoQueueDeservedAndZeroCapability) {
  const std::string head =
      "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\nspec:\n";
  auto both = ParseDocuments(head +
                             "  guarantee: {resource: {nvidia.com/gpu: 1, cpu: 8}}\n"
                             "  deserved: {nvidia.com/gpu: 6, cpu: 4}\n");
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ((*both)[0].queue.guarantee.gpu_milli, 6000);
  EXPECT_EQ((*both)[0].queue.guarantee.cpu_milli, 8000);
  auto zero_gpu = ParseDocuments(head + "  capability: {cpu: 64, nvidia.com/gpu: 0}\n");
  ASSERT_FALSE(zero_gpu.ok());
  EXPECT_NE(zero_gpu.status().message().find("spec.capability.nvidia.com/gpu: 0 (no GPUs, in "
                                             "Volcano) is not supported"),
            std::string::npos)
      << zero_gpu.status().message();
  auto zero_cpu = ParseDocuments(head + "  capability: {cpu: 0, nvidia.com/gpu: 4}\n");
  ASSERT_TRUE(zero_cpu.ok()) << zero_cpu.status().ToString();
  EXPECT_EQ((*zero_cpu)[0].queue.limit->gpu_milli, 4000);
}

TEST(Spec, SbatchDirectives) {
  auto s = ParseDocuments(SeedFile("train.sbatch"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const JobSpec& j = (*s)[0].job;
  EXPECT_EQ(j.job.id, "resnet-sweep");
  EXPECT_EQ(j.job.queue, "training");
  EXPECT_EQ(j.job.priority_class, "p1-training");
  EXPECT_EQ(j.job.groups[0].replicas, 2);              // -N 2: one task per node
  EXPECT_TRUE(j.job.one_task_per_node);                // on distinct nodes
  EXPECT_EQ(j.job.groups[0].request.cpu_milli, 8000);  // 2 tasks/node x 4 cpus
  EXPECT_EQ(j.job.groups[0].request.gpu.count, 2);
  EXPECT_EQ(j.job.min_available, 2);
  EXPECT_EQ(j.job.runtime_estimate_seconds, 7200);
  EXPECT_EQ(j.time_limit_seconds, 7200);  // -t is also a limit, per attempt
  EXPECT_FALSE(j.time_limit_whole_job);
  EXPECT_EQ(j.job.groups[0].request.memory_bytes, int64_t{64} << 30);
  EXPECT_EQ(j.templates[0].script, SeedFile("train.sbatch"));  // run as a file, #! and all
  // Stored and read back (the server keeps the spec as JSON).
  auto back = JobSpecFromJson(JobSpecToJson(j), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->job.one_task_per_node);
  EXPECT_FALSE(back->job.exclusive);
  EXPECT_EQ(back->time_limit_seconds, 7200);
  EXPECT_EQ(j.restart.on_eviction, FailureAction::kRestartJob);  // Slurm's default: requeue

  auto nr = ParseDocuments("#!/bin/bash\n#SBATCH --no-requeue\ntrue\n");
  ASSERT_TRUE(nr.ok()) << nr.status().ToString();
  EXPECT_EQ((*nr)[0].job.restart.on_eviction, FailureAction::kFailJob);

  // As sbatch: directives end at the first command; blank lines and comments do not end them.
  auto late = ParseDocuments(
      "#!/bin/bash\n#SBATCH -J late\n\n# setup\n  #SBATCH -N 2\n#SBATCH -n 3\necho first\n"
      "#SBATCH --gres=gpu:8\ncat <<EOF\n#SBATCH --bogus\nEOF\n");
  ASSERT_TRUE(late.ok()) << late.status().ToString();
  EXPECT_EQ((*late)[0].job.job.id, "late");
  EXPECT_EQ((*late)[0].job.job.groups[0].replicas, 1);              // "  #SBATCH -N 2" is a comment
  EXPECT_EQ((*late)[0].job.job.groups[0].request.cpu_milli, 3000);  // -n 3 is read
  EXPECT_EQ((*late)[0].job.job.groups[0].request.gpu.count, 0) << "after the first command";
}

// --dependency as sbatch writes it (every item must hold), and the same text in the
// annotation tessera.io/dependency on a YAML job; stored and read back with the spec.
TEST(Spec, Dependencies) {
  using C = Dependency::Condition;
  auto s = ParseDocuments(
      "#!/bin/bash\n#SBATCH --dependency=afterok:12:prep,afterany:13\n#SBATCH -d "
      "afternotok:eval,after:warm\ntrue\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const JobSpec& j = (*s)[0].job;  // a repeated option: its last value, as sbatch
  EXPECT_EQ(j.dependencies,
            (std::vector<Dependency>{{C::kAfterNotOk, "eval", 0}, {C::kAfter, "warm", 0}}));
  EXPECT_EQ(j.origin.dependency, "line 3: -d afternotok:eval,after:warm");
  auto bare = ParseDocuments("#!/bin/bash\n#SBATCH -d 12\ntrue\n");  // sbatch: afterany
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ((*bare)[0].job.dependencies, (std::vector<Dependency>{{C::kAfterAny, "12", 0}}));
  auto first = ParseDocuments("#!/bin/bash\n#SBATCH --dependency=afterok:12:prep,afterany:13\n");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)[0].job.dependencies,
            (std::vector<Dependency>{
                {C::kAfterOk, "12", 0}, {C::kAfterOk, "prep", 0}, {C::kAfterAny, "13", 0}}));
  Dependency resolved = (*first)[0].job.dependencies[0];
  resolved.seq = 12;
  JobSpec stored = (*first)[0].job;
  stored.dependencies[0] = resolved;
  auto back = JobSpecFromJson(JobSpecToJson(stored), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->dependencies, stored.dependencies);

  auto y = ParseDocuments(
      "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: eval\n  annotations: "
      "{tessera.io/dependency: \"afterok:train\"}\nspec: {template: {spec: {restartPolicy: Never, "
      "containers: [{name: "
      "c, command: [x]}]}}}\n");
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  EXPECT_EQ((*y)[0].job.dependencies, (std::vector<Dependency>{{C::kAfterOk, "train", 0}}));

  struct Case {
    std::string directive, error;
  } cases[] = {
      {"--dependency=afterok:", "line 2: --dependency: \"afterok:\": a job name or id is missing"},
      {"--dependency=afterok",
       "expected CONDITION:JOB[:JOB...] with CONDITION one of after, "
       "afterany, afterok, afternotok (e.g. afterok:prep)"},
      {"--dependency=afterok:a,", "line 2: --dependency: \"\": expected CONDITION:JOB"},
      {"-d afterfoo:a", "line 2: -d: \"afterfoo:a\": expected CONDITION:JOB"},
      {"-d afterok:a?afterany:b", "\"?\" (any one of) is not supported"},
      {"-d singleton", "singleton is not supported (Tessera job names are unique"},
      {"-d aftercorr:5", "aftercorr is not supported"},
      {"-d after:5+10", "a delay (JOB+MINUTES) is not supported"},
      {"-d afterok:a/b", "\"a/b\" may contain only letters, digits"},
      {"--dependency", "line 2: --dependency: needs a value"},
  };
  for (const Case& c : cases) {
    auto bad = ParseDocuments("#!/bin/bash\n#SBATCH " + c.directive + "\ntrue\n");
    ASSERT_FALSE(bad.ok()) << c.directive;
    EXPECT_NE(bad.status().message().find(c.error), std::string::npos)
        << c.directive << ": " << bad.status().message();
  }
  auto bad_annotation = ParseDocuments(
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {tessera.io/dependency: "
      "\"ok:x\"}\nspec: {containers: [{name: c, command: [x]}]}\n");
  ASSERT_FALSE(bad_annotation.ok());
  EXPECT_EQ(bad_annotation.status().message().rfind(
                "metadata.annotations.tessera.io/dependency: \"ok:x\": expected", 0),
            0u)
      << bad_annotation.status().message();
}

// -N, -n and --ntasks-per-node as sbatch combines them (Slurm 22.05): one Tessera task per
// node, holding that node's Slurm tasks.
// Slurm's options that take no value: those that change only sbatch's own output are taken;
// the others are refused as unsupported, by name, never as missing a value or by taking
// the next option as their value.
TEST(Spec, SbatchValuelessOptions) {
  auto ok = ParseDocuments(
      "#!/bin/bash\n#SBATCH --parsable\n#SBATCH -Q --verbose -v\n#SBATCH --ignore-pbs -N 2\n"
      "true\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ((*ok)[0].job.job.TaskCount(), 2);
  for (const char* opt : {"--overcommit", "-O", "--oversubscribe", "-s", "--spread-job", "--wait",
                          "-W", "--test-only", "--contiguous", "--get-user-env", "--no-kill"}) {
    for (const std::string& line : {std::string(opt), std::string(opt) + " --time=5"}) {
      auto bad = ParseDocuments("#!/bin/bash\n#SBATCH " + line + "\ntrue\n");
      ASSERT_FALSE(bad.ok()) << line;
      EXPECT_EQ(bad.status().message().rfind(
                    std::string("line 2: ") + opt + ": unknown or unsupported directive", 0),
                0u)
          << bad.status().message();
    }
  }
  auto valued = ParseDocuments("#!/bin/bash\n#SBATCH --parsable=yes\ntrue\n");
  ASSERT_FALSE(valued.ok());
  EXPECT_EQ(valued.status().message(), "line 2: --parsable: takes no value, got \"yes\"");
}

TEST(Spec, SbatchTaskLayout) {
  struct Case {
    const char* directives;
    int32_t nodes, per_node;
  } cases[] = {
      {"-n 4 --ntasks-per-node=2", 2, 2},                 // no -N: 4 / 2 = 2 nodes
      {"--ntasks=6\n#SBATCH --ntasks-per-node 3", 2, 3},  // on two lines
      {"-N 2 --ntasks-per-node=3", 2, 3},                 // no -n: 2 x 3 = 6 tasks
      {"-N 2 -n 4 --ntasks-per-node=2", 2, 2},            // all three, agreeing
      {"--ntasks-per-node=3", 1, 3},                      // one node by default
      {"-n 3", 1, 3},                                     // -n alone: one node
      {"-N 2 -n 4", 2, 2},                                // spread evenly
      {"-N 2", 2, 1},                                     // one task per node by default
  };
  for (const auto& c : cases) {
    std::string text =
        std::string("#!/bin/bash\n#SBATCH -c 2\n#SBATCH ") + c.directives + "\nsrun hostname\n";
    auto r = ParseDocuments(text);
    ASSERT_TRUE(r.ok()) << c.directives << ": " << r.status().ToString();
    const JobSpec& j = (*r)[0].job;
    EXPECT_EQ(j.job.groups[0].replicas, c.nodes) << c.directives;
    EXPECT_EQ(j.job.min_available, c.nodes) << c.directives;
    EXPECT_EQ(j.job.groups[0].request.cpu_milli, 2000 * c.per_node) << c.directives;  // -c 2
    EXPECT_EQ(j.templates[0].env.at("SLURM_NNODES"), std::to_string(c.nodes)) << c.directives;
    EXPECT_EQ(j.templates[0].env.at("SLURM_NTASKS"), std::to_string(c.nodes * c.per_node))
        << c.directives;
  }
}

// A script of one #SBATCH line with `directives`, and `true`.
StatusOr<std::vector<Document>> SbatchWith(const std::string& directives) {
  return ParseDocuments("#!/bin/bash\n#SBATCH " + directives + "\ntrue\n");
}

// That script is refused with an error that says `words`.
void ExpectSbatchRefused(const std::string& directives, const std::string& words) {
  ExpectRefused(SbatchWith(directives), words, directives);
}

// -w/--nodelist and -x/--exclude, as Slurm hostlists: node affinity on kubernetes.io/hostname
// (the label every node carries). -w without -N is as many nodes as it names; the job's nodes
// must be exactly the listed ones (each task on its own node), so -N must agree.
TEST(Spec, SbatchNodelistAndExclude) {
  using Op = NodeSelectorRequirement::Op;
  struct Case {
    const char* directives;
    int32_t nodes, per_node;
    std::vector<std::string> in, not_in;  // empty: no such requirement
  } cases[] = {
      {"-w gpu-node-[1-2]", 2, 1, {"gpu-node-1", "gpu-node-2"}, {}},
      {"--nodelist=b,a -N 2", 2, 1, {"b", "a"}, {}},  // as written
      {"-wa -x b,c", 1, 1, {"a"}, {"b", "c"}},
      {"--exclude=n[01-03]", 1, 1, {}, {"n01", "n02", "n03"}},
      {"-x n1 -N 2", 2, 1, {}, {"n1"}},
      {"-w a,b -n 4", 2, 2, {"a", "b"}, {}},
      {"-w a,b -n 4 --ntasks-per-node=2", 2, 2, {"a", "b"}, {}},
      {"-w a,b --ntasks-per-node=3", 2, 3, {"a", "b"}, {}},
      {"-w x -w a,b", 2, 1, {"a", "b"}, {}},  // the last, as sbatch
  };
  for (const auto& c : cases) {
    auto r = SbatchWith(c.directives);
    ASSERT_TRUE(r.ok()) << c.directives << ": " << r.status().ToString();
    const JobSpec& j = (*r)[0].job;
    EXPECT_EQ(j.job.groups[0].replicas, c.nodes) << c.directives;
    EXPECT_EQ(j.job.groups[0].request.cpu_milli, 1000 * c.per_node) << c.directives;
    EXPECT_TRUE(j.job.one_task_per_node);
    ASSERT_EQ(j.job.placement.affinity.required.size(), 1u) << c.directives;
    std::vector<std::string> in, not_in;
    for (const auto& e : j.job.placement.affinity.required[0].match_expressions) {
      EXPECT_EQ(e.key, "kubernetes.io/hostname");
      (e.op == Op::kIn ? in : not_in) = e.values;
      EXPECT_TRUE(e.op == Op::kIn || e.op == Op::kNotIn);
    }
    EXPECT_EQ(in, c.in) << c.directives;
    EXPECT_EQ(not_in, c.not_in) << c.directives;
    // Stored and read back with the spec.
    auto back = JobSpecFromJson(JobSpecToJson(j), "");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->job.placement.affinity.required.size(), 1u);
  }
  auto none = ParseDocuments("#!/bin/bash\n#SBATCH -N 2\ntrue\n");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)[0].job.job.placement.affinity.required.empty());

  struct Refused {
    const char* directives;
    const char* words;
  } refused[] = {
      {"-N 1 -w a,b",
       "line 2: -w a,b: names 2 nodes, more than the job's 1 (line 2: -N 1): every "
       "listed node must be one of the job's"},
      {"-N 3 -w a,b",
       "line 2: -w a,b: names 2 nodes and the job has 3 (line 2: -N 3): Slurm "
       "would add 1 node(s) of its choosing, which Tessera cannot express"},
      {"-n 6 --ntasks-per-node=2 --nodelist=a,b",
       "line 2: --nodelist=a,b: names 2 nodes and the job has 3 (line 2: -n 6 with line 2: "
       "--ntasks-per-node=2)"},
      {"-w a,b -n 3", "line 2: -n 3: 3 tasks do not divide evenly over 2 nodes (line 2: -w a,b)"},
      {"-w a,n[1-2],a", "line 2: -w a,n[1-2],a: node a is named twice"},
      {"-w n[1-", "line 2: -w n[1-: hostlist \"n[1-\": unbalanced '['"},
      {"-x n[2-1]", "line 2: -x n[2-1]: hostlist \"n[2-1]\": bad range \"2-1\""},
      // Bounded: a short line must not become 100,000 names kept in the job.
      {"-x n[0-99999]", "line 2: -x n[0-99999]: hostlist \"n[0-99999]\": more than 4096 names"},
      {"--nodelist=/etc/nodes",
       "line 2: --nodelist=/etc/nodes: a file of node names is not "
       "supported"},
      {"-w ,", "line 2: -w ,: names no node"},
      {"-w a,b -x c,b", "line 2: -x c,b: node b is also in line 2: -w a,b"},
  };
  for (const auto& c : refused) ExpectSbatchRefused(c.directives, c.words);
}

// --gres=gpu[:type]:N and --gpus-per-node=[type:]N: GPUs per node. A repeated option
// keeps its last value, as sbatch; the two options together must say the same.
TEST(Spec, SbatchGpusPerNode) {
  struct Case {
    const char* directives;
    int32_t count;
    std::vector<std::string> models;
  } cases[] = {
      {"--gres=gpu:2", 2, {}},
      {"--gres=gpu:a100", 1, {"A100", "A100-*"}},  // Slurm's count defaults to 1
      {"--gres=gpu", 1, {}},
      {"--gpus-per-node=a100:4", 4, {"A100", "A100-*"}},
      {"--gres=gpu:a100:2 --gpus-per-node=a100:2", 2, {"A100", "A100-*"}},
      {"--gres=gpu:2 --gpus-per-node=2", 2, {}},
      {"--gres=gpu:a100:2 --gres=gpu:4", 4, {}},  // the last, type and all
      {"--gpus-per-node=1 --gpus-per-node=h200:8", 8, {"H200", "H200-*"}},
      // -G/--gpus: the job's in all, the same on each node.
      {"--gpus=2", 2, {}},
      {"-G 4", 4, {}},
      {"-N 2 --gpus=h100:8", 4, {"H100", "H100-*"}},
      {"-N 2 --gpus=4 --gpus-per-node=2", 2, {}},
      // Without -N, one node, whatever its size: Slurm would take as many as the GPUs need,
      // which the spec cannot know and the engine cannot leave open (docs/slurm.md).
      {"--gpus=16", 16, {}},
  };
  for (const auto& c : cases) {
    auto r = SbatchWith(c.directives);
    ASSERT_TRUE(r.ok()) << c.directives << ": " << r.status().ToString();
    const GpuRequest& gpu = (*r)[0].job.job.groups[0].request.gpu;
    EXPECT_EQ(gpu.count, c.count) << c.directives;
    EXPECT_EQ(gpu.models, c.models) << c.directives;
  }
}

// -t as sbatch reads it: to the minute, seconds rounded up; UNLIMITED, INFINITE (any case)
// and -1 are no limit.
TEST(Spec, SbatchTimeLimits) {
  struct Case {
    const char* time;
    std::optional<int64_t> seconds;  // nullopt: no limit
  } cases[] = {
      {"90", 5400},      {"1:30", 120},       {"0:01", 60},     {"2:00", 120},
      {"1:00:01", 3660}, {"1-0:0:30", 86460}, {"1-2", 93600},   {"0", std::nullopt},
      {"UNLIMITED", {}}, {"unlimited", {}},   {"INFINITE", {}}, {"Infinite", {}},
      {"-1", {}},
  };
  for (const auto& c : cases) {
    auto r = SbatchWith(std::string("-t ") + c.time);
    ASSERT_TRUE(r.ok()) << c.time << ": " << r.status().ToString();
    EXPECT_EQ((*r)[0].job.time_limit_seconds, c.seconds) << c.time;
  }
  ExpectSbatchRefused("-t -2", "bad time");
  ExpectSbatchRefused("-t forever", "bad time");
}

// A Slurm GPU type names a model family: every model the agents report for it (NVML names,
// agent/nvml.cc) matches, whatever its memory or form factor, ignoring case; another family
// does not.
TEST(Spec, SbatchGpuTypeMatchesItsFamily) {
  struct Case {
    const char* type;
    std::vector<std::string> match, other;
  } cases[] = {
      {"h100", {"H100-80GB", "H100-94GB", "H100"}, {"H200-141GB", "H1000", "A100-80GB"}},
      {"v100", {"V100-SXM2-32GB", "V100-PCIE-16GB", "v100-sxm2-16gb"}, {"V1000", "A100-40GB"}},
      {"a100", {"A100-40GB", "A100-80GB", "A100"}, {"A10", "A100X"}},
      {"h200", {"H200-141GB"}, {"H100-80GB"}},
  };
  for (const auto& c : cases) {
    auto r = SbatchWith(std::string("--gres=gpu:") + c.type + ":1");
    ASSERT_TRUE(r.ok()) << c.type << ": " << r.status().ToString();
    const std::vector<std::string>& models = (*r)[0].job.job.groups[0].request.gpu.models;
    auto allowed = [&](const std::string& m) {
      return std::any_of(models.begin(), models.end(),
                         [&](const std::string& a) { return GpuModelMatches(a, m); });
    };
    for (const std::string& m : c.match) EXPECT_TRUE(allowed(m)) << c.type << " " << m;
    for (const std::string& m : c.other) EXPECT_FALSE(allowed(m)) << c.type << " " << m;
  }
}

// -G/--gpus that would not be the same on every node, or that says another number than a
// per-node option, is refused, naming the lines.
TEST(Spec, SbatchGpusInAllMustSplitEvenly) {
  struct Case {
    const char* directives;
    const char* words;
  } cases[] = {
      {"-N 2 --gpus=3",
       "line 2: --gpus=3: 3 GPUs over the job's 2 nodes is not the same number on each"},
      {"--gres=gpu:2 -G 4",
       "line 2: --gres=gpu:2 and line 2: -G 4: two different GPU requests (2 and 4 per node)"},
  };
  for (const auto& c : cases) ExpectSbatchRefused(c.directives, c.words);
}

// --gpus-per-task=[type:]N: a node's GPUs are N x its tasks (-n, --ntasks-per-node; or -G
// over N, Slurm's implicit task count). Slurm needs a task count with it, and refuses GPU
// options that disagree; so does Tessera, naming the lines.
TEST(Spec, SbatchGpusPerTask) {
  struct Case {
    const char* directives;
    int32_t nodes, gpus_per_node, tasks;
    std::vector<std::string> models;
  } cases[] = {
      {"-n 4 --gpus-per-task=1", 1, 4, 4, {}},
      {"-N 2 --ntasks-per-node=4 --gpus-per-task=2", 2, 8, 8, {}},
      {"-n 8 --ntasks-per-node=4 --gpus-per-task=a100:1", 2, 4, 8, {"A100", "A100-*"}},
      {"--ntasks-per-node=2 --gpus-per-task=1", 1, 2, 2, {}},
      {"-N 2 -n 4 --gpus-per-task=1 --gpus-per-node=2", 2, 2, 4, {}},
      {"-N 2 -n 4 --gpus-per-task=1 --gpus=4", 2, 2, 4, {}},
      {"-n 2 --gres=gpu:h100:4 --gpus-per-task=h100:2", 1, 4, 2, {"H100", "H100-*"}},
      // -G with --gpus-per-task and no -n: G / per-task tasks (16 = 2 nodes of 8, 8 GPUs each).
      {"--gpus=16 --gpus-per-task=1 --ntasks-per-node=8", 2, 8, 16, {}},
      {"--gpus=4 --gpus-per-task=2", 1, 4, 2, {}},
      {"--gpus-per-task=1 --gpus-per-task=2 -n 2", 1, 4, 2, {}},  // the last, as sbatch
  };
  for (const auto& c : cases) {
    auto r = SbatchWith(c.directives);
    ASSERT_TRUE(r.ok()) << c.directives << ": " << r.status().ToString();
    const JobSpec& j = (*r)[0].job;
    EXPECT_EQ(j.job.groups[0].replicas, c.nodes) << c.directives;
    EXPECT_EQ(j.job.groups[0].request.gpu.kind, GpuRequestKind::kWhole) << c.directives;
    EXPECT_EQ(j.job.groups[0].request.gpu.count, c.gpus_per_node) << c.directives;
    EXPECT_EQ(j.job.groups[0].request.gpu.models, c.models) << c.directives;
    EXPECT_EQ(j.templates[0].env.at("SLURM_NTASKS"), std::to_string(c.tasks)) << c.directives;
  }

  struct Refused {
    const char* directives;
    const char* words;
  } refused[] = {
      {"--gpus-per-task=1",
       "line 2: --gpus-per-task=1: needs a task count: give -n/--ntasks (or -G/--gpus, or "
       "--ntasks-per-node), as Slurm requires -n or --gpus with it"},
      {"-N 2 --gpus-per-task=1", "line 2: --gpus-per-task=1: needs a task count"},
      // Slurm's own refusals (its test39.4): per-node and per-task GPUs that disagree.
      {"-n 2 -N 1 --gpus-per-task=1 --gpus-per-node=1",
       "line 2: --gpus-per-node=1 and line 2: --gpus-per-task=1 x 2 tasks per node: two "
       "different GPU requests (1 and 2 per node); give one of them"},
      {"-N 1 --ntasks-per-node=1 --gpus-per-task=1 --gpus-per-node=2",
       "line 2: --gpus-per-node=2 and line 2: --gpus-per-task=1 x 1 tasks per node: two "
       "different GPU requests (2 and 1 per node)"},
      {"-n 2 --gpus=3 --gpus-per-task=1",
       "line 2: --gpus=3 and line 2: --gpus-per-task=1 x 2 tasks per node: two different GPU "
       "requests (3 and 2 per node)"},
      {"-n 2 --gpus-per-task=a100:1 --gres=gpu:2",
       "line 2: --gres=gpu:2 and line 2: --gpus-per-task=a100:1 x 2 tasks per node: two "
       "different GPU requests (2 and 2 a100 per node)"},
      // Uneven layouts: Tessera runs the same number of tasks, so of GPUs, on every node.
      {"-N 2 -n 3 --gpus-per-task=1", "line 2: -n 3: 3 tasks do not divide evenly over 2 nodes"},
      {"-N 2 --gpus=6 --gpus-per-task=2",
       "line 2: --gpus=6 with line 2: --gpus-per-task=2: 3 tasks do not divide evenly over 2 "
       "nodes (line 2: -N 2)"},
      {"--gpus=6 --gpus-per-task=4",
       "line 2: --gpus=6 with line 2: --gpus-per-task=4: 6 GPUs are not a whole number of tasks "
       "of 4 GPUs each"},
      {"-n 2 --gpus-per-task=gpu:a100:1",
       "line 2: --gpus-per-task: expected [type:]N, got \"gpu:a100:1\""},
      {"-n 2 --gpus-per-task=0", "line 2: --gpus-per-task: must be >= 1, got 0"},
      {"-n 999999 --gpus-per-task=999999",
       "line 2: --gpus-per-task=999999 x 999999 tasks per node = 999998000001 GPUs per node: too "
       "large"},
  };
  for (const auto& c : refused) ExpectSbatchRefused(c.directives, c.words);
}

// The server's errors about a job's name, queue and priority class name the field (or line)
// of the document's own shape, also where the value is a default it did not give.
TEST(Spec, OriginsNameEachShapesOwnFields) {
  const std::string pod = "{containers: [{name: c, command: [x]}], priorityClassName: p}";
  struct Case {
    const char* kind;
    std::string text;
    const char* name;
    const char* queue;
    const char* priority_class;
  } cases[] = {
      {"tessera.io/v1 Job",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {queue: q, "
       "priorityClass: p, tasks: [{command: [x]}]}\n",
       "metadata.name", "spec.queue", "spec.priorityClass"},
      {"Volcano Job",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  queue: "
       "q\n  priorityClassName: p\n  tasks:\n  - {name: w, replicas: 1, template: {spec: " +
           pod + "}}\n",
       "metadata.name", "spec.queue", "spec.priorityClassName"},
      {"Volcano Job, priority class from its task",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
       "  - {name: w, replicas: 1, template: {spec: " +
           pod + "}}\n",
       "metadata.name", "spec.queue", "spec.tasks[0].template.spec.priorityClassName"},
      {"batch/v1 Job",
       "apiVersion: batch/v1\nkind: Job\nmetadata: {name: b}\nspec:\n  template:\n    spec: "
       "{restartPolicy: Never, containers: [{name: c, command: [x]}], priorityClassName: p}\n",
       "metadata.name",
       "metadata.annotations.scheduling.volcano.sh/queue-name (not given: the default queue)",
       "spec.template.spec.priorityClassName"},
      {"Deployment",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, annotations: "
       "{tessera.io/queue: q}}\nspec:\n  template:\n    spec: " +
           pod + "\n",
       "metadata.name", "metadata.annotations.tessera.io/queue",
       "spec.template.spec.priorityClassName"},
      {"Pod", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: " + pod + "\n",
       "metadata.name",
       "metadata.annotations.scheduling.volcano.sh/queue-name (not given: the default queue)",
       "spec.priorityClassName"},
      {"sbatch", "#!/bin/bash\n#SBATCH -J s -p q\n#SBATCH --qos=p\ntrue\n", "line 2: -J",
       "line 2: -p (partition: the queue)", "line 3: --qos (QOS: the priority class)"},
      {"sbatch, defaults", "#!/bin/bash\ntrue\n", "#SBATCH -J (not given: a generated name)",
       "#SBATCH -p (not given: the default queue)", "#SBATCH -q"},
  };
  for (const auto& c : cases) {
    auto r = ParseDocuments(c.text);
    ASSERT_TRUE(r.ok()) << c.kind << ": " << r.status().ToString();
    const JobSpec::Origins& o = (*r)[0].job.origin;
    EXPECT_EQ(o.name, c.name) << c.kind;
    EXPECT_EQ(o.queue, c.queue) << c.kind;
    EXPECT_EQ(o.priority_class, c.priority_class) << c.kind;
  }
}

// Submitted held: sbatch --hold / -H, `suspend: true` of a batch/v1 or Tessera Job.
TEST(Spec, HeldSubmissions) {
  const char* held[] = {
      "#!/bin/bash\n#SBATCH --hold\ntrue\n", "#!/bin/bash\n#SBATCH -H\ntrue\n",
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: b}\nspec:\n  suspend: true\n  template:\n"
      "    spec:\n      restartPolicy: Never\n      containers: [{name: c, image: x, command: "
      "[x]}]\n",
      "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {suspend: true, tasks: "
      "[{command: [x]}]}\n",
      // A Deployment created paused starts no pods until resumed.
      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  paused: true\n"
      "  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n"
      "    spec: {containers: [{name: c, command: [x]}]}\n"};
  for (const char* doc : held) {
    auto s = ParseDocuments(doc);
    ASSERT_TRUE(s.ok()) << doc << s.status().ToString();
    EXPECT_TRUE((*s)[0].job.held) << doc;
  }
  auto not_held = ParseDocuments(
      "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {suspend: false, "
      "tasks: [{command: [x]}]}\n");
  ASSERT_TRUE(not_held.ok()) << not_held.status().ToString();
  EXPECT_FALSE((*not_held)[0].job.held);
  auto bad = ParseDocuments(
      "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {suspend: yes please, "
      "tasks: [{command: [x]}]}\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("spec.suspend"), std::string::npos)
      << bad.status().message();
}

// sbatch -o / -e: kept as patterns (stderr with stdout unless -e; stdout to slurm-%j.out
// unless -o), stored, and expanded per task as sbatch does.
TEST(Spec, SbatchOutputFiles) {
  auto s = ParseDocuments("#!/bin/bash\n#SBATCH -o logs/%x-%j.%3t.out\ntrue\n");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const TaskTemplate& t = (*s)[0].job.templates[0];
  EXPECT_EQ(t.stdout_file, "logs/%x-%j.%3t.out");
  EXPECT_EQ(t.stderr_file, t.stdout_file);
  auto back = JobSpecFromJson(JobSpecToJson((*s)[0].job), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->templates[0].stderr_file, t.stdout_file);
  const SlurmFilenameFields f{42, "train", "gpu-node-1", "alice", 1, 1, std::nullopt};
  EXPECT_EQ(ExpandSlurmFilename(t.stdout_file, f), "logs/train-42.001.out");
  EXPECT_EQ(ExpandSlurmFilename("%N_%n_%u_100%%", f), "gpu-node-1_1_alice_100%");

  auto e = ParseDocuments("#!/bin/bash\n#SBATCH --error=err-%j\ntrue\n");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)[0].job.templates[0].stdout_file, "slurm-%j.out");
  EXPECT_EQ((*e)[0].job.templates[0].stderr_file, "err-%j");
  auto none = ParseDocuments("#!/bin/bash\ntrue\n");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)[0].job.templates[0].stdout_file, "") << "the agent's log files only";
  // The script is run as a file (its #! line names the interpreter), and stored as such.
  EXPECT_EQ((*none)[0].job.templates[0].script, "#!/bin/bash\ntrue\n");
  EXPECT_TRUE((*none)[0].job.templates[0].command.empty());
  EXPECT_EQ(JobSpecFromJson(JobSpecToJson((*none)[0].job), "")->templates[0].script,
            "#!/bin/bash\ntrue\n");
  // As sbatch: without a #! line there is no interpreter to run it with.
  for (const char* text : {"#SBATCH -J x\ntrue\n", "\n#!/bin/bash\ntrue\n"}) {
    auto no_interpreter = ParseDocuments(text);
    ASSERT_FALSE(no_interpreter.ok()) << text;
    EXPECT_NE(no_interpreter.status().message().find("line 1: a batch script must start with #!"),
              std::string::npos)
        << no_interpreter.status().message();
  }

  // Quoted values, as sbatch reads them: the quotes go, the blanks inside stay.
  auto quoted = ParseDocuments(
      "#!/bin/bash\n#SBATCH --output=\"logs/%x-%j.out\" -e 'err %j' # comment\n"
      "#SBATCH -J \"quoted\" --gres=\"gpu:1\"\ntrue\n");
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  EXPECT_EQ((*quoted)[0].job.templates[0].stdout_file, "logs/%x-%j.out");
  EXPECT_EQ((*quoted)[0].job.templates[0].stderr_file, "err %j");
  EXPECT_EQ((*quoted)[0].job.job.id, "quoted");
  EXPECT_EQ((*quoted)[0].job.job.groups[0].request.gpu.count, 1);

  auto bad = ParseDocuments("#!/bin/bash\n#SBATCH -o out-%s\ntrue\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "line 2: -o: \"%s\" is not supported (supported: %j, %x, %N, %n, %t, %u, %A, %a, "
                "%%)"),
            std::string::npos)
      << bad.status().message();
}

// sbatch --array / -a: indices and ranges with steps, a throttle; every element of the array
// knows the whole (count, min, max, step).
TEST(Spec, SbatchArrays) {
  struct Case {
    const char* directive;
    std::vector<int32_t> indices;
    int32_t step, throttle;
  } cases[] = {
      {"--array=0-3", {0, 1, 2, 3}, 1, 0},
      {"-a 1,3,5-7", {1, 3, 5, 6, 7}, 1, 0},  // no common difference: step 1
      {"--array=0-15:4", {0, 4, 8, 12}, 4, 0},
      {"--array 0-9%2", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 2},
      {"-a7", {7}, 1, 0},
      {"--array=5,1,3", {1, 3, 5}, 2, 0},  // in index order
      {"--array=998-1000%1", {998, 999, 1000}, 1, 1},
  };
  for (const auto& c : cases) {
    auto r = ParseDocuments(std::string("#!/bin/bash\n#SBATCH ") + c.directive + "\ntrue\n");
    ASSERT_TRUE(r.ok()) << c.directive << ": " << r.status().ToString();
    const JobSpec& s = (*r)[0].job;
    EXPECT_EQ(s.array_indices, c.indices) << c.directive;
    ASSERT_TRUE(s.array.has_value()) << c.directive;
    EXPECT_EQ(s.array->count, static_cast<int32_t>(c.indices.size())) << c.directive;
    EXPECT_EQ(s.array->min, c.indices.front()) << c.directive;
    EXPECT_EQ(s.array->max, c.indices.back()) << c.directive;
    EXPECT_EQ(s.array->step, c.step) << c.directive;
    EXPECT_EQ(s.array->throttle, c.throttle) << c.directive;
  }
  struct Bad {
    const char* directive;
    const char* error;
  } bad[] = {
      {"--array=", "line 2: --array: needs a value"},
      {"--array=1,,3", "line 2: --array=1,,3: an empty index between commas in \"1,,3\""},
      {"--array=1,", "line 2: --array=1,: an empty index after the last comma in \"1,\""},
      {"--array=%4", "line 2: --array=%4: no indices"},
      {"--array=5-2", "line 2: --array=5-2: \"5-2\": the range ends before it starts"},
      {"--array=0-8:0", "line 2: --array=0-8:0: \"0-8:0\": step 0: must be at least 1"},
      {"-a 3:2", "line 2: -a 3:2: \"3:2\": a step needs a range (a-b:step)"},
      {"--array=1-3,3", "line 2: --array=1-3,3: index 3 is given twice"},
      {"--array=-1", "line 2: --array=-1: \"-1\": indices are not negative"},
      {"--array=1--3", "line 2: --array=1--3: \"1--3\": indices are not negative"},
      {"--array=0-9%0", "line 2: --array=0-9%0: throttle %0: at least 1 element must run"},
      {"--array=0-1001",
       "line 2: --array=0-1001: index 1001 is above 1000 (indices go from 0 to 1000, Slurm's "
       "default MaxArraySize 1001)"},
      {"--array=x", "line 2: --array=x: \"x\": \"x\" is not a number"},
  };
  for (const auto& c : bad) {
    auto r = ParseDocuments(std::string("#!/bin/bash\n#SBATCH ") + c.directive + "\ntrue\n");
    ASSERT_FALSE(r.ok()) << c.directive;
    EXPECT_EQ(r.status().message().substr(0, std::string(c.error).size()), c.error) << c.directive;
  }
}

// An array submission becomes one job per index, <name>_<index>, each with Slurm's
// SLURM_ARRAY_* and its membership stored with it; %A and %a name its files.
TEST(Spec, ArrayElementsAndTheirFiles) {
  auto r = ParseDocuments(
      "#!/bin/bash\n#SBATCH -J sweep\n#SBATCH --array=2-6:2%1\n#SBATCH -e err-%A_%a\ntrue\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobSpec& s = (*r)[0].job;
  EXPECT_EQ(s.templates[0].stdout_file, "slurm-%A_%a.out") << "sbatch's default in an array";
  auto elements = ArrayElements(s, "sweep", 40);
  ASSERT_TRUE(elements.ok()) << elements.status().ToString();
  ASSERT_EQ(elements->size(), 3u);
  const JobSpec& e = (*elements)[1];
  EXPECT_EQ(e.job.id, "sweep_4");
  EXPECT_TRUE(e.array_indices.empty());
  const std::map<std::string, std::string> want = {
      {"SLURM_ARRAY_JOB_ID", "40"},  {"SLURM_ARRAY_TASK_ID", "4"},  {"SLURM_ARRAY_TASK_COUNT", "3"},
      {"SLURM_ARRAY_TASK_MIN", "2"}, {"SLURM_ARRAY_TASK_MAX", "6"}, {"SLURM_ARRAY_TASK_STEP", "2"}};
  for (const auto& [k, v] : want) EXPECT_EQ(e.templates[0].env.at(k), v) << k;
  auto back = JobSpecFromJson(JobSpecToJson(e), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->array, e.array) << "membership is stored";
  EXPECT_EQ(back->array->throttle, 1);

  SlurmFilenameFields f{42, "sweep", "n1", "alice", 0, 0, e.array};
  EXPECT_EQ(ExpandSlurmFilename("o-%A_%a-%j-%3a", f), "o-40_4-42-004");
  EXPECT_EQ(ExpandForSlurm("o-%A_%a-%j-%%a-%x", "sweep", e.array), "o-40_4-%j-%%a-sweep")
      << "the rest is Slurm's to expand";
  EXPECT_EQ(ExpandForSlurm("o-%A_%a-%x", "one", std::nullopt), "o-%A_%a-one")
      << "not an array: %A and %a are Slurm's";
  f.array.reset();  // not in an array: as Slurm 22.05 writes them
  EXPECT_EQ(ExpandSlurmFilename("o-%A_%a", f), "o-42_4294967294");

  std::string long_name(250, 'x');
  auto too_long = ArrayElements(
      (*ParseDocuments("#!/bin/bash\n#SBATCH -J " + long_name + "\n#SBATCH -a 1000\ntrue\n"))[0]
          .job,
      long_name, 1);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("line 2: -J (with line 3: -a 1000): "),
            std::string::npos)
      << too_long.status().message();
}

// Whole nodes: sbatch --exclusive, Tessera's spec.exclusive, and for Volcano and Kubernetes
// documents the annotation tessera.io/exclusive; the stored spec keeps it.
TEST(Spec, ExclusiveNodesFromEveryShape) {
  auto sb = ParseDocuments("#!/bin/bash\n#SBATCH -N 2\n#SBATCH --exclusive\nsrun true\n");
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  EXPECT_TRUE((*sb)[0].job.job.exclusive);
  EXPECT_TRUE((*sb)[0].job.job.one_task_per_node);  // -N 2 still means distinct nodes
  auto back = JobSpecFromJson(JobSpecToJson((*sb)[0].job), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->job.exclusive);

  auto own = ParseDocuments(
      "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {exclusive: true, "
      "tasks: [{replicas: 2, command: [x]}]}\n");
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  EXPECT_TRUE((*own)[0].job.job.exclusive);

  const std::string tasks =
      "  tasks:\n"
      "  - {name: w, replicas: 2, template: {spec: {containers: [{name: c, command: [x]}]}}}\n";
  for (const char* value : {"\"true\"", "\"false\""}) {
    auto v = ParseDocuments(
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v, annotations: "
        "{tessera.io/exclusive: " +
        std::string(value) + "}}\nspec:\n" + tasks);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ((*v)[0].job.job.exclusive, std::string(value) == "\"true\"");
  }
  auto batch = ParseDocuments(
      "apiVersion: batch/v1\nkind: Job\nmetadata: {name: b, annotations: {tessera.io/exclusive: "
      "\"true\"}}\nspec:\n  template: {spec: {restartPolicy: Never, containers: [{name: c, "
      "command: [x]}]}}\n");
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_TRUE((*batch)[0].job.job.exclusive);
}

TEST(Spec, TesseraOwnShapeRoundTrips) {
  const char* doc = R"(
apiVersion: tessera.io/v1
kind: Job
metadata: {name: t1}
spec:
  queue: training
  minAvailable: 2
  oneTaskPerNode: true
  restartPolicy: {onFailure: RestartJob, maxRetries: 2}
  tasks:
    - name: w
      replicas: 2
      resources: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 1}
      command: [python3, train.py]
      env: {A: "1"}
)";
  auto d = ParseDocuments(doc);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const JobSpec& s = (*d)[0].job;
  EXPECT_EQ(s.templates[0].command.size(), 2u);
  EXPECT_EQ(s.restart.max_retries, 2);
  EXPECT_TRUE(s.job.one_task_per_node);
  auto back = JobSpecFromJson(JobSpecToJson(s), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(JobSpecToJson(*back).dump(), JobSpecToJson(s).dump());
  EXPECT_EQ(back->templates[0], s.templates[0]);
  EXPECT_EQ(back->restart, s.restart);
}

// Volcano policies by exit code and per task: "restart on 137 (OOM), abort otherwise", a
// task group with its own policy, per-task minimums; what cannot be honoured is refused.
TEST(Spec, VolcanoExitCodesAndTaskPolicies) {
  const std::string head =
      "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n";
  const std::string c = "template: {spec: {containers: [{name: c, command: [x]}]}}";
  auto d = ParseDocuments(head +
                          "  policies: [{exitCode: 137, action: RestartJob}, {event: PodFailed, "
                          "action: AbortJob}]\n  tasks:\n"
                          "  - {name: ps, replicas: 1, policies: [{event: PodFailed, action: "
                          "RestartTask}], " +
                          c + "}\n  - {name: worker, replicas: 3, minAvailable: 2, " + c + "}\n");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const JobSpec& j = (*d)[0].job;
  EXPECT_EQ(j.restart.OnFailure(137), FailureAction::kRestartJob);
  EXPECT_EQ(j.restart.OnFailure(1), FailureAction::kFailJob);
  EXPECT_EQ(j.restart.OnFailure(std::nullopt), FailureAction::kFailJob);
  // ps (task 0) has its own policy, started from the job's: its exit-code rule stays.
  EXPECT_EQ(j.RestartFor(0).OnFailure(1), FailureAction::kRestartTask);
  EXPECT_EQ(j.RestartFor(0).OnFailure(137), FailureAction::kRestartJob);
  EXPECT_EQ(&j.RestartFor(1), &j.restart);  // the workers: the job's
  EXPECT_EQ(&j.RestartFor(3), &j.restart);
  EXPECT_EQ(j.job.min_available, 3);  // ps 1 + workers 2, as Volcano's default
  auto back = JobSpecFromJson(JobSpecToJson(j), "");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(JobSpecToJson(*back).dump(), JobSpecToJson(j).dump());
  EXPECT_EQ(back->RestartFor(0).OnFailure(1), FailureAction::kRestartTask);
  EXPECT_EQ(back->restart.OnFailure(137), FailureAction::kRestartJob);

  const std::pair<std::string, std::string> refused[] = {
      {"  policies: [{exitCode: 0, action: RestartJob}]\n  tasks: [{replicas: 1, " + c + "}]\n",
       "spec.policies[0].exitCode: 0 is not a failure"},
      {"  policies: [{exitCode: 1, event: PodFailed, action: RestartJob}]\n  tasks: [{replicas: "
       "1, " +
           c + "}]\n",
       "give either exitCode or event(s)"},
      {"  tasks: [{replicas: 1, maxRetry: 10, " + c + "}]\n",
       "spec.tasks[0].maxRetry: 10 differs from the job's 3"},
      {"  tasks: [{name: w, replicas: 3, minAvailable: 1, " + c + "}, {name: ps, replicas: 1, " +
           c + "}]\n",
       "spec.tasks[0].minAvailable: 1 of 3 replicas: only the last task"},
      {"  minAvailable: 2\n  tasks: [{name: ps, replicas: 1, " + c +
           "}, {name: w, replicas: 3, minAvailable: 2, " + c + "}]\n",
       "spec.minAvailable: 2 is less than the tasks' minAvailable together (3)"},
  };
  for (const auto& [spec, want] : refused) {
    auto r = ParseDocuments(head + spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
  }
}

// A Volcano task's restartPolicy: OnFailure (the kubelet restarts the container in place)
// restarts that task alone, unless a policy says what a failed pod does; it used to be read
// and dropped, and the job failed on its first non-zero exit.
TEST(Spec, VolcanoTaskRestartPolicyOnFailure) {
  const std::string head =
      "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n";
  const std::string on_failure =
      "template: {spec: {restartPolicy: OnFailure, containers: [{name: c, command: [x]}]}}";
  const std::string never =
      "template: {spec: {restartPolicy: Never, containers: [{name: c, command: [x]}]}}";
  auto d = ParseDocuments(head + "  tasks:\n  - {name: a, replicas: 1, " + on_failure +
                          "}\n  - {name: b, replicas: 1, " + never + "}\n");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const JobSpec& j = (*d)[0].job;
  EXPECT_EQ(j.RestartFor(0).OnFailure(1), FailureAction::kRestartTask);
  EXPECT_EQ(j.RestartFor(0).max_retries, 3);  // Volcano's maxRetry default
  EXPECT_EQ(j.RestartFor(1).OnFailure(1), FailureAction::kFailJob);
  // A policy naming the failure stands.
  auto p = ParseDocuments(head + "  policies: [{event: PodFailed, action: AbortJob}]\n" +
                          "  tasks:\n  - {name: a, replicas: 1, " + on_failure + "}\n");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[0].job.RestartFor(0).OnFailure(1), FailureAction::kFailJob);
  // PodEvicted -> RestartTask: an eviction takes the whole job here, so the job stores (and
  // describe shows) RestartJob; Tessera's own shape refuses it.
  auto e = ParseDocuments(head + "  policies: [{event: PodEvicted, action: RestartTask}]\n" +
                          "  tasks:\n  - {name: a, replicas: 1, " + never + "}\n");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)[0].job.restart.on_eviction, FailureAction::kRestartJob);
  auto own = ParseDocuments(
      "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec:\n  restartPolicy: "
      "{onEviction: RestartTask}\n  tasks: [{replicas: 1, command: [x]}]\n");
  ASSERT_FALSE(own.ok());
  EXPECT_NE(
      own.status().message().find("spec.restartPolicy.onEviction: RestartTask is not supported"),
      std::string::npos)
      << own.status().message();
}

TEST(Spec, RejectsWithFieldPaths) {
  struct Case {
    const char* name;
    std::string text;
    const char* want;
  } cases[] = {
      {"dot-dot name",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: ..}\nspec:\n  containers: [{name: c, "
       "command: [x]}]\n",
       "metadata.name: \"..\" is not a name"},
      {"negative cpu",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    "
       "resources:\n"
       "      limits: {cpu: -1}\n",
       "spec.containers[0].resources.limits.cpu"},
      {"unknown pod field",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n  bogus: "
       "1\n",
       "spec.bogus: unknown field"},
      {"unknown container field",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, colour: "
       "red}]\n",
       "spec.containers[0].colour: unknown field"},
      {"unknown volcano task field",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n  "
       "- replicas: 1\n"
       "    extra: 2\n    template: {spec: {containers: [{name: c}]}}\n",
       "spec.tasks[0].extra: unknown field"},
      {"bad policy action",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  policies: "
       "[{event: PodEvicted, "
       "action: Explode}]\n  tasks: [{replicas: 1, template: {spec: {containers: [{name: c}]}}}]\n",
       "spec.policies[0].action: unknown action \"Explode\""},
      {"deployment that never restarts",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template: {spec: "
       "{restartPolicy: Never, containers: [{name: c, command: [x]}]}}\n",
       "spec.template.spec.restartPolicy: a Deployment needs Always, got \"Never\""},
      {"minAvailable too big",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  "
       "minAvailable: 5\n"
       "  tasks: [{replicas: 1, template: {spec: {containers: [{name: c}]}}}]\n",
       "spec.minAvailable"},
      // The stopping fields are one per job: a later task whose template differs is refused.
      {"second task's own grace period",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
       "  - {replicas: 1, template: {spec: {containers: [{name: c}]}}}\n"
       "  - {replicas: 1, template: {spec: {terminationGracePeriodSeconds: 5, containers: "
       "[{name: c}]}}}\n",
       "spec.tasks[1].template.spec.terminationGracePeriodSeconds: every task"},
      {"second task's own deadline",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
       "  - {replicas: 1, template: {spec: {activeDeadlineSeconds: 60, containers: [{name: "
       "c}]}}}\n"
       "  - {replicas: 1, template: {spec: {containers: [{name: c}]}}}\n",
       "spec.tasks[1].template.spec.activeDeadlineSeconds: every task"},
      {"task restartPolicy",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec:\n  tasks: [{replicas: 1, "
       "command: [x], restartPolicy: {onFailure: RestartJob}}]\n",
       "spec.tasks[0].restartPolicy: one per job here: give it as spec.restartPolicy"},
      // Kubernetes' paths, not the model's: matchFields is named as unsupported, a term's
      // missing matchExpressions and a preferred term's weight where they are in the pod.
      {"matchFields",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n"
       "  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
       "{nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: "
       "[n]}]}]}}}\n",
       "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
       "nodeSelectorTerms[0].matchFields: not supported"},
      {"term without expressions",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n"
       "  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: "
       "{nodeSelectorTerms: [{}]}}}\n",
       "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution."
       "nodeSelectorTerms[0].matchExpressions: required"},
      {"preferred without weight",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c}]\n"
       "  affinity: {nodeAffinity: {preferredDuringSchedulingIgnoredDuringExecution: "
       "[{preference: {matchExpressions: [{key: a, operator: Exists}]}}]}}\n",
       "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: "
       "required"},
      {"unknown kind", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "kind: unsupported"},
      {"missing name", "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c}]}\n",
       "metadata.name: required"},
      {"bad name",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: \"a/b\"}\nspec: {containers: [{name: c}]}\n",
       "metadata.name"},
      {"unknown resource",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    "
       "resources:\n"
       "      limits: {amd.com/gpu: 1}\n",
       "amd.com/gpu: unknown resource"},
      {"server-owned field",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: x}\nspec: {running: [], tasks: "
       "[{}]}\n",
       "spec.running: set by the server"},
      {"server-owned terminating (it would keep the job from ever being preempted)",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: x}\nspec: {terminating: true, "
       "tasks: [{}]}\n",
       "spec.terminating: set by the server, not by users"},
      {"priority wider than 32 bits",
       "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: p}\nvalue: "
       "4294967301\n",
       "value: must be <= 2000000000, got 4294967301"},
      {"user priority above 1e9",
       "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: p}\nvalue: "
       "2000000000\n",
       "must be <= 1000000000, got 2000000000"},
      {"sbatch unknown directive", "#!/bin/bash\n#SBATCH --frobnicate=3\necho\n",
       "line 2: --frobnicate"},
      {"sbatch bad gres", "#!/bin/bash\n#SBATCH --gres=gpu:-1\n", "line 2: --gres"},
      {"sbatch bad time", "#!/bin/bash\n#SBATCH --time=soon\n", "bad time"},
      {"sbatch CPUs per node overflow",
       "#!/bin/bash\n#SBATCH -c 999999999\n#SBATCH --ntasks-per-node=999999999\n",
       "line 2: -c 999999999 x 999999999 tasks per node = 999999998000000001 CPUs per node, more "
       "than any node has (1000000 at most)"},
      {"bad utf8", std::string("apiVersion: v1\nkind: Pod\nmetadata: {name: \"\xff\xfe\"}\n"),
       "not valid UTF-8"},
      {"deep flow nesting", std::string(200, '[') + std::string(200, ']'), "nests deeper"},
      {"deep block nesting",
       [] {
         std::string s;
         for (int i = 0; i < 150; ++i) s += std::string(i * 2, ' ') + "k:\n";
         return s;
       }(),
       "nests deeper"},
      {"dash nesting",
       [] {
         std::string s;
         for (int i = 0; i < 200; ++i) s += "- ";
         return s + "x\n";
       }(),
       "nests deeper"},
      {"empty", "  \n# only a comment\n", "empty document"},
      {"multi-doc error names document",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, command: "
       "[x]}]}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: []}\n",
       "document[1]: spec.containers"},
      {"pod without a command",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: "
       "x}]}\n",
       "spec.containers[0].command: required (Tessera runs the first container's command"},
      // args without a command are the image entrypoint's arguments, not a program.
      {"pod with args but no command",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: [{name: c, image: "
       "x, args: [sleep, \"1\"]}]}\n",
       "spec.containers[0].command: required (Tessera runs the first container's command"},
      {"deployment with args but no command",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 1\n"
       "  template: {spec: {containers: [{name: c, image: vllm, args: [--port, \"80\"]}]}}\n",
       "spec.template.spec.containers[0].command: required"},
      // A queue name is checked where the document gave it: a Pod's annotation.
      {"pod queue annotation not a name",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: a, annotations: "
       "{scheduling.volcano.sh/queue-name: \"gpu queue\"}}\n"
       "spec: {containers: [{name: c, command: [x]}]}\n",
       "metadata.annotations.scheduling.volcano.sh/queue-name: \"gpu queue\" may contain only"},
      {"volcano task without a command",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
       "  - {name: a, replicas: 1, template: {spec: {containers: [{name: c, command: [x]}]}}}\n"
       "  - {name: b, replicas: 1, template: {spec: {containers: [{name: c, args: []}]}}}\n",
       "spec.tasks[1].template.spec.containers[0].command: required"},
      {"deployment without a command",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: 2\n"
       "  template: {spec: {containers: [{name: c, image: vllm}]}}\n",
       "spec.template.spec.containers[0].command: required"},
      {"tessera task without a command",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {tasks: [{replicas: "
       "1}]}\n",
       "spec.tasks[0].command: required (the program and its arguments)"},
      {"request above its limit",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
       "    command: [x]\n    resources:\n      limits: {cpu: 1, memory: 1Gi}\n"
       "      requests: {cpu: 500m, memory: 2Gi}\n",
       "spec.containers[0].resources.requests.memory: \"2Gi\" is more than its limit \"1Gi\""},
      {"gpu request unlike its limit",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
       "    command: [x]\n    resources:\n      limits: {nvidia.com/gpu: 2}\n"
       "      requests: {nvidia.com/gpu: 1}\n",
       "requests.nvidia.com/gpu: 1 must equal its limit 2"},
      // Events Volcano's admission refuses in a policy: refused, not dropped.
      {"volcano policy on PodPending",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n"
       "  policies: [{event: PodPending, action: RestartJob}]\n"
       "  tasks: [{replicas: 1, template: {spec: {containers: [{name: c, command: [x]}]}}}]\n",
       "spec.policies[0].event: \"PodPending\" is not supported in a policy"},
      {"volcano policy on JobUnknown among events",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n"
       "  policies: [{events: [PodEvicted, JobUnknown], action: AbortJob}]\n"
       "  tasks: [{replicas: 1, template: {spec: {containers: [{name: c, command: [x]}]}}}]\n",
       "spec.policies[0].events[1]: \"JobUnknown\" is not supported in a policy"},
      {"volcano task policy on CommandIssued",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n"
       "  tasks: [{replicas: 1, policies: [{event: CommandIssued, action: RestartJob}],\n"
       "           template: {spec: {containers: [{name: c, command: [x]}]}}}]\n",
       "spec.tasks[0].policies[0].event: \"CommandIssued\" is not supported in a policy"},
      // A Deployment's selector must select its template's pods, as Kubernetes requires.
      {"deployment selector unlike its template",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n"
       "  selector: {matchLabels: {app: other}}\n  template:\n    metadata: {labels: {app: web}}\n"
       "    spec: {containers: [{name: c, command: [x]}]}\n",
       "spec.selector: does not match the template's labels ({\"app\":\"web\"}"},
      {"deployment selector expression unlike its template",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n"
       "  selector: {matchExpressions: [{key: app, operator: In, values: [api]}]}\n"
       "  template: {spec: {containers: [{name: c, command: [x]}]}}\n",
       "spec.selector: does not match the template's labels ({}"},
      {"deployment empty selector",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  selector: {}\n"
       "  template: {spec: {containers: [{name: c, command: [x]}]}}\n",
       "spec.selector: empty"},
      {"deployment selector bad operator",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n"
       "  selector: {matchExpressions: [{key: app, operator: Near}]}\n"
       "  template: {spec: {containers: [{name: c, command: [x]}]}}\n",
       "spec.selector.matchExpressions[0].operator: unknown \"Near\""},
      {"deployment paused not a boolean",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  paused: maybe\n"
       "  template: {spec: {containers: [{name: c, command: [x]}]}}\n",
       "spec.paused"},
      {"volcano duplicate task names",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
       "  - {name: w, replicas: 1, template: {spec: {containers: [{name: c, command: [x]}]}}}\n"
       "  - {name: w, replicas: 2, template: {spec: {containers: [{name: c, command: [x]}]}}}\n",
       "spec.tasks[1].name: \"w\" is also the name of task group 0"},
      {"tessera duplicate task names",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {tasks: [{name: a, "
       "command: [x]}, {name: a, command: [y]}]}\n",
       "spec.tasks[1].name: \"a\" is also the name of task group 0"},
      {"volcano queue guaranteed above its capability",
       "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\nspec:\n"
       "  capability: {nvidia.com/gpu: 8}\n  guarantee: {resource: {nvidia.com/gpu: 16}}\n",
       "spec.guarantee.resource.nvidia.com/gpu: 16 is more than spec.capability.nvidia.com/gpu 8"},
      {"volcano queue deserved above its capability",
       "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\nspec:\n"
       "  capability: {nvidia.com/gpu: 8}\n  guarantee: {resource: {nvidia.com/gpu: 2}}\n"
       "  deserved: {nvidia.com/gpu: 12}\n",
       "spec.deserved.nvidia.com/gpu: 12 is more than spec.capability.nvidia.com/gpu 8"},
      {"tessera queue guaranteed above its limit",
       "apiVersion: tessera.io/v1\nkind: Queue\nmetadata: {name: q}\nspec: {limit: {cpu: 4}, "
       "guarantee: {cpu: 8}}\n",
       "guarantee.cpu: 8 is more than"},
      {"tessera MIG profile with a suffix it cannot have",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {tasks: [{command: [x], "
       "resources: {nvidia.com/mig-1g.24gb+: 1}}]}\n",
       "is not a MIG profile"},
      {"tessera unknown MIG profile",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {tasks: [{command: [x], "
       "resources: {nvidia.com/mig-9g.99gb: 1}}]}\n",
       "nvidia.com/mig-9g.99gb: \"9g.99gb\" is not a MIG profile"},
      {"sbatch hold with a value", "#!/bin/bash\n#SBATCH --hold=yes\ntrue\n",
       "line 2: --hold: takes no value, got \"yes\""},
      {"sbatch unterminated quote", "#!/bin/bash\n#SBATCH -J \"train\ntrue\n",
       "line 2: unterminated double quote"},
      {"sbatch value with a blank", "#!/bin/bash\n#SBATCH -J has space\ntrue\n",
       "line 2: \"space\" is not an option"},
      {"sbatch count beyond 32 bits", "#!/bin/bash\n#SBATCH --gres=gpu:4294967297\ntrue\n",
       "4294967297 is too large"},
      // Slurm's shared forms of --exclusive are refused, naming the line and the option.
      {"sbatch exclusive=user", "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --exclusive=user\ntrue\n",
       "line 3: --exclusive=user: not supported (only plain --exclusive"},
      {"sbatch exclusive=mcs", "#!/bin/bash\n#SBATCH --exclusive=mcs\ntrue\n",
       "line 2: --exclusive=mcs: not supported"},
      {"sbatch exclusive=topo", "#!/bin/bash\n#SBATCH --time=5 --exclusive=topo\ntrue\n",
       "line 2: --exclusive=topo: not supported"},
      {"volcano exclusive annotation not a boolean",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v, annotations: "
       "{tessera.io/exclusive: \"yes\"}}\nspec:\n  tasks:\n"
       "  - {name: w, replicas: 1, template: {spec: {containers: [{name: c, command: [x]}]}}}\n",
       "metadata.annotations.tessera.io/exclusive: expected \"true\" or \"false\", got \"yes\""},
      {"tessera exclusive not a boolean",
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: t}\nspec: {exclusive: 1, tasks: "
       "[{command: [x]}]}\n",
       "spec.exclusive: expected true or false"},
      // A typo in replicas must not be stored and then exhaust the server's memory.
      {"deployment replicas beyond the bound",
       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  replicas: "
       "100000000\n  template: {spec: {containers: [{name: c, command: [x]}]}}\n",
       "spec.replicas: the job would have 100000000 tasks; at most 100000 per job"},
      {"volcano tasks summed beyond the bound",
       "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: v}\nspec:\n  tasks:\n"
       "  - {name: a, replicas: 60000, template: {spec: {containers: [{name: c, command: [x]}]}}}\n"
       "  - {name: b, replicas: 70000, template: {spec: {containers: [{name: c, command: "
       "[x]}]}}}\n",
       "spec.tasks[1].replicas: the job would have 130000 tasks"},
      {"sbatch nodes beyond the bound", "#!/bin/bash\n#SBATCH -N 200000\ntrue\n",
       "line 2: -N 200000: the job would have 200000 nodes (one task each); at most 100000"},
      {"sbatch derived nodes beyond the bound",
       "#!/bin/bash\n#SBATCH -n 999999999 --ntasks-per-node=1\ntrue\n",
       "line 2: -n 999999999 with line 2: --ntasks-per-node=1: the job would have 999999999 "
       "nodes"},
      // Task layouts Slurm would run unevenly (Tessera runs equal tasks per node), or refuses.
      {"sbatch -n not a multiple of --ntasks-per-node",
       "#!/bin/bash\n#SBATCH -n 5\n#SBATCH --ntasks-per-node=2\ntrue\n",
       "line 2: -n 5 with line 3: --ntasks-per-node=2: Slurm would take 3 nodes of 2 tasks and "
       "run 5, the last node short"},
      {"sbatch -n beyond -N x --ntasks-per-node",
       "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -n 5\n#SBATCH --ntasks-per-node=2\ntrue\n",
       "line 3: -n 5 with line 4: --ntasks-per-node=2 and line 2: -N 2: 2 nodes of 2 tasks hold "
       "4, fewer than asked (Slurm refuses this too): make -n 4, or leave -n out"},
      {"sbatch -n short of -N x --ntasks-per-node",
       "#!/bin/bash\n#SBATCH --nodes=2 --ntasks=3 --ntasks-per-node=2\ntrue\n",
       "line 2: --ntasks=3 with line 2: --ntasks-per-node=2 and line 2: --nodes=2: 2 nodes of 2 "
       "tasks hold 4, more than asked"},
      // Slurm's --mem=0 is all of each node's memory, not none.
      {"sbatch --mem=0", "#!/bin/bash\n#SBATCH -N 2\n#SBATCH --mem=0\ntrue\n",
       "line 3: --mem=0: all of each node's memory (Slurm's meaning) is not supported: give the "
       "amount per node (e.g. --mem=500G)"},
      {"sbatch --mem 0G", "#!/bin/bash\n#SBATCH --mem 0G\ntrue\n", "line 2: --mem=0G: all of"},
      // Slurm takes whole numbers of its units.
      {"sbatch --mem=1.5G", "#!/bin/bash\n#SBATCH --mem=1.5G\ntrue\n",
       "bad memory \"1.5G\" (a whole number"},
      {"sbatch --mem=1e3", "#!/bin/bash\n#SBATCH --mem=1e3\ntrue\n", "bad memory \"1e3\""},
      // As Kubernetes: a GPU request needs its limit.
      {"pod gpu request without a limit",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
       "    command: [x]\n    resources:\n      requests: {cpu: 1, nvidia.com/gpu: 1}\n",
       "spec.containers[0].resources.limits.nvidia.com/gpu: required, equal to "
       "spec.containers[0].resources.requests.nvidia.com/gpu"},
      {"pod MIG request without a limit",
       "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n"
       "    command: [x]\n    resources:\n      limits: {cpu: 1}\n"
       "      requests: {nvidia.com/mig-1g.10gb: 1}\n",
       "resources.limits.nvidia.com/mig-1g.10gb: required"},
      // Slurm rejects conflicting GPU requests; the last one no longer wins silently.
      {"sbatch --gres and --gpus-per-node differ",
       "#!/bin/bash\n#SBATCH --gres=gpu:a100:2\n#SBATCH --gpus-per-node=1\ntrue\n",
       "line 2: --gres=gpu:a100:2 and line 3: --gpus-per-node=1: two different GPU requests (2 "
       "a100 and 1 per node); give one of them"},
      {"sbatch --gpus-per-node and --gres differ in type",
       "#!/bin/bash\n#SBATCH --gpus-per-node=v100:2 --gres=gpu:a100:2\ntrue\n",
       "line 2: --gres=gpu:a100:2 and line 2: --gpus-per-node=v100:2: two different GPU"},
      {"sbatch -n uneven over -N", "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -n 5\ntrue\n",
       "line 3: -n 5: 5 tasks do not divide evenly over 2 nodes (line 2: -N 2)"},
  };
  for (const auto& c : cases) ExpectRefused(ParseDocuments(c.text), c.want, c.name);
}

}  // namespace
}  // namespace tessera::spec
