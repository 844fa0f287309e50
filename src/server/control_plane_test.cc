#include "server/control_plane.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "server/test_util.h"

namespace tessera::server {
namespace {

using testing::FakeClock;
using testing::ScriptedEngine;

const Principal kAdmin{"admin", Role::kAdmin, {"*"}};
// An inference service: 3 replicas of one GPU each.
const char* kDeployment =
    "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: svc}\nspec:\n"
    "  replicas: 3\n  template:\n    spec:\n      containers:\n"
    "      - name: server\n        command: [serve]\n"
    "        resources: {limits: {nvidia.com/gpu: 1}}\n";

const char* kSetup = R"(apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: default}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: training}
spec: {weight: 2}
)";

std::string JobDoc(const std::string& name, int replicas, int gpus, const std::string& extra = "",
                   const std::string& queue = "default") {
  return "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: " + name +
         "}\nspec:\n  queue: " + queue + "\n" + extra +
         "  tasks:\n    - name: w\n      replicas: " + std::to_string(replicas) +
         "\n      resources: {cpu: 1, memory: 1Gi, nvidia.com/gpu: " + std::to_string(gpus) +
         "}\n      command: [python3, train.py]\n      env: {FOO: bar}\n";
}

Json NodeDoc(const std::string& name, int gpus) {
  return Json{{"node",
               {{"name", name},
                {"cpu", 64},
                {"memory", "512Gi"},
                {"gpus", {{"model", "A100-80GB"}, {"count", gpus}, {"virtual", true}}}}},
              {"agentVersion", "test"},
              {"bootId", "boot-" + name}};
}

class ControlPlaneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir(
        "cp_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    Reopen();
    ASSERT_TRUE(cp_->Apply(kAdmin, kSetup).ok());
  }
  void TearDown() override {
    cp_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Reopen(ScriptedEngine::Fn fn = nullptr) {
    cp_.reset();
    auto st = store::OpenSqliteStore(dir_);
    ASSERT_TRUE(st.ok());
    ControlPlaneOptions o;
    o.clock = clock_.fn();
    o.run_scheduler = false;
    if (tune_) tune_(o);
    std::unique_ptr<Engine> engine = std::make_unique<ScriptedEngine>(fn);
    if (real_engine_) {
      auto e = Engine::Create(DefaultEngineConfig());
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      engine = std::move(*e);
    }
    auto cp = ControlPlane::Open(std::move(*st), std::move(engine), o);
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
  }
  Json Job(const std::string& id) {
    auto j = cp_->GetJob(kAdmin, id, true);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : Json();
  }
  std::string State(const std::string& id) { return Job(id)["state"]; }
  std::vector<std::string> Reasons(const std::string& id) {
    std::vector<std::string> out;
    Json j = Job(id);
    for (const auto& e : j["events"]) out.push_back(e["reason"]);
    return out;
  }
  int64_t Epoch(const std::string& node) {
    auto r = cp_->RegisterAgent(kAdmin, NodeDoc(node, 8));
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return (*r)["epoch"];
  }
  Json Beat(const std::string& node, int64_t epoch, Json tasks = Json::array()) {
    auto r = cp_->Heartbeat(kAdmin, node, Json{{"epoch", epoch}, {"tasks", tasks}});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : Json();
  }
  static Json Task(const std::string& alloc, const std::string& state, int exit_code = 0) {
    return {{"allocation", alloc}, {"state", state}, {"exitCode", exit_code}};
  }
  // Runs a cycle and reports every allocation the node is given as running (`count` of them);
  // returns those reports.
  Json StartAll(const std::string& node, int64_t epoch, size_t count) {
    EXPECT_TRUE(cp_->RunCycle().ok());
    const Json d = Beat(node, epoch);
    EXPECT_EQ(d["allocations"].size(), count) << d.dump();
    Json running = Json::array();
    for (const auto& a : d["allocations"]) running.push_back(Task(a["allocation"], "running"));
    Beat(node, epoch, running);
    return running;
  }

  // Reopens with every attempt the cycles bind appended to `bound` (on_cycle's JobBound).
  void RecordBindings(std::vector<JobBound>& bound) {
    tune_ = [&bound](ControlPlaneOptions& o) {
      o.on_cycle = [&bound](const Snapshot&, const Plan&, const std::vector<JobSummary>&,
                            const std::vector<JobBound>& b, int64_t,
                            double) { bound.insert(bound.end(), b.begin(), b.end()); };
    };
    Reopen();
  }

  std::string dir_;
  FakeClock clock_;
  std::function<void(ControlPlaneOptions&)> tune_;  // options of the next Reopen()
  bool real_engine_ = false;  // the next Reopen() runs the default engine, not a script
  std::unique_ptr<ControlPlane> cp_;
};

// Deleting is refused while something still needs the object, and what is deleted stays
// deleted across a restart; a revoked token stops authenticating at once.
TEST_F(ControlPlaneTest, DeleteRefusesWhatIsStillNeededAndIsDurable) {
  const Principal member{"team", Role::kMember, {"training"}};
  EXPECT_EQ(cp_->Delete(member, "queue", "training").code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(cp_->Delete(kAdmin, "queue", "nope").code(), StatusCode::kNotFound);
  EXPECT_EQ(cp_->Delete(kAdmin, "widget", "x").code(), StatusCode::kInvalidArgument);

  // A queue with an unfinished job, or with a child queue; a class an unfinished job uses.
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("t1", 1, 1, "  priorityClass: high\n", "training")).ok());
  Status busy = cp_->Delete(kAdmin, "queue", "training");
  EXPECT_EQ(busy.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.message(),
            "queue \"training\" has unfinished jobs (job \"t1\"): cancel them or let them end");
  Status pc = cp_->Delete(kAdmin, "priorityclass", "high");
  EXPECT_EQ(pc.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(pc.message().find("job \"t1\""), std::string::npos) << pc.message();
  ASSERT_TRUE(cp_->Apply(kAdmin,
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                         "{name: child}\nspec: {parent: default}\n")
                  .ok());
  EXPECT_NE(cp_->Delete(kAdmin, "queue", "default").message().find("parent of queue \"child\""),
            std::string::npos);

  // Once the job has ended, both go; so does the child queue.
  ASSERT_TRUE(cp_->Cancel(kAdmin, "t1").ok());
  ASSERT_EQ(State("t1"), "Cancelled");
  EXPECT_TRUE(cp_->Delete(kAdmin, "queue", "training").ok());
  EXPECT_TRUE(cp_->Delete(kAdmin, "priorityclass", "high").ok());
  EXPECT_TRUE(cp_->Delete(kAdmin, "queue", "child").ok());

  // What the --bootstrap folder declares comes back at every start: refused.
  ASSERT_TRUE(cp_->Apply(kAdmin,
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                         "{name: seeded}\n",
                         true)
                  .ok());
  EXPECT_NE(cp_->Delete(kAdmin, "queue", "seeded").message().find("--bootstrap folder"),
            std::string::npos);
  // ... and so is a change, which the next start would undo; applied unchanged, it is fine.
  const std::string seeded =
      "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: seeded}\n";
  auto again = cp_->Apply(kAdmin, seeded);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)[0]["action"], "unchanged");
  Status changed =
      cp_->Apply(kAdmin, kSetup + std::string("---\n") + seeded + "spec: {weight: 3}\n").status();
  EXPECT_EQ(changed.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(changed.message(),
            "document[4]: queue \"seeded\" is declared in the --bootstrap folder, applied at "
            "every start: change it there (a change applied here would be undone at the next "
            "start)");

  // Tokens: revoked at once; never the last admin, nor one from --auth-config.
  ASSERT_TRUE(
      cp_->AddToken(kAdmin, {{"root", Role::kAdmin, {"*"}}, Sha256Hex("root-t"), "api"}).ok());
  ASSERT_TRUE(
      cp_->AddToken(kAdmin, {{"bot", Role::kMember, {"default"}}, Sha256Hex("bot-t"), "api"}).ok());
  cp_->tokens().Add({{"ops", Role::kMember, {"default"}}, Sha256Hex("ops-t"), "config"});
  ASSERT_TRUE(cp_->tokens().Authenticate("Bearer bot-t").ok());
  ASSERT_TRUE(cp_->tokens().Authenticate("bearer bot-t").ok()) << "the scheme has no case";
  EXPECT_FALSE(cp_->tokens().Authenticate("Basic bot-t").ok());
  EXPECT_TRUE(cp_->Delete(kAdmin, "token", "bot").ok());
  EXPECT_EQ(cp_->tokens().Authenticate("Bearer bot-t").status().code(),
            StatusCode::kUnauthenticated);
  EXPECT_NE(cp_->Delete(kAdmin, "token", "root").message().find("last admin token"),
            std::string::npos);
  EXPECT_NE(cp_->Delete(kAdmin, "token", "ops").message().find("--auth-config"), std::string::npos);
  auto listed = cp_->ListTokens(kAdmin);
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->dump().find("sha256"), std::string::npos) << listed->dump();

  Reopen();
  Json queues = cp_->ListQueues(kAdmin)["items"];
  std::vector<std::string> names;
  for (const auto& q : queues) names.push_back(q["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"default", "seeded"}));
  EXPECT_EQ(cp_->ListPriorityClasses().dump().find("\"high\""), std::string::npos);
  EXPECT_FALSE(cp_->tokens().HasName("bot"));
  EXPECT_TRUE(cp_->tokens().HasName("root"));
  EXPECT_EQ(cp_->Submit(kAdmin, JobDoc("t2", 1, 1, "", "training")).status().code(),
            StatusCode::kInvalidArgument);
}

// A parent queue's usage is its children's (what its limit is checked against).
// The audit log holds what was done: a refused apply or submission leaves no record (it
// said "ok" for a queue that was never created), and what it shows survives a restart as is.
TEST_F(ControlPlaneTest, RefusedChangesLeaveNoAuditRecord) {
  auto audit = [&] {
    auto a = cp_->ListAudit(kAdmin, 0, 10000);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    std::vector<std::string> out;
    for (const auto& x : (*a)["items"])
      out.push_back(std::to_string(x["seq"].get<int64_t>()) + " " + x["action"].get<std::string>() +
                    " " + x["object"].get<std::string>() + " " + x["result"].get<std::string>());
    return out;
  };
  const std::vector<std::string> before = audit();
  EXPECT_FALSE(cp_->Apply(kAdmin,
                          "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                          "{name: orphan}\nspec: {parent: nosuch}\n")
                   .ok());
  EXPECT_FALSE(cp_->Submit(kAdmin, JobDoc("twice", 1, 1) + "---\n" + JobDoc("twice", 1, 1)).ok());
  EXPECT_EQ(audit(), before);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("once", 1, 1)).ok());
  const std::vector<std::string> after = audit();
  ASSERT_EQ(after.size(), before.size() + 1);
  EXPECT_EQ(after.back(), std::to_string(before.size() + 1) + " submit job/once ok");
  Reopen();
  EXPECT_EQ(audit(), after);
}

// A member refused again and again (the audit's loop wrote ~10 MB/s of records, each the whole
// path asked for) leaves one record per action and object per window, its path cut, with a
// count; ever new paths add at most kMaxDenialsPerWindow records, then one for the others.
TEST_F(ControlPlaneTest, DenialsAreCutAndRepeatsCountInOneRecord) {
  const Principal member{"bob", Role::kMember, {"default"}};
  auto items = [&] { return (*cp_->ListAudit(kAdmin, 0, 10000))["items"]; };
  const size_t before = items().size();
  const std::string path = "/v1/queues/" + std::string(100000, 'x');
  const std::string why = "only an admin may delete a queue";
  for (int i = 0; i < 1000; ++i) cp_->AuditDenied(member, "DELETE", path, why);
  Json all = items();
  ASSERT_EQ(all.size(), before + 1);
  Json d = all.back();
  EXPECT_EQ(d["count"], 1000);
  EXPECT_EQ(d["principal"], "bob");
  EXPECT_EQ(d["result"], "denied: " + why);
  const std::string object = d["object"];
  EXPECT_EQ(object, path.substr(0, kMaxAuditObject) + "...(cut; 100011 bytes)");
  // Stored at most once a second: the count a second later is what a restart reads.
  clock_.now += 1;
  cp_->AuditDenied(member, "DELETE", path, why);
  Reopen();
  all = items();
  ASSERT_EQ(all.size(), before + 1);
  EXPECT_EQ(all.back()["count"], 1001);
  EXPECT_EQ(all.back()["object"], object);

  // Ever new paths.
  for (int i = 0; i < 500; ++i)
    cp_->AuditDenied(member, "GET", "/v1/audit/" + std::to_string(i), "only an admin may read");
  all = items();
  // The DELETE's record, one per path up to the most, and one for the others.
  ASSERT_EQ(all.size(), before + 1 + kMaxDenialsPerWindow + 1);
  EXPECT_EQ(all.back()["object"], "(other objects)");
  EXPECT_EQ(all.back()["count"], 500 - static_cast<int64_t>(kMaxDenialsPerWindow));
  // Another principal is counted apart.
  cp_->AuditDenied(kAdmin, "GET", "/v1/audit/0", "x");
  EXPECT_EQ(items().size(), all.size() + 1);

  // A window later, a repeat opens a new record, and the last repeats of the old one are
  // stored.
  clock_.now += kDenialWindowSeconds;
  const size_t settled = items().size();
  cp_->AuditDenied(member, "DELETE", path, why);
  all = items();
  ASSERT_EQ(all.size(), settled + 1);
  EXPECT_FALSE(all.back().contains("count"));
  Reopen();
  all = items();
  EXPECT_EQ(all.size(), settled + 1);
  EXPECT_EQ(all[all.size() - 3]["count"], 500 - static_cast<int64_t>(kMaxDenialsPerWindow));
}

TEST_F(ControlPlaneTest, AParentQueueShowsItsChildrensUse) {
  ASSERT_TRUE(cp_->Apply(kAdmin,
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                         "metadata: {name: research}\n---\n"
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                         "metadata: {name: research-a}\nspec: {parent: research}\n---\n"
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                         "metadata: {name: research-b}\nspec: {parent: research}\n")
                  .ok());
  Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("a", 1, 2, "", "research-a")).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("b", 1, 1, "", "research-b")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::map<std::string, Json> by_name;
  const Json queues = cp_->ListQueues(kAdmin)["items"];  // (named: items of a temporary dangle)
  for (const auto& q : queues) by_name[q["name"].get<std::string>()] = q;
  EXPECT_EQ(by_name["research-a"]["gpuMilliInUse"], 2000);
  EXPECT_EQ(by_name["research"]["gpuMilliInUse"], 3000);
  EXPECT_EQ(by_name["research"]["runningJobs"], 2);
  EXPECT_EQ(by_name["research"]["jobs"], 2);
}

// An exclusive job keeps its node to itself and is charged it whole (8 GPUs for its 1, in
// `get queues` and `get nodes`): a
// job submitted after it goes to the other node, though the first has 7 GPUs free. Both
// survive a restart of the server, as the stored spec keeps `exclusive`.
TEST_F(ControlPlaneTest, AnExclusiveJobHoldsItsNodeWholeAcrossARestart) {
  real_engine_ = true;
  Reopen();
  Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("whole", 1, 1, "  exclusive: true\n")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Epoch("node-b");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("plain", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  auto nodes_of = [&](const std::string& id) {
    auto j = cp_->GetJob(kAdmin, id, false);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? (*j)["nodes"] : Json();
  };
  EXPECT_EQ(nodes_of("whole"), Json::array({"node-a"}));
  EXPECT_EQ(nodes_of("plain"), Json::array({"node-b"}));
  EXPECT_EQ((*cp_->GetJob(kAdmin, "whole", false))["exclusive"], true);
  EXPECT_EQ((*cp_->GetJob(kAdmin, "plain", false))["exclusive"], false);
  auto in_use = [&] {
    const Json queues = cp_->ListQueues(kAdmin)["items"];
    for (const auto& q : queues)
      if (q["name"] == "default") return q["gpuMilliInUse"].get<int64_t>();
    return int64_t{-1};
  };
  EXPECT_EQ(in_use(), 8000 + 1000);            // node-a whole, and plain's one GPU
  std::map<std::string, int64_t> node_in_use;  // `get nodes` says the same
  const Json nodes = cp_->ListNodes(kAdmin, false);
  for (const auto& n : nodes["items"]) node_in_use[n["name"]] = n["gpuMilliInUse"];
  EXPECT_EQ(node_in_use, (std::map<std::string, int64_t>{{"node-a", 8000}, {"node-b", 1000}}));
  Reopen();  // the real engine again
  EXPECT_EQ((*cp_->GetJob(kAdmin, "whole", false))["exclusive"], true);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("later", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(nodes_of("later"), Json::array({"node-b"}));
}

// Guarantees the tree cannot honour are refused: children guaranteed more than their parent
// together, or a queue guaranteed more than an ancestor may use.
TEST_F(ControlPlaneTest, QueueGuaranteesMustFitTheTree) {
  auto queue = [](const std::string& name, const std::string& spec) {
    return "apiVersion: tessera.io/v1\nkind: Queue\nmetadata: {name: " + name + "}\nspec: " + spec +
           "\n---\n";
  };
  const std::string parent =
      queue("org", "{guarantee: {nvidia.com/gpu: 3}, limit: {nvidia.com/gpu: 6}}");
  auto sum =
      cp_->Apply(kAdmin, parent + queue("a", "{parent: org, guarantee: {nvidia.com/gpu: 2}}") +
                             queue("b", "{parent: org, guarantee: {nvidia.com/gpu: 2}}"));
  ASSERT_FALSE(sum.ok());
  EXPECT_NE(sum.status().message().find(
                "queue org: its children are guaranteed 4 nvidia.com/gpu together; it is "
                "guaranteed 3"),
            std::string::npos)
      << sum.status().message();
  const std::string open = queue("open", "{limit: {nvidia.com/gpu: 6}}");
  auto over =
      cp_->Apply(kAdmin, open + queue("x", "{parent: open, guarantee: {nvidia.com/gpu: 10}}"));
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("queue x: guaranteed 10 nvidia.com/gpu, more than queue "
                                         "open may use (limit 6)"),
            std::string::npos)
      << over.status().message();
  // Nor may a child be allowed more than its ancestor (a limit never reached), as Volcano.
  auto wide = cp_->Apply(kAdmin, open + queue("y", "{parent: open, limit: {nvidia.com/gpu: 20}}"));
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("queue y: limit 20 nvidia.com/gpu, more than queue open "
                                         "may use (limit 6)"),
            std::string::npos)
      << wide.status().message();
  EXPECT_TRUE(
      cp_->Apply(kAdmin, parent + queue("a", "{parent: org, guarantee: {nvidia.com/gpu: 2}}"))
          .ok());
  // A tree stored by an earlier version that breaks the rule does not stop other applies
  // (nor the server's start): only what an apply makes worse is refused.
  ASSERT_TRUE(cp_->store()
                  .Txn({}, {store::Op::Put("queues/b", R"({"name":"b","parent":"org",)"
                                                       R"("guarantee":{"nvidia.com/gpu":"2"}})")})
                  .ok());
  Reopen();
  EXPECT_TRUE(cp_->Apply(kAdmin, queue("unrelated", "{weight: 2}")).ok());
  EXPECT_FALSE(
      cp_->Apply(kAdmin, queue("c", "{parent: org, guarantee: {nvidia.com/gpu: 1}}")).ok());
}

TEST_F(ControlPlaneTest, QueueParentLoopsAreRefusedWithThePath) {
  auto queue = [](const std::string& name, const std::string& parent) {
    return "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: " + name +
           "}\nspec: {weight: 1, parent: " + parent + "}\n";
  };
  auto self = cp_->Apply(kAdmin, queue("loop", "loop"));
  EXPECT_EQ(self.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(self.status().message(),
            "queue loop: spec.parent: \"loop\" makes a loop (loop -> loop)");
  ASSERT_TRUE(cp_->Apply(kAdmin, queue("qa", "training")).ok());
  ASSERT_TRUE(cp_->Apply(kAdmin, queue("qb", "qa")).ok());
  auto closing = cp_->Apply(kAdmin, queue("qa", "qb"));  // re-parenting qa under its child
  EXPECT_EQ(closing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(closing.status().message().find("(qa -> qb -> qa)"), std::string::npos)
      << closing.status().message();
  // Nothing of the refused documents was kept: the tree is as before, and cycles run.
  Reopen();
  Epoch("n1");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("in-qb", 1, 1, "", "qb")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("in-qb"), "Scheduled");
}

// Jobs go to leaf queues, as in Volcano: a parent queue refuses them, and a queue holding
// unfinished jobs does not become a parent.
TEST_F(ControlPlaneTest, JobsGoToLeafQueuesOnly) {
  auto queue = [](const std::string& name, const std::string& parent) {
    return "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: " + name +
           "}\nspec: {parent: " + parent + "}\n";
  };
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("in-training", 1, 1, "", "training")).ok());
  auto busy = cp_->Apply(kAdmin, queue("sub", "training"));
  EXPECT_EQ(busy.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.status().message(),
            "queue sub: spec.parent: queue \"training\" holds unfinished jobs (in-training is "
            "one); a parent queue takes no jobs: let them finish or cancel them first");
  ASSERT_TRUE(cp_->Cancel(kAdmin, "in-training").ok());
  ASSERT_TRUE(cp_->Apply(kAdmin, queue("sub", "training")).ok());
  ASSERT_TRUE(cp_->Apply(kAdmin, queue("sub2", "training")).ok());
  auto parent = cp_->Submit(kAdmin, JobDoc("in-parent", 1, 1, "", "training"));
  EXPECT_EQ(parent.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parent.status().message(),
            "spec.queue: queue \"training\" has child queues (sub, sub2); jobs go to a leaf "
            "queue");
  EXPECT_TRUE(cp_->Submit(kAdmin, JobDoc("in-leaf", 1, 1, "", "sub")).ok());
}

// A job among the documents of `apply`: the error names the document and the job, and
// nothing of the text is applied (the queue before it neither).
TEST_F(ControlPlaneTest, ApplyNamesTheJobDocumentItRefusesAndAppliesNothing) {
  auto r = cp_->Apply(kAdmin,
                      "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: "
                      "fresh}\nspec: {weight: 1}\n---\napiVersion: v1\nkind: Pod\nmetadata: "
                      "{name: stray}\nspec: {containers: [{name: c, image: x, command: [sh]}]}\n");
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "document[1]: kind: a job (v1 Pod \"stray\") is submitted with `tessera submit` "
            "(POST /v1/jobs); apply takes Queue and PriorityClass documents and applied "
            "nothing of this text");
  Reopen();
  EXPECT_EQ(cp_->ListQueues(kAdmin).dump().find("fresh"), std::string::npos);
}

