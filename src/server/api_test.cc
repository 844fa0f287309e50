// The REST API over a real store: hostile inputs and the authorisation boundary between teams.
#include "server/api.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "server/test_util.h"

namespace tessera::server {
namespace {

const Principal kAdmin{"admin", Role::kAdmin, {"*"}};

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir(
        "api_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    auto st = store::OpenSqliteStore(dir_);
    ASSERT_TRUE(st.ok());
    ControlPlaneOptions o;
    o.run_scheduler = false;
    auto cp = ControlPlane::Open(std::move(*st), std::make_unique<testing::ScriptedEngine>(), o);
    ASSERT_TRUE(cp.ok());
    cp_ = std::move(*cp);
    ASSERT_TRUE(cp_->Apply(kAdmin,
                           "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                           "{name: training}\n"
                           "---\napiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: "
                           "{name: debug}\n")
                    .ok());
    AddToken("root-token-0123456789", "root", Role::kAdmin, {"*"});
    AddToken("team-a-token-0123456789", "team-a", Role::kMember, {"training"});
    AddToken("team-b-token-0123456789", "team-b", Role::kMember, {"debug"});
    AddToken("agent-token-0123456789", "agent", Role::kAgent, {});
    ApiOptions ao;
    ao.port = 0;
    ao.max_body_bytes = 1 << 20;
    api_ = std::make_unique<ApiServer>(*cp_, ao);
    ASSERT_TRUE(api_->Start().ok());
  }
  void TearDown() override {
    api_->Stop();
    api_.reset();
    cp_.reset();
    std::filesystem::remove_all(dir_);
  }
  void AddToken(const std::string& token, const std::string& name, Role role,
                std::set<std::string> queues) {
    cp_->tokens().Add({{name, role, std::move(queues)}, Sha256Hex(token), "test"});
  }
  struct Resp {
    int status = 0;
    Json body;
    std::string raw;
  };
  Resp Do(const std::string& method, const std::string& path, const std::string& token,
          const std::string& body = "") {
    httplib::Client c("127.0.0.1", api_->port());
    c.set_read_timeout(30, 0);
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    auto r = method == "GET"      ? c.Get(path.c_str(), h)
             : method == "DELETE" ? c.Delete(path.c_str(), h)
                                  : c.Post(path.c_str(), h, body, "application/yaml");
    Resp out;
    if (!r) return out;
    out.status = r->status;
    out.raw = r->body;
    try {
      out.body = Json::parse(r->body);
    } catch (...) {
    }
    return out;
  }
  static std::string Job(const std::string& name, const std::string& queue) {
    return "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: " + name +
           "}\nspec:\n  queue: " + queue +
           "\n  tasks: [{replicas: 1, resources: {cpu: 1, nvidia.com/gpu: 1}, command: "
           "[\"true\"]}]\n";
  }