TEST_F(ControlPlaneTest, OneGlobalDefaultPriorityClassAndNoWrappedValues) {
  auto pc = [](const std::string& name, const std::string& value, bool global) {
    return "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: " + name +
           "}\nvalue: " + value + "\nglobalDefault: " + (global ? "true" : "false") + "\n";
  };
  ASSERT_TRUE(cp_->Apply(kAdmin, pc("low", "10", true)).ok());
  auto second = cp_->Apply(kAdmin, pc("other", "20", true));
  EXPECT_EQ(second.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(second.status().message(),
            "priorityclass other: globalDefault: \"low\" is the global default already (only "
            "one may be; set its globalDefault to false first)");
  // Moving the default in one apply is fine.
  ASSERT_TRUE(cp_->Apply(kAdmin, pc("low", "10", false) + "---\n" + pc("other", "20", true)).ok());
  auto wrapped = cp_->Apply(kAdmin, pc("huge", "4294967301", false));
  EXPECT_NE(wrapped.status().message().find("must be <= 2000000000, got 4294967301"),
            std::string::npos)
      << wrapped.status().message();
  Reopen();
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("j", 1, 0)).ok());
  EXPECT_EQ(Job("j")["priorityClass"], "other");
  EXPECT_EQ(Job("j")["priority"], 20);
  // As Kubernetes' admission: the default is resolved once, at submit; moving it later
  // leaves the accepted job at its class (it used to follow the new default).
  ASSERT_TRUE(cp_->Apply(kAdmin, pc("other", "20", false) + "---\n" + pc("low", "10", true)).ok());
  EXPECT_EQ(Job("j")["priorityClass"], "other");
  EXPECT_EQ(Job("j")["priority"], 20);
}

TEST_F(ControlPlaneTest, SubmitIsDurableAndNamedErrorsAreReturned) {
  auto r = cp_->Submit(kAdmin, JobDoc("j1", 2, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0]["state"], "Pending");
  auto dup = cp_->Submit(kAdmin, JobDoc("j1", 1, 1));
  EXPECT_EQ(dup.status().code(), StatusCode::kAlreadyExists);
  auto unknown = cp_->Submit(kAdmin, JobDoc("j2", 1, 1, "", "nope"));
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("unknown queue \"nope\""), std::string::npos);
  auto pc = cp_->Submit(kAdmin, JobDoc("j3", 1, 1, "  priorityClass: ultra\n"));
  // A Tessera Job's field is spec.priorityClass (Volcano's and a pod's is priorityClassName).
  EXPECT_NE(pc.status().message().find("spec.priorityClass: unknown priority class \"ultra\""),
            std::string::npos)
      << pc.status().ToString();
  // A batch script's errors name its line and option, not a YAML field it does not have;
  // a Kubernetes object's, the annotation that named the queue.
  const std::pair<std::string, std::string> where[] = {
      {"#SBATCH -J j1", "line 2: -J: job \"j1\" already exists"},
      {"#SBATCH --partition=nope", "line 2: --partition (partition: the queue): unknown queue"},
      {"#SBATCH -q ultra", "line 2: -q (QOS: the priority class): unknown priority class"}};
  for (const auto& [line, error] : where) {
    auto bad = cp_->Submit(kAdmin, "#!/bin/bash\n" + line + "\ntrue\n");
    ASSERT_FALSE(bad.ok()) << line;
    EXPECT_NE(bad.status().message().find(error), std::string::npos) << bad.status().ToString();
  }
  auto annotated = cp_->Submit(
      kAdmin,
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: "
      "{scheduling.volcano.sh/queue-name: nope}\nspec: {containers: [{name: c, command: [x]}]}\n");
  EXPECT_NE(annotated.status().message().find(
                "metadata.annotations.scheduling.volcano.sh/queue-name: unknown queue"),
            std::string::npos)
      << annotated.status().ToString();
  Reopen();
  EXPECT_EQ(State("j1"), "Pending");
  EXPECT_EQ(Reasons("j1"), std::vector<std::string>{"Submitted"});
  EXPECT_EQ(Job("j1")["spec"]["templates"][0]["command"][0], "python3");
  // Generated names continue after a restart instead of colliding.
  auto gen = cp_->Submit(kAdmin,
                         "apiVersion: tessera.io/v1\nkind: Job\nspec: {tasks: [{replicas: 1, "
                         "command: [\"true\"]}]}\n");
  ASSERT_TRUE(gen.ok()) << gen.status().ToString();
  EXPECT_EQ((*gen)[0]["name"], "job-000002");
}

// FIFO holds within a second: the job submitted first runs first, whatever its name.
TEST_F(ControlPlaneTest, JobsSubmittedInOneSecondRunInSubmissionOrder) {
  real_engine_ = true;
  Reopen();
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, NodeDoc("n1", 1)).ok());
  for (const char* name : {"zz-first", "mm-second", "aa-third"})
    ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc(name, 1, 1)).ok());
  Reopen();  // the order is the durable submission sequence
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("zz-first"), "Scheduled");
  EXPECT_EQ(State("mm-second"), "Pending");
  EXPECT_EQ(State("aa-third"), "Pending");
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, NodeDoc("n2", 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("mm-second"), "Scheduled");
  EXPECT_EQ(State("aa-third"), "Pending");
}

// The engine runs outside the lock, on a snapshot: a hold or a cordon the API answered while
// it ran stands against the plan it brings (the job stays held, the node gets no new task).
TEST_F(ControlPlaneTest, AHoldOrACordonDuringACycleStandsAgainstItsPlan) {
  bool acted = false;
  Reopen([&](const Snapshot& s, int64_t now) {
    if (!acted) {
      acted = true;
      EXPECT_TRUE(cp_->Hold(kAdmin, "held", true).ok());
      EXPECT_TRUE(cp_->CordonNode(kAdmin, "n2", true).ok());
    }
    return ScriptedEngine::FirstFit(s, now);
  });
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, NodeDoc("n1", 1)).ok());
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, NodeDoc("n2", 1)).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("held", 1, 1)).ok());   // n1, by first fit
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("other", 1, 1)).ok());  // n2
  ASSERT_TRUE(cp_->RunCycle().ok());
  ASSERT_TRUE(acted);
  EXPECT_EQ(State("held"), "Pending");
  EXPECT_EQ(Job("held")["pendingReason"]["code"], "Held");
  EXPECT_EQ(State("other"), "Pending");
  EXPECT_EQ(Reasons("held"), (std::vector<std::string>{"Submitted", "Held"}));
  EXPECT_EQ(Reasons("other"), std::vector<std::string>{"Submitted"});
}

// A name the submitter did not choose is never refused: job-<number> with a suffix when a
// user already took that name.
TEST_F(ControlPlaneTest, AGeneratedNameStepsAroundOneAUserChose) {
  const std::string unnamed =
      "apiVersion: tessera.io/v1\nkind: Job\nspec: {tasks: [{replicas: 1, command: [\"true\"]}]}\n";
  auto first = cp_->Submit(kAdmin, unnamed);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)[0]["name"], "job-000001");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("job-000003", 1, 1)).ok());  // number 2
  auto next = cp_->Submit(kAdmin, unnamed);                           // number 3
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ((*next)[0]["name"], "job-000003-2");
  auto array = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH --array=0-1\ntrue\n");  // 4 and 5
  ASSERT_TRUE(array.ok()) << array.status().ToString();
  EXPECT_EQ((*array)[0]["name"], "job-000004_0");
}

// A Volcano job's tasks get what its env and svc plugins give in Kubernetes: the index within
// the task group, and each group's hosts and replicas (a TF parameter-server job builds its
// TF_CONFIG from them).
TEST_F(ControlPlaneTest, VolcanoTasksGetTheEnvAndSvcPluginsVariables) {
  Epoch("node-a");
  Epoch("node-b");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: "
                          "tf}\nspec:\n  queue: default\n  plugins: {env: [], svc: []}\n  tasks:\n"
                          "  - {name: ps, replicas: 1, template: {spec: {containers: [{name: c, "
                          "command: [x], resources: {limits: {nvidia.com/gpu: 8}}}]}}}\n"
                          "  - {name: worker-gpu, replicas: 2, template: {spec: {containers: "
                          "[{name: c, command: [x], resources: {limits: {nvidia.com/gpu: "
                          "4}}}]}}}\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json j = Job("tf");
  ASSERT_EQ(j["allocations"].size(), 3u);
  const Json w1 = j["allocations"][2]["env"];  // the second worker: task 2
  EXPECT_EQ(w1["VC_TASK_INDEX"], "1");
  EXPECT_EQ(w1["VK_TASK_INDEX"], "1");
  EXPECT_EQ(w1["VC_PS_HOSTS"], "node-a");
  EXPECT_EQ(w1["VC_PS_NUM"], "1");
  EXPECT_EQ(w1["VC_WORKER_GPU_HOSTS"], "node-b,node-b");
  EXPECT_EQ(w1["VC_WORKER_GPU_NUM"], "2");
  EXPECT_EQ(j["allocations"][0]["env"]["VC_TASK_INDEX"], "0");
}

// The agent caps a Kubernetes task at its limits, as the kubelet does (a pod bursting above
// its memory request was OOM-killed at the request); a Tessera task stays at its request.
TEST_F(ControlPlaneTest, TheAgentCapsATaskAtItsKubernetesLimits) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: v1\nkind: Pod\nmetadata: {name: burst}\nspec:\n  "
                          "restartPolicy: Never\n  containers:\n  - {name: c, command: [x], "
                          "resources: {requests: {cpu: 2, memory: 4Gi}, limits: {cpu: 4, memory: "
                          "8Gi}}}\n")
                  .ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("plain", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::map<std::string, Json> by_job;
  const Json desired = Beat("node-a", epoch);
  for (const auto& a : desired["allocations"]) by_job[a["job"]] = a;
  ASSERT_EQ(by_job.size(), 2u);
  EXPECT_EQ(by_job["burst"]["memory"], std::to_string(8LL << 30));
  EXPECT_EQ(by_job["burst"]["cpu"], "4000m");
  Reopen();  // kept with the allocation
  EXPECT_EQ(Beat("node-a", epoch)["allocations"][0]["memory"], std::to_string(8LL << 30));
}

// Who a task runs as travels to the agent in its allocation: the template's
// securityContext, and the submitter's name (for --run-as-submitter). A job without one
// sends no securityContext, as before (an agent then runs it as it always did).
TEST_F(ControlPlaneTest, TheAgentIsToldWhoATaskRunsAs) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: v1\nkind: Pod\nmetadata: {name: nobody}\nspec:\n  "
                          "restartPolicy: Never\n  securityContext: {runAsUser: 65534, "
                          "supplementalGroups: [100]}\n  containers:\n  - {name: c, command: "
                          "[x], securityContext: {runAsGroup: 65534, runAsNonRoot: true}}\n")
                  .ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("plain", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json want = {{"runAsUser", 65534},
                     {"runAsGroup", 65534},
                     {"runAsNonRoot", true},
                     {"supplementalGroups", {100}}};
  auto by_job = [&] {
    std::map<std::string, Json> out;
    const Json desired = Beat("node-a", epoch);
    for (const auto& a : desired["allocations"]) out[a["job"]] = a;
    return out;
  };
  auto sent = by_job();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent["nobody"]["securityContext"], want);
  EXPECT_EQ(sent["nobody"]["submitter"], "admin");
  EXPECT_FALSE(sent["plain"].contains("securityContext"));
  EXPECT_EQ(sent["plain"]["submitter"], "admin");
  // describe shows it, on the allocation and the stored template.
  const Json j = Job("nobody");
  EXPECT_EQ(j["allocations"][0]["securityContext"], want);
  EXPECT_EQ(j["spec"]["templates"][0]["securityContext"], want);
  Reopen();  // kept with the allocation
  EXPECT_EQ(by_job()["nobody"]["securityContext"], want);
}

TEST_F(ControlPlaneTest, LifecycleScheduledRunningSucceededWithTorchrunEnv) {
  int64_t epoch = Epoch("node-a");
  Epoch("node-b");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("train", 2, 4, "  minAvailable: 2\n")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json j = Job("train");
  EXPECT_EQ(j["state"], "Scheduled");
  ASSERT_EQ(j["allocations"].size(), 2u);
  Json a0 = j["allocations"][0], a1 = j["allocations"][1];
  EXPECT_EQ(a0["env"]["CUDA_VISIBLE_DEVICES"], "0,1,2,3");
  EXPECT_EQ(a1["env"]["CUDA_VISIBLE_DEVICES"], "4,5,6,7");  // first fit: same node, next devices
  EXPECT_EQ(a0["env"]["RANK"], "0");
  EXPECT_EQ(a1["env"]["RANK"], "1");
  EXPECT_EQ(a1["env"]["LOCAL_RANK"], "1");
  EXPECT_EQ(a1["env"]["WORLD_SIZE"], "2");
  EXPECT_EQ(a1["env"]["MASTER_ADDR"], "node-a");
  EXPECT_EQ(a1["env"]["FOO"], "bar");
  // The heartbeat answer is the node's desired state.
  Json desired = Beat("node-a", epoch);
  ASSERT_EQ(desired["allocations"].size(), 2u);
  std::string id0 = desired["allocations"][0]["allocation"],
              id1 = desired["allocations"][1]["allocation"];
  EXPECT_EQ(desired["allocations"][0]["command"][1], "train.py");
  Beat("node-a", epoch, {Task(id0, "running"), Task(id1, "running")});
  EXPECT_EQ(State("train"), "Running");
  Beat("node-a", epoch, {Task(id0, "succeeded"), Task(id1, "running")});
  EXPECT_EQ(State("train"), "Running");
  Beat("node-a", epoch, {Task(id1, "succeeded")});
  EXPECT_EQ(State("train"), "Succeeded");
  EXPECT_TRUE(Beat("node-a", epoch)["allocations"].empty());
  Reopen();
  EXPECT_EQ(State("train"), "Succeeded");
  EXPECT_EQ(Reasons("train"),
            (std::vector<std::string>{"Submitted", "Scheduled", "Started", "TaskSucceeded",
                                      "TaskSucceeded", "Completed"}));
}

// A task over before any heartbeat saw it running (assigned, then succeeded) still started
// its job; and a finished job's GPU time is counted whether it succeeded or not.
// A batch script reads Slurm's variables: the job's id and name, the node list, and which
// node of the allocation it runs on.
TEST_F(ControlPlaneTest, SbatchTasksGetSlurmsEnvironment) {
  real_engine_ = true;
  Reopen();
  int64_t ea = Epoch("node-a"), eb = Epoch("node-b");
  auto r = cp_->Submit(kAdmin,
                       "#!/bin/bash\n#SBATCH -J sweep\n#SBATCH -N 2\n#SBATCH --gres=gpu:1\n"
                       "#SBATCH --ntasks-per-node=2\n#SBATCH -c 3\n"
                       "#SBATCH -o out/%x-%j-%N.log\necho $SLURM_NODEID\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::map<std::string, Json> env;  // by SLURM_NODEID
  for (auto [node, epoch] : {std::pair<const char*, int64_t>{"node-a", ea}, {"node-b", eb}}) {
    const Json desired = Beat(node, epoch);  // (named: a temporary's items would dangle)
    for (const auto& a : desired["allocations"]) {
      env[a["env"]["SLURM_NODEID"].get<std::string>()] = a["env"];
      // -o, expanded for the node it runs on; stderr goes with it.
      const std::string out =
          "out/sweep-" + a["env"]["SLURM_JOB_ID"].get<std::string>() + "-" + node + ".log";
      EXPECT_EQ(a.value("stdoutFile", ""), out);
      EXPECT_EQ(a.value("stderrFile", ""), out);
      // The script itself, which the agent executes as a file (its #! line counts).
      EXPECT_EQ(a.value("script", "").rfind("#!/bin/bash\n#SBATCH -J sweep\n", 0), 0u) << a.dump();
      EXPECT_TRUE(a["command"].empty());
    }
  }
  ASSERT_EQ(env.size(), 2u);
  for (const auto& [id, e] : env) {
    EXPECT_EQ(e["SLURM_JOB_NAME"], "sweep");
    EXPECT_EQ(e["SLURM_JOB_NODELIST"], e["SLURM_NODELIST"]);
    EXPECT_EQ(e["SLURM_JOB_NUM_NODES"], "2");
    EXPECT_EQ(e["SLURM_PROCID"], id);
    EXPECT_FALSE(e["SLURM_JOB_ID"].get<std::string>().empty());
    // The node's share, which srun (agent/srun.h) starts: 2 tasks of 3 CPUs, 1 GPU.
    EXPECT_EQ(e["SLURM_NTASKS"], "4");
    EXPECT_EQ(e["SLURM_NTASKS_PER_NODE"], "2");
    EXPECT_EQ(e["SLURM_CPUS_PER_TASK"], "3");
    EXPECT_EQ(e["SLURM_GPUS_ON_NODE"], "1");
  }
  EXPECT_EQ(env["0"]["SLURM_JOB_ID"], env["1"]["SLURM_JOB_ID"]);
  const std::string list = env["0"]["SLURM_JOB_NODELIST"];
  EXPECT_TRUE(list == "node-a,node-b" || list == "node-b,node-a") << list;  // no shared number
  // Each copy of the script knows its own node, as under slurmd.
  EXPECT_NE(env["0"]["SLURMD_NODENAME"], env["1"]["SLURMD_NODENAME"]);
  EXPECT_NE(list.find(env["0"]["SLURMD_NODENAME"].get<std::string>()), std::string::npos);
}

// sbatch -w/-x on Tessera's own nodes: the job gets exactly the listed nodes, or none of the
// excluded ones (node affinity on kubernetes.io/hostname, which every node carries); a list
// naming a node the cluster lacks keeps the job Pending, saying why.
TEST_F(ControlPlaneTest, SbatchNodelistAndExcludePickTheNodes) {
  real_engine_ = true;
  Reopen();
  for (const char* n : {"gpu-1", "gpu-2", "gpu-3"}) Epoch(n);
  auto submit = [&](const std::string& name, const std::string& directives) {
    auto r = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J " + name +
                                     "\n#SBATCH --gres=gpu:1\n#SBATCH " + directives + "\ntrue\n");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  };
  submit("listed", "-w gpu-[2-3]");
  submit("kept-out", "--exclude=gpu-1,gpu-2");
  submit("absent", "-w gpu-9");
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json listed = Job("listed")["nodes"];
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, Json::array({"gpu-2", "gpu-3"}));
  EXPECT_EQ(Job("kept-out")["nodes"], Json::array({"gpu-3"}));
  EXPECT_EQ(State("absent"), "Pending");
  EXPECT_NE(Job("absent").dump().find("didn't match Pod's node affinity/selector"),
            std::string::npos)
      << Job("absent").dump();
}

// sbatch --array: one submission, one ordinary job per index (<name>_<index>), stored
// together or not at all, and idempotent; each element's tasks see Slurm's SLURM_ARRAY_*.
TEST_F(ControlPlaneTest, AnArrayIsOneJobPerIndexStoredTogether) {
  int64_t epoch = Epoch("node-a");
  const std::string script =
      "#!/bin/bash\n#SBATCH -J sweep\n#SBATCH --array=0-4:2\n#SBATCH --gres=gpu:1\n"
      "#SBATCH -o out/%x-%A_%a.log\necho $SLURM_ARRAY_TASK_ID\n";
  auto r = cp_->Submit(kAdmin, script, "key-1");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  const int64_t first = (*r)[0]["slurmJobId"];
  for (int i = 0; i < 3; ++i) {
    const Json& j = (*r)[i];
    EXPECT_EQ(j["name"], "sweep_" + std::to_string(2 * i));
    EXPECT_EQ(j["slurmJobId"], first + i) << "each element is a job of its own";
    EXPECT_EQ(j["array"]["jobId"], first) << "the array's id: its first element's";
    EXPECT_EQ(j["array"]["index"], 2 * i);
    EXPECT_EQ(j["state"], "Pending");
  }
  // A retry with the key answers with every element and creates nothing.
  bool replayed = false;
  auto again = cp_->Submit(kAdmin, script, "key-1", &replayed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(replayed);
  EXPECT_EQ(again->size(), 3u);
  // All or none: an element whose name is taken refuses the whole array.
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("other_4", 1, 1)).ok());
  auto clash = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J other\n#SBATCH -a 4-5\ntrue\n");
  ASSERT_EQ(clash.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(clash.status().message().find("job \"other_4\" already exists"), std::string::npos)
      << clash.status().message();
  EXPECT_EQ(cp_->GetJob(kAdmin, "other_5", false).status().code(), StatusCode::kNotFound);
  // An array's name and a job's are never the same: `tessera cancel NAME` means one thing.
  EXPECT_EQ(cp_->Submit(kAdmin, JobDoc("sweep", 1, 1)).status().message(),
            "metadata.name: job array \"sweep\" exists (its jobs are sweep_<index>); a job may "
            "not have an array's name");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("plain", 1, 1)).ok());
  EXPECT_EQ(
      cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J plain\n#SBATCH -a 1\ntrue\n").status().message(),
      "line 2: -J: job \"plain\" exists; an array may not have a job's name (`tessera "
      "cancel plain` cancels every job of the array)");
  EXPECT_EQ(cp_->ListJobs(kAdmin, {})->at("items").size(), 5u);  // 3 of sweep, other_4, plain

  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json desired = Beat("node-a", epoch);
  std::set<std::string> seen;
  for (const auto& a : desired["allocations"]) {
    const std::string job = a["job"];
    if (!job.starts_with("sweep_")) continue;
    const Json& env = a["env"];
    const std::string index = job.substr(6);
    seen.insert(index);
    EXPECT_EQ(env["SLURM_ARRAY_TASK_ID"], index);
    EXPECT_EQ(env["SLURM_ARRAY_JOB_ID"], std::to_string(first));
    EXPECT_EQ(env["SLURM_ARRAY_TASK_COUNT"], "3");
    EXPECT_EQ(env["SLURM_ARRAY_TASK_MIN"], "0");
    EXPECT_EQ(env["SLURM_ARRAY_TASK_MAX"], "4");
    EXPECT_EQ(env["SLURM_ARRAY_TASK_STEP"], "2");
    EXPECT_EQ(env["SLURM_JOB_NAME"], "sweep") << "Slurm's: the array's -J";
    EXPECT_NE(env["SLURM_JOB_ID"], env["SLURM_ARRAY_JOB_ID"].get<std::string>() + "x");
    EXPECT_EQ(a["stdoutFile"], "out/sweep-" + std::to_string(first) + "_" + index + ".log");
  }
  EXPECT_EQ(seen, (std::set<std::string>{"0", "2", "4"})) << desired.dump();
}

// --array=...%N: at most N elements run at once; the others stay Pending, never shown to the
// engine, with Slurm's reason JobArrayTaskLimit, and start as running ones end, in index
// order. The limit is stored with every element, so it holds across a restart.
TEST_F(ControlPlaneTest, AnArrayThrottleHoldsElementsBackAcrossARestart) {
  int64_t epoch = Epoch("node-a");
  auto r = cp_->Submit(
      kAdmin, "#!/bin/bash\n#SBATCH -J thr\n#SBATCH --array=0-3%2\n#SBATCH --gres=gpu:1\ntrue\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Json running = StartAll("node-a", epoch, 2);
  EXPECT_EQ(State("thr_0"), "Running");
  EXPECT_EQ(State("thr_1"), "Running");
  for (const char* id : {"thr_2", "thr_3"}) {
    EXPECT_EQ(State(id), "Pending") << id;
    EXPECT_EQ(Job(id)["pendingReason"]["code"], "JobArrayTaskLimit") << id;
  }
  // A listing says the same, its throttle computed once for the page.
  const Json listed = cp_->ListJobs(kAdmin, {}).value();
  for (const auto& item : listed["items"])
    if (item["name"] == "thr_2" || item["name"] == "thr_3") {
      EXPECT_EQ(item["pendingReason"]["code"], "JobArrayTaskLimit") << item["name"];
    }
  EXPECT_EQ(Job("thr_2")["pendingReason"]["message"],
            "array thr runs at most 2 of its jobs at once (thr%2); this one starts when one of "
            "them ends");

  Reopen();  // the limit and the membership are stored with the elements
  epoch = Epoch("node-a");
  Beat("node-a", epoch, running);
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Beat("node-a", epoch, running)["allocations"].size(), 2u);
  EXPECT_EQ(Job("thr_3")["pendingReason"]["code"], "JobArrayTaskLimit");
  // One ends: the next element by index takes its place, the last still waits.
  const std::string first = Job("thr_0")["allocations"][0]["id"];
  Json reports = Json::array();
  for (const auto& t : running)
    reports.push_back(t["allocation"] == first ? Task(first, "succeeded") : t);
  Beat("node-a", epoch, reports);
  EXPECT_EQ(State("thr_0"), "Succeeded");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("thr_2"), "Scheduled");
  EXPECT_EQ(State("thr_3"), "Pending");
  EXPECT_EQ(Job("thr_3")["pendingReason"]["code"], "JobArrayTaskLimit");
  // A cancelled element leaves its place to the next one.
  ASSERT_TRUE(cp_->Cancel(kAdmin, "thr_1").ok());
  Json stopped = Task(Job("thr_1")["allocations"][0]["id"], "killed", -15);
  Beat("node-a", epoch, {stopped});
  EXPECT_EQ(State("thr_1"), "Cancelled");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("thr_3"), "Scheduled");
}

// `tessera cancel NAME` of an array cancels every unfinished element at once (scancel of an
// array's id); each element can be cancelled alone too.
// scontrol hold/release of an array: its pending jobs, at once.
TEST_F(ControlPlaneTest, HoldingAnArrayHoldsItsPendingJobs) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "#!/bin/bash\n#SBATCH -J arr\n#SBATCH --array=1-3\n#SBATCH "
                          "--gres=gpu:1\nsleep 100\n")
                  .ok());
  ASSERT_TRUE(cp_->Hold(kAdmin, "arr_3", true).ok());
  auto held = cp_->Hold(kAdmin, "arr", true);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  ASSERT_EQ((*held)["items"].size(), 2u) << "arr_3 was held already";
  EXPECT_EQ((*held)["items"][0]["name"], "arr_1");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Beat("node-a", epoch)["allocations"].empty());
  EXPECT_EQ(cp_->Hold(kAdmin, "arr", true).status().message(),
            "job array \"arr\": no job of it is pending and not held");
  // By its number, as scontrol release 12 of an array (SLURM_ARRAY_JOB_ID).
  const std::string array_id = to_string(Job("arr_1")["array"]["jobId"]);
  auto released = cp_->Hold(kAdmin, array_id, false);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_EQ((*released)["items"].size(), 3u);
  // The array's number names the array for hold/release/cancel; elsewhere (get, describe,
  // logs, delete) it is the job it also numbers, the array's first.
  auto first = cp_->GetJob(kAdmin, array_id, false);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ((*first)["name"], "arr_1");
  // One job by its sbatch number (slurmJobId), as scontrol show job 13.
  const std::string second = to_string(Job("arr_2")["slurmJobId"]);
  auto by_number = cp_->GetJob(kAdmin, second, false);
  ASSERT_TRUE(by_number.ok()) << by_number.status().ToString();
  EXPECT_EQ((*by_number)["name"], "arr_2");
  StartAll("node-a", epoch, 3);
  EXPECT_EQ(cp_->Hold(kAdmin, "arr", false).status().message(),
            "job array \"arr\": no job of it is held");
  const Principal other{"bob", Role::kMember, {"training"}};
  EXPECT_EQ(cp_->Hold(other, "arr", true).status().code(), StatusCode::kNotFound);
  // A second array of the same name would make `arr` mean two arrays.
  Status twice =
      cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J arr\n#SBATCH --array=7-8\ntrue\n").status();
  EXPECT_EQ(twice.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(twice.message(),
            "line 2: -J: job array \"arr\" already exists; its name is free once its jobs are "
            "deleted (`tessera delete job arr_<index>`)");
}

// A queue may name the priority classes its jobs use (as Slurm's allowed QOS): a member of
// `debug` cannot submit at `high` and preempt others' work; a child queue without a list
// takes its parent's; the classes must exist, and one a queue allows is not deleted.
TEST_F(ControlPlaneTest, AQueueAllowsOnlyItsPriorityClasses) {
  ASSERT_TRUE(cp_->Apply(kAdmin,
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n"
                         "  name: research\n  annotations: {tessera.io/priority-classes: \"low\"}\n"
                         "---\napiVersion: tessera.io/v1\nkind: Queue\nmetadata: {name: debug}\n"
                         "spec: {parent: research}\n")
                  .ok());
  const Principal bob{"bob", Role::kMember, {"debug"}};
  Status high =
      cp_->Submit(bob, JobDoc("urgent", 1, 1, "  priorityClass: high\n", "debug")).status();
  EXPECT_EQ(high.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(high.message().find("priority class \"high\" is not allowed in queue \"debug\" "
                                "(allowed: low)"),
            std::string::npos)
      << high.message();
  EXPECT_TRUE(cp_->Submit(bob, JobDoc("ok", 1, 1, "  priorityClass: low\n", "debug")).ok());
  // No class given, and no global default that is allowed: says to give one.
  Status none = cp_->Submit(bob, JobDoc("plain", 1, 1, "", "debug")).status();
  EXPECT_NE(none.message().find("give one of them"), std::string::npos) << none.message();
  // Other queues are not limited.
  EXPECT_TRUE(cp_->Submit(kAdmin, JobDoc("elsewhere", 1, 1, "  priorityClass: high\n")).ok());
  Status typo = cp_->Apply(kAdmin,
                           "apiVersion: tessera.io/v1\nkind: Queue\nmetadata: {name: x}\n"
                           "spec: {priorityClasses: [lwo]}\n")
                    .status();
  EXPECT_EQ(typo.message(),
            "queue x: priorityClasses: unknown priority class \"lwo\" (known: high, low)");
  Status del = cp_->Delete(kAdmin, "priorityclass", "low");
  EXPECT_NE(del.message().find("is allowed by queue \"research\""), std::string::npos)
      << del.message();
}

// A heartbeat with a field of the wrong type is refused whole, naming it, before anything
// changes (read half-way, it would have thrown after memory had changed).
TEST_F(ControlPlaneTest, AHeartbeatWithAWronglyTypedFieldChangesNothing) {
  const int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("j", 1, 1)).ok());
  Json running = StartAll("node-a", epoch, 1);
  const std::string id = running[0]["allocation"];
  auto bad = cp_->Heartbeat(
      kAdmin, "node-a",
      Json{{"epoch", epoch},
           {"tasks",
            Json::array({Task(id, "failed", 1), Json{{"allocation", "a-x"}, {"exitCode", "x"}}})}});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "tasks[1].exitCode: expected a number, got \"x\"");
  EXPECT_EQ(State("j"), "Running") << "the failure in the same body was not taken either";
}

// The identity an agent reports a task runs as is kept with the allocation (describe shows
// it beside what was asked), survives a restart, and a malformed one is refused, named.
TEST_F(ControlPlaneTest, TheIdentityATaskRunsAsIsKeptWithItsAllocation) {
  const int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("j", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const std::string id = Beat("node-a", epoch)["allocations"][0]["allocation"];
  Json t = Task(id, "running");
  t["runAs"] = {{"uid", 1000}, {"gid", 100}, {"user", "alice"}};
  Beat("node-a", epoch, Json::array({t}));  // its first report: running, and as whom
  const Json want = {{"uid", 1000}, {"gid", 100}, {"user", "alice"}};
  EXPECT_EQ(Job("j")["allocations"][0]["runAs"], want);
  EXPECT_EQ(State("j"), "Running");
  Reopen();
  EXPECT_EQ(Job("j")["allocations"][0]["runAs"], want);
  // A change reported for a running allocation (nothing else changes) is written too.
  Json again = Task(id, "running");
  again["runAs"] = {{"uid", 1001}, {"gid", 100}, {"user", "bob"}};
  Beat("node-a", epoch, Json::array({again}));
  Reopen();
  EXPECT_EQ(Job("j")["allocations"][0]["runAs"]["user"], "bob");
  again["runAs"] = want;
  Beat("node-a", epoch, Json::array({again}));
  for (const auto& [bad, why] : std::vector<std::pair<Json, std::string>>{
           {{{"uid", -1}, {"gid", 100}},
            "tasks[0].runAs.uid: expected a Unix id (0..4294967295), got -1"},
           {{{"uid", 1}}, "tasks[0].runAs.gid: expected a Unix id (0..4294967295), got nothing"},
           {{{"uid", 1}, {"gid", 1}, {"user", 7}}, "tasks[0].runAs.user: expected a string, got 7"},
           {"root", "tasks[0].runAs: expected an object"}}) {
    Json b = Task(id, "running");
    b["runAs"] = bad;
    auto r = cp_->Heartbeat(kAdmin, "node-a", Json{{"epoch", epoch}, {"tasks", Json::array({b})}});
    EXPECT_EQ(r.status().message(), why);
  }
  EXPECT_EQ(Job("j")["allocations"][0]["runAs"], want);
}

// A node its agent registers runs at most 110 tasks unless it says otherwise (kubelet's
// maxPods): a job of 100,000 10m-CPU tasks must not swamp one agent. (Nodes registered
// otherwise, e.g. a Slurm pool's, have no such limit.)
TEST_F(ControlPlaneTest, AnAgentsNodeRunsAtMost110TasksByDefault) {
  const Principal agent{"agent", Role::kAgent, {}};
  ASSERT_TRUE(cp_->RegisterAgent(agent, NodeDoc("node-a", 8)).ok());
  Json own = NodeDoc("node-b", 8);
  own["node"]["maxTasks"] = 500;
  ASSERT_TRUE(cp_->RegisterAgent(agent, own).ok());
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, NodeDoc("node-c", 8)).ok());
  std::map<std::string, Json> by_name;
  const Json listed = cp_->ListNodes(kAdmin);
  for (const auto& n : listed["items"]) by_name[n["name"]] = n;
  EXPECT_EQ(by_name["node-a"].value("maxTasks", 0), 110);
  EXPECT_EQ(by_name["node-b"].value("maxTasks", 0), 500);
  EXPECT_FALSE(by_name["node-c"].contains("maxTasks"));
}

// A member learns nothing of other queues' jobs: not their names through sbatch numbers,
// not their states or that they are arrays through a name clash.
TEST_F(ControlPlaneTest, OtherQueuesJobsLeakNeitherNamesNorStates) {
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("secret-gang", 1, 1)).ok());
  ASSERT_TRUE(
      cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J secret-arr\n#SBATCH --array=1-2\ntrue\n").ok());
  const std::string number = to_string(Job("secret-gang")["slurmJobId"]);
  const Principal bob{"bob", Role::kMember, {"training"}};
  for (const auto& status :
       {cp_->GetJob(bob, number, false).status(), cp_->Cancel(bob, number).status(),
        cp_->Hold(bob, number, true).status(), cp_->DeleteJob(bob, number).status(),
        cp_->LogsSourceOf(bob, number, 0, "", "stdout").status()}) {
    EXPECT_EQ(status.code(), StatusCode::kNotFound);
    EXPECT_EQ(status.message(), "job \"" + number + "\" not found");
  }
  for (const char* name : {"secret-gang", "secret-arr"}) {
    // As a job and as an array of that name alike.
    for (const std::string& doc :
         {JobDoc(name, 1, 1, "", "training"), "#!/bin/bash\n#SBATCH -J " + std::string(name) +
                                                  "\n#SBATCH -p training\n#SBATCH "
                                                  "--array=1-2\ntrue\n"}) {
      Status clash = cp_->Submit(bob, doc).status();
      EXPECT_EQ(clash.code(), StatusCode::kAlreadyExists);
      EXPECT_NE(clash.message().find(std::string("the name \"") + name +
                                     "\" is taken by a job in a queue you cannot see"),
                std::string::npos)
          << clash.message();
    }
  }
}

TEST_F(ControlPlaneTest, CancellingAnArrayCancelsEveryElement) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "#!/bin/bash\n#SBATCH -J arr\n#SBATCH --array=1-3\n#SBATCH "
                          "--gres=gpu:1\nsleep 100\n")
                  .ok());
  ASSERT_TRUE(cp_->Hold(kAdmin, "arr_3", true).ok());
  ASSERT_TRUE(cp_->Cancel(kAdmin, "arr_3").ok());
  EXPECT_EQ(State("arr_3"), "Cancelled");
  // A finished job is not released (it was held when cancelled).
  EXPECT_EQ(cp_->Hold(kAdmin, "arr", false).status().message(),
            "job array \"arr\": no job of it is held");
  EXPECT_EQ(cp_->Hold(kAdmin, "arr_3", false).status().message(), "job \"arr_3\" is not held");
  StartAll("node-a", epoch, 2);
  auto c = cp_->Cancel(kAdmin, "arr");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ((*c)["name"], "arr");
  ASSERT_EQ((*c)["items"].size(), 2u) << "the unfinished ones";
  EXPECT_EQ((*c)["items"][0]["name"], "arr_1");
  EXPECT_EQ((*c)["items"][0]["state"], "Terminating");
  EXPECT_EQ(State("arr_2"), "Terminating");
  const Principal other{"bob", Role::kMember, {"training"}};
  EXPECT_EQ(cp_->Cancel(other, "arr").status().code(), StatusCode::kNotFound);
  // The agent no longer runs them (an empty report): they end Cancelled.
  EXPECT_TRUE(Beat("node-a", epoch)["allocations"].empty()) << "both are being stopped";
  EXPECT_EQ(State("arr_1"), "Cancelled");
  EXPECT_EQ(State("arr_2"), "Cancelled");
  EXPECT_EQ(cp_->Cancel(kAdmin, "arr").status().message(),
            "job array \"arr\": every job of it already finished");
}

// A dependency on an array, by its name or its job id (%A), is on the array as a whole, as
// Slurm judges one by its highest exit code: afterok once every job succeeded (never, as soon
// as one failed), afternotok once all ended and one failed. JOBID_INDEX names one job of it.
TEST_F(ControlPlaneTest, ADependencyOnAnArrayJudgesItAsAWhole) {
  int64_t epoch = Epoch("node-a");
  auto sweep = cp_->Submit(
      kAdmin, "#!/bin/bash\n#SBATCH -J sweep\n#SBATCH --array=0-2\n#SBATCH --gres=gpu:1\ntrue\n");
  ASSERT_TRUE(sweep.ok()) << sweep.status().ToString();
  const std::string id = to_string(Job("sweep_0")["slurmJobId"]);
  auto submit = [&](const std::string& name, const std::string& dependency) {
    auto r = cp_->Submit(
        kAdmin, "#!/bin/bash\n#SBATCH -J " + name + "\n#SBATCH -d " + dependency + "\ntrue\n");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  };
  submit("all-ok", "afterok:sweep");
  submit("any-failed", "afternotok:" + id);
  submit("after-one", "afterany:" + id + "_1");
  EXPECT_EQ(
      Job("all-ok")["dependencies"],
      Json::parse(R"([{"condition":"afterok","job":"sweep","state":"Waiting","array":true}])"));
  EXPECT_EQ(Job("after-one")["dependencies"][0]["job"], "sweep_1");
  StartAll("node-a", epoch, 3);
  std::map<std::string, std::string> alloc;  // job -> allocation
  for (const char* e : {"sweep_0", "sweep_1", "sweep_2"}) alloc[e] = Job(e)["allocations"][0]["id"];
  EXPECT_EQ(Job("any-failed")["pendingReason"]["message"],
            "waits for array sweep to end with a job failed (afternotok); 0 of its 3 jobs ended");
  Beat("node-a", epoch,
       {Task(alloc["sweep_0"], "succeeded"), Task(alloc["sweep_1"], "failed", 1),
        Task(alloc["sweep_2"], "running")});
  // One failed: afterok can never hold, though sweep_2 still runs; afternotok waits for it.
  EXPECT_EQ(Job("all-ok")["pendingReason"]["message"],
            "job sweep_1 of array sweep ended Failed: afterok can never be satisfied; `tessera "
            "cancel all-ok` removes this job");
  EXPECT_EQ(Job("any-failed")["pendingReason"]["code"], "Dependency");
  EXPECT_FALSE(Job("after-one").contains("pendingReason") &&
               Job("after-one")["pendingReason"]["code"] == "Dependency");
  Beat("node-a", epoch, {Task(alloc["sweep_2"], "succeeded")});
  EXPECT_EQ(Job("any-failed")["dependencies"][0]["state"], "Satisfied");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("any-failed"), "Scheduled");
  // Refused at submission once it can never hold.
  EXPECT_EQ(cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -d afterok:sweep\ntrue\n").status().message(),
            "line 2: -d afterok:sweep: array sweep ended so that: afterok can never be satisfied");
}

// A pool that queues a task on its own (Slurm) says why on the allocation while it is
// Assigned; once the task runs, that is no longer so and the message goes (agent protocol).
TEST_F(ControlPlaneTest, APoolsPendingMessageIsClearedWhenTheTaskRuns) {
  const int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("queued", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json desired = Beat("node-a", epoch);
  ASSERT_EQ(desired["allocations"].size(), 1u) << desired.dump();
  const std::string alloc = desired["allocations"][0]["allocation"];
  Json pending = Task(alloc, "pending");
  pending["message"] = "slurm:42: Slurm job 42 PENDING (Resources)";
  Beat("node-a", epoch, Json::array({pending}));
  Json j = Job("queued");
  ASSERT_EQ(j["allocations"].size(), 1u);
  EXPECT_EQ(j["allocations"][0]["state"], "Assigned");
  EXPECT_EQ(j["allocations"][0].value("message", ""), "slurm:42: Slurm job 42 PENDING (Resources)");
  EXPECT_EQ(Reasons("queued").back(), "WaitingInPool");

  Beat("node-a", epoch, Json::array({Task(alloc, "running")}));
  j = Job("queued");
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["allocations"][0]["state"], "Running");
  EXPECT_FALSE(j["allocations"][0].contains("message")) << j["allocations"][0].dump();
}

// sbatch -t and activeDeadlineSeconds are limits, not only estimates: past them the job's
// tasks are stopped and it fails (DeadlineExceeded), without a retry. -t counts from when the
// attempt first ran (time queued in a pool is not charged, as in Slurm); a batch/v1 Job's
// deadline from its first start, across restarts.
TEST_F(ControlPlaneTest, TimeLimitsStopTheJobAndFailIt) {
  real_engine_ = true;
  Reopen();
  const int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "#!/bin/bash\n#SBATCH -J limited\n#SBATCH -t 5\n"
                          "#SBATCH --requeue\nsleep 1000\n")
                  .ok());
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch/v1\nkind: Job\nmetadata: {name: deadline}\n"
                          "spec:\n  activeDeadlineSeconds: 300\n  backoffLimit: 5\n"
                          "  template:\n    spec:\n      restartPolicy: Never\n"
                          "      containers: [{name: c, image: x, command: [sleep, '1000']}]\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::map<std::string, std::string> alloc;    // job -> its allocation
  const Json desired = Beat("node-a", epoch);  // (named: a temporary's items would dangle)
  for (const auto& a : desired["allocations"]) alloc[a["job"]] = a["allocation"];
  ASSERT_EQ(alloc.size(), 2u);
  // The batch job waits in its pool's queue for a minute before it runs.
  Beat("node-a", epoch,
       Json::array({Task(alloc["deadline"], "running"), Task(alloc["limited"], "pending")}));
  clock_.now += 60;
  Beat("node-a", epoch,
       Json::array({Task(alloc["deadline"], "running"), Task(alloc["limited"], "running")}));
  // batch/v1: the first pod fails after 200 s and is replaced (backoffLimit).
  clock_.now += 140;
  Beat("node-a", epoch,
       Json::array({Task(alloc["deadline"], "failed", 1), Task(alloc["limited"], "running")}));
  clock_.now += 10;  // the crash-loop back-off
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string replacement;
  const Json next = Beat("node-a", epoch);
  for (const auto& a : next["allocations"])
    if (a["job"] == "deadline") replacement = a["allocation"];
  ASSERT_FALSE(replacement.empty());
  // Still running `seconds` - 1 later; one more second and its tasks are being stopped for
  // its time limit, saying so.
  auto expect_limit_after = [&](const std::string& job, int64_t seconds, const std::string& why) {
    clock_.now += seconds - 1;
    cp_->CheckTimers();
    EXPECT_EQ(State(job), "Running");
    clock_.now += 1;
    cp_->CheckTimers();
    EXPECT_EQ(State(job), "Terminating");
    EXPECT_EQ(Reasons(job).back(), "DeadlineExceeded");
    EXPECT_NE(Job(job)["message"].get<std::string>().find(why), std::string::npos)
        << Job(job).dump();
  };
  // The batch/v1 deadline counts from the job's first start, through the replacement.
  expect_limit_after("deadline", 90,  // 300 s
                     "ran 300 s since it first started, past its time limit of 300 s");
  Beat("node-a", epoch, Json::array({Task(replacement, "killed", 137)}));
  EXPECT_EQ(State("deadline"), "Failed");
  // -t 5 = 300 s from when the batch job ran (60 s after it was bound): stopped, not
  // requeued; Failed once its task is gone.
  EXPECT_EQ(State("limited"), "Running");
  expect_limit_after("limited", 60, "past its time limit of 300 s");
  Beat("node-a", epoch, Json::array({Task(alloc["limited"], "killed", 137)}));
  EXPECT_EQ(State("limited"), "Failed");
  Reopen();  // and so it stays
  EXPECT_EQ(State("limited"), "Failed");
  EXPECT_EQ(State("deadline"), "Failed");
}