  std::string dir_;
  std::unique_ptr<ControlPlane> cp_;
  std::unique_ptr<ApiServer> api_;
};

TEST_F(ApiTest, HostileInputsGetClearFourHundreds) {
  const std::string root = "root-token-0123456789";
  std::string deep_json;
  for (int i = 0; i < 100000; ++i) deep_json += "[";
  std::string deep_yaml;
  for (int i = 0; i < 1000; ++i) deep_yaml += std::string(i, ' ') + "a:\n";
  struct Case {
    const char* name;
    std::string method, path, token, body;
    int status;
    const char* want;  // in error.message
  } cases[] = {
      {"huge body", "POST", "/v1/jobs", root, std::string(2 << 20, 'x'), 413, "too large"},
      {"bad utf-8", "POST", "/v1/jobs", root,
       "apiVersion: v1\nkind: Pod\nmetadata: {name: \"\xc3\x28\"}\n", 400, "not valid UTF-8"},
      {"overlong utf-8", "POST", "/v1/jobs", root, "kind: \"\xc0\xaf\"\n", 400, "not valid UTF-8"},
      {"deep json", "POST", "/v1/jobs", root, deep_json, 400, "nests deeper"},
      {"deep yaml", "POST", "/v1/jobs", root, deep_yaml, 400, "nests deeper"},
      {"negative quantity", "POST", "/v1/jobs", root,
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: n}\nspec:\n  tasks: [{resources: "
       "{cpu: -4}}]\n",
       400, "spec.tasks[0].resources.cpu: must not be negative"},
      {"negative gpus", "POST", "/v1/jobs", root,
       "apiVersion: v1\nkind: Pod\nmetadata: {name: n}\nspec:\n  containers: [{name: c, resources: "
       "{limits: "
       "{nvidia.com/gpu: -1}}}]\n",
       400, "spec.containers[0].resources.limits.nvidia.com/gpu"},
      {"unknown queue", "POST", "/v1/jobs", root, Job("q", "nope"), 400, "unknown queue \"nope\""},
      {"malformed yaml", "POST", "/v1/jobs", root, "a: [unclosed\n", 400, "malformed YAML"},
      {"malformed json", "POST", "/v1/jobs", root, "{\"apiVersion\": ", 400, "malformed JSON"},
      {"not an object", "POST", "/v1/jobs", root, "- 1\n- 2\n", 400, "expected an object"},
      {"empty body", "POST", "/v1/jobs", root, "", 400, "empty document"},
      {"nul byte", "POST", "/v1/jobs", root, std::string("kind: a\0b", 9), 400, "NUL"},
      {"huge replicas", "POST", "/v1/jobs", root,
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: h}\nspec:\n  tasks: [{replicas: "
       "99999999999}]\n",
       400, "too large"},
      {"unknown field", "POST", "/v1/jobs", root,
       "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: u}\nspec:\n  tasks: [{replicas: "
       "1}]\n  colour: red\n",
       400, "spec.colour: unknown field"},
      {"sbatch bad directive", "POST", "/v1/jobs", root, "#!/bin/bash\n#SBATCH --nodes=-3\n", 400,
       "line 2: --nodes"},
      {"no token", "GET", "/v1/jobs", "", "", 401, "missing Authorization"},
      {"bad token", "GET", "/v1/jobs", "wrong-token-xxxxxxxxxx", "", 401, "unknown or revoked"},
      {"bad limit", "GET", "/v1/jobs?limit=abc", root, "", 400, "limit: expected an integer"},
      {"bad state", "GET", "/v1/jobs?state=Sleeping", root, "", 400, "state: unknown"},
      {"unknown path", "GET", "/v2/everything", root, "", 404, "no such path"},
      {"unknown job", "GET", "/v1/jobs/ghost", root, "", 404, "job \"ghost\" not found"},
      {"heartbeat garbage", "POST", "/v1/agents/n1/heartbeat", root, "\x01\x02", 400,
       "malformed JSON"},
      {"register without node", "POST", "/v1/agents/register", root, "{\"bootId\": \"x\"}", 400,
       "node: required"},
      {"register negative cpu", "POST", "/v1/agents/register", root,
       "{\"bootId\": \"x\", \"node\": {\"name\": \"n\", \"cpu\": -1, \"memory\": 1}}", 400,
       "node.cpu"},
  };
  for (const auto& c : cases) {
    Resp r = Do(c.method, c.path, c.token, c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.raw.substr(0, 300);
    ASSERT_TRUE(r.body.is_object() && r.body.contains("error"))
        << c.name << ": body " << r.raw.substr(0, 200);
    std::string msg = r.body["error"]["message"];
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.name << ": message \"" << msg << "\"";
  }
  // Still serving, nothing half-accepted.
  EXPECT_EQ(Do("GET", "/healthz", "").status, 200);
  Resp list = Do("GET", "/v1/jobs", root);
  EXPECT_EQ(list.status, 200);
  EXPECT_TRUE(list.body["items"].empty());
}

TEST_F(ApiTest, TwoTeamsSeeAndCancelOnlyTheirQueues) {
  const std::string a = "team-a-token-0123456789", b = "team-b-token-0123456789",
                    root = "root-token-0123456789", agent = "agent-token-0123456789";
  EXPECT_EQ(Do("POST", "/v1/jobs", a, Job("a-train", "training")).status, 201);
  EXPECT_EQ(Do("POST", "/v1/jobs", b, Job("b-debug", "debug")).status, 201);
  Resp denied = Do("POST", "/v1/jobs", a, Job("a-sneak", "debug"));
  EXPECT_EQ(denied.status, 403);
  EXPECT_NE(denied.raw.find("may not submit to queue \\\"debug\\\""), std::string::npos)
      << denied.raw;
  EXPECT_EQ(Do("POST", "/v1/jobs", agent, Job("agent-job", "debug")).status, 403);

  auto names = [&](const std::string& token) {
    std::vector<std::string> out;
    Json items = Do("GET", "/v1/jobs", token).body["items"];
    for (const auto& j : items) out.push_back(j["name"]);
    return out;
  };
  EXPECT_EQ(names(a), std::vector<std::string>{"a-train"});
  EXPECT_EQ(names(b), std::vector<std::string>{"b-debug"});
  EXPECT_EQ(names(root), (std::vector<std::string>{"a-train", "b-debug"}));
  // Another team's job does not exist for you: no read, no describe, no cancel, no events.
  EXPECT_EQ(Do("GET", "/v1/jobs/a-train", b).status, 404);
  EXPECT_EQ(Do("GET", "/v1/jobs/a-train/describe", b).status, 404);
  EXPECT_EQ(Do("POST", "/v1/jobs/a-train/cancel", b).status, 404);
  EXPECT_EQ(Do("DELETE", "/v1/jobs/a-train", b).status, 404);
  EXPECT_EQ(Do("GET", "/v1/events?job=a-train", b).status, 404);
  Json events = Do("GET", "/v1/events", b).body["items"];
  for (const auto& e : events) EXPECT_NE(e["object"], "job/a-train");
  EXPECT_EQ(Do("GET", "/v1/jobs/a-train", a).body["state"], "Pending");
  // Admin-only operations.
  EXPECT_EQ(Do("POST", "/v1/queues", a,
               "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: x}\n")
                .status,
            403);
  EXPECT_EQ(Do("GET", "/v1/audit", a).status, 403);
  EXPECT_EQ(Do("POST", "/v1/tokens", a, R"({"name": "evil", "role": "admin"})").status, 403);
  EXPECT_EQ(Do("POST", "/v1/agents/register", a,
               R"({"bootId": "x", "node": {"name": "n", "cpu": 1, "memory": 1}})")
                .status,
            403);
  // Own job: cancel works.
  Resp cancel = Do("POST", "/v1/jobs/a-train/cancel", a);
  EXPECT_EQ(cancel.status, 200);
  EXPECT_EQ(cancel.body["state"], "Cancelled");
  // A token created through the API works, and only its hash is stored.
  Resp tok = Do("POST", "/v1/tokens", root,
                R"({"name": "team-c", "role": "member", "queues": ["debug"]})");
  ASSERT_EQ(tok.status, 201) << tok.raw;
  std::string secret = tok.body["token"];
  EXPECT_EQ(names(secret), std::vector<std::string>{"b-debug"});
  auto stored = cp_->store().Get("tokens/team-c");
  ASSERT_TRUE(stored.ok() && stored->has_value());
  EXPECT_EQ((*stored)->value.find(secret), std::string::npos);
  EXPECT_NE((*stored)->value.find(Sha256Hex(secret)), std::string::npos);
  // Every mutation is audited, denials included.
  std::vector<std::string> audit;
  Json records = Do("GET", "/v1/audit", root).body["items"];
  for (const auto& x : records)
    audit.push_back(x["principal"].get<std::string>() + " " + x["action"].get<std::string>() + " " +
                    x["object"].get<std::string>() + " " + x["result"].get<std::string>());
  for (const char* want : {"team-a submit job/a-train ok", "team-b submit job/b-debug ok",
                           "team-a submit queue/debug denied", "team-a cancel job/a-train ok",
                           "root create-token token/team-c ok"})
    EXPECT_NE(std::find(audit.begin(), audit.end(), want), audit.end()) << want;
}

TEST_F(ApiTest, OpenApiDocumentDescribesTheVersionedPaths) {
  Resp r = Do("GET", "/openapi.json", "");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["openapi"], "3.0.3");
  for (const char* p :
       {"/v1/jobs", "/v1/jobs/{name}", "/v1/jobs/{name}/describe", "/v1/jobs/{name}/cancel",
        "/v1/events", "/v1/queues", "/v1/priorityclasses", "/v1/nodes", "/v1/pools", "/v1/audit",
        "/v1/tokens", "/v1/agents/register", "/v1/agents/{node}/heartbeat"})
    EXPECT_TRUE(r.body["paths"].contains(p)) << p;
}

TEST_F(ApiTest, ListPaginationIsStableByName) {
  const std::string root = "root-token-0123456789";
  for (int i = 0; i < 7; ++i)
    ASSERT_EQ(Do("POST", "/v1/jobs", root, Job("p" + std::to_string(i), "debug")).status, 201);
  std::vector<std::string> seen;
  std::string cont;
  for (int page = 0; page < 10; ++page) {
    Resp r = Do("GET", "/v1/jobs?limit=3" + (cont.empty() ? "" : "&continue=" + cont), root);
    Json items = r.body["items"];
    for (const auto& j : items) seen.push_back(j["name"]);
    if (!r.body.contains("continue")) break;
    cont = r.body["continue"];
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"p0", "p1", "p2", "p3", "p4", "p5", "p6"}));
}

}  // namespace
}  // namespace tessera::server