// A job's GPU service is each allocation's own: from its binding to the end of its
// termination, not the whole attempt for every task; an exclusive job's node counts whole
// while any of its tasks holds it. Both are stored with the job.
TEST_F(ControlPlaneTest, EachTaskCountsTheGpuTimeItHeld) {
  const int64_t epoch = Epoch("node-a");
  // Two tasks of 1 GPU on node-a: one ends after 10 s, the other after 40 s.
  auto run = [&](const std::string& name, const std::string& extra) {
    ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc(name, 2, 1, extra)).ok());
    ASSERT_TRUE(cp_->RunCycle().ok());
    const Json desired = Beat("node-a", epoch);
    ASSERT_EQ(desired["allocations"].size(), 2u);
    const std::string first = desired["allocations"][0]["allocation"];
    const std::string second = desired["allocations"][1]["allocation"];
    clock_.now += 10;
    Beat("node-a", epoch, {Task(first, "succeeded"), Task(second, "running")});
    clock_.now += 30;
    Beat("node-a", epoch, {Task(second, "succeeded")});
    ASSERT_EQ(State(name), "Succeeded");
  };
  ASSERT_NO_FATAL_FAILURE(run("pair", ""));
  EXPECT_EQ(Job("pair")["attainedGpuSeconds"], 50);  // 1 GPU x 10 s + 1 GPU x 40 s, not 2 x 40
  ASSERT_NO_FATAL_FAILURE(run("whole", "  exclusive: true\n"));
  EXPECT_EQ(Job("whole")["attainedGpuSeconds"], 320);  // node-a's 8 GPUs x 40 s, once
  Reopen();
  EXPECT_EQ(Job("pair")["attainedGpuSeconds"], 50);
  EXPECT_EQ(Job("whole")["attainedGpuSeconds"], 320);
}

TEST_F(ControlPlaneTest, AQuickJobHasStartedAndItsGpuTimeIsCounted) {
  int64_t epoch = Epoch("node-a");
  for (const char* name : {"quick", "cancelled"})
    ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc(name, 1, 2)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json desired = Beat("node-a", epoch);
  ASSERT_EQ(desired["allocations"].size(), 2u);
  std::map<std::string, std::string> alloc;
  for (const auto& a : desired["allocations"]) alloc[a["job"]] = a["allocation"];
  const int64_t bound = clock_.now;
  clock_.now += 30;
  Beat("node-a", epoch, {Task(alloc["quick"], "succeeded"), Task(alloc["cancelled"], "running")});
  Json quick = Job("quick");
  EXPECT_EQ(quick["state"], "Succeeded");
  EXPECT_EQ(quick["startedAt"], bound + 30);
  EXPECT_EQ(quick["attainedGpuSeconds"], 60);  // 2 GPUs x 30 s
  EXPECT_EQ(Reasons("quick"), (std::vector<std::string>{"Submitted", "Scheduled", "Started",
                                                        "TaskSucceeded", "Completed"}));
  ASSERT_TRUE(cp_->Cancel(kAdmin, "cancelled").ok());
  Beat("node-a", epoch, {Task(alloc["cancelled"], "killed")});
  Json cancelled = Job("cancelled");
  EXPECT_EQ(cancelled["state"], "Cancelled");
  EXPECT_EQ(cancelled["attainedGpuSeconds"], 60);
  // Ended either way: each shows when its last attempt was bound, also after a restart.
  EXPECT_EQ(quick["runStartedAt"], bound);
  EXPECT_EQ(cancelled["runStartedAt"], bound);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("never", 1, 100)).ok());  // fits nowhere
  ASSERT_TRUE(cp_->Cancel(kAdmin, "never").ok());
  Reopen();
  EXPECT_EQ(Job("quick")["runStartedAt"], bound);
  EXPECT_EQ(Job("never")["runStartedAt"], -1);  // never bound
}

// A task its agent stopped on its own (its lease ran out while the server was away, or it
// shut down with its tasks) is an eviction: the job restarts at once, no retry counted, even
// when its policy fails the job on any failure.
TEST_F(ControlPlaneTest, ATaskItsAgentStoppedIsAnEvictionNotAFailure) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("fenced", 1, 1,
                                         "  restartPolicy: {onFailure: FailJob, maxRetries: 0}\n"))
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string id = Beat("node-a", epoch)["allocations"][0]["allocation"];
  Beat("node-a", epoch, {Task(id, "running")});
  Json killed = Task(id, "killed", 143);
  killed["message"] = "stopped: agent lost contact with the server (lease expired)";
  Beat("node-a", epoch, {killed});
  Json j = Job("fenced");
  EXPECT_EQ(j["state"], "Pending") << j.dump();
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_FALSE(j.contains("pendingReason") && j["pendingReason"]["code"] == "BackOff") << j.dump();
  auto r = Reasons("fenced");
  EXPECT_NE(std::find(r.begin(), r.end(), "Evicted"), r.end());
  EXPECT_EQ(std::find(r.begin(), r.end(), "TaskFailed"), r.end());
}

// Evictions do not use up retries: after one, a job allowed one retry still gets it.
TEST_F(ControlPlaneTest, AnEvictionLeavesTheRetriesForFailures) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("once", 1, 1,
                                         "  restartPolicy: {onFailure: RestartJob, maxRetries: "
                                         "1}\n"))
                  .ok());
  auto run = [&](const std::string& state, int code) {
    clock_.now += 60;  // past any back-off
    EXPECT_TRUE(cp_->RunCycle().ok());
    std::string id = Beat("node-a", epoch)["allocations"][0]["allocation"];
    Beat("node-a", epoch, {Task(id, "running")});
    Beat("node-a", epoch, {Task(id, state, code)});
  };
  run("killed", 143);  // stopped by its agent: an eviction
  EXPECT_EQ(Job("once")["attempt"], 2);
  run("failed", 1);  // the one retry
  EXPECT_EQ(State("once"), "Pending");
  EXPECT_EQ(Job("once")["attempt"], 3);
  run("failed", 1);  // past the limit
  EXPECT_EQ(State("once"), "Failed");
}

TEST_F(ControlPlaneTest, FailuresFollowTheRestartPolicyAndRetryLimit) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin, JobDoc("flaky", 1, 1,
                                 "  restartPolicy: {onFailure: RestartJob, maxRetries: 1}\n"))
          .ok());
  for (int attempt = 1; attempt <= 2; ++attempt) {
    ASSERT_TRUE(cp_->RunCycle().ok());
    Json d = Beat("node-a", epoch);
    ASSERT_EQ(d["allocations"].size(), 1u) << attempt;
    EXPECT_EQ(d["allocations"][0]["attempt"], attempt);
    std::string id = d["allocations"][0]["allocation"];
    Json failed = Task(id, "failed", attempt == 1 ? 3 : 137);
    failed["message"] = attempt == 1 ? "exited with code 3" : "killed by SIGKILL";
    Beat("node-a", epoch, {failed});
    const Json events = Job("flaky")["events"];
    auto said = std::find_if(events.rbegin(), events.rend(),
                             [](const Json& e) { return e["reason"] == "TaskFailed"; });
    ASSERT_NE(said, events.rend());
    const std::string want = attempt == 1
                                 ? "task 0 on node-a failed: exited with code 3; "
                                 : "task 0 on node-a failed: killed by SIGKILL (exit code 137)";
    EXPECT_EQ((*said)["message"].get<std::string>().substr(0, want.size()), want)
        << "the agent's words, the code once";
    if (attempt == 1) {
      // Crash-loop back-off: pending, and not placed for 10 s.
      Json j = Job("flaky");
      EXPECT_EQ(j["state"], "Pending");
      EXPECT_EQ(j["pendingReason"]["code"], "BackOff");
      EXPECT_EQ(j["pendingReason"]["message"],
                "restarting after 1 failure(s) in a row: next try in 10 s");
      ASSERT_TRUE(cp_->RunCycle().ok());
      EXPECT_EQ(State("flaky"), "Pending");
      EXPECT_TRUE(Beat("node-a", epoch)["allocations"].empty());
      clock_.now += 10;
    }
  }
  Json j = Job("flaky");
  EXPECT_EQ(j["state"], "Failed");
  EXPECT_EQ(j["attempt"], 2);
  EXPECT_NE(j["message"].get<std::string>().find("retry limit 1 reached"), std::string::npos);
  auto r = Reasons("flaky");
  EXPECT_NE(std::find(r.begin(), r.end(), "Requeued"), r.end());
  int failures = 0;  // a failure warns, also the one that restarted the job
  for (const auto& e : j["events"])
    if (e["reason"] == "TaskFailed") {
      EXPECT_EQ(e["type"], "Warning") << e;
      ++failures;
    }
  EXPECT_EQ(failures, 2);
  // Allocation ids are never reused.
  EXPECT_NE(j["allocations"][0]["id"], j["allocations"][1]["id"]);
}

// Crash-loop back-off, as Kubernetes': 10 s doubling to 5 min; a run of 10 minutes starts
// the count over. Evictions restart at once.
TEST_F(ControlPlaneTest, CrashLoopBackOffDoublesToFiveMinutesAndResetsAfterALongRun) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin, JobDoc("loop", 1, 1,
                                 "  restartPolicy: {onFailure: RestartJob, maxRetries: -1}\n"))
          .ok());
  auto run_and_fail = [&](int64_t run_for) {
    ASSERT_TRUE(cp_->RunCycle().ok());
    Json d = Beat("node-a", epoch);
    ASSERT_EQ(d["allocations"].size(), 1u);
    std::string id = d["allocations"][0]["allocation"];
    Beat("node-a", epoch, {Task(id, "running")});
    clock_.now += run_for;
    Beat("node-a", epoch, {Task(id, "failed", 1)});
  };
  std::vector<int64_t> waits;
  for (int i = 0; i < 7; ++i) {
    run_and_fail(5);
    Json j = Job("loop");
    waits.push_back(j["backoffUntil"].get<int64_t>() - clock_.now);
    clock_.now += waits.back() - 1;
    ASSERT_TRUE(cp_->RunCycle().ok());
    EXPECT_EQ(State("loop"), "Pending") << "one second before the back-off ends";
    clock_.now += 1;
  }
  EXPECT_EQ(waits, (std::vector<int64_t>{10, 20, 40, 80, 160, 300, 300}));
  run_and_fail(600);  // a run of 10 minutes: not a crash loop any more
  EXPECT_EQ(Job("loop")["backoffUntil"].get<int64_t>() - clock_.now, 10);
}

TEST_F(ControlPlaneTest, RestartTaskRestartsOnlyTheFailedTask) {
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin,
                  JobDoc("tt", 3, 1, "  restartPolicy: {onFailure: RestartTask, maxRetries: 2}\n"))
          .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 3u);
  std::string a0 = d["allocations"][0]["allocation"], a1 = d["allocations"][1]["allocation"],
              a2 = d["allocations"][2]["allocation"];
  Beat("node-a", epoch, {Task(a0, "running"), Task(a1, "running"), Task(a2, "running")});
  EXPECT_EQ(State("tt"), "Running");

  // Task 1 fails twice: each time only task 1 is placed again, in the same attempt, while
  // tasks 0 and 2 keep running untouched (Volcano TaskFailed -> RestartTask).
  std::string failing = a1;
  for (int retry = 1; retry <= 2; ++retry) {
    Beat("node-a", epoch, {Task(a0, "running"), Task(failing, "failed", 3), Task(a2, "running")});
    Json j = Job("tt");
    EXPECT_EQ(j["state"], "Running") << retry;
    EXPECT_EQ(j["attempt"], 1);
    EXPECT_EQ(j["restarts"], retry) << "kubectl's RESTARTS: tasks restarted alone count";
    EXPECT_EQ(j["runningTasks"], 2);
    // The task waits out its back-off (10 s, then 20 s: failures in a row) before it is
    // placed again; the others keep their allocations meanwhile.
    ASSERT_TRUE(cp_->RunCycle().ok());
    EXPECT_EQ(Beat("node-a", epoch)["allocations"].size(), 2u) << retry;
    clock_.now += retry == 1 ? 10 : 20;
    ASSERT_TRUE(cp_->RunCycle().ok());
    d = Beat("node-a", epoch);
    ASSERT_EQ(d["allocations"].size(), 3u) << retry;
    std::set<std::string> ids;
    for (const auto& a : d["allocations"]) {
      ids.insert(a["allocation"].get<std::string>());
      EXPECT_EQ(a["attempt"], 1);
    }
    EXPECT_TRUE(ids.count(a0) && ids.count(a2)) << "the healthy tasks keep their allocations";
    EXPECT_FALSE(ids.count(failing));
    for (const auto& a : d["allocations"])
      if (a["allocation"] != a0 && a["allocation"] != a2) {
        EXPECT_EQ(a["task"], 1);
        EXPECT_EQ(a["env"]["RANK"], "1");
        failing = a["allocation"];
      }
    Beat("node-a", epoch, {Task(a0, "running"), Task(failing, "running"), Task(a2, "running")});
  }
  auto r = Reasons("tt");
  EXPECT_EQ(std::count(r.begin(), r.end(), "Requeued"), 0);
  EXPECT_NE(Job("tt")["events"][r.size() - 2]["message"].get<std::string>().find(
                "restarting task 1 alone (retry 2 of 2), in 20 s (failure 2 in a row)"),
            std::string::npos);
  // The retry count survives a restart of the server.
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  // The third failure exceeds maxRetries: the job fails and the others are stopped.
  Beat("node-a", epoch, {Task(a0, "running"), Task(failing, "failed", 3), Task(a2, "running")});
  Json j = Job("tt");
  EXPECT_EQ(j["state"], "Terminating");
  EXPECT_NE(j["message"].get<std::string>().find("retry limit 2 reached"), std::string::npos);
  EXPECT_TRUE(Beat("node-a", epoch)["allocations"].empty());
  Beat("node-a", epoch, {});
  EXPECT_EQ(State("tt"), "Failed");
}

// An inference Deployment: a replica that crashes, or exits 0, is replaced alone; the other
// replicas keep their processes and devices (one bad replica is no outage).
TEST_F(ControlPlaneTest, ADeploymentReplicaThatExitsIsReplacedAlone) {
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, kDeployment).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 3u);
  std::vector<std::string> ids;
  for (const auto& a : d["allocations"]) ids.push_back(a["allocation"]);
  Beat("node-a", epoch,
       {Task(ids[0], "running"), Task(ids[1], "running"), Task(ids[2], "running")});
  for (const char* how : {"failed", "succeeded"}) {
    Beat("node-a", epoch, {Task(ids[0], "running"), Task(ids[1], how, 1), Task(ids[2], "running")});
    Json j = Job("svc");
    EXPECT_EQ(j["state"], "Running") << how;
    EXPECT_EQ(j["attempt"], 1) << how;
    EXPECT_EQ(j["runningTasks"], 2) << how;
    clock_.now += 300;  // past the crash-loop back-off
    ASSERT_TRUE(cp_->RunCycle().ok());
    d = Beat("node-a", epoch);
    ASSERT_EQ(d["allocations"].size(), 3u) << how;
    std::set<std::string> now;
    for (const auto& a : d["allocations"]) {
      now.insert(a["allocation"].get<std::string>());
      if (a["allocation"] != ids[0] && a["allocation"] != ids[2]) {
        EXPECT_EQ(a["task"], 1) << how;
        ids[1] = a["allocation"];
      }
    }
    EXPECT_TRUE(now.count(ids[0]) && now.count(ids[2])) << how << ": the others keep serving";
    Beat("node-a", epoch,
         {Task(ids[0], "running"), Task(ids[1], "running"), Task(ids[2], "running")});
  }
  auto r = Reasons("svc");
  EXPECT_EQ(std::count(r.begin(), r.end(), "Requeued"), 0);
}

// A replica that crashes keeps its GPU while it backs off and restarts on it, as the kubelet
// restarts a crashed container in place: a job waiting for a GPU does not take it meanwhile.
TEST_F(ControlPlaneTest, ACrashingReplicaKeepsItsGpuThroughItsBackOff) {
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  int64_t epoch = Epoch("node-a");  // 8 GPUs
  ASSERT_TRUE(cp_->Submit(kAdmin, kDeployment).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 3u);
  Json running = Json::array();
  std::string crashing;
  Json devices;
  for (const auto& a : d["allocations"]) {
    running.push_back(Task(a["allocation"], "running"));
    if (a["task"] == 1) {
      crashing = a["allocation"];
      devices = a["devices"];
    }
  }
  Beat("node-a", epoch, running);
  // What `get nodes` and `get queues` show in use.
  auto in_use = [&] {
    int64_t node = -1, queue = -1;
    const Json nodes = cp_->ListNodes(kAdmin);  // (a temporary's items would dangle)
    for (const auto& n : nodes["items"])
      if (n["name"] == "node-a") node = n["gpuMilliInUse"];
    const std::string q = Job("svc")["queue"];
    const Json queues = cp_->ListQueues(kAdmin);
    for (const auto& x : queues["items"])
      if (x["name"] == q) queue = x["gpuMilliInUse"];
    return std::pair{node, queue};
  };
  const auto running_use = in_use();
  ASSERT_GT(running_use.first, 0);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("grab", 1, 6)).ok());  // 5 GPUs free: waits
  running[1] = Task(crashing, "failed", 1);
  Beat("node-a", epoch, running);
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("grab"), "Pending") << "the crashed replica's GPU is kept for it";
  EXPECT_EQ(Job("svc")["pendingReason"]["code"], "BackOff");
  // Shown in use as the scheduler counts it (the audit saw 0/8 free while an 8-GPU job was
  // refused "Insufficient"), and listed as backing off on its devices.
  EXPECT_EQ(in_use(), running_use);
  bool listed = false;
  const Json listing = cp_->ListNodes(kAdmin, true);
  for (const auto& n : listing["items"])
    for (const auto& a : n["allocations"])
      if (a["job"] == "svc" && a["task"] == 1) {
        EXPECT_EQ(a["state"], "BackingOff") << a;
        EXPECT_EQ(a["id"], crashing);
        listed = true;
      }
  EXPECT_TRUE(listed);
  clock_.now += 300;  // past the back-off
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json again = Beat("node-a", epoch);
  bool restarted = false;
  for (const auto& a : again["allocations"]) {
    if (a["job"] != "svc" || a["task"] != 1) continue;
    EXPECT_NE(a["allocation"], crashing);
    EXPECT_EQ(a["devices"], devices) << "on the devices it kept";
    restarted = true;
  }
  EXPECT_TRUE(restarted) << again;
  EXPECT_EQ(State("grab"), "Pending");
}

// A node lost under a Deployment: only its replicas are replaced, at once and elsewhere, as a
// ReplicaSet replaces a lost node's pods; the replica on a healthy node keeps serving (the job
// is not requeued behind a fence as a batch gang is), and the loss is not a retry.
TEST_F(ControlPlaneTest, ANodeLostUnderADeploymentReplacesOnlyItsReplicas) {
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  int64_t ea = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("fill", 1, 7)).ok());
  StartAll("node-a", ea, 1);
  int64_t eb = Epoch("node-b");
  ASSERT_TRUE(cp_->Submit(kAdmin, kDeployment).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string on_a;
  std::vector<std::string> stale;  // on node-b
  for (const char* node : {"node-a", "node-b"}) {
    const Json d = Beat(node, node[5] == 'a' ? ea : eb);
    Json running = Json::array();
    for (const auto& a : d["allocations"]) {
      running.push_back(Task(a["allocation"], "running"));
      if (a["job"] == "svc" && node[5] == 'a') on_a = a["allocation"];
      if (node[5] == 'b') stale.push_back(a["allocation"]);
    }
    Beat(node, node[5] == 'a' ? ea : eb, running);
  }
  ASSERT_FALSE(on_a.empty());
  ASSERT_EQ(stale.size(), 2u);
  EXPECT_EQ(Job("svc")["runningTasks"], 3);
  clock_.now += 31;  // node-b misses its heartbeats
  Json keep = Json::array({Task(on_a, "running")});
  const Json before = Beat("node-a", ea);  // (a temporary's items would dangle)
  for (const auto& a : before["allocations"])
    if (a["job"] == "fill") keep.push_back(Task(a["allocation"], "running"));
  Beat("node-a", ea, keep);
  cp_->CheckNodes();
  Json j = Job("svc");
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["attempt"], 1);
  EXPECT_EQ(j["runningTasks"], 1);
  int64_t ec = Epoch("node-c");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Beat("node-c", ec)["allocations"].size(), 2u) << "replaced without waiting";
  bool kept = false;
  const Json after = Beat("node-a", ea);
  for (const auto& a : after["allocations"]) kept = kept || a["allocation"] == on_a;
  EXPECT_TRUE(kept) << "the replica on node-a keeps serving";
  // node-b comes back with its old replicas still running: they are not wanted there now.
  Json c_running = Json::array();
  const Json on_c = Beat("node-c", ec);
  for (const auto& a : on_c["allocations"]) c_running.push_back(Task(a["allocation"], "running"));
  Beat("node-c", ec, c_running);
  Json old_b = Json::array();
  for (const auto& id : stale) old_b.push_back(Task(id, "running"));
  EXPECT_TRUE(Beat("node-b", eb, old_b)["allocations"].empty());
  old_b = Json::array();
  for (const auto& id : stale) old_b.push_back(Task(id, "killed", 137));
  Beat("node-b", eb, old_b);
  j = Job("svc");
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["runningTasks"], 3);
  auto r = Reasons("svc");
  EXPECT_EQ(std::count(r.begin(), r.end(), "NodeLost"), 2);
  EXPECT_EQ(std::count(r.begin(), r.end(), "Requeued"), 0);
  // Not retries (they would use up a retry limit).
  j = Job("svc");
  for (const auto& e : j["events"]) {
    if (e["reason"] != "NodeLost") continue;
    EXPECT_EQ(e["message"].get<std::string>().find("retry"), std::string::npos) << e;
  }
}

// A Pod whose restartPolicy is Always (Kubernetes' default) is restarted after any exit, as
// the kubelet restarts its container: exit 0 does not complete it. OnFailure's does.
TEST_F(ControlPlaneTest, AnAlwaysPodRestartsAfterExitingZero) {
  int64_t epoch = Epoch("node-a");
  for (const char* policy : {"Always", "OnFailure"}) {
    const std::string name = std::string("pod-") + (policy[0] == 'A' ? "always" : "onfailure");
    ASSERT_TRUE(cp_->Submit(kAdmin, "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name +
                                        "}\nspec: {restartPolicy: " + policy +
                                        ", containers: [{name: c, command: [x]}]}\n")
                    .ok());
  }
  StartAll("node-a", epoch, 2);
  std::vector<Json> done;
  const Json running = Beat("node-a", epoch);  // (a temporary's items would dangle)
  for (const auto& a : running["allocations"]) done.push_back(Task(a["allocation"], "succeeded"));
  Beat("node-a", epoch, done);
  EXPECT_EQ(State("pod-onfailure"), "Succeeded");
  EXPECT_NE(State("pod-always"), "Succeeded");
  clock_.now += 300;  // past any back-off
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json again = Beat("node-a", epoch);
  ASSERT_EQ(again["allocations"].size(), 1u);
  EXPECT_EQ(again["allocations"][0]["job"], "pod-always");
}

// A job placed only in part (gang minimum 1) whose placed tasks all succeed is not done:
// its other tasks never ran (as a Kubernetes Job of parallelism 3 completes at 3 successes).
TEST_F(ControlPlaneTest, APartlyPlacedJobIsNotDoneWhenItsPlacedTasksSucceed) {
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  const int64_t epoch = Epoch("node-a");  // 8 GPUs: 2 of the 10 tasks wait
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch/v1\nkind: Job\nmetadata: {name: par}\nspec:\n"
                          "  parallelism: 10\n  template: {spec: {restartPolicy: Never, "
                          "containers: [{name: c, command: [x], resources: {limits: "
                          "{nvidia.com/gpu: 1}}}]}}\n")
                  .ok());
  Json running = StartAll("node-a", epoch, 8);
  Json done = Json::array();
  for (const auto& t : running) done.push_back(Task(t["allocation"], "succeeded"));
  Beat("node-a", epoch, done);
  EXPECT_NE(State("par"), "Succeeded") << "2 of its tasks never ran";
  Json rest = StartAll("node-a", epoch, 2);
  done = Json::array();
  for (const auto& t : rest) done.push_back(Task(t["allocation"], "succeeded"));
  Beat("node-a", epoch, done);
  EXPECT_EQ(State("par"), "Succeeded");
  EXPECT_EQ(Job("par")["message"], "10 task(s) succeeded");
}

// batch/v1 completionMode: Indexed: each pod has its index, as Kubernetes gives it.
TEST_F(ControlPlaneTest, AnIndexedJobsPodsHaveTheirCompletionIndex) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch/v1\nkind: Job\nmetadata: {name: ix}\nspec:\n"
                          "  parallelism: 2\n  completionMode: Indexed\n  template: {spec: "
                          "{restartPolicy: Never, containers: [{name: c, command: [x]}]}}\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 2u);
  for (const auto& a : d["allocations"])
    EXPECT_EQ(a["env"]["JOB_COMPLETION_INDEX"], std::to_string(a["task"].get<int>()));
}

// A Kubernetes container's $(VAR) references are expanded as the kubelet expands them: an env
// value by the variables declared before it and the server's (JOB_COMPLETION_INDEX, RANK, ...),
// command and args by the task's whole environment; $$ is one $, an unknown name stays as
// written. A Tessera Job's command and env, documented as run as written, are.
TEST_F(ControlPlaneTest, KubernetesVariableReferencesAreExpandedWhereTheTaskIsPlaced) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch/v1\nkind: Job\nmetadata: {name: k1}\nspec:\n"
                          "  parallelism: 2\n  completionMode: Indexed\n  template:\n"
                          "    spec:\n      restartPolicy: Never\n      containers:\n"
                          "      - name: c\n        command: [/bin/sh, -c]\n"
                          "        args: ['echo rank=$(JOB_COMPLETION_INDEX) greet=$GREETING "
                          "shard=$SHARD', '--rank=$(RANK)', '$(NOPE) $$(SHARD) $ $(']\n"
                          "        env:\n        - {name: SHARD, value: '$(BASE)-$(RANK)'}\n"
                          "        - {name: BASE, value: data}\n"
                          "        - {name: PATHS, value: '$(BASE)/$(JOB_COMPLETION_INDEX)'}\n"
                          "        - {name: GREETING, value: 'hello $$(BASE)'}\n")
                  .ok());
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: own}\n"
                          "spec: {tasks: [{command: [echo, '$(RANK)'], env: {A: '$(RANK)'}}]}\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 3u) << d;
  for (const auto& a : d["allocations"]) {
    const Json& env = a["env"];
    if (a["job"] == "own") {
      EXPECT_EQ(a["command"], Json({"echo", "$(RANK)"}));
      EXPECT_EQ(env["A"], "$(RANK)");
      continue;
    }
    const std::string i = std::to_string(a["task"].get<int>());
    EXPECT_EQ(a["command"],
              Json({"/bin/sh", "-c", "echo rank=" + i + " greet=$GREETING shard=$SHARD",
                    "--rank=" + i, "$(NOPE) $(SHARD) $ $("}));
    // BASE is declared after SHARD: SHARD's $(BASE) stays; RANK is the server's, known to all.
    EXPECT_EQ(env["SHARD"], "$(BASE)-" + i);
    EXPECT_EQ(env["PATHS"], "data/" + i);
    EXPECT_EQ(env["GREETING"], "hello $(BASE)");
    EXPECT_EQ(env["RANK"], i);
  }
}

// A running job with tasks the cluster has no room for says why, as a pending job does.
TEST_F(ControlPlaneTest, ARunningJobsUnplacedTasksHaveAPendingReason) {
  real_engine_ = true;
  Reopen();
  Epoch("node-a");  // 8 GPUs for 10 one-GPU replicas
  std::string doc = kDeployment;
  doc.replace(doc.find("replicas: 3"), 11, "replicas: 10");
  ASSERT_TRUE(cp_->Submit(kAdmin, doc).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());  // 8 placed
  ASSERT_TRUE(cp_->RunCycle().ok());  // the other 2 still find no room
  Json j = Job("svc");
  EXPECT_EQ(j["state"], "Scheduled");
  ASSERT_TRUE(j.contains("pendingReason")) << j;
  EXPECT_NE(j["pendingReason"]["message"].get<std::string>().find("nvidia.com/gpu"),
            std::string::npos)
      << j["pendingReason"];
  EXPECT_FALSE(j["pendingReason"].contains("infeasible"));  // it waits for room
  // One that can never fit says so (get jobs -o wide shows Infeasible), apart from waiting.
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("huge", 1, 16)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Job("huge")["pendingReason"].value("infeasible", false), true) << Job("huge");
}

// Volcano exit-code policies: restart on 137 (killed for memory), abort on anything else.
TEST_F(ControlPlaneTest, ExitCodePoliciesPickTheAction) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: "
                          "oom}\nspec:\n  policies: [{exitCode: 137, action: RestartJob}]\n"
                          "  tasks: [{replicas: 1, template: {spec: {containers: [{name: c, "
                          "command: [x], resources: {limits: {nvidia.com/gpu: 1}}}]}}}]\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string id = Beat("node-a", epoch)["allocations"][0]["allocation"];
  Beat("node-a", epoch, {Task(id, "failed", 137)});  // the kernel OOM-killed it
  EXPECT_EQ(State("oom"), "Pending") << "137: RestartJob";
  clock_.now += 10;
  ASSERT_TRUE(cp_->RunCycle().ok());
  id = Beat("node-a", epoch)["allocations"][0]["allocation"];
  Beat("node-a", epoch, {Task(id, "failed", 1)});
  EXPECT_EQ(State("oom"), "Failed") << "1: the job's onFailure, FailJob";
}

// Volcano TaskCompleted -> CompleteJob: the job completes once every pod of the task group
// succeeded, not at its first pod; the other groups' tasks are then stopped.
TEST_F(ControlPlaneTest, CompleteJobWaitsForEveryPodOfTheTask) {
  real_engine_ = true;
  Reopen();
  int64_t epoch = Epoch("node-a");
  const std::string pod =
      "template: {spec: {containers: [{name: c, command: [x], resources: {limits: "
      "{nvidia.com/gpu: 1}}}]}}";
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: "
                          "{name: tc}\nspec:\n  tasks:\n  - {name: ps, replicas: 1, " +
                              pod +
                              "}\n  - {name: worker, replicas: 2, policies: [{event: "
                              "TaskCompleted, action: CompleteJob}], " +
                              pod + "}\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 3u) << d.dump();
  std::map<int, std::string> by_task;
  for (const auto& a : d["allocations"]) by_task[a["task"].get<int>()] = a["allocation"];
  Beat("node-a", epoch,
       {Task(by_task[0], "running"), Task(by_task[1], "succeeded"), Task(by_task[2], "running")});
  EXPECT_EQ(State("tc"), "Running") << "one worker of two succeeded";
  Beat("node-a", epoch, {Task(by_task[0], "running"), Task(by_task[2], "succeeded")});
  Json j = Job("tc");
  EXPECT_NE(j["state"], "Running") << j.dump();
  auto r = Reasons("tc");
  EXPECT_NE(std::find(r.begin(), r.end(), "Completing"), r.end()) << j.dump();
  Beat("node-a", epoch, {Task(by_task[0], "killed", 143)});
  EXPECT_EQ(State("tc"), "Succeeded");
}

// Replicas back off on their own: one crash-looping replica neither delays the restart of a
// healthy one that failed once nor has its count reset by it.
TEST_F(ControlPlaneTest, EachReplicaBacksOffOnItsOwn) {
  real_engine_ = true;
  Reopen();
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, kDeployment).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::map<int, std::string> id;  // task -> its current allocation
  // A cycle, then the node runs what it is given; returns the tasks it runs.
  auto place = [&] {
    EXPECT_TRUE(cp_->RunCycle().ok());
    std::vector<Json> running;
    for (const auto& [t, a] : id) running.push_back(Task(a, "running"));
    Json d = Beat("node-a", epoch, running);
    std::set<int> tasks;
    running.clear();
    for (const auto& a : d["allocations"]) {
      tasks.insert(a["task"].get<int>());
      id[a["task"].get<int>()] = a["allocation"];
      running.push_back(Task(a["allocation"], "running"));
    }
    Beat("node-a", epoch, running);
    return tasks;
  };
  auto fail = [&](int task) {
    std::vector<Json> beat;
    for (const auto& [t, a] : id)
      beat.push_back(t == task ? Task(a, "failed", 1) : Task(a, "running"));
    Beat("node-a", epoch, beat);
    id.erase(task);
  };
  ASSERT_EQ(place(), (std::set<int>{0, 1, 2}));
  clock_.now += 3600;  // all serve for an hour
  // Replica 1 crash-loops: 10 s, 20 s, then a 40 s back-off.
  for (int64_t wait : {10, 20}) {
    fail(1);
    clock_.now += wait;
    EXPECT_EQ(place(), (std::set<int>{0, 1, 2}));
  }
  fail(1);
  EXPECT_EQ(Job("svc")["backoffUntil"].get<int64_t>() - clock_.now, 40);
  // The running job says which task waits, and why.
  EXPECT_EQ(Job("svc")["pendingReason"]["message"],
            "task 1 restarting after 3 failure(s) in a row: next try in 40 s");
  Reopen();  // the task's count and wait are stored
  // Replica 0, which ran for an hour, fails once: back in 10 s, while replica 1 still waits.
  clock_.now += 5;
  fail(0);
  EXPECT_EQ(Job("svc")["backoffUntil"].get<int64_t>() - clock_.now, 10);
  clock_.now += 10;
  EXPECT_EQ(place(), (std::set<int>{0, 2})) << "replica 0 is back, replica 1 still backs off";
  clock_.now += 25;
  EXPECT_EQ(place(), (std::set<int>{0, 1, 2}));
  EXPECT_FALSE(Job("svc").contains("pendingReason")) << Job("svc");
  // Replica 1's count was not reset by replica 0's long run: its next failure waits 80 s.
  fail(1);
  auto events = Job("svc")["events"];
  EXPECT_NE(events.back()["message"].get<std::string>().find("in 80 s (failure 4 in a row)"),
            std::string::npos)
      << events.back();
}

// A batch/v1 Job's pod that fails after another pod succeeded is restarted alone, by the
// real engine: the succeeded pod is not run again (its work and side effects are done).
TEST_F(ControlPlaneTest, RestartTaskAfterAnotherTaskSucceededRunsOnlyTheFailedOne) {
  real_engine_ = true;
  Reopen();
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin,
                  JobDoc("ts", 2, 1, "  restartPolicy: {onFailure: RestartTask, maxRetries: 1}\n"))
          .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 2u);
  std::string a0 = d["allocations"][0]["allocation"], a1 = d["allocations"][1]["allocation"];
  Beat("node-a", epoch, {Task(a0, "succeeded"), Task(a1, "running")});
  ASSERT_TRUE(cp_->RunCycle().ok());
  d = Beat("node-a", epoch, {Task(a1, "running")});
  ASSERT_EQ(d["allocations"].size(), 1u) << "the succeeded task is not placed again";
  Beat("node-a", epoch, {Task(a1, "failed", 1)});
  Json j = Job("ts");
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["attempt"], 1);
  clock_.now += 10;  // the crash-loop back-off
  ASSERT_TRUE(cp_->RunCycle().ok());
  d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 1u) << d.dump();
  EXPECT_EQ(d["allocations"][0]["task"], 1);
  EXPECT_EQ(d["allocations"][0]["attempt"], 1);
  EXPECT_EQ(d["allocations"][0]["env"]["RANK"], "1");
  std::string again = d["allocations"][0]["allocation"];
  Beat("node-a", epoch, {Task(again, "succeeded")});
  j = Job("ts");
  EXPECT_EQ(j["state"], "Succeeded");
  EXPECT_EQ(j["message"], "2 task(s) succeeded");
  auto r = Reasons("ts");
  EXPECT_EQ(std::count(r.begin(), r.end(), "Requeued"), 0);
}

// A long-running server does not keep its whole history: a finished job is deleted, with
// its allocations and events, once its time to live is over (ttlSecondsAfterFinished, else
// the server's finished_job_ttl_seconds); unfinished jobs are never touched.
TEST_F(ControlPlaneTest, FinishedJobsAreDeletedAfterTheirTimeToLive) {
  tune_ = [](ControlPlaneOptions& o) { o.finished_job_ttl_seconds = 3600; };
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  auto stored = [&](const std::string& prefix) {
    auto r = cp_->store().Range(prefix);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->size() : 0;
  };
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("done", 1, 1)).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("keep", 1, 1)).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("brief", 1, 0, "  ttlSecondsAfterFinished: 0\n")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 3u);
  std::map<std::string, std::string> alloc;  // job -> allocation
  for (const auto& a : d["allocations"]) alloc[a["job"]] = a["allocation"];
  Beat("node-a", epoch,
       {Task(alloc["done"], "succeeded"), Task(alloc["keep"], "running"),
        Task(alloc["brief"], "failed", 1)});
  ASSERT_EQ(State("done"), "Succeeded");
  ASSERT_EQ(State("brief"), "Failed");
  const size_t events_before = stored("events/");

  // ttlSecondsAfterFinished: 0 goes at once, with its allocation and events; the others stay.
  EXPECT_EQ(cp_->CompactFinishedJobs(), 1u);
  EXPECT_EQ(cp_->GetJob(kAdmin, "brief", false).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(stored("allocs/"), 2u);
  EXPECT_LT(stored("events/"), events_before);
  clock_.now += 3599;
  EXPECT_EQ(cp_->CompactFinishedJobs(), 0u);
  clock_.now += 1;
  EXPECT_EQ(cp_->CompactFinishedJobs(), 1u);
  EXPECT_EQ(stored("jobs/"), 1u);
  EXPECT_EQ(stored("allocs/"), 1u);

  // Durable: after a restart only the running job is there, and the names are free again.
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  Json list = *cp_->ListJobs(kAdmin, {});
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["name"], "keep");
  EXPECT_EQ(State("keep"), "Running");
  // Deleted records' numbers are not handed out again (agents' task folders and Slurm tags
  // are named by allocation id).
  std::string newest;
  for (const auto& [job, id] : alloc) newest = std::max(newest, id);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("done", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json assigned = Beat("node-a", epoch)["allocations"];
  for (const auto& a : assigned) {
    if (a["job"] == "done") {
      EXPECT_GT(a["allocation"].get<std::string>(), newest);
    }
  }
}

// A Deployment replica that crash-loops backs off however long the Deployment has served:
// what counts is how long that replica ran.
TEST_F(ControlPlaneTest, ACrashLoopingReplicaBacksOffInALongRunningDeployment) {
  Reopen([](const Snapshot& s, int64_t now) { return ScriptedEngine::FirstFit(s, now, true); });
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: svc}\nspec:\n"
                          "  replicas: 2\n  template:\n    spec:\n      containers:\n"
                          "      - name: server\n        command: [serve]\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 2u);
  std::string keep = d["allocations"][0]["allocation"], bad = d["allocations"][1]["allocation"];
  Beat("node-a", epoch, {Task(keep, "running"), Task(bad, "running")});
  clock_.now += 3600;  // the Deployment has served an hour
  for (int failure = 1; failure <= 3; ++failure) {
    Beat("node-a", epoch, {Task(keep, "running"), Task(bad, "failed", 1)});
    const int64_t wait = 10 << (failure - 1);
    auto r = Job("svc")["events"];
    EXPECT_NE(
        r.back()["message"].get<std::string>().find("in " + std::to_string(wait) + " s (failure " +
                                                    std::to_string(failure) + " in a row)"),
        std::string::npos)
        << r.back().dump();
    clock_.now += wait;
    ASSERT_TRUE(cp_->RunCycle().ok());
    const Json assigned = Beat("node-a", epoch)["allocations"];
    for (const auto& a : assigned)
      if (a["allocation"] != keep) bad = a["allocation"];
    Beat("node-a", epoch, {Task(keep, "running"), Task(bad, "running")});
    clock_.now += 5;  // it crashes again soon after it starts
  }
}

TEST_F(ControlPlaneTest, EventRetentionKeepsTheNewestPerJobAndCompactsTheStore) {
  tune_ = [](ControlPlaneOptions& o) {
    o.max_events_per_job = 4;
    o.max_events = 0;
    o.event_ttl_seconds = 0;
  };
  Reopen();
  auto stored_events = [&] {
    auto r = cp_->store().Range("events/");
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->size() : 0;
  };
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin, JobDoc("flaky", 1, 1,
                                 "  restartPolicy: {onFailure: RestartJob, maxRetries: -1}\n"))
          .ok());
  for (int i = 0; i < 3; ++i) {  // each round: Scheduled, Started, TaskFailed, Requeued
    ASSERT_TRUE(cp_->RunCycle().ok());
    std::string id = Beat("node-a", epoch)["allocations"][0]["allocation"];
    Beat("node-a", epoch, {Task(id, "failed", 1)});
    if (i < 2) clock_.now += 40;  // its crash-loop back-off (10 s, 20 s)
  }
  // 1 + 3 x 4 = 13 events happened; the job keeps its newest 4, in order.
  auto ev = cp_->ListEvents(kAdmin, "flaky", 0, 100);
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ((*ev)["items"].size(), 4u);
  EXPECT_EQ((*ev)["items"][3]["reason"], "Requeued");
  EXPECT_EQ(Reasons("flaky"),
            (std::vector<std::string>{"Scheduled", "Started", "TaskFailed", "Requeued"}));
  EXPECT_EQ(stored_events(), cp_->counts().events) << "dropped events are deleted from the store";
  EXPECT_EQ(cp_->counts().events, 5u);  // the job's 4 and node-a's NodeRegistered

  // A restart with a tighter bound trims at once; then a global count and a TTL.
  tune_ = [](ControlPlaneOptions& o) {
    o.max_events_per_job = 2;
    o.max_events = 2;
    o.event_ttl_seconds = 100;
  };
  Reopen();
  EXPECT_EQ(Reasons("flaky"), (std::vector<std::string>{"TaskFailed", "Requeued"}));
  EXPECT_EQ(cp_->counts().events, 2u);  // and NodeRegistered, the oldest of 3, went too
  EXPECT_EQ(cp_->CompactEvents(), 0u);
  EXPECT_EQ(stored_events(), 2u);
  clock_.now += 101;
  EXPECT_EQ(cp_->CompactEvents(), 2u);
  EXPECT_EQ(cp_->counts().events, 0u);
  EXPECT_TRUE(Reasons("flaky").empty());
  Reopen();
  EXPECT_EQ(stored_events(), 0u);
  EXPECT_EQ(State("flaky"), "Pending");  // the job itself stays
  // New events get new sequence numbers (never reused).
  ASSERT_TRUE(cp_->RunCycle().ok());
  auto after = cp_->ListEvents(kAdmin, "", 0, 100);
  ASSERT_TRUE(after.ok());
  ASSERT_FALSE((*after)["items"].empty());
  EXPECT_GT((*after)["items"][0]["seq"].get<int64_t>(), 10);
}

TEST_F(ControlPlaneTest, CancelStopsTasksWithGraceThenCancels) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("c1", 1, 2)).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("c2", 1, 200)).ok());  // never fits: cancel while pending
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  std::string id = d["allocations"][0]["allocation"];
  Beat("node-a", epoch, {Task(id, "running")});
  auto c = cp_->Cancel(kAdmin, "c1");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)["state"], "Terminating");
  // Not listed any more: the agent stops it; while it still runs the job stays Terminating.
  EXPECT_TRUE(Beat("node-a", epoch, {Task(id, "running")})["allocations"].empty());
  EXPECT_EQ(State("c1"), "Terminating");
  Json killed = Task(id, "killed", -15);
  killed["message"] = "stopped: allocation no longer assigned to this node: killed by SIGTERM";
  Beat("node-a", epoch, {killed});
  EXPECT_EQ(State("c1"), "Cancelled");
  // The allocation says why it was stopped, which its agent cannot know, then how it ended.
  EXPECT_EQ(Job("c1")["allocations"][0]["message"],
            "cancelled by admin; stopped: allocation no longer assigned to this node: killed by "
            "SIGTERM");
  EXPECT_EQ(State("c2"), "Pending");
  EXPECT_EQ(Job("c2")["pendingReason"]["code"], "Insufficient");
  ASSERT_TRUE(cp_->Cancel(kAdmin, "c2").ok());
  EXPECT_EQ(State("c2"), "Cancelled");
  EXPECT_EQ(cp_->Cancel(kAdmin, "c2").status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(cp_->Cancel(kAdmin, "nope").status().code(), StatusCode::kNotFound);
}

// A job submitted held (sbatch --hold, suspend: true) or held while pending is never placed
// until released, across a restart too; only a pending job can be held.
TEST_F(ControlPlaneTest, AHeldJobWaitsUntilReleasedAcrossARestart) {
  std::vector<JobBound> bound;  // a released job's wait counts from its release
  RecordBindings(bound);
  int64_t epoch = Epoch("node-a");
  auto r = cp_->Submit(kAdmin,
                       "#!/bin/bash\n#SBATCH -J h1\n#SBATCH --hold\n#SBATCH "
                       "--gres=gpu:1\necho hi\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("h2", 1, 1, "  suspend: true\n")).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("h3", 1, 1)).ok());
  ASSERT_TRUE(cp_->Hold(kAdmin, "h3", true).ok());
  EXPECT_TRUE(cp_->Hold(kAdmin, "h3", true).ok());  // held already: no change
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Beat("node-a", epoch)["allocations"].empty());
  for (const char* id : {"h1", "h2", "h3"}) {
    EXPECT_EQ(State(id), "Pending") << id;
    EXPECT_EQ(Job(id)["pendingReason"]["code"], "Held") << id;
  }
  EXPECT_EQ(Job("h3")["pendingReason"]["message"],
            "held by admin: `tessera release h3` lets it be scheduled");

  Reopen();  // who holds a job is durable
  epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Beat("node-a", epoch)["allocations"].empty());
  clock_.now += 50;
  const int64_t released_at = clock_.now;
  auto released = cp_->Hold(kAdmin, "h1", false);
  ASSERT_TRUE(released.ok()) << released.status().ToString();
  EXPECT_FALSE(released->contains("pendingReason") &&
               (*released)["pendingReason"]["code"] == "Held");
  const std::vector<std::string> reasons = Reasons("h1");
  EXPECT_EQ(reasons.back(), "Released");
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 1u) << d.dump();
  EXPECT_EQ(d["allocations"][0]["job"], "h1");
  EXPECT_EQ(State("h1"), "Scheduled");
  ASSERT_FALSE(bound.empty());
  EXPECT_EQ(bound.back().queued_at, released_at) << "not its time held";

  // Only a pending job can be held; only a held one released.
  Status running = cp_->Hold(kAdmin, "h1", true).status();
  EXPECT_EQ(running.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(running.message(),
            "job \"h1\" is Scheduled: only a pending job can be held (`tessera cancel h1` "
            "stops it)");
  EXPECT_EQ(cp_->Hold(kAdmin, "h1", false).status().message(), "job \"h1\" is not held");
  EXPECT_EQ(cp_->Hold(kAdmin, "nope", true).status().code(), StatusCode::kNotFound);
  const Principal agent{"node-a", Role::kAgent, {}};
  EXPECT_EQ(cp_->Hold(agent, "h2", false).status().code(), StatusCode::kPermissionDenied);
  // A held job can be cancelled.
  ASSERT_TRUE(cp_->Cancel(kAdmin, "h2").ok());
  EXPECT_EQ(State("h2"), "Cancelled");
  EXPECT_FALSE(Job("h2").contains("pendingReason"));
  EXPECT_EQ(cp_->Hold(kAdmin, "h2", true).status().message(),
            "job \"h2\" is Cancelled: only a pending job can be held");
}

// A job with dependencies (sbatch --dependency, the annotation tessera.io/dependency) is not
// scheduled before the jobs it names have started, ended, succeeded or failed, across a
// restart; one that can never run says so; a job waited for is kept until its dependents
// start.
TEST_F(ControlPlaneTest, ADependentJobWaitsForTheJobsItNamesAcrossARestart) {
  std::vector<JobBound> bound;  // queue waits count from when the job could first run
  RecordBindings(bound);
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J prep\n#SBATCH --gres=gpu:1\necho hi\n").ok());
  // Named by sbatch job id (%j), by name, and in a YAML annotation.
  const std::string prep_id = to_string(Job("prep")["slurmJobId"]);
  auto train = cp_->Submit(kAdmin,
                           "#!/bin/bash\n#SBATCH -J train\n#SBATCH --dependency=afterok:prep\n"
                           "#SBATCH --gres=gpu:1\necho hi\n");
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  auto on_fail =
      cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -J on-fail\n#SBATCH -d afternotok:" + prep_id +
                              "\n#SBATCH --gres=gpu:1\necho hi\n");
  ASSERT_TRUE(on_fail.ok()) << on_fail.status().ToString();
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "#!/bin/bash\n#SBATCH -J killme\n#SBATCH -d afternotok:prep\n"
                          "#SBATCH --kill-on-invalid-dep=yes\ntrue\n")
                  .ok());
  std::string report = JobDoc("report", 1, 1);
  report.replace(report.find("{name: report}"), 14,
                 "{name: report, annotations: {tessera.io/dependency: \"after:prep\"}}");
  ASSERT_TRUE(cp_->Submit(kAdmin, report).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 1u) << d.dump();
  EXPECT_EQ(d["allocations"][0]["job"], "prep");
  EXPECT_EQ(Job("train")["pendingReason"],
            Json({{"code", "Dependency"},
                  {"message", "waits for prep to succeed (afterok); prep is Scheduled"}}));
  EXPECT_EQ(Job("on-fail")["dependencies"],
            Json::parse(R"([{"condition":"afternotok","job":"prep","state":"Waiting"}])"));
  EXPECT_EQ(Job("report")["pendingReason"]["message"],
            "waits for prep to start (after); prep is Scheduled");
  EXPECT_EQ(Job("train")["events"][0]["message"],
            "accepted sbatch into queue default by admin, waits for prep to succeed (afterok)");

  Reopen();  // what a job waits for is durable
  epoch = Epoch("node-a");
  const std::string prep_alloc = d["allocations"][0]["allocation"];
  Beat("node-a", epoch, {Task(prep_alloc, "running")});
  ASSERT_TRUE(cp_->RunCycle().ok());  // prep started: `after` holds
  d = Beat("node-a", epoch, {Task(prep_alloc, "running")});
  ASSERT_EQ(d["allocations"].size(), 2u) << d.dump();
  EXPECT_EQ(d["allocations"][1]["job"], "report");
  EXPECT_EQ(Job("train")["pendingReason"]["code"], "Dependency");

  clock_.now += 100;
  const int64_t prep_ended = clock_.now;
  Beat("node-a", epoch, {Task(prep_alloc, "succeeded")});
  EXPECT_EQ(State("prep"), "Succeeded");
  clock_.now += 5;
  ASSERT_TRUE(cp_->RunCycle().ok());
  ASSERT_FALSE(bound.empty());
  EXPECT_EQ(bound.back().queued_at, prep_ended) << "eligible when prep succeeded";
  EXPECT_EQ(bound.back().bound_at, prep_ended + 5);
  d = Beat("node-a", epoch);
  ASSERT_EQ(d["allocations"].size(), 2u) << d.dump();  // report, and now train
  EXPECT_EQ(d["allocations"][1]["job"], "train");
  // Said once, as a Warning; --kill-on-invalid-dep=yes cancels instead, as Slurm.
  const std::vector<std::string> said = Reasons("on-fail");
  EXPECT_EQ(std::count(said.begin(), said.end(), "FailedScheduling"), 1);
  EXPECT_EQ(Job("on-fail")["events"].back()["message"],
            "Waiting: DependencyNeverSatisfied: job prep ended Succeeded: afternotok can never be "
            "satisfied");
  EXPECT_EQ(State("killme"), "Cancelled");
  EXPECT_EQ(Job("killme")["message"],
            "cancelled: job prep ended Succeeded: afternotok can never be satisfied "
            "(--kill-on-invalid-dep=yes)");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Reasons("on-fail"), said) << "not again";
  const Json never = Job("on-fail")["pendingReason"];
  EXPECT_EQ(never["code"], "DependencyNeverSatisfied");
  EXPECT_EQ(never["message"],
            "job prep ended Succeeded: afternotok can never be satisfied; `tessera cancel "
            "on-fail` removes this job");
  EXPECT_FALSE(never.contains("infeasible")) << "not a fit problem: get jobs shows the code";

  // prep is kept while on-fail waits on it, then may go.
  Status kept = cp_->DeleteJob(kAdmin, "prep").status();
  EXPECT_EQ(kept.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(kept.message(),
            "job \"prep\" is kept while jobs that depend on it wait: on-fail (--dependency); it "
            "can be deleted once they have been scheduled or have ended");
  ASSERT_TRUE(cp_->Cancel(kAdmin, "on-fail").ok());
  EXPECT_TRUE(cp_->DeleteJob(kAdmin, "prep").ok());
  EXPECT_EQ(Job("train")["dependencies"][0]["state"], "Satisfied") << "placed: prep did succeed";

  // Refused at submission: a job that does not exist (or comes later in the same file), one
  // that already ended so that the dependency can never hold.
  Status unknown =
      cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH --dependency=afterok:nope\necho\n").status();
  EXPECT_EQ(unknown.message(),
            "line 2: --dependency=afterok:nope: no job \"nope\" (a job depended on must exist, "
            "or come earlier in the same submission)");
  Status ended = cp_->Submit(kAdmin, "#!/bin/bash\n#SBATCH -d afterok:on-fail\necho\n").status();
  EXPECT_EQ(ended.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ended.message(),
            "line 2: -d afterok:on-fail: job \"on-fail\" ended Cancelled: afterok can never be "
            "satisfied");
  std::string second = JobDoc("b", 1, 1);
  second.replace(second.find("{name: b}"), 9,
                 "{name: b, annotations: {tessera.io/dependency: \"afterany:a\"}}");
  Status later = cp_->Submit(kAdmin, second + "---\n" + JobDoc("a", 1, 1)).status();
  EXPECT_EQ(later.message(),
            "document[0]: metadata.annotations.tessera.io/dependency: no job \"a\" (a job "
            "depended on must exist, or come earlier in the same submission)");
  // In one submission, a later document may wait for an earlier one.
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("a", 1, 8) + "---\n" + second).ok());
  EXPECT_EQ(Job("b")["pendingReason"]["code"], "Dependency");
}

TEST_F(ControlPlaneTest, PreemptionEvictsRequeuesAndNamesThePreemptor) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("victim", 1, 8, "  priorityClass: low\n")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string id = Beat("node-a", epoch)["allocations"][0]["allocation"];
  Beat("node-a", epoch, {Task(id, "running")});
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("vip", 1, 8, "  priorityClass: high\n")).ok());
  Reopen([](const Snapshot& s, int64_t now) {
    Plan p = ScriptedEngine::FirstFit(s, now);
    for (const auto& j : s.jobs)
      if (j.id == "victim" && j.RunningTasks() > 0)
        p.evictions.push_back({"victim", 0, "node-a", "Preempted", "vip", "priority 1000 > 10", 5});
    return p;
  });
  epoch = (*cp_->RegisterAgent(kAdmin, NodeDoc("node-a", 8)))["epoch"];  // same boot id: same epoch
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json v = Job("victim");
  EXPECT_EQ(v["state"], "Terminating");
  EXPECT_EQ(v["allocations"][0]["gracePeriodSeconds"], 5);
  bool named = false;
  for (const auto& e : v["events"])
    if (e["reason"] == "Preempted" &&
        e["message"].get<std::string>().find("by vip") != std::string::npos)
      named = true;
  EXPECT_TRUE(named);
  EXPECT_EQ(State("vip"), "Pending");  // its devices are still held by the stopping victim
  Beat("node-a", epoch, {});           // the agent stopped it
  EXPECT_EQ(State("victim"), "Pending");
  EXPECT_EQ(Job("victim")["attempt"], 2);
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("vip"), "Scheduled");
}

// While a victim's task is in its grace period, the preemptor waits for it: the next
// cycles evict nobody else (they once took another victim in every cycle until it exited).
TEST_F(ControlPlaneTest, APreemptorWaitsForItsVictimInsteadOfEvictingMore) {
  real_engine_ = true;
  Reopen();
  int64_t epoch = Epoch("node-a");
  for (const char* name : {"low-1", "low-2"})
    ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc(name, 1, 4, "  priorityClass: low\n")).ok());
  const Json running = StartAll("node-a", epoch, 2);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("vip", 1, 4, "  priorityClass: high\n")).ok());
  for (int cycle = 0; cycle < 3; ++cycle) {
    clock_.now += 1;
    ASSERT_TRUE(cp_->RunCycle().ok());
    Beat("node-a", epoch, running);  // the victim's task is still stopping
  }
  int terminating = 0;
  for (const char* name : {"low-1", "low-2"}) terminating += State(name) == "Terminating";
  EXPECT_EQ(terminating, 1);
  EXPECT_EQ(Job("vip")["pendingReason"]["code"], "PreemptionInProgress");
}

// An elastic job keeping its gang minimum loses only the task the engine evicted: the rest
// runs on in the same attempt, and the task is placed again once capacity returns.
TEST_F(ControlPlaneTest, AnElasticJobLosesOnlyTheEvictedTask) {
  real_engine_ = true;
  Reopen();
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin, JobDoc("elastic", 2, 4, "  priorityClass: low\n  minAvailable: 1\n"))
          .ok());
  const Json running = StartAll("node-a", epoch, 2);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("vip", 1, 4, "  priorityClass: high\n")).ok());
  clock_.now += 1;
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json j = Job("elastic");
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["attempt"], 1);
  std::string stopping;
  for (const auto& a : j["allocations"])
    if (a["state"] == "Stopping") stopping = a["id"];
  ASSERT_FALSE(stopping.empty()) << j.dump();
  // The stopped task exits; the vip takes its GPUs; the job still runs its other task.
  Json after = Json::array();
  for (const auto& t : running)
    after.push_back(t["allocation"] == stopping ? Task(stopping, "killed", 143) : t);
  Beat("node-a", epoch, after);
  clock_.now += 1;
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("vip"), "Scheduled");
  EXPECT_EQ(State("elastic"), "Running");
  EXPECT_EQ(Job("elastic")["attempt"], 1);
}

// The engine sees the current attempt: a requeued job has no start time and keeps the GPU
// time its earlier attempt held (least attained service), across a restart of the server;
// its next attempt starts when it is bound again.
TEST_F(ControlPlaneTest, ARequeuedJobKeepsItsServiceAndStartsAfresh) {
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("victim", 1, 8, "  priorityClass: low\n")).ok());
  const int64_t bound = clock_.now;
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string id = Beat("node-a", epoch)["allocations"][0]["allocation"];
  clock_.now += 100;
  Beat("node-a", epoch, {Task(id, "running")});
  clock_.now += 900;
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("vip", 1, 8, "  priorityClass: high\n")).ok());
  auto seen = std::make_shared<std::map<std::string, tessera::Job>>();
  Reopen([seen](const Snapshot& s, int64_t now) {
    for (const auto& j : s.jobs) (*seen)[j.id] = j;
    Plan p = ScriptedEngine::FirstFit(s, now);
    for (const auto& j : s.jobs)
      if (j.id == "victim" && j.RunningTasks() > 0)
        p.evictions.push_back({"victim", 0, "node-a", "Preempted", "vip", "priority", 5});
    return p;
  });
  epoch = (*cp_->RegisterAgent(kAdmin, NodeDoc("node-a", 8)))["epoch"];
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(seen->at("victim").start_time, bound);  // the running attempt, as bound
  EXPECT_EQ(seen->at("victim").attained_gpu_milli_seconds, 0);
  Beat("node-a", epoch, {});  // stopped 1,000 s after it was bound
  ASSERT_EQ(State("victim"), "Pending");
  auto fn = [seen](const Snapshot& s, int64_t now) {
    for (const auto& j : s.jobs) (*seen)[j.id] = j;
    return ScriptedEngine::FirstFit(s, now);
  };
  Reopen(fn);  // what it held survives a restart of the server
  clock_.now += 50;
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(seen->at("victim").start_time, -1);
  EXPECT_EQ(seen->at("victim").attained_gpu_milli_seconds, 1000 * 8000);
  EXPECT_EQ(Job("victim")["startedAt"], bound + 100);  // the first start, for people
  EXPECT_EQ(Job("victim")["runStartedAt"], -1);
  EXPECT_EQ(Job("victim")["attainedGpuSeconds"], 8000);
}

// The engine's service figure (attained + (now - startTime) x held GPU milli) must not fall
// when a job loses a task in its attempt: one of four replicas evicted took the job below a
// service level, its replica evicted the job that had evicted it, cycle after cycle. The
// figure sent counts the lost task's GPU time, and a task placed again only from its binding.
TEST_F(ControlPlaneTest, AJobsServiceDoesNotFallWhenItLosesATask) {
  auto seen = std::make_shared<std::map<std::string, tessera::Job>>();
  auto evict = std::make_shared<bool>(false);
  Reopen([seen, evict](const Snapshot& s, int64_t now) {
    for (const auto& j : s.jobs) (*seen)[j.id] = j;
    Plan p = ScriptedEngine::FirstFit(s, now, /*top_up=*/true);
    if (*evict) p.evictions.push_back({"elastic", 1, "node-a", "Preempted", "vip", "rank", 5});
    return p;
  });
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(
      cp_->Submit(kAdmin, JobDoc("elastic", 2, 4, "  priorityClass: low\n  minAvailable: 1\n"))
          .ok());
  const int64_t bound = clock_.now;
  const Json running = StartAll("node-a", epoch, 2);
  // What the engine counts from the snapshot `seen` holds at `now`.
  auto service = [&](int64_t now) {
    const tessera::Job& j = seen->at("elastic");
    int64_t held = 0;
    for (const auto& a : j.allocations)
      if (a) held += a->GpuMilli();
    return j.attained_gpu_milli_seconds + (now - j.start_time) * held;
  };
  clock_.now += 1000;
  *evict = true;
  ASSERT_TRUE(cp_->RunCycle().ok());  // both tasks, 1,000 s: 8 GPU x 1,000 s
  *evict = false;
  EXPECT_EQ(service(clock_.now), 8000 * 1000);
  std::string stopping;
  const Json elastic = Job("elastic");  // (a temporary would die before the loop)
  for (const auto& a : elastic["allocations"])
    if (a["state"] == "Stopping") stopping = a["id"];
  ASSERT_FALSE(stopping.empty());
  clock_.now += 10;  // task 1 exits 10 s later
  Json after = Json::array();
  for (const auto& t : running)
    if (t["allocation"] != stopping) after.push_back(t);
  after.push_back(Task(stopping, "killed", 143));
  Beat("node-a", epoch, after);
  clock_.now += 90;
  ASSERT_TRUE(cp_->RunCycle().ok());  // task 0 alone runs on; task 1 is placed again
  ASSERT_EQ(State("elastic"), "Running");
  EXPECT_EQ(seen->at("elastic").start_time, bound);
  // Task 0: 1,100 s; task 1: 1,010 s; 4 GPUs each. (Counting only what runs from the start:
  // 4 GPU x 1,100 s, less than before the eviction.)
  EXPECT_EQ(service(clock_.now), 4000 * (1100 + 1010));
  clock_.now += 100;
  ASSERT_TRUE(cp_->RunCycle().ok());
  // Task 1 again, from its binding 100 s ago: not from the job's start.
  EXPECT_EQ(service(clock_.now), 4000 * (1200 + 1010 + 100));
}

// The same with the real engine (las levels: under 1 GPU-hour, under 10, more): an elastic
// job of 8 one-GPU replicas that has held 1 GPU-hour loses a replica to a new job of its
// priority and queue (a lower level). Once the replica has exited the new job takes its GPU,
// and nobody is evicted again: counting only what runs, the job fell back under 1 GPU-hour,
// its replica went first and took the GPU back, and the new job evicted it again.
TEST_F(ControlPlaneTest, AnEqualPriorityPreemptionDoesNotPingPong) {
  real_engine_ = true;
  Reopen();
  int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("prod-a", 8, 1, "  minAvailable: 1\n")).ok());
  const Json running = StartAll("node-a", epoch, 8);
  clock_.now += 460;  // 8 GPUs x 460 s: level 1
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("prod-b", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  auto stopping = [&] {
    std::vector<std::string> ids;
    const Json job = Job("prod-a");
    for (const auto& a : job["allocations"])
      if (a["state"] == "Stopping") ids.push_back(a["id"]);
    return ids;
  };
  const std::vector<std::string> evicted = stopping();
  ASSERT_EQ(evicted.size(), 1u) << Job("prod-a").dump();
  Json after = Json::array();
  for (const auto& t : running)
    after.push_back(t["allocation"] == evicted[0] ? Task(evicted[0], "killed", 143) : t);
  clock_.now += 5;
  Beat("node-a", epoch, after);
  for (int cycle = 0; cycle < 3; ++cycle) {
    clock_.now += 2;
    ASSERT_TRUE(cp_->RunCycle().ok());
    EXPECT_EQ(State("prod-b"), "Scheduled") << "cycle " << cycle;
    EXPECT_TRUE(stopping().empty()) << "cycle " << cycle;
  }
}

// node-a's registration by an agent of that boot and work dir id.
Json AgentDoc(const std::string& boot, const std::string& instance) {
  Json d = NodeDoc("node-a", 8);
  d["bootId"] = boot;
  d["instanceId"] = instance;
  return d;
}

// A second agent under a node name that a live agent serves is refused (it would take the
// node over back and forth, both running its tasks); the owner of the node's work dir may
// come back at once with a new boot, and once the first goes quiet the second may take over.
TEST_F(ControlPlaneTest, ASecondLiveAgentForANodeIsRefused) {
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, AgentDoc("boot-1", "workdir-1")).ok());
  auto twin = cp_->RegisterAgent(kAdmin, AgentDoc("boot-2", "workdir-2"));
  EXPECT_EQ(twin.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(twin.status().message().find("node node-a is served by another live agent (work dir "
                                         "id workdir-1"),
            std::string::npos)
      << twin.status().message();
  EXPECT_TRUE(cp_->RegisterAgent(kAdmin, AgentDoc("boot-3", "workdir-1")).ok()) << "its restart";
  clock_.now += 6;  // a stall of a few seconds: still its node
  EXPECT_EQ(cp_->RegisterAgent(kAdmin, AgentDoc("boot-4", "workdir-2")).status().code(),
            StatusCode::kFailedPrecondition);
  clock_.now += 17;  // silent past an agent's lease and a heartbeat (its tasks stopped)
  EXPECT_TRUE(cp_->RegisterAgent(kAdmin, AgentDoc("boot-4", "workdir-2")).ok());
}

// A node whose work dir was wiped: its new agent cannot know the old tasks, whose monitors
// stop them only once the old agent's lease has lapsed and their grace period passed. It may
// register, and the devices be given out again, only then (it used to register at once, and
// the next attempt ran on the same GPUs beside the old one).
TEST_F(ControlPlaneTest, AnAgentWithANewWorkDirWaitsUntilTheOldTasksHaveStopped) {
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, AgentDoc("boot-1", "workdir-1")).ok());
  const int64_t heard = clock_.now;
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("old", 1, 8, "  gracePeriodSeconds: 60\n")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  ASSERT_NE(State("old"), "Pending");
  // Lease 20 s + a heartbeat 2 s + the task's 60 s grace after its agent was last heard.
  clock_.now = heard + 40;
  auto early = cp_->RegisterAgent(kAdmin, AgentDoc("boot-2", "workdir-2"));
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(early.status().message().find("it may register in 43 s"), std::string::npos)
      << early.status().message();
  clock_.now = heard + 83;
  EXPECT_TRUE(cp_->RegisterAgent(kAdmin, AgentDoc("boot-2", "workdir-2")).ok());
}

// Every node carries kubernetes.io/hostname=<its name>, as kubelet sets it, whatever its
// registration says, across a restart, and on a node stored before the server set it; a
// Pod's nodeSelector on it pins the Pod to that node.
TEST_F(ControlPlaneTest, EveryNodeIsLabelledWithItsHostname) {
  real_engine_ = true;
  Reopen();
  Epoch("node-a");
  Json spoof = NodeDoc("node-b", 8);
  spoof["node"]["labels"] = {{"kubernetes.io/hostname", "node-a"}, {"rack", "r2"}};
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, spoof).ok());
  auto labels = [&] {
    std::map<std::string, Json> out;
    const Json nodes = cp_->ListNodes(kAdmin);
    for (const auto& n : nodes["items"]) out[n["name"].get<std::string>()] = n["labels"];
    return out;
  };
  EXPECT_EQ(labels()["node-a"], Json({{"kubernetes.io/hostname", "node-a"}}));
  EXPECT_EQ(labels()["node-b"], Json({{"kubernetes.io/hostname", "node-b"}, {"rack", "r2"}}));
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: v1\nkind: Pod\nmetadata: {name: pinned}\nspec:\n"
                          "  nodeSelector: {kubernetes.io/hostname: node-b}\n"
                          "  containers: [{name: c, command: [sleep, '1'], "
                          "resources: {limits: {nvidia.com/gpu: 1}}}]\n")
                  .ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Job("pinned")["nodes"], Json::array({"node-b"}));

  // A node record written before the server labelled nodes gets the label when loaded.
  cp_.reset();
  {
    auto st = store::OpenSqliteStore(dir_);
    ASSERT_TRUE(st.ok());
    Json old = {{"node", {{"name", "node-c"}, {"cpu", "8"}, {"memory", "64Gi"}}},
                {"epoch", 1},
                {"bootId", "b"}};
    ASSERT_TRUE((*st)->Write({store::Op::Put("nodes/node-c", old.dump())}).ok());
  }
  Reopen();
  EXPECT_EQ(labels()["node-b"], Json({{"kubernetes.io/hostname", "node-b"}, {"rack", "r2"}}));
  EXPECT_EQ(labels()["node-c"], Json({{"kubernetes.io/hostname", "node-c"}}));
}

// What an agent registers about its node (tessera agent --node-labels, --register-with-taints,
// --pool, --cost-per-gpu-hour) is what the node is: an agent restarted with other flags
// (a new boot) replaces the labels, taints, pool and price, and the engine sees them. An
// agent's node cannot join a pool that another system runs.
TEST_F(ControlPlaneTest, AReRegistrationReplacesTheNodesLabelsTaintsPoolAndPrice) {
  real_engine_ = true;
  Reopen();
  const Principal agent{"agent", Role::kAgent, {}};
  Json doc = NodeDoc("node-a", 8);
  doc["node"]["labels"] = {{"rack", "r1"}};
  doc["node"]["taints"] = Json::array({{{"key", "dedicated"}, {"value", "infer"}}});
  doc["node"]["pool"] = "lab";
  doc["node"]["costPerGpuHour"] = "2.5";
  ASSERT_TRUE(cp_->RegisterAgent(agent, doc).ok());
  auto node = [&] { return cp_->ListNodes(kAdmin)["items"][0]; };
  EXPECT_EQ(node()["labels"], Json({{"kubernetes.io/hostname", "node-a"}, {"rack", "r1"}}));
  EXPECT_EQ(node()["taints"].size(), 1u);
  EXPECT_EQ(node()["pool"], "lab");
  EXPECT_EQ(node()["costPerGpuHour"], "2.5");
  // The taint keeps an untolerating job off the node.
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("plain", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("plain"), "Pending");

  doc["bootId"] = "boot-2";  // the agent restarted with other flags
  doc["node"]["labels"] = {{"rack", "r2"}, {"tier", "gold"}};
  doc["node"].erase("taints");
  doc["node"]["pool"] = "default";
  doc["node"]["costPerGpuHour"] = "3";
  ASSERT_TRUE(cp_->RegisterAgent(agent, doc).ok());
  EXPECT_EQ(node()["labels"],
            Json({{"kubernetes.io/hostname", "node-a"}, {"rack", "r2"}, {"tier", "gold"}}));
  EXPECT_FALSE(node().contains("taints")) << node().dump();
  EXPECT_EQ(node()["pool"], "default");
  EXPECT_EQ(node()["costPerGpuHour"], "3");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Job("plain")["nodes"], Json::array({"node-a"}));

  class SlurmLike : public Backend {
   public:
    std::string Kind() const override { return "slurm"; }
    void Launch(const Dispatch&) override {}
    void Stop(const std::string&, int64_t) override {}
  };
  cp_->RegisterBackend("hpc", std::make_shared<SlurmLike>());
  Json joiner = NodeDoc("node-b", 8);
  joiner["node"]["pool"] = "hpc";
  auto refused = cp_->RegisterAgent(agent, joiner);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "node.pool: \"hpc\" is run by the slurm backend, not by node agents"),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(cp_->RegisterAgent(kAdmin, joiner).ok()) << "the pool's own (admin) registrations";
}

// Node operations, as kubectl's: drain cordons and evicts (the job restarts elsewhere, no
// retry counted), a cordon survives the agent registering again, uncordon lifts it; a
// NotReady node that is not coming back is deleted, releasing what its tasks held.
TEST_F(ControlPlaneTest, CordonDrainAndDeleteANode) {
  real_engine_ = true;
  std::map<std::string, int64_t> evictions;  // on_evictions: what the metrics count
  tune_ = [&](ControlPlaneOptions& o) {
    o.on_evictions = [&](const std::string& reason, int64_t n) { evictions[reason] += n; };
  };
  Reopen();
  int64_t ea = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("moved", 1, 8)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string id = Beat("node-a", ea)["allocations"][0]["allocation"];
  Beat("node-a", ea, {Task(id, "running")});
  const Principal member{"team", Role::kMember, {"default"}};
  EXPECT_EQ(cp_->DrainNode(member, "node-a").status().code(), StatusCode::kPermissionDenied);
  auto drained = cp_->DrainNode(kAdmin, "node-a");
  ASSERT_TRUE(drained.ok()) << drained.status().ToString();
  EXPECT_EQ((*drained)["evicted"], Json::array({"moved"}));
  EXPECT_EQ(evictions, (std::map<std::string, int64_t>{{"Drained", 1}}));
  EXPECT_EQ(State("moved"), "Terminating");
  Beat("node-a", ea, {Task(id, "killed", 143)});
  EXPECT_EQ(State("moved"), "Pending");
  int64_t eb = Epoch("node-b");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Job("moved")["nodes"], Json::array({"node-b"})) << "not back on the cordoned node";
  EXPECT_FALSE(Job("moved").contains("message")) << "the drain is history once placed again";
  Epoch("node-a");  // the agent registers again: still cordoned
  Json nodes = cp_->ListNodes(kAdmin)["items"];
  EXPECT_EQ(nodes[0].value("unschedulable", false), true) << nodes.dump();
  ASSERT_TRUE(cp_->CordonNode(kAdmin, "node-a", false).ok());
  EXPECT_EQ(cp_->ListNodes(kAdmin)["items"][0].value("unschedulable", false), false);

  // node-b dies with the job's task on it: NotReady, the task written off but holding its
  // devices; deleting the node releases them.
  std::string on_b = Beat("node-b", eb)["allocations"][0]["allocation"];
  Beat("node-b", eb, {Task(on_b, "running")});
  EXPECT_EQ(cp_->DeleteNode(kAdmin, "node-b").status().code(), StatusCode::kFailedPrecondition)
      << "a Ready node is drained and its agent stopped first";
  clock_.now += 31;
  Beat("node-a", Epoch("node-a"));
  cp_->CheckNodes();
  EXPECT_EQ(evictions["NodeLost"], 1);
  auto deleted = cp_->DeleteNode(kAdmin, "node-b");
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ((*deleted)["released"], 1);
  const Json moved = Job("moved");
  for (const auto& a : moved["allocations"]) EXPECT_NE(a["state"], "Lost") << a.dump();
  EXPECT_EQ(cp_->ListNodes(kAdmin)["items"].size(), 1u);
  Reopen();
  EXPECT_EQ(cp_->ListNodes(kAdmin)["items"].size(), 1u) << "durable";
}

TEST_F(ControlPlaneTest, NodeLossMarksNotReadyAndRestartsElsewhere) {
  int64_t ea = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("gang", 1, 8)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string id = Beat("node-a", ea)["allocations"][0]["allocation"];
  Beat("node-a", ea, {Task(id, "running")});
  int64_t eb = Epoch("node-b");
  clock_.now += 31;  // > 15 heartbeats of 2 s
  Beat("node-b", eb);
  cp_->CheckNodes();
  Json nodes = cp_->ListNodes(kAdmin);
  EXPECT_FALSE(nodes["items"][0]["ready"].get<bool>());
  EXPECT_TRUE(nodes["items"][1]["ready"].get<bool>());
  // RestartJob on eviction: requeued, but not placed before node-a's agent has surely
  // stopped the task (lease 20 s + one heartbeat from its last answer, then 30 s of grace).
  EXPECT_EQ(State("gang"), "Pending");
  EXPECT_EQ(Job("gang")["pendingReason"]["code"], "NodeLost");
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("gang"), "Pending") << "the lost task may still be running";
  Reopen();
  // Nobody has heard from the nodes since the restart: no heartbeat time is made up.
  EXPECT_FALSE(cp_->ListNodes(kAdmin)["items"][1].contains("lastHeartbeat"))
      << cp_->ListNodes(kAdmin);
  clock_.now += 20;  // 51 s after node-a's last heartbeat
  eb = Epoch("node-b");
  EXPECT_EQ(cp_->ListNodes(kAdmin)["items"][1]["lastHeartbeat"], clock_.now.load());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("gang"), "Pending") << "the fence is durable";
  clock_.now += 2;
  Beat("node-b", eb);
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json j = Job("gang");
  EXPECT_EQ(j["state"], "Scheduled");
  EXPECT_EQ(j["nodes"][0], "node-b");
  // node-a comes back with the same boot: its stale task is not desired (the agent kills it).
  EXPECT_TRUE(Beat("node-a", ea, {Task(id, "running")})["allocations"].empty());
  Beat("node-a", ea, {});
  EXPECT_EQ(Job("gang")["allocations"][0]["state"], "Killed");
  // A stale epoch is refused.
  EXPECT_EQ(cp_->Heartbeat(kAdmin, "node-a", Json{{"epoch", ea + 5}}).status().code(),
            StatusCode::kFailedPrecondition);
  // An agent restarted on node-a that still holds a task written off with the node does not
  // adopt it (it is not wanted: the agent stops it).
  const std::string second = Job("gang")["allocations"][1]["id"];
  Beat("node-b", eb, {Task(second, "running")});
  clock_.now += 31;
  Beat("node-a", ea);
  cp_->CheckNodes();  // node-b lost, with the task on it
  Json doc = NodeDoc("node-b", 8);
  doc["bootId"] = "boot-node-b-2";
  doc["tasks"] = Json::array({Task(second, "running")});
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, doc).ok());
  const auto events = cp_->ListEvents(kAdmin, "", 0, 10000);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->dump().find("TasksAdopted"), std::string::npos) << events->dump();
}

// A task lost with its node stops counting against its queue once its agent has surely
// stopped it (the fence): the job, requeued, runs elsewhere within its queue's limit rather
// than waiting on its own lost task (the reviewer's case: QueueOverLimit for good).
TEST_F(ControlPlaneTest, ALostTaskPastItsFenceIsNotChargedToItsQueue) {
  real_engine_ = true;
  Reopen();
  ASSERT_TRUE(cp_->Apply(kAdmin,
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                         "{name: capped}\nspec: {capability: {nvidia.com/gpu: 8}}\n")
                  .ok());
  std::map<std::string, int64_t> epoch = {{"node-a", Epoch("node-a")}, {"node-b", Epoch("node-b")}};
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("gang", 1, 8, "", "capped")).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const std::string lost = Job("gang")["nodes"][0], other = lost == "node-a" ? "node-b" : "node-a";
  const std::string id = Beat(lost, epoch[lost])["allocations"][0]["allocation"];
  Beat(lost, epoch[lost], {Task(id, "running")});
  auto in_use = [&] {
    const Json queues = cp_->ListQueues(kAdmin);
    for (const auto& q : queues["items"])
      if (q["name"] == "capped") return q["gpuMilliInUse"].get<int64_t>();
    return int64_t{-1};
  };
  clock_.now += 31;
  Beat(other, epoch[other]);
  cp_->CheckNodes();
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Job("gang")["pendingReason"]["code"], "NodeLost");
  EXPECT_EQ(in_use(), 8000) << "the lost task may still run";
  clock_.now += 30;  // past the fence: lease 20 s + a heartbeat, then 30 s of grace
  Beat(other, epoch[other]);
  EXPECT_EQ(in_use(), 0);
  ASSERT_TRUE(cp_->RunCycle().ok());
  const Json j = Job("gang");
  EXPECT_EQ(j["state"], "Scheduled") << j.dump();
  EXPECT_EQ(j["nodes"][0], other);
  EXPECT_EQ(in_use(), 8000);
  // Back, the node's agent reports the task it stopped: the allocation ends; while the node is
  // ready and the task unreported, its devices there are held (a lease-less agent may still
  // run it).
  Beat(lost, epoch[lost], {Task(id, "killed", -15)});
  EXPECT_EQ(Job("gang")["allocations"][0]["state"], "Killed");
}

// A job cancelled while its task may still run on a node that stopped answering is not over
// before that task surely is: it stays Terminating until the node's agent confirms the task
// gone, or until the agent's lease and the grace period have passed (the fence).
TEST_F(ControlPlaneTest, CancelledWorkOnASilentNodeEndsOnlyWhenItsTaskSurelyHas) {
  std::map<std::string, std::pair<std::string, int64_t>> where;  // job -> node, epoch
  const int64_t ea = Epoch("node-a"), eb = Epoch("node-b");
  for (const char* name : {"fenced", "back"})
    ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc(name, 1, 8)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  for (auto [node, epoch] : {std::pair<std::string, int64_t>{"node-a", ea}, {"node-b", eb}}) {
    const Json desired = Beat(node, epoch);
    ASSERT_EQ(desired["allocations"].size(), 1u);
    where[desired["allocations"][0]["job"]] = {node, epoch};
    Beat(node, epoch, {Task(desired["allocations"][0]["allocation"], "running")});
  }
  const int64_t last_heartbeat = clock_.now;
  clock_.now += 31;
  cp_->CheckNodes();  // both nodes silent: their tasks are written off, maybe still running
  for (const char* name : {"fenced", "back"}) {
    ASSERT_TRUE(cp_->Cancel(kAdmin, name).ok());
    EXPECT_EQ(State(name), "Terminating");
    EXPECT_NE(Job(name)["message"].get<std::string>().find("may run until its agent stops it"),
              std::string::npos)
        << Job(name);
  }
  // One node comes back and its agent no longer runs the task: that job is over.
  Beat(where["back"].first, where["back"].second, {});
  EXPECT_EQ(State("back"), "Cancelled");
  // The other's agent surely stopped its task once its lease (20 s) from its last answer, a
  // heartbeat (2 s) and the grace period (30 s) are over; the restart keeps the fence.
  Reopen();
  clock_.now = last_heartbeat + 51;
  cp_->CheckTimers();
  EXPECT_EQ(State("fenced"), "Terminating");
  clock_.now += 1;
  cp_->CheckTimers();
  EXPECT_EQ(State("fenced"), "Cancelled");
  EXPECT_EQ(Reasons("fenced").back(), "Cancelled");
}

// The agent's own lease sets the fence: 0 (it never stops its tasks itself) places the work
// again at once; a short one shortens the wait.
TEST_F(ControlPlaneTest, LostWorkWaitsForTheAgentsOwnLease) {
  auto reg = [&](const std::string& node, int64_t lease) {
    Json doc = NodeDoc(node, 8);
    doc["leaseSeconds"] = lease;
    auto r = cp_->RegisterAgent(kAdmin, doc);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? (*r)["epoch"].get<int64_t>() : 0;
  };
  int64_t ea = reg("node-a", 0);
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("nofence", 1, 8)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::string id = Beat("node-a", ea)["allocations"][0]["allocation"];
  Beat("node-a", ea, {Task(id, "running")});
  int64_t eb = reg("node-b", 4);
  clock_.now += 31;
  Beat("node-b", eb);
  cp_->CheckNodes();
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Job("nofence")["nodes"], Json::array({"node-b"})) << "lease 0: placed again at once";
  id = Beat("node-b", eb)["allocations"][0]["allocation"];
  Beat("node-b", eb, {Task(id, "running")});
  reg("node-a", 0);
  clock_.now += 31;
  Beat("node-a", ea);
  cp_->CheckNodes();
  EXPECT_EQ(Job("nofence")["pendingReason"]["code"], "NodeLost");
  clock_.now += 4 + 2 + 30 - 31 - 1;  // one second before lease 4 + heartbeat 2 + grace 30
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("nofence"), "Pending");
  clock_.now += 1;
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Job("nofence")["nodes"], Json::array({"node-a"}));
}

TEST_F(ControlPlaneTest, ConflictingBindingsNeverDoubleAllocateADevice) {
  Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("x", 1, 1)).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("y", 1, 1)).ok());
  Reopen([](const Snapshot& s, int64_t now) {
    Plan p;
    p.now = now;
    for (const auto& j : s.jobs)
      if (j.RunningTasks() == 0)
        p.bindings.push_back({j.id, 0, {"node-a", 1000, 0, {{3, 1000, 0, -1}}}});
    return p;
  });
  Epoch("node-a");
  ASSERT_TRUE(cp_->RunCycle().ok());
  ASSERT_TRUE(cp_->RunCycle().ok());  // y again: device 3 is still x's
  EXPECT_EQ(State("x"), "Scheduled");
  EXPECT_EQ(State("y"), "Pending");
}

// FailedScheduling is written when the outcome or reason changes, not every cycle; a restart of
// the server does not make it new (100k pending jobs would write 100k events again).
TEST_F(ControlPlaneTest, ARestartDoesNotRepeatAnUnchangedFailedScheduling) {
  auto failed_scheduling = [&](const std::string& id) {
    std::vector<std::string> messages;
    const Json job = Job(id);  // (the loop must not run over a temporary's member)
    for (const auto& e : job["events"])
      if (e["reason"] == "FailedScheduling") messages.push_back(e["message"]);
    return messages;
  };
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("big", 1, 16)).ok());  // more GPUs than a node has
  ASSERT_TRUE(cp_->RunCycle().ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  const std::vector<std::string> once = {"Unschedulable: Insufficient: 0/0 nodes have free GPUs"};
  EXPECT_EQ(failed_scheduling("big"), once);
  Reopen();
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(failed_scheduling("big"), once);
  // New words for the same verdict (other node counts: every completion changes them) are
  // no new event until the latest is 10 minutes old, after a restart too; the pending
  // reason has them at once.
  const int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->RunCycle().ok());
  Reopen();
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(failed_scheduling("big"), once);
  EXPECT_EQ(Job("big")["pendingReason"]["message"], "0/1 nodes have free GPUs");
  clock_.now += 600;
  Beat("node-a", epoch);
  ASSERT_TRUE(cp_->RunCycle().ok());
  const std::string now_one = "Unschedulable: Insufficient: 0/1 nodes have free GPUs";
  EXPECT_EQ(failed_scheduling("big"), (std::vector<std::string>{once[0], now_one}));
}

TEST_F(ControlPlaneTest, HundredThousandJobsRestartQuickly) {
  constexpr int kJobs = 100000, kPerBody = 1000;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int b = t; b < kJobs / kPerBody; b += 4) {
        std::string body;
        for (int i = 0; i < kPerBody; ++i) {
          int n = b * kPerBody + i;
          body += "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: j" + std::to_string(n) +
                  "}\nspec: {queue: training, tasks: [{replicas: 1, resources: {cpu: 1, "
                  "nvidia.com/gpu: 1}, command: "
                  "[\"true\"]}]}\n---\n";
        }
        if (!cp_->Submit(kAdmin, body).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(failures.load(), 0);
  auto t0 = std::chrono::steady_clock::now();
  Reopen();
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("restart with %d jobs (+%d events): loaded in %.0f ms\n", kJobs, kJobs, ms);
  EXPECT_EQ(cp_->counts().jobs, static_cast<size_t>(kJobs));
  EXPECT_EQ(cp_->counts().events, static_cast<size_t>(kJobs));
  Json j = Job("j99999");
  EXPECT_EQ(j["queue"], "training");
  EXPECT_EQ(j["state"], "Pending");
  ListOptions o;
  o.limit = 10000;
  o.state = "Pending";
  auto page = cp_->ListJobs(kAdmin, o);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ((*page)["items"].size(), 10000u);
  EXPECT_TRUE((*page).contains("continue"));
}

}  // namespace
}  // namespace tessera::server

namespace tessera::server {
namespace {

// A store that refuses every write while `full` is set, as a full disk does.
class FullDiskStore : public store::Store {
 public:
  explicit FullDiskStore(std::unique_ptr<store::Store> s) : s_(std::move(s)) {}
  std::future<StatusOr<store::TxnResult>> TxnAsync(std::vector<store::Compare> c,
                                                   std::vector<store::Op> ops) override {
    largest = std::max(largest.load(), ops.size());
    if (!pause_key.empty() && std::any_of(ops.begin(), ops.end(), [&](const store::Op& op) {
          return op.key.find(pause_key) != std::string::npos;
        })) {
      ++paused;
      return std::async(std::launch::async, [this, c = std::move(c), ops = std::move(ops)]() {
        resumed_.wait();
        return s_->TxnAsync(c, ops).get();
      });
    }
    if (!full && (max_writes == 0 || ops.size() <= max_writes))
      return s_->TxnAsync(std::move(c), std::move(ops));
    std::promise<StatusOr<store::TxnResult>> p;
    p.set_value(full ? Unavailable("sqlite: COMMIT: database or disk is full")
                     : ResourceExhausted("over the store's writes per transaction"));
    return p.get_future();
  }
  size_t MaxWritesPerTxn() override { return max_writes; }
  StatusOr<std::optional<store::KeyValue>> Get(const std::string& k) override { return s_->Get(k); }
  StatusOr<std::vector<store::KeyValue>> Range(const std::string& p, const std::string& a,
                                               size_t l) override {
    return s_->Range(p, a, l);
  }
  int64_t Revision() override { return s_->Revision(); }
  Stats GetStats() override { return s_->GetStats(); }
  std::atomic<bool> full{false};
  // As etcd's --max-txn-ops: a transaction of more writes is refused (0: no limit).
  std::atomic<size_t> max_writes{0};
  std::atomic<size_t> largest{0};  // the most writes a transaction carried
  // A transaction writing a key that contains `pause_key` ("": none) waits for Resume(), as
  // on a slow disk; `paused` counts those that came.
  std::string pause_key;
  std::atomic<int> paused{0};
  void Resume() { resume_.set_value(); }

 private:
  std::unique_ptr<store::Store> s_;
  std::promise<void> resume_;
  std::shared_future<void> resumed_ = resume_.get_future().share();
};

// A control plane over a store whose disk the test fills (FullDiskStore).
class ControlPlaneStore : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir(std::string("cp_store_") +
                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    auto st = store::OpenSqliteStore(dir_);
    ASSERT_TRUE(st.ok());
    auto owned = std::make_unique<FullDiskStore>(std::move(*st));
    disk_ = owned.get();
    options_.run_scheduler = false;
    options_.on_store_error = [this](const Status&, bool) { ++reported_; };
    auto cp = ControlPlane::Open(std::move(owned), std::make_unique<ScriptedEngine>(), options_);
    ASSERT_TRUE(cp.ok()) << cp.status().ToString();
    cp_ = std::move(*cp);
    ASSERT_TRUE(cp_->Apply(kAdmin, kSetup).ok());
  }
  void TearDown() override {
    cp_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string dir_;
  FullDiskStore* disk_ = nullptr;
  int reported_ = 0;
  ControlPlaneOptions options_;
  std::unique_ptr<ControlPlane> cp_;
};

// A submission is published once stored, without the lock: until then the event and audit
// listings stop below its numbers, so that a client paging with `after` never moves past its
// Submitted event (later changes commit meanwhile), and its queue may not become a parent.
TEST_F(ControlPlaneStore, ASubmissionBeingStoredIsNeitherSkippedNorLeftInAParentQueue) {
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("first", 1, 1)).ok());
  disk_->pause_key = "jobs/slow";
  auto slow = std::async(std::launch::async, [this] {
    return cp_->Submit(kAdmin, JobDoc("slow", 1, 1, "", "training"));
  });
  for (int i = 0; i < 2000 && disk_->paused == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_EQ(disk_->paused, 1);
  ASSERT_TRUE(cp_->Hold(kAdmin, "first", true).ok());  // stored after slow's number was taken
  auto page = cp_->ListEvents(kAdmin, "", 0, 100);
  ASSERT_TRUE(page.ok());
  std::vector<std::string> reasons;
  for (const auto& e : (*page)["items"]) reasons.push_back(e["reason"]);
  EXPECT_EQ(reasons, std::vector<std::string>{"Submitted"}) << page->dump();
  auto audit = cp_->ListAudit(kAdmin, 0, 100);
  ASSERT_TRUE(audit.ok());
  for (const auto& a : (*audit)["items"]) EXPECT_NE(a["object"], "job/slow") << audit->dump();
  auto parent = cp_->Apply(kAdmin,
                           "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                           "{name: sub}\nspec: {parent: training}\n");
  EXPECT_EQ(parent.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(parent.status().message(),
            "queue sub: spec.parent: queue \"training\" is taking a submission that is being "
            "stored; a parent queue takes no jobs");
  disk_->Resume();
  ASSERT_TRUE(slow.get().ok());
  auto rest = cp_->ListEvents(kAdmin, "", (*page)["next"], 100);
  ASSERT_TRUE(rest.ok());
  std::vector<std::string> objects;
  for (const auto& e : (*rest)["items"])
    objects.push_back(e["object"].get<std::string>() + " " + e["reason"].get<std::string>());
  EXPECT_EQ(objects, (std::vector<std::string>{"job/slow Submitted", "job/first Held"}));
}

// A submission the store refuses gets 503, is logged and counted (on_store_error), and the
// store's health says so until a write succeeds again.
// A store that takes few writes per transaction (etcd's --max-txn-ops): deleting a job with
// more events than that, and compacting many finished jobs, go in transactions that fit.
TEST_F(ControlPlaneStore, DeletesAndCompactionsFitTheStoresWritesPerTransaction) {
  disk_->max_writes = 16;
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("chatty", 1, 1)).ok());
  for (int i = 0; i < 20; ++i) {  // 40 events
    ASSERT_TRUE(cp_->Hold(kAdmin, "chatty", true).ok());
    ASSERT_TRUE(cp_->Hold(kAdmin, "chatty", false).ok());
  }
  ASSERT_TRUE(cp_->Cancel(kAdmin, "chatty").ok());
  auto deleted = cp_->DeleteJob(kAdmin, "chatty");
  ASSERT_TRUE(deleted.ok()) << deleted.status().ToString();
  EXPECT_EQ(cp_->GetJob(kAdmin, "chatty", false).status().code(), StatusCode::kNotFound);
  auto events = cp_->store().Range("events/");
  ASSERT_TRUE(events.ok());
  for (const auto& kv : *events) EXPECT_EQ(kv.value.find("job/chatty"), std::string::npos);
  for (int i = 0; i < 12; ++i) {
    const std::string name = "brief-" + std::to_string(i);
    ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc(name, 1, 1, "  ttlSecondsAfterFinished: 0\n")).ok());
    ASSERT_TRUE(cp_->Cancel(kAdmin, name).ok());
  }
  size_t gone = 0;
  for (int round = 0; round < 20; ++round) gone += cp_->CompactFinishedJobs();
  EXPECT_EQ(gone, 12u);
  EXPECT_EQ((*cp_->ListJobs(kAdmin, {}))["items"].size(), 0u);
  EXPECT_LE(disk_->largest.load(), 16u);
  EXPECT_FALSE(cp_->frozen());
  EXPECT_EQ(reported_, 0);
}

TEST_F(ControlPlaneStore, ARefusedWriteIsReportedUntilOneSucceeds) {
  EXPECT_TRUE(cp_->store_health().error.empty());
  disk_->full = true;
  auto refused = cp_->Submit(kAdmin, JobDoc("lost", 1, 1));
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(reported_, 1);
  ControlPlane::StoreHealth h = cp_->store_health();
  EXPECT_EQ(h.error, "sqlite: COMMIT: database or disk is full");
  EXPECT_EQ(h.failures, 1);
  EXPECT_FALSE(cp_->frozen());
  disk_->full = false;
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("kept", 1, 1)).ok());
  EXPECT_TRUE(cp_->store_health().error.empty());
  EXPECT_EQ(cp_->store_health().failures, 1);
}

// A change the store refuses never reaches a backend: a cycle whose bindings were not
// stored launches nothing (no sbatch for a job the restarted server will not know).
TEST_F(ControlPlaneStore, ABackendHearsOnlyOfStoredChanges) {
  struct Recording : Backend {
    std::string Kind() const override { return "test"; }
    void Launch(const Dispatch& d) override { launched.push_back(d.allocation); }
    void Stop(const std::string& a, int64_t) override { stopped.push_back(a); }
    std::vector<std::string> launched, stopped;
  };
  auto backend = std::make_shared<Recording>();
  cp_->RegisterBackend("hpc", backend);
  Json node = NodeDoc("node-h", 8);
  node["node"]["pool"] = "hpc";
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, node).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("first", 1, 1)).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  ASSERT_EQ(backend->launched.size(), 1u);  // stored, then launched
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("second", 1, 1)).ok());
  disk_->full = true;
  (void)cp_->RunCycle();
  EXPECT_TRUE(cp_->frozen());
  EXPECT_EQ(backend->launched.size(), 1u) << "a launch of an unstored binding went out";
  EXPECT_TRUE(backend->stopped.empty());
}

// A write other than a submission's that the store refuses (memory already holds the change)
// makes the server read-only rather than end it: the caller gets 503, nothing more is
// written or decided, agents are told to hold, and a restart finds only what was stored.
TEST_F(ControlPlaneStore, ARefusedWriteMakesTheServerReadOnlyNotDead) {
  auto reg = cp_->RegisterAgent(kAdmin, NodeDoc("node-a", 8));
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  const int64_t epoch = (*reg)["epoch"];
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("kept", 1, 1)).ok());
  disk_->full = true;
  auto held = cp_->Hold(kAdmin, "kept", true);
  EXPECT_EQ(held.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(held.status().message().find("read-only until restarted"), std::string::npos);
  EXPECT_TRUE(cp_->frozen());
  EXPECT_EQ(reported_, 1);
  EXPECT_TRUE(cp_->store_health().read_only);
  disk_->full = false;  // even with room again: memory may be ahead of the store
  EXPECT_EQ(cp_->Submit(kAdmin, JobDoc("refused", 1, 1)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(cp_->Cancel(kAdmin, "kept").status().code(), StatusCode::kUnavailable);
  auto beat = cp_->Heartbeat(kAdmin, "node-a", Json{{"epoch", epoch}, {"tasks", Json::array()}});
  ASSERT_TRUE(beat.ok()) << beat.status().ToString();
  EXPECT_EQ((*beat)["hold"], true);
  EXPECT_FALSE(beat->contains("allocations"));
  // An agent restarted meanwhile registers: told to hold, nothing registered; an unknown
  // node is refused.
  auto again_reg = cp_->RegisterAgent(kAdmin, NodeDoc("node-a", 8));
  ASSERT_TRUE(again_reg.ok()) << again_reg.status().ToString();
  EXPECT_EQ((*again_reg)["hold"], true);
  EXPECT_EQ((*again_reg)["epoch"], epoch);
  EXPECT_EQ(cp_->RegisterAgent(kAdmin, NodeDoc("node-new", 8)).status().code(),
            StatusCode::kUnavailable);
  cp_.reset();
  // A restart reloads what is durable: the job, never held.
  auto again = store::OpenSqliteStore(dir_);
  ASSERT_TRUE(again.ok());
  auto cp2 = ControlPlane::Open(std::move(*again), std::make_unique<ScriptedEngine>(), options_);
  ASSERT_TRUE(cp2.ok()) << cp2.status().ToString();
  EXPECT_FALSE((*cp2)->frozen());
  auto job = (*cp2)->GetJob(kAdmin, "kept", false);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["state"], "Pending");
  EXPECT_NE(job->value("/pendingReason/code"_json_pointer, ""), "Held") << job->dump();
}

// ---- tessera scale: a Deployment's replicas ----

// The tasks a node is told to run (its heartbeat's answer), by task: allocation id.
std::map<int, std::string> Desired(const Json& answer, const std::string& job) {
  std::map<int, std::string> out;
  for (const auto& a : answer["allocations"])
    if (a["job"] == job) out[a["task"].get<int>()] = a["allocation"];
  return out;
}

// Scaled up, the new replicas (the next task indexes) are placed beside the ones that serve;
// scaled down, the highest-numbered stop, and their GPUs go to a job that waited for them
// once their node confirms them gone (never before: no GPU serves two processes).
TEST_F(ControlPlaneTest, ScalingADeploymentPlacesNewReplicasAndStopsTheHighest) {
  real_engine_ = true;
  Reopen();
  const int64_t epoch = Epoch("node-a");  // 8 GPUs
  ASSERT_TRUE(cp_->Submit(kAdmin, kDeployment).ok());
  Json running = StartAll("node-a", epoch, 3);
  auto up = cp_->Scale(kAdmin, "svc", 5);
  ASSERT_TRUE(up.ok()) << up.status().ToString();
  EXPECT_EQ((*up)["tasks"], 5);
  EXPECT_EQ((*up)["state"], "Running");
  ASSERT_TRUE(cp_->RunCycle().ok());
  std::map<int, std::string> serving = Desired(Beat("node-a", epoch, running), "svc");
  ASSERT_EQ(serving.size(), 5u);
  EXPECT_EQ(serving.rbegin()->first, 4) << "tasks 3 and 4 are the new replicas";
  running = Json::array();
  for (const auto& [task, id] : serving) running.push_back(Task(id, "running"));
  Beat("node-a", epoch, running);
  EXPECT_EQ(Job("svc")["runningTasks"], 5);
  EXPECT_EQ(Job("svc")["attempt"], 1) << "the serving replicas were not restarted";

  ASSERT_TRUE(cp_->Scale(kAdmin, "svc", 2).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("grab", 1, 6)).ok());  // needs the 3 stopped GPUs
  // The node runs only replicas 0 and 1 now; 2, 3 and 4 are being stopped.
  EXPECT_EQ(Desired(Beat("node-a", epoch, running), "svc"),
            (std::map<int, std::string>{{0, serving[0]}, {1, serving[1]}}));
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("grab"), "Pending") << "the stopping replicas still hold their GPUs";
  Json j = Job("svc");
  EXPECT_EQ(j["tasks"], 2);
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["spec"]["job"]["tasks"][0]["replicas"], 2) << "describe shows the new count";
  for (const auto& a : j["allocations"]) {
    if (a["task"] >= 2 && a["attempt"] == 1 && a["state"] != "Killed") {
      EXPECT_EQ(a["message"], "scaled down to 2 replica(s) by admin") << a;
    }
  }
  const Json& last = j["events"].back();
  EXPECT_EQ(last["reason"], "Scaled");
  EXPECT_EQ(last["message"], "scaled from 5 to 2 replicas by admin; stopping replica(s) 2, 3, 4");
  // The agent has stopped them: their GPUs are free, and the waiting job gets them.
  Beat("node-a", epoch, {Task(serving[0], "running"), Task(serving[1], "running")});
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(State("grab"), "Scheduled");
  j = Job("svc");
  EXPECT_EQ(j["runningTasks"], 2);
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["taskRestarts"], 0) << "replicas scaled away are not restarted";
  auto r = Reasons("svc");
  EXPECT_EQ(std::count(r.begin(), r.end(), "Scaled"), 2);
  // Nothing more is placed for it: it has what it asks.
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Desired(Beat("node-a", epoch), "svc").size(), 2u);
}

// Scaled past its queue's limit, the replicas beyond it wait with the engine's reason; the
// queue is never charged more than its limit, however many cycles run.
TEST_F(ControlPlaneTest, ScalingPastTheQueueLimitLeavesTheNewReplicasPending) {
  real_engine_ = true;
  Reopen();
  ASSERT_TRUE(cp_->Apply(kAdmin,
                         "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                         "{name: capped}\nspec: {capability: {nvidia.com/gpu: 4}}\n")
                  .ok());
  const int64_t epoch = Epoch("node-a");  // 8 GPUs: room enough but for the limit
  std::string doc = kDeployment;
  doc.replace(doc.find("{name: svc}"), 11, "{name: svc, annotations: {tessera.io/queue: capped}}");
  ASSERT_TRUE(cp_->Submit(kAdmin, doc).ok());
  Json running = StartAll("node-a", epoch, 3);
  ASSERT_TRUE(cp_->Scale(kAdmin, "svc", 6).ok());
  auto in_use = [&] {
    const Json queues = cp_->ListQueues(kAdmin);  // (a temporary's items would dangle)
    for (const auto& q : queues["items"])
      if (q["name"] == "capped") return q["gpuMilliInUse"].get<int64_t>();
    return int64_t{-1};
  };
  for (int cycle = 0; cycle < 3; ++cycle) {
    ASSERT_TRUE(cp_->RunCycle().ok());
    EXPECT_EQ(Desired(Beat("node-a", epoch, running), "svc").size(), 4u) << "cycle " << cycle;
    EXPECT_EQ(in_use(), 4000) << "cycle " << cycle;
  }
  const Json j = Job("svc");
  EXPECT_EQ(j["state"], "Running");
  EXPECT_EQ(j["tasks"], 6);
  EXPECT_EQ(j["pendingReason"]["code"], "QueueOverLimit") << j.dump();
}

// Only a Deployment scales, to a count within the bound on a job's tasks; a job another
// queue's member may not see does not exist for it; the same count changes nothing.
TEST_F(ControlPlaneTest, ScaleRefusesWhatIsNotADeploymentAndIsANoOpAtTheSameCount) {
  ASSERT_TRUE(cp_->Submit(kAdmin, kDeployment).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin, JobDoc("batch", 2, 1)).ok());
  Status batch = cp_->Scale(kAdmin, "batch", 3).status();
  EXPECT_EQ(batch.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(batch.message(),
            "job \"batch\" is not a Deployment (submitted as tessera.io/v1 Job): only a Deployment "
            "(apps/v1) scales");
  EXPECT_EQ(Job("batch")["tasks"], 2);
  for (int64_t n : {int64_t{-1}, spec::kMaxTasksPerJob + 1}) {
    Status bad = cp_->Scale(kAdmin, "svc", n).status();
    EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << n;
    EXPECT_EQ(bad.message(),
              "replicas: must be 0..100000 (the tasks a job may have), got " + std::to_string(n));
  }
  EXPECT_EQ(cp_->Scale(kAdmin, "nope", 2).status().code(), StatusCode::kNotFound);
  const Principal other{"team", Role::kMember, {"training"}};
  EXPECT_EQ(cp_->Scale(other, "svc", 2).status().code(), StatusCode::kNotFound);
  const Principal agent{"agent", Role::kAgent, {}};
  EXPECT_EQ(cp_->Scale(agent, "svc", 2).status().code(), StatusCode::kPermissionDenied);
  const Principal member{"ml", Role::kMember, {"default"}};
  auto audit_size = [&] { return (*cp_->ListAudit(kAdmin, 0, 10000))["items"].size(); };
  const size_t audited = audit_size();
  auto same = cp_->Scale(member, "svc", 3);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ((*same)["tasks"], 3);
  auto r = Reasons("svc");
  EXPECT_EQ(std::count(r.begin(), r.end(), "Scaled"), 0) << "the same count writes nothing";
  EXPECT_EQ(audit_size(), audited);
  ASSERT_TRUE(cp_->Scale(member, "svc", 4).ok());
  EXPECT_EQ(audit_size(), audited + 1);
  EXPECT_EQ((*cp_->ListAudit(kAdmin, 0, 10000))["items"].back()["action"], "scale");
  ASSERT_TRUE(cp_->Cancel(kAdmin, "svc").ok());
  Status done = cp_->Scale(kAdmin, "svc", 2).status();
  EXPECT_EQ(done.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(done.message().find("already finished (Cancelled)"), std::string::npos)
      << done.message();
}

// The new count is stored: a restarted server keeps it, places nothing for replicas scaled
// away, and a Deployment scaled to zero stays, Running with nothing to run, until scaled up.
TEST_F(ControlPlaneTest, AScaledDeploymentKeepsItsCountAcrossARestartAndMayScaleToZero) {
  real_engine_ = true;
  Reopen();
  const int64_t epoch = Epoch("node-a");
  ASSERT_TRUE(cp_->Submit(kAdmin, kDeployment).ok());
  Json running = StartAll("node-a", epoch, 3);
  ASSERT_TRUE(cp_->Scale(kAdmin, "svc", 1).ok());
  Reopen();
  EXPECT_EQ(Job("svc")["tasks"], 1);
  EXPECT_EQ(Job("svc")["spec"]["job"]["tasks"][0]["replicas"], 1);
  auto r = Reasons("svc");
  EXPECT_EQ(std::count(r.begin(), r.end(), "Scaled"), 1);
  const Json answer = Beat("node-a", epoch, running);
  ASSERT_EQ(Desired(answer, "svc").size(), 1u);
  const std::string kept = Desired(answer, "svc").begin()->second;
  Beat("node-a", epoch, {Task(kept, "running")});  // the agent stopped the others
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Desired(Beat("node-a", epoch, {Task(kept, "running")}), "svc").size(), 1u);

  ASSERT_TRUE(cp_->Scale(kAdmin, "svc", 0).ok());
  Reopen();  // zero replicas are stored as such
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_TRUE(Desired(Beat("node-a", epoch, {Task(kept, "running")}), "svc").empty());
  Beat("node-a", epoch, {});
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json j = Job("svc");
  EXPECT_EQ(j["state"], "Running") << "scaled to zero is neither Completed nor Failed";
  EXPECT_EQ(j["tasks"], 0);
  EXPECT_EQ(j["runningTasks"], 0);
  EXPECT_EQ(j["pendingReason"]["code"], "ScaledToZero") << j.dump();
  EXPECT_TRUE(Desired(Beat("node-a", epoch), "svc").empty());
  ASSERT_TRUE(cp_->Scale(kAdmin, "svc", 2).ok());
  ASSERT_TRUE(cp_->RunCycle().ok());
  EXPECT_EQ(Desired(Beat("node-a", epoch), "svc").size(), 2u);
  EXPECT_FALSE(Job("svc").contains("pendingReason")) << Job("svc").dump();
}

}  // namespace
}  // namespace tessera::server
