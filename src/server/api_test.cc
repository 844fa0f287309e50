// The REST API over a real store: hostile inputs and the authorisation boundary between teams.
#include "server/api.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>

#include "common/capture_command.h"
#include "metrics/test_util.h"
#include "server/observability_routes.h"
#include "server/test_util.h"

namespace tessera::server {
namespace {

const Principal kAdmin{"admin", Role::kAdmin, {"*"}};

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir(
        "api_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    OpenServer();
  }
  // A server restart on the same store (its API on a new port).
  void RestartServer() {
    api_->Stop();
    api_.reset();
    cp_.reset();
    OpenServer();
  }
  void OpenServer() {
    auto st = store::OpenSqliteStore(dir_);
    ASSERT_TRUE(st.ok());
    ControlPlaneOptions o;
    o.run_scheduler = false;
    o.clock = [this] {
      return std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count() +
             skew_.load();
    };
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
    httplib::Headers headers;
    std::string Header(const char* k) const {
      auto it = headers.find(k);
      return it == headers.end() ? "" : it->second;
    }
  };
  Resp Do(const std::string& method, const std::string& path, const std::string& token,
          const std::string& body = "", httplib::Headers h = {}) {
    httplib::Client c("127.0.0.1", api_->port());
    c.set_read_timeout(30, 0);
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    auto r = method == "GET"      ? c.Get(path.c_str(), h)
             : method == "DELETE" ? c.Delete(path.c_str(), h)
                                  : c.Post(path.c_str(), h, body, "application/yaml");
    Resp out;
    if (!r) return out;
    out.status = r->status;
    out.raw = r->body;
    out.headers = r->headers;
    try {
      out.body = Json::parse(r->body);
    } catch (...) {
    }
    return out;
  }
  // node n1 (an agent's registration `reg`) and job "talk" of queue debug, whose one task
  // n1 reports running.
  struct RunningTalk {
    int64_t epoch = 0;
    std::string alloc;
  };
  void RunTalkOn(const Json& reg, RunningTalk* out) {
    auto r = cp_->RegisterAgent(kAdmin, reg);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    out->epoch = (*r)["epoch"];
    ASSERT_EQ(Do("POST", "/v1/jobs", "root-token-0123456789", Job("talk", "debug")).status, 201);
    ASSERT_TRUE(cp_->RunCycle().ok());
    auto d = cp_->Heartbeat(kAdmin, "n1", Json{{"epoch", out->epoch}});
    ASSERT_TRUE(d.ok());
    out->alloc = (*d)["allocations"][0]["allocation"];
    ReportTalk(*out, "running");
  }
  void ReportTalk(const RunningTalk& t, const std::string& state) {
    ASSERT_TRUE(cp_->Heartbeat(kAdmin, "n1",
                               Json{{"epoch", t.epoch},
                                    {"tasks", {{{"allocation", t.alloc}, {"state", state}}}}})
                    .ok());
  }
  static std::string Job(const std::string& name, const std::string& queue) {
    return "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: " + name +
           "}\nspec:\n  queue: " + queue +
           "\n  tasks: [{replicas: 1, resources: {cpu: 1, nvidia.com/gpu: 1}, command: "
           "[\"true\"]}]\n";
  }

  std::string dir_;
  std::atomic<int64_t> skew_{0};  // added to the control plane's wall clock
  std::unique_ptr<ControlPlane> cp_;
  std::unique_ptr<ApiServer> api_;
};

TEST_F(ApiTest, HostileInputsGetClearFourHundreds) {
  const std::string root = "root-token-0123456789";
  std::string deep_json;
  for (int i = 0; i < 100000; ++i) deep_json += "[";
  std::string deep_yaml;
  for (int i = 0; i < 1000; ++i) deep_yaml += std::string(i, ' ') + "a:\n";
  // Each line's list repeats the one before ten times: 10^9 values from ~500 bytes.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
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
      {"token without a name", "POST", "/v1/tokens", root, R"({"name": "", "role": "admin"})", 400,
       "name: must not be empty"},
      {"token name with a slash", "POST", "/v1/tokens", root, R"({"name": "a/b", "role": "admin"})",
       400, "no spaces, control characters or '/'"},
      {"agent token with queues", "POST", "/v1/tokens", root,
       R"({"name": "ag", "role": "agent", "queues": ["training"]})", 400,
       "queues: an agent token has no queues"},
      // A repeated key would keep its last value silently (YAML refuses it too).
      {"job JSON with a repeated key", "POST", "/v1/jobs", root,
       R"({"apiVersion": "tessera.io/v1", "kind": "Job", "metadata": {"name": "d", "name": "e"},
           "spec": {"tasks": [{"replicas": 1, "command": ["x"]}]}})",
       400, "malformed JSON: key \"name\" repeats within an object"},
      {"agent JSON with a repeated key", "POST", "/v1/agents/register", "agent-token-0123456789",
       R"({"bootId": "x", "bootId": "y", "node": {"name": "n", "cpu": 1, "memory": 1}})", 400,
       "body: malformed JSON: key \"bootId\" repeats"},
      {"member token bound to nodes", "POST", "/v1/tokens", root,
       R"({"name": "m", "role": "member", "queues": ["debug"], "nodes": "n1"})", 400,
       "nodes: only an agent token is bound to nodes"},
      {"agent token with a bad hostlist", "POST", "/v1/tokens", root,
       R"({"name": "ag", "role": "agent", "nodes": "gpu-[3-1]"})", 400, "nodes: "},
      {"unknown priority class", "POST", "/v1/jobs", root,
       "apiVersion: v1\nkind: Pod\nmetadata: {name: pc, annotations: {tessera.io/queue: "
       "training}}\nspec:\n  priorityClassName: nope\n"
       "  containers: [{name: c, command: [x]}]\n",
       400, "spec.priorityClassName: unknown priority class \"nope\" (known: "},
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
      {"register a name with a space", "POST", "/v1/agents/register", root,
       "{\"bootId\": \"x\", \"node\": {\"name\": \"a b\", \"cpu\": 1, \"memory\": 1}}", 400,
       "node.name: \"a b\": a node name must be"},
      // An agent's words are checked; an admin's (a pool of another system) are its own.
      {"register a label with a newline", "POST", "/v1/agents/register", "agent-token-0123456789",
       "{\"bootId\": \"x\", \"node\": {\"name\": \"n\", \"cpu\": 1, \"memory\": 1, "
       "\"labels\": {\"zone\": \"a\\nb\"}}}",
       400, "node.labels[zone]"},
      {"aliases that multiply", "POST", "/v1/jobs", root, bomb, 400,
       "document expands to more than"},
  };
  for (const auto& c : cases) {
    Resp r = Do(c.method, c.path, c.token, c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.raw.substr(0, 300);
    ASSERT_TRUE(r.body.is_object() && r.body.contains("error"))
        << c.name << ": body " << r.raw.substr(0, 200);
    std::string msg = r.body["error"]["message"];
    EXPECT_NE(msg.find(c.want), std::string::npos) << c.name << ": message \"" << msg << "\"";
    // Sending any of these again cannot help.
    EXPECT_EQ(r.body["error"]["retryable"], false) << c.name;
  }
  // curl -d's default type is a form, which cpp-httplib caps at 8 KiB: the 413 says so.
  {
    httplib::Client c(api_->url());
    auto r = c.Post("/v1/jobs", {{"Authorization", "Bearer " + root}},
                    Job("form", "training") + "# " + std::string(9000, 'x') + "\n",
                    "application/x-www-form-urlencoded");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_NE(r->body.find("application/x-www-form-urlencoded (curl -d's default"),
              std::string::npos)
        << r->body;
  }
  // A POST without Content-Length (curl -X POST with no -d) is answered at once, 411, saying
  // what to send (httplib's client always sends the header: a raw socket, left open as curl
  // leaves it, so a server waiting for a body would not answer).
  {
    const std::string url = api_->url();
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1))));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string request =
        "POST /v1/jobs/x/cancel HTTP/1.1\r\nHost: t\r\nAuthorization: "
        "Bearer " +
        root + "\r\nConnection: close\r\n\r\n";
    ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
    std::string answer;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) answer.append(buf, n);
    ::close(fd);
    EXPECT_EQ(answer.rfind("HTTP/1.1 411", 0), 0u) << answer;
    EXPECT_NE(answer.find("a POST needs a Content-Length header, 0 for no body"), std::string::npos)
        << answer;
  }
  // Still serving, nothing half-accepted; the store took every write (ready).
  EXPECT_EQ(Do("GET", "/healthz", "").status, 200);
  EXPECT_EQ(Do("GET", "/readyz", "").status, 200);
  Resp list = Do("GET", "/v1/jobs", root);
  EXPECT_EQ(list.status, 200);
  EXPECT_TRUE(list.body["items"].empty());
}

TEST(RouteTemplate, NamesTheRouteNotTheObject) {
  EXPECT_EQ(RouteTemplate("/v1/jobs"), "/v1/jobs");
  EXPECT_EQ(RouteTemplate("/v1/jobs/train-7"), "/v1/jobs/{name}");
  EXPECT_EQ(RouteTemplate("/v1/jobs/train-7/logs"), "/v1/jobs/{name}/logs");
  EXPECT_EQ(RouteTemplate("/v1/nodes/gpu-1/drain"), "/v1/nodes/{name}/drain");
  EXPECT_EQ(RouteTemplate("/v1/agents/gpu-1/heartbeat"), "/v1/agents/{name}/heartbeat");
  EXPECT_EQ(RouteTemplate("/v1/queues/ml"), "/v1/queues/{name}");
  EXPECT_EQ(RouteTemplate("/ui/assets/index.js"), "/ui");
  for (const char* unknown : {"/wp-admin", "/v1/jobs/x/y/z", "/v1/jobs/x/nope", "/v1/things/x",
                              "/v1/agents/x", "/v1/jobs//logs", "/v2/jobs"})
    EXPECT_EQ(RouteTemplate(unknown), "other") << unknown;
}

// Every answer is counted by route pattern, method and status, and timed (an SRE alerts on
// 5xx and on latency); a name never becomes a label.
TEST_F(ApiTest, RequestsAreCountedAndTimedByRoute) {
  const std::string root = "root-token-0123456789";
  auto count = [](const std::string& series) {
    const std::string v = metrics::testing::SeriesValue(ProcessMetrics().RenderText(), series);
    return v == "absent" ? 0.0 : std::stod(v);
  };
  const std::string missing =
      "tessera_http_requests_total{route=\"/v1/jobs/{name}\",method=\"GET\",code=\"404\"}";
  const std::string scans =
      "tessera_http_requests_total{route=\"other\",method=\"GET\",code=\"404\"}";
  const std::string timed =
      "tessera_http_request_duration_seconds_count{route=\"/v1/jobs/{name}\",method=\"GET\"}";
  const double missing0 = count(missing), scans0 = count(scans), timed0 = count(timed);
  EXPECT_EQ(Do("GET", "/v1/jobs/nope-1", root).status, 404);
  EXPECT_EQ(Do("GET", "/v1/jobs/nope-2", root).status, 404);
  EXPECT_EQ(Do("GET", "/wp-login.php", "").status, 404);
  // (The server's logger counts a request once its answer is written: the client may read
  // the answer first.)
  for (int i = 0; i < 500 && (count(missing) < missing0 + 2 || count(scans) < scans0 + 1 ||
                              count(timed) < timed0 + 2);
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(count(missing), missing0 + 2);
  EXPECT_EQ(count(scans), scans0 + 1);
  EXPECT_EQ(count(timed), timed0 + 2);
  EXPECT_EQ(ProcessMetrics().RenderText().find("nope-1"), std::string::npos);
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
  EXPECT_EQ(Do("GET", "/v1/jobs", agent).status, 403);

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
  // The node list shows another queue's allocation as capacity in use only (no job, no id),
  // and nobody the commands or environments (describe shows those to the job's queue).
  Resp reg = Do("POST", "/v1/agents/register", root,
                R"({"bootId": "b1", "node": {"name": "n1", "cpu": 8, "memory": "64Gi", "gpus": )"
                R"({"model": "A100-80GB", "count": 2, "virtual": true}}})");
  ASSERT_LT(reg.status, 300) << reg.raw;
  ASSERT_TRUE(cp_->RunCycle().ok());
  auto holders = [&](const std::string& token) {
    Resp r = Do("GET", "/v1/nodes?allocations=true", token);
    EXPECT_EQ(r.raw.find("\"command\""), std::string::npos) << r.raw;
    EXPECT_EQ(r.raw.find("\"env\""), std::string::npos) << r.raw;
    std::vector<std::string> out;
    for (const auto& n : r.body["items"])
      for (const auto& x : n["allocations"]) out.push_back(x.value("job", "?"));
    std::sort(out.begin(), out.end());
    return out;
  };
  EXPECT_EQ(holders(root), (std::vector<std::string>{"a-train", "b-debug"}));
  EXPECT_EQ(holders(a), (std::vector<std::string>{"?", "a-train"}));
  // Of another queue's allocation, only what capacity in use needs: no identity (runAs,
  // securityContext), attempt, times or limits.
  const Json listing = Do("GET", "/v1/nodes?allocations=true", a).body;
  for (const auto& n : listing["items"])
    for (const auto& x : n["allocations"]) {
      if (x.contains("job")) continue;
      std::vector<std::string> keys;
      for (const auto& [k, v] : x.items()) keys.push_back(k);
      std::sort(keys.begin(), keys.end());
      EXPECT_EQ(keys, (std::vector<std::string>{"placement", "state", "task"})) << x.dump();
      EXPECT_TRUE(x["placement"].contains("node")) << x.dump();
    }
  EXPECT_EQ(holders(agent), (std::vector<std::string>{"?", "?"}));
  // Own job: cancel works (it runs: its task is being stopped).
  Resp cancel = Do("POST", "/v1/jobs/a-train/cancel", a);
  EXPECT_EQ(cancel.status, 200);
  EXPECT_EQ(cancel.body["state"], "Terminating");
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
  for (const char* want :
       {"team-a submit job/a-train ok", "team-b submit job/b-debug ok",
        "team-a POST /v1/jobs denied: token \"team-a\" may not submit to queue \"debug\"",
        "team-a POST /v1/queues denied: only an admin may create queues and priority classes",
        "team-a GET /v1/audit denied: only an admin may read the audit log",
        "team-a POST /v1/tokens denied: only an admin may create tokens",
        "team-a cancel job/a-train ok", "root create-token token/team-c ok"})
    EXPECT_NE(std::find(audit.begin(), audit.end(), want), audit.end()) << want;
  // Numbered without gaps: a refused request takes no number.
  for (size_t i = 1; i < records.size(); ++i)
    EXPECT_EQ(records[i]["seq"].get<int64_t>(), records[i - 1]["seq"].get<int64_t>() + 1);
  // Pages say where the next begins and whether there is one.
  Json page = Do("GET", "/v1/audit?limit=2", root).body;
  ASSERT_EQ(page["items"].size(), 2u);
  EXPECT_TRUE(page["more"].get<bool>());
  Json rest =
      Do("GET", "/v1/audit?limit=10000&after=" + std::to_string(page["next"].get<int64_t>()), root)
          .body;
  EXPECT_EQ(rest["items"].size() + 2, records.size());
  EXPECT_FALSE(rest["more"].get<bool>());
}

// A stolen per-node agent token cannot register or heartbeat as another node (Kubernetes'
// NodeRestriction); the refusal is audited.
TEST_F(ApiTest, ANodeBoundAgentTokenSpeaksForItsNodesAlone) {
  const std::string root = "root-token-0123456789";
  Resp tok = Do("POST", "/v1/tokens", root,
                R"({"name": "rack1", "role": "agent", "nodes": "gpu-[01-02]"})");
  ASSERT_EQ(tok.status, 201) << tok.raw;
  EXPECT_EQ(tok.body["nodes"], "gpu-01,gpu-02");
  const std::string agent = tok.body["token"];
  auto reg = [](const std::string& node) {
    return "{\"bootId\": \"x\", \"node\": {\"name\": \"" + node + "\", \"cpu\": 1, \"memory\": 1}}";
  };
  EXPECT_EQ(Do("POST", "/v1/agents/register", agent, reg("gpu-02")).status, 200);
  Resp other = Do("POST", "/v1/agents/register", agent, reg("gpu-03"));
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(other.body["error"]["message"],
            "token \"rack1\" is bound to node(s) gpu-01,gpu-02 and may not speak for node "
            "\"gpu-03\"")
      << other.raw;
  // A node registered by someone else is not its to heartbeat for.
  ASSERT_EQ(Do("POST", "/v1/agents/register", root, reg("gpu-03")).status, 200);
  EXPECT_EQ(Do("POST", "/v1/agents/gpu-03/heartbeat", agent, R"({"epoch": 1})").status, 403);
  // The fleet-wide agent token still speaks for any node.
  EXPECT_EQ(Do("POST", "/v1/agents/register", "agent-token-0123456789", reg("gpu-04")).status, 200);
  bool listed = false;
  const Json tokens = Do("GET", "/v1/tokens", root).body["items"];
  for (const auto& t : tokens)
    if (t["name"] == "rack1") listed = t["nodes"] == "gpu-01,gpu-02";
  EXPECT_TRUE(listed);
  bool audited = false;
  const Json audit = Do("GET", "/v1/audit", root).body["items"];
  for (const auto& x : audit)
    audited = audited || (x["principal"] == "rack1" && x["object"] == "/v1/agents/register" &&
                          x["result"].get<std::string>().starts_with("denied: token"));
  EXPECT_TRUE(audited);
}

// A second server on a port in use fails to bind (no SO_REUSEPORT sharing the port, which
// would split requests and heartbeats between two control planes).
TEST_F(ApiTest, ASecondServerOnTheSamePortFailsToBind) {
  ApiOptions ao;
  ao.port = api_->port();
  ApiServer second(*cp_, ao);
  Status s = second.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("cannot bind"), std::string::npos) << s.ToString();
}

TEST_F(ApiTest, OpenApiDocumentDescribesTheVersionedPaths) {
  Resp r = Do("GET", "/openapi.json", "");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.body["openapi"], "3.0.3");
  for (const char* p : {"/v1/jobs", "/v1/jobs/{name}", "/v1/jobs/{name}/describe",
                        "/v1/jobs/{name}/cancel", "/v1/jobs/{name}/scale", "/v1/events",
                        "/v1/queues", "/v1/priorityclasses", "/v1/nodes", "/v1/pools", "/v1/audit",
                        "/v1/tokens", "/v1/agents/register", "/v1/agents/{node}/heartbeat",
                        "/v1/queues/{name}", "/v1/priorityclasses/{name}", "/v1/tokens/{name}"})
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

TEST_F(ApiTest, IdempotencyKeyMakesARetryReturnTheStoredJobInsteadOfASecond) {
  const std::string root = "root-token-0123456789";
  httplib::Headers key = {{"Idempotency-Key", "submit-7f3a"}};
  Resp first = Do("POST", "/v1/jobs", root, Job("idem", "debug"), key);
  ASSERT_EQ(first.status, 201) << first.raw;
  // The client never saw that answer and retries: same key, same job, nothing new.
  Resp retry = Do("POST", "/v1/jobs", root, Job("idem", "debug"), key);
  ASSERT_EQ(retry.status, 200) << retry.raw;
  EXPECT_EQ(retry.body["items"][0]["name"], "idem");
  // Without the key the name collides, as before.
  EXPECT_EQ(Do("POST", "/v1/jobs", root, Job("idem", "debug")).status, 409);
  // The same key with another document is not a retry: refused, or that job would be lost.
  Resp other = Do("POST", "/v1/jobs", root, Job("idem-2", "debug"), key);
  EXPECT_EQ(other.status, 409) << other.raw;
  EXPECT_NE(other.raw.find("already used for a different document (job idem)"), std::string::npos)
      << other.raw;
  // Keys are each caller's own: another tenant's same key is a submission of its own.
  Resp tenant = Do("POST", "/v1/jobs", "team-b-token-0123456789", Job("idem-b", "debug"), key);
  EXPECT_EQ(tenant.status, 201) << tenant.raw;
  // Generated names: a retry does not create a second job either.
  const std::string unnamed =
      "apiVersion: tessera.io/v1\nkind: Job\nspec:\n  queue: debug\n  tasks: [{replicas: 1, "
      "command: [\"true\"]}]\n";
  httplib::Headers key2 = {{"Idempotency-Key", "unnamed-1"}};
  Resp g1 = Do("POST", "/v1/jobs", root, unnamed, key2);
  Resp g2 = Do("POST", "/v1/jobs", root, unnamed, key2);
  ASSERT_EQ(g1.status, 201);
  ASSERT_EQ(g2.status, 200);
  EXPECT_EQ(g1.body["items"][0]["name"], g2.body["items"][0]["name"]);
  EXPECT_EQ(Do("GET", "/v1/jobs?queue=debug", root).body["items"].size(), 3u);
  // The key is durable: after a restart of the control plane a retry still replays.
  api_->Stop();
  cp_.reset();
  auto st = store::OpenSqliteStore(dir_);
  ASSERT_TRUE(st.ok());
  ControlPlaneOptions o;
  o.run_scheduler = false;
  auto cp = ControlPlane::Open(std::move(*st), std::make_unique<testing::ScriptedEngine>(), o);
  ASSERT_TRUE(cp.ok());
  cp_ = std::move(*cp);
  bool replayed = false;
  const Principal by_root{"root", Role::kAdmin, {"*"}};
  auto again = cp_->Submit(by_root, Job("idem", "debug"), "submit-7f3a", &replayed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE(replayed);
  EXPECT_EQ(cp_->Submit(by_root, Job("idem-2", "debug"), "submit-7f3a").status().code(),
            StatusCode::kAlreadyExists);
  EXPECT_EQ(cp_->counts().jobs, 3u);
  EXPECT_EQ(cp_->Submit(kAdmin, Job("k", "debug"), "bad key with spaces").status().code(),
            StatusCode::kInvalidArgument);
}

// A node agent's logs endpoint (agent-protocol.md), serving one growing log.
class FakeAgentLogs {
 public:
  FakeAgentLogs() {
    http_.Get(R"(/v1/logs/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> l(mu_);
      if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_) {
        res.status = 401;  // as the agent with --logs-token
        res.set_content("{\"error\":\"missing or wrong bearer token\"}", "application/json");
        return;
      }
      if (!removed_.empty()) {  // as the agent answers once its retention removed the folder
        res.status = 410;
        res.set_content(Json{{"error", removed_}}.dump(), "application/json");
        return;
      }
      if (req.get_param_value("stream") == "stderr" && !err_.empty()) {
        res.set_header("X-Tessera-Log-Size", std::to_string(err_.size()));
        res.set_content(err_, "text/plain");
        return;
      }
      if (req.get_param_value("stream") == "stderr") {  // as the agent answers: no such file
        res.status = 404;
        res.set_content(
            "{\"error\":\"no logs for allocation " + std::string(req.matches[1]) + "\"}",
            "application/json");
        return;
      }
      size_t off = std::min(
          log_.size(),
          static_cast<size_t>(std::stoll(req.has_param("offset") ? req.get_param_value("offset")
                                                                 : std::string("0"))));
      res.set_header("X-Tessera-Log-Size", std::to_string(log_.size()));
      res.set_header("X-Next-Offset", std::to_string(log_.size()));
      res.set_content(log_.substr(off), "text/plain");
    });
    port_ = http_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { http_.listen_after_bind(); });
  }
  ~FakeAgentLogs() {
    http_.stop();
    thread_.join();
  }
  void Append(const std::string& s) {
    std::lock_guard<std::mutex> l(mu_);
    log_ += s;
  }
  void AppendErr(const std::string& s) {
    std::lock_guard<std::mutex> l(mu_);
    err_ += s;
  }
  void Remove(const std::string& notice) {  // the agent's --task-retention removed the folder
    std::lock_guard<std::mutex> l(mu_);
    removed_ = notice;
  }
  void RequireToken(const std::string& t) {  // tessera agent --logs-token
    std::lock_guard<std::mutex> l(mu_);
    token_ = t;
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // The registration of node n1 (one virtual GPU) whose agent serves logs here.
  Json Registration() const {
    return {{"node",
             {{"name", "n1"},
              {"cpu", 8},
              {"memory", "64Gi"},
              {"gpus", {{"model", "A100-80GB"}, {"count", 1}, {"virtual", true}}}}},
            {"agentVersion", "test"},
            {"bootId", "b1"},
            {"logsUrl", url()}};
  }

 private:
  httplib::Server http_;
  std::mutex mu_;
  std::string log_, err_, token_, removed_;
  int port_ = 0;
  std::thread thread_;
};

// A node agent's logsUrl must name the address it connects from: the server fetches task logs
// there for whoever asks, so another host would let a compromised node send the server's
// requests anywhere it can reach (SSRF). --agent-logs-any-host lifts the check.
TEST_F(ApiTest, AnAgentsLogsUrlMustNameTheAddressItConnectsFrom) {
  const std::string agent = "agent-token-0123456789";
  auto reg = [](const std::string& url) {
    return Json{{"node", {{"name", "n1"}, {"cpu", 8}, {"memory", "64Gi"}}},
                {"agentVersion", "test"},
                {"bootId", "b1"},
                {"logsUrl", url}}
        .dump();
  };
  Resp r = Do("POST", "/v1/agents/register", agent, reg("http://10.9.9.9:9101"));
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(
      r.body["error"]
          .value("message", "")
          .rfind("logsUrl: \"http://10.9.9.9:9101\": host 10.9.9.9 is not the address this agent "
                 "connects from (127.0.0.1)",
                 0),
      0u)
      << r.raw;
  EXPECT_EQ(cp_->ListNodes(kAdmin)["items"].size(), 0u);
  for (const char* bad :
       {"file:///etc/passwd", "http://127.0.0.1:9101/admin?x=", "http://user@127.0.0.1:9101",
        "http://:9101", "gopher://127.0.0.1:1", "https://10.9.9.9:9101"}) {
    Resp b = Do("POST", "/v1/agents/register", agent, reg(bad));
    EXPECT_EQ(b.status, 400) << bad << ": " << b.raw;
    EXPECT_NE(b.raw.find("logsUrl: "), std::string::npos) << b.raw;
  }
  for (const char* good :
       {"http://127.0.0.1:9101", "http://127.0.0.1:9101/", "https://localhost:9101", ""}) {
    Resp g = Do("POST", "/v1/agents/register", agent, reg(good));
    EXPECT_EQ(g.status, 200) << good << ": " << g.raw;
  }
  ASSERT_EQ(Do("POST", "/v1/agents/register", agent, reg("http://127.0.0.1:9101")).status, 200);
  // A heartbeat moving it elsewhere is refused too (before the control plane sees it).
  Resp hb = Do("POST", "/v1/agents/n1/heartbeat", agent,
               Json{{"bootId", "b1"}, {"logsUrl", "http://169.254.169.254:80"}}.dump());
  EXPECT_EQ(hb.status, 400) << hb.raw;
  EXPECT_NE(hb.raw.find("host 169.254.169.254 is not the address"), std::string::npos) << hb.raw;
  // Agents that serve logs on another network: the server's --agent-logs-any-host.
  api_->Stop();
  ApiOptions ao;
  ao.port = 0;
  ao.agent_logs_any_host = true;
  api_ = std::make_unique<ApiServer>(*cp_, ao);
  ASSERT_TRUE(api_->Start().ok());
  EXPECT_EQ(Do("POST", "/v1/agents/register", agent, reg("http://10.9.9.9:9101")).status, 200);
}

// A waiting follow holds a server thread: at most a quarter of them (16 of 64) wait at once;
// the others answer at once with Retry-After (the CLI then asks again a second later), and
// heartbeats keep threads to be served on.
TEST_F(ApiTest, AtMostAQuarterOfTheThreadsWaitInLogsFollow) {
  const std::string root = "root-token-0123456789";
  FakeAgentLogs agent;
  RunningTalk talk;
  ASSERT_NO_FATAL_FAILURE(RunTalkOn(agent.Registration(), &talk));
  agent.Append("hello\n");
  constexpr int kFollowers = 17;
  std::vector<Resp> got(kFollowers);
  std::vector<std::thread> followers;
  for (int i = 0; i < kFollowers; ++i)
    followers.emplace_back(
        [&, i] { got[i] = Do("GET", "/v1/jobs/talk/logs?task=0&follow=true&offset=6", root); });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  agent.Append("world\n");
  for (auto& t : followers) t.join();
  int told_to_retry = 0;
  for (const Resp& g : got) {
    ASSERT_EQ(g.status, 200) << g.raw;
    if (!g.Header("Retry-After").empty()) {
      ++told_to_retry;
      EXPECT_EQ(g.raw, "");
      EXPECT_EQ(g.Header("X-Next-Offset"), "6");
    } else {
      EXPECT_EQ(g.raw, "world\n");
    }
  }
  EXPECT_EQ(told_to_retry, kFollowers - 16);
  // Their slots are free again: a follow waits.
  Resp again = Do("GET", "/v1/jobs/talk/logs?task=0&follow=true&offset=6", root);
  EXPECT_EQ(again.raw, "world\n");
  EXPECT_EQ(again.Header("Retry-After"), "");
}

TEST_F(ApiTest, LogsFollowWaitsForNewBytesAndEndsWithTheTask) {
  const std::string root = "root-token-0123456789";
  FakeAgentLogs agent;
  RunningTalk talk;
  ASSERT_NO_FATAL_FAILURE(RunTalkOn(agent.Registration(), &talk));
  const std::string& alloc = talk.alloc;
  auto beat = [&](const std::string& state) { ReportTalk(talk, state); };
  agent.Append("hello\n");
  Resp a = Do("GET", "/v1/jobs/talk/logs?task=0&follow=true&offset=0", root);
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.raw, "hello\n");
  EXPECT_EQ(a.Header("X-Next-Offset"), "6");
  EXPECT_EQ(a.Header("X-Tessera-Allocation"), alloc);
  EXPECT_EQ(a.Header("X-Tessera-Task-Ended"), "false");
  // Nothing new yet: the request waits until the bytes come (long poll), then returns them.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    agent.Append("world\n");
  });
  Resp b = Do("GET", "/v1/jobs/talk/logs?task=0&follow=true&offset=6", root);
  writer.join();
  ASSERT_EQ(b.status, 200);
  EXPECT_EQ(b.raw, "world\n");
  EXPECT_EQ(b.Header("X-Next-Offset"), "12");

  // The CLI: `tessera logs -f` prints everything and returns when the task ends.
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin)) {
    beat("succeeded");
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest): the CLI part is skipped";
  }
  std::string out_file = dir_ + "/logs.out";
  std::string cmd = std::string(bin) + " logs talk -f --server " + api_->url() + " --token " +
                    root + " > " + out_file + " 2>&1";
  int rc = -1;
  std::thread cli([&] { rc = std::system(cmd.c_str()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  agent.Append("last line\n");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  beat("succeeded");  // the process is gone: its log is complete
  cli.join();
  EXPECT_EQ(WEXITSTATUS(rc), 0);
  std::ifstream in(out_file);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "hello\nworld\nlast line\n");
  // Once ended, a follow answers at once.
  Resp c = Do("GET", "/v1/jobs/talk/logs?task=0&follow=true&offset=22", root);
  EXPECT_EQ(c.Header("X-Tessera-Task-Ended"), "true");
  EXPECT_EQ(Do("GET", "/v1/jobs/talk/logs?task=3", root).status, 400);
  // The agent has no such output: the API's error shape, naming the task; the CLI says so.
  Resp none = Do("GET", "/v1/jobs/talk/logs?task=0&stream=stderr", root);
  EXPECT_EQ(none.status, 404) << none.raw;
  ASSERT_TRUE(none.body.is_object() && none.body["error"].is_object()) << none.raw;
  EXPECT_NE(none.body["error"]["message"].get<std::string>().find(
                "job \"talk\" task 0: no stderr on its node"),
            std::string::npos)
      << none.raw;
  auto [rc_none, out_none] =
      CaptureCommand(std::string(bin) + " logs talk --stream stderr --server " + api_->url() +
                     " --token " + root + " 2>&1");
  EXPECT_EQ(rc_none, 1) << out_none;
  EXPECT_NE(out_none.find("Error from server (NotFound)"), std::string::npos) << out_none;
}

// An agent whose logs endpoint requires a token (--logs-token) gives it to the server when it
// registers and in its heartbeats; the server's logs proxy sends it. Nothing else gets in.
TEST_F(ApiTest, TheLogsProxySendsTheTokenTheAgentGave) {
  const std::string root = "root-token-0123456789";
  FakeAgentLogs agent;
  agent.RequireToken("s3cret");
  Json reg = agent.Registration();
  reg["logsToken"] = "s3cret";
  RunningTalk talk;
  ASSERT_NO_FATAL_FAILURE(RunTalkOn(reg, &talk));
  const std::string& alloc = talk.alloc;
  const int64_t epoch = talk.epoch;
  agent.Append("hello\n");
  Resp a = Do("GET", "/v1/jobs/talk/logs?task=0", root);
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.raw, "hello\n");
  // Not to be read without it: a request of its own is refused...
  httplib::Client direct(agent.url());
  auto anon = direct.Get(("/v1/logs/" + alloc).c_str());
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
  // ...and so is the proxy once the server has no token (an agent registered without one).
  reg.erase("logsToken");
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, reg).ok());
  Resp refused = Do("GET", "/v1/jobs/talk/logs?task=0", root);
  EXPECT_EQ(refused.status, 503) << refused.raw;
  EXPECT_NE(refused.raw.find("answered HTTP 401"), std::string::npos) << refused.raw;
  // A heartbeat gives it again (a restarted server learns it so).
  ASSERT_TRUE(cp_->Heartbeat(kAdmin, "n1", {{"epoch", epoch}, {"logsToken", "s3cret"}}).ok());
  EXPECT_EQ(Do("GET", "/v1/jobs/talk/logs?task=0", root).raw, "hello\n");
  // The token is never shown.
  EXPECT_EQ(Do("GET", "/v1/nodes?allocations=true", root).raw.find("s3cret"), std::string::npos);

  // Nor stored: a restarted server has none until the agent's next heartbeat. Meanwhile a
  // request says so, and a follow waits for it.
  RestartServer();
  Resp early = Do("GET", "/v1/jobs/talk/logs?task=0", root);
  EXPECT_EQ(early.status, 503) << early.raw;
  EXPECT_NE(early.raw.find("has not heard from that agent since"), std::string::npos) << early.raw;
  std::thread beat([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_TRUE(cp_->Heartbeat(kAdmin, "n1", {{"epoch", epoch}, {"logsToken", "s3cret"}}).ok());
  });
  Resp follow = Do("GET", "/v1/jobs/talk/logs?task=0&follow=true&offset=0", root);
  beat.join();
  EXPECT_EQ(follow.status, 200) << follow.raw;
  EXPECT_EQ(follow.raw, "hello\n");
}

// The API promises at most 1 MiB per logs request; an agent (or whoever holds an agent
// token and registered a node) answering more is refused, 502 naming it, without the server
// holding the whole answer: the audit's 800 MiB answer took its RSS from 38 MB to 1.25 GB.
TEST_F(ApiTest, TheLogsProxyRefusesAnAgentAnsweringMoreThanOneChunk) {
  const std::string root = "root-token-0123456789";
  FakeAgentLogs agent;  // (serves the whole log from the offset, whatever the limit)
  RunningTalk talk;
  ASSERT_NO_FATAL_FAILURE(RunTalkOn(agent.Registration(), &talk));
  agent.Append(std::string(1 << 20, 'x'));  // one chunk exactly: passed on
  Resp one = Do("GET", "/v1/jobs/talk/logs?task=0", root);
  ASSERT_EQ(one.status, 200) << one.raw.substr(0, 300);
  EXPECT_EQ(one.raw.size(), size_t{1} << 20);
  agent.Append("z");  // one byte more than a chunk: within the slack for an error's words, but
                      // no log answer is that long
  EXPECT_EQ(Do("GET", "/v1/jobs/talk/logs?task=0", root).status, 502);
  agent.Append(std::string(32 << 20, 'y'));
  Resp big = Do("GET", "/v1/jobs/talk/logs?task=0", root);
  EXPECT_EQ(big.status, 502) << big.raw.substr(0, 300);
  EXPECT_LT(big.raw.size(), 4096u);
  EXPECT_EQ(big.body["error"]
                .value("message", "")
                .rfind("job \"talk\" task 0: node agent at " + agent.url() +
                           " answered more than 1 MiB, the most one logs request returns",
                       0),
            0u)
      << big.raw.substr(0, 300);
}

// The agent removed a finished task's folder after its retention (--task-retention) and
// answers 410 saying so: `tessera logs`, following or not, shows its words as NotFound, not
// as an unavailable agent to try again.
TEST_F(ApiTest, LogsTheAgentRemovedAfterItsRetentionSaySo) {
  const std::string root = "root-token-0123456789";
  FakeAgentLogs agent;
  RunningTalk talk;
  ASSERT_NO_FATAL_FAILURE(RunTalkOn(agent.Registration(), &talk));
  ASSERT_NO_FATAL_FAILURE(ReportTalk(talk, "succeeded"));
  const std::string notice = "logs of job talk task 0 (allocation " + talk.alloc +
                             ") were removed after 24h (the agent's --task-retention)";
  agent.Remove(notice);
  for (const char* query : {"?task=0", "?task=0&follow=true&offset=0"}) {
    Resp r = Do("GET", std::string("/v1/jobs/talk/logs") + query, root);
    EXPECT_EQ(r.status, 404) << query << ": " << r.raw;
    Json e = Json::parse(r.raw, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.raw;
    EXPECT_EQ(e["error"].value("message", ""), "job \"talk\" task 0: " + notice);
    EXPECT_EQ(e["error"].value("retryable", true), false);
  }
}

// A task that wrote only to stderr (a failure, usually): `tessera logs` shows its empty
// stdout and points at stderr, as the output is not lost on the user.
TEST_F(ApiTest, LogsOfAnEmptyStdoutPointAtStderr) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  const std::string root = "root-token-0123456789";
  FakeAgentLogs agent;
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, agent.Registration()).ok());
  ASSERT_EQ(Do("POST", "/v1/jobs", root, Job("quiet", "debug")).status, 201);
  ASSERT_TRUE(cp_->RunCycle().ok());
  agent.AppendErr("Traceback: boom\n");
  auto [rc, out] = CaptureCommand(std::string(bin) + " logs quiet --server " + api_->url() +
                                  " --token " + root + " 2>&1");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("(no stdout; stderr has 16 bytes: tessera logs quiet --stream stderr)"),
            std::string::npos)
      << out;
}

// A pool whose nodes run no agent and whose tasks write their output to files the server
// reads (as Slurm does): stdout in <dir>/<job>.<attempt>.out, stderr refused.
class FileLogsBackend : public Backend {
 public:
  explicit FileLogsBackend(std::string dir) : dir_(std::move(dir)) {}
  std::string Kind() const override { return "files"; }
  void Launch(const Dispatch&) override {}
  void Stop(const std::string&, int64_t) override {}
  StatusOr<std::string> LogFile(const spec::JobSpec& job, const Dispatch& d,
                                const std::string& stream) const override {
    if (stream == "stderr")
      return FailedPrecondition("job " + job.job.id + ": stderr is elsewhere");
    return dir_ + "/" + d.job + "." + std::to_string(d.attempt) + ".out";
  }

 private:
  std::string dir_;
};

TEST_F(ApiTest, LogsOfAPoolThatWritesFilesAreReadFromThem) {
  const std::string root = "root-token-0123456789";
  cp_->RegisterBackend("files", std::make_shared<FileLogsBackend>(dir_));
  Json reg = {{"node",
               {{"name", "f1"},
                {"pool", "files"},
                {"cpu", 8},
                {"memory", "64Gi"},
                {"gpus", {{"model", "A100-80GB"}, {"count", 1}, {"virtual", true}}}}},
              {"bootId", "f1"}};
  auto r = cp_->RegisterAgent(kAdmin, reg);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int64_t epoch = (*r)["epoch"];
  ASSERT_EQ(Do("POST", "/v1/jobs", root, Job("batch", "debug")).status, 201);
  ASSERT_TRUE(cp_->RunCycle().ok());
  Json job = cp_->GetJob(kAdmin, "batch", true).value();
  ASSERT_EQ(job["allocations"].size(), 1u) << job.dump();
  const std::string alloc = job["allocations"][0]["id"];

  // Placed, nothing written yet: a clear 404 (following, it waits instead).
  Resp none = Do("GET", "/v1/jobs/batch/logs?task=0", root);
  EXPECT_EQ(none.status, 404) << none.raw;
  EXPECT_NE(none.raw.find("no output yet: " + dir_ + "/batch.1.out does not exist"),
            std::string::npos)
      << none.raw;
  std::ofstream(dir_ + "/batch.1.out") << "hello\n";
  Resp a = Do("GET", "/v1/jobs/batch/logs?task=0", root);
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.raw, "hello\n");
  EXPECT_EQ(a.Header("X-Next-Offset"), "6");
  EXPECT_EQ(a.Header("X-Tessera-Allocation"), alloc);
  EXPECT_EQ(a.Header("X-Tessera-Task-Ended"), "false");
  // Following: waits for new bytes (long poll).
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ofstream(dir_ + "/batch.1.out", std::ios::app) << "world\n";
  });
  Resp b = Do("GET", "/v1/jobs/batch/logs?task=0&follow=true&offset=6", root);
  writer.join();
  ASSERT_EQ(b.status, 200) << b.raw;
  EXPECT_EQ(b.raw, "world\n");
  EXPECT_EQ(b.Header("X-Next-Offset"), "12");
  // The pool's own refusal, as it says it.
  Resp e = Do("GET", "/v1/jobs/batch/logs?task=0&stream=stderr", root);
  EXPECT_EQ(e.status, 409) << e.raw;
  EXPECT_NE(e.raw.find("job batch: stderr is elsewhere"), std::string::npos) << e.raw;
  // Once the task has ended, a follow at the end answers at once, saying so.
  ASSERT_TRUE(cp_->Heartbeat(kAdmin, "f1",
                             Json{{"epoch", epoch},
                                  {"tasks", {{{"allocation", alloc}, {"state", "succeeded"}}}}})
                  .ok());
  Resp c = Do("GET", "/v1/jobs/batch/logs?task=0&follow=true&offset=12", root);
  EXPECT_EQ(c.status, 200);
  EXPECT_EQ(c.raw, "");
  EXPECT_EQ(c.Header("X-Tessera-Task-Ended"), "true");
  // A file that cannot be read is an error naming it (a directory here: root reads anything).
  std::filesystem::remove(dir_ + "/batch.1.out");
  std::filesystem::create_directory(dir_ + "/batch.1.out");
  Resp d = Do("GET", "/v1/jobs/batch/logs?task=0", root);
  EXPECT_EQ(d.status, 409) << d.raw;
  EXPECT_NE(d.raw.find(dir_ + "/batch.1.out is not a regular file"), std::string::npos) << d.raw;
}

// `tessera get nodes` in kubectl's words: a cordoned or drained node (unschedulable) is
// Ready,SchedulingDisabled, or NotReady,SchedulingDisabled once it stops heartbeating.
TEST_F(ApiTest, GetNodesSaysSchedulingDisabledForUnschedulableNodes) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  auto reg = [&](const std::string& name, bool unschedulable) {
    Json node = {{"name", name}, {"cpu", 8}, {"memory", "64Gi"}};
    if (unschedulable) node["unschedulable"] = true;
    auto r = cp_->RegisterAgent(kAdmin, Json{{"node", node}, {"bootId", "boot-" + name}});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
  };
  reg("n-gone", true);
  skew_ = 600;  // n-gone misses its heartbeats
  cp_->CheckNodes();
  reg("n-drained", true);
  reg("n-ok", false);
  // A node with two models says so (not 2x the first one's).
  Json mixed = {
      {"name", "n-mixed"},
      {"cpu", 8},
      {"memory", "64Gi"},
      {"devices",
       {{{"index", 0}, {"model", "A100-80GB"}}, {{"index", 1}, {"model", "H200-141GB"}}}}};
  ASSERT_TRUE(cp_->RegisterAgent(kAdmin, Json{{"node", mixed}, {"bootId", "boot-m"}}).ok());
  std::string cmd = std::string(bin) + " get nodes --server " + api_->url() +
                    " --token root-token-0123456789 2>&1";
  const auto [rc, out] = CaptureCommand(cmd);
  ASSERT_EQ(rc, 0) << out;
  std::map<std::string, std::string> status;  // NAME -> STATUS column
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string name, st;
    words >> name >> st;
    status[name] = st;
  }
  EXPECT_EQ(status["n-ok"], "Ready") << out;
  EXPECT_EQ(status["n-drained"], "Ready,SchedulingDisabled") << out;
  EXPECT_EQ(status["n-gone"], "NotReady,SchedulingDisabled") << out;
  EXPECT_NE(out.find("1xA100-80GB,1xH200-141GB"), std::string::npos) << out;
  // As kubectl: doing it again says the node already was.
  auto run = [&](const std::string& args) {
    return CaptureCommand(std::string(bin) + " " + args + " --server " + api_->url() +
                          " --token root-token-0123456789 2>&1")
        .second;
  };
  EXPECT_EQ(run("cordon n-ok"), "node/n-ok cordoned\n");
  EXPECT_EQ(run("cordon n-ok"), "node/n-ok already cordoned\n");
  EXPECT_EQ(run("drain n-ok"), "node/n-ok already cordoned\nnode/n-ok drained\n");
  EXPECT_EQ(run("uncordon n-ok"), "node/n-ok uncordoned\n");
  EXPECT_EQ(run("uncordon n-ok"), "node/n-ok already uncordoned\n");
  // kubectl describe node: what it is, what it holds, its events.
  const std::string d = run("describe node n-mixed");
  EXPECT_NE(d.find("Name:           n-mixed\nPool:           "), std::string::npos) << d;
  EXPECT_NE(d.find("Capacity:       cpu 8, memory 64Gi, GPUs 1xA100-80GB,1xH200-141GB"),
            std::string::npos)
      << d;
  EXPECT_NE(d.find("Allocated:      cpu 0, memory 0, GPUs 0/2\nAllocations:\n  <none>\n"),
            std::string::npos)
      << d;
  const std::string ok = run("describe node n-ok");
  EXPECT_NE(ok.find("Status:         Ready\n"), std::string::npos) << ok;
  EXPECT_NE(ok.find("NodeCordoned"), std::string::npos) << ok;
  EXPECT_NE(ok.find("NodeUncordoned"), std::string::npos) << ok;
  EXPECT_EQ(run("describe node nope"), "Error from server (NotFound): node \"nope\" not found\n");
}

// `tessera get` filters every kind as it says (or refuses a filter it cannot apply),
// `submit` reads every file before it sends any, `delete` removes queues and revokes tokens.
// TLS flags given for a plain http:// server are refused, not silently unused (they would
// read as "this is encrypted").
TEST_F(ApiTest, TlsFlagsForAPlainHttpServerAreRefused) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  for (const std::string flag : {"--cacert /etc/hostname", "--insecure-skip-tls-verify"}) {
    auto [rc, out] = CaptureCommand(std::string(bin) + " get jobs --server " + api_->url() +
                                    " --token root-token-0123456789 " + flag + " 2>&1");
    EXPECT_EQ(rc, 2) << out;
    EXPECT_NE(out.find(flag.substr(0, flag.find(' ')) + ": the server URL " + api_->url() +
                       " is not https://"),
              std::string::npos)
        << out;
  }
}

// A 401 with no token sent says where one comes from (a server with its own --data-dir
// keeps its admin token there, where the CLI does not look).
TEST_F(ApiTest, CliWithoutATokenSaysWhereOneComesFrom) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  const std::string bare = (std::filesystem::path(dir_) / "no-token-here").string();
  std::filesystem::create_directories(bare);
  const std::string cmd = "cd '" + bare + "' && env -u TESSERA_TOKEN -u TESSERA_TOKEN_FILE " + bin +
                          " get jobs --server " + api_->url();
  auto [rc, out] = CaptureCommand(cmd + " 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("Error from server (Unauthenticated)"), std::string::npos) << out;
  EXPECT_NE(out.find("hint: no token was sent"), std::string::npos) << out;
  EXPECT_NE(out.find("DATA_DIR/admin.token"), std::string::npos) << out;
  // A token that was sent and refused gets no hint: the problem is the token.
  auto [rc2, out2] = CaptureCommand(cmd + " --token wrong-token-0123456789 2>&1");
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_EQ(out2.find("hint:"), std::string::npos) << out2;
}

TEST_F(ApiTest, CliGetFiltersEveryKindSubmitReadsEveryFileFirstDeleteRevokes) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  const std::string cli = std::string(bin) + " ";
  const std::string server = " --server " + api_->url() + " --token root-token-0123456789";
  auto run = [&](const std::string& args) { return CaptureCommand(cli + args + server + " 2>&1"); };
  auto json = [&](const std::string& args) {
    auto [rc, out] = CaptureCommand(cli + args + server + " -o json");
    EXPECT_EQ(rc, 0) << args << ": " << out;
    return rc == 0 ? Json::parse(out)["items"] : Json::array();
  };
  for (const char* name : {"a1", "a2", "a3"})
    ASSERT_TRUE(cp_->Submit(kAdmin, Job(name, "training")).ok());

  // squeue's REASON in the default table: why a pending job waits.
  ASSERT_TRUE(cp_->Hold(kAdmin, "a3", true).ok());
  auto [rc_jobs, out_jobs] = run("get jobs a3");
  ASSERT_EQ(rc_jobs, 0) << out_jobs;
  EXPECT_EQ(out_jobs.substr(0, out_jobs.find('\n')).substr(out_jobs.find("REASON")), "REASON");
  EXPECT_EQ(out_jobs.substr(out_jobs.find('\n') + 1).substr(out_jobs.find("REASON")), "Held\n")
      << out_jobs;
  ASSERT_TRUE(cp_->Hold(kAdmin, "a3", false).ok());
  // kubectl's -o name, which the job commands take back.
  EXPECT_EQ(run("get jobs -o name"), (std::pair<int, std::string>{0, "job/a1\njob/a2\njob/a3\n"}));
  EXPECT_EQ(run("get queues debug -o name"), (std::pair<int, std::string>{0, "queue/debug\n"}));
  EXPECT_EQ(run("get events -o name").first, 2);
  EXPECT_EQ(run("hold job/a3"), (std::pair<int, std::string>{0, "job/a3 held\n"}));
  EXPECT_EQ(run("release jobs/a3"), (std::pair<int, std::string>{0, "job/a3 released\n"}));
  // A name picks one object of every kind; structured, it is the object itself (kubectl).
  auto [rc_q, out_q] = CaptureCommand(cli + "get queues debug" + server + " -o json");
  ASSERT_EQ(rc_q, 0) << out_q;
  EXPECT_EQ(Json::parse(out_q)["name"], "debug") << out_q;
  auto [rc_j, out_j] = CaptureCommand(cli + "get job a1" + server + " -o yaml");
  ASSERT_EQ(rc_j, 0) << out_j;
  EXPECT_EQ(out_j.rfind("name: a1\n", 0) == 0 || out_j.find("\nname: a1\n") != std::string::npos,
            true)
      << out_j;
  EXPECT_EQ(out_j.find("items"), std::string::npos) << out_j;
  EXPECT_EQ(run("get job job/a1 -o name"), (std::pair<int, std::string>{0, "job/a1\n"}));
  // apply says what it did to each object, as kubectl.
  const std::string queues = dir_ + "/queues.yaml";
  std::ofstream(queues) << "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                           "metadata: {name: debug}\nspec: {weight: 1}\n---\n"
                           "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                           "metadata: {name: fresh}\nspec: {weight: 2}\n";
  auto [rc_ap, out_ap] = run("apply -f " + queues);
  EXPECT_EQ(rc_ap, 0) << out_ap;
  EXPECT_NE(out_ap.find("Queue/fresh created"), std::string::npos) << out_ap;
  auto [rc_ap2, out_ap2] = run("apply -f " + queues);
  EXPECT_NE(out_ap2.find("Queue/fresh unchanged"), std::string::npos) << out_ap2;
  // A limit that caps CPUs only: no GPU limit, shown as none (not 0); no parent.
  std::ofstream(queues) << "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                           "metadata: {name: cpuonly}\nspec: {weight: 1, capability: {cpu: 8}}\n";
  ASSERT_EQ(run("apply -f " + queues).first, 0);
  auto [rc_w, out_w] = run("get queues cpuonly -o wide");
  ASSERT_EQ(rc_w, 0) << out_w;
  EXPECT_EQ(out_w.substr(0, out_w.find('\n'))
                .find("NAME      PARENT   WEIGHT   GUARANTEE-GPU   "
                      "LIMIT-GPU   GPU-IN-USE   PENDING   RUNNING   "
                      "LIMIT-CPU   LIMIT-MEMORY   RECLAIMABLE   "
                      "BORROWING"),
            0u)
      << out_w;
  std::istringstream row(out_w.substr(out_w.find('\n') + 1));
  std::vector<std::string> cells{std::istream_iterator<std::string>(row), {}};
  EXPECT_EQ(cells, (std::vector<std::string>{"cpuonly", "<none>", "1", "0", "<none>", "0", "0", "0",
                                             "8", "<none>", "true", "true"}))
      << out_w;
  auto [rc_nf, out_nf] = run("get queues nope");
  EXPECT_EQ(rc_nf, 1) << out_nf;
  EXPECT_NE(out_nf.find("queues \"nope\" not found"), std::string::npos) << out_nf;
  // --limit applies to every list; for events it keeps the newest.
  EXPECT_EQ(json("get queues --limit 1").size(), 1u);
  Json all_events = json("get events");
  Json last = json("get events --limit 2");
  ASSERT_GE(all_events.size(), 3u);
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[1]["seq"], all_events.back()["seq"]);
  // kubectl events --for / --types; -o wide adds what --after pages by, and the time.
  auto [rc_for, out_for] = run("events --for job/a2 -o wide");
  ASSERT_EQ(rc_for, 0) << out_for;
  EXPECT_EQ(
      out_for.rfind("SEQ   TIME                   LAST SEEN   TYPE     REASON      OBJECT", 0), 0u)
      << out_for;
  EXPECT_NE(out_for.find("job/a2"), std::string::npos) << out_for;
  EXPECT_EQ(out_for.find("job/a1"), std::string::npos) << out_for;
  EXPECT_NE(out_for.find("Z   "), std::string::npos) << "RFC 3339, UTC: " << out_for;
  EXPECT_TRUE(json("events --type Warning").empty());
  EXPECT_EQ(json("events --type Normal --for job/a1").size(), 1u) << "Submitted";
  auto [rc_nokind, out_nokind] = run("events --for a1");
  EXPECT_EQ(rc_nokind, 1);
  EXPECT_NE(out_nokind.find("object: \"a1\": expected KIND/NAME"), std::string::npos) << out_nokind;
  EXPECT_NE(run("events --for pod/a1").second.find("KIND job or node"), std::string::npos);
  EXPECT_EQ(json("events --types normal --for Jobs/a1").size(), 1u) << "kubectl's spellings";
  // `tessera events` pages from the oldest, and says where the rest begin.
  auto [rc_ev, out_ev] = run("events --limit 2");
  EXPECT_EQ(rc_ev, 0) << out_ev;
  EXPECT_NE(out_ev.find("(the oldest 2 shown; more may follow: --after " +
                        all_events[1]["seq"].dump() + ";"),
            std::string::npos)
      << out_ev;
  // --state is a job filter, in any case; on other kinds it is refused, not ignored.
  EXPECT_EQ(json("get jobs --state pending").size(), 3u);
  EXPECT_EQ(run("get nodes --state Pending").first, 2);
  EXPECT_EQ(run("get events --queue training").first, 2);

  // A missing second file: nothing is submitted.
  const std::string good = dir_ + "/good.yaml", bad = dir_ + "/bad.yaml";
  std::ofstream(good) << Job("b1", "training");
  std::ofstream(bad) << Job("b2", "no-such-queue");
  auto [rc_miss, out_miss] = run("submit -f " + good + " -f " + dir_ + "/missing.yaml");
  EXPECT_EQ(rc_miss, 2) << out_miss;
  EXPECT_EQ(json("get jobs").size(), 3u) << out_miss;
  // A refused second file: the first one's job is submitted and said to be.
  auto [rc_bad, out_bad] = run("submit -f " + good + " -f " + bad);
  EXPECT_EQ(rc_bad, 1) << out_bad;
  EXPECT_NE(out_bad.find("job/b1 submitted"), std::string::npos) << out_bad;
  EXPECT_NE(out_bad.find(bad + ": nothing from it was submitted"), std::string::npos) << out_bad;
  EXPECT_EQ(json("get jobs").size(), 4u);
  // A queue given to submit: the error says which command creates it.
  const std::string queue = dir_ + "/queue.yaml";
  std::ofstream(queue) << "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\n"
                          "metadata: {name: extra}\nspec: {weight: 1}\n";
  auto [rc_queue, out_queue] = run("submit -f " + queue);
  EXPECT_EQ(rc_queue, 1) << out_queue;
  EXPECT_NE(out_queue.find("a Queue is not a job: create it with `tessera apply -f FILE`"),
            std::string::npos)
      << out_queue;
  // As kubectl, --server and --token may come before the command too.
  auto [rc_first, out_first] = CaptureCommand(cli + server + " get jobs b1 2>&1");
  EXPECT_EQ(rc_first, 0) << out_first;
  EXPECT_NE(out_first.find("b1"), std::string::npos) << out_first;

  // delete: queues, tokens (revoked at once), over DELETE routes an admin alone may use.
  EXPECT_EQ(Do("DELETE", "/v1/queues/debug", "team-b-token-0123456789").status, 403);
  auto [rc_del, out_del] = run("delete queue debug");
  EXPECT_EQ(rc_del, 0) << out_del;
  EXPECT_NE(out_del.find("queue/debug deleted"), std::string::npos) << out_del;
  auto [rc_busy, out_busy] = run("delete queue training");
  EXPECT_EQ(rc_busy, 1) << out_busy;
  EXPECT_NE(out_busy.find("FailedPrecondition"), std::string::npos) << out_busy;
  Json tokens = json("get tokens");
  ASSERT_EQ(tokens.size(), 4u) << tokens.dump();
  EXPECT_EQ(tokens.dump().find("sha256"), std::string::npos);
  EXPECT_EQ(Do("GET", "/v1/jobs", "team-b-token-0123456789").status, 200);
  EXPECT_EQ(run("delete token team-b").first, 0);
  EXPECT_EQ(Do("GET", "/v1/jobs", "team-b-token-0123456789").status, 401);
  // Digits as numbers, as `ls -v`: an array's sweep_2 before sweep_10.
  for (const char* name : {"n_10", "n_2"})
    ASSERT_TRUE(cp_->Submit(kAdmin, Job(name, "training")).ok());
  const std::string listed = run("get jobs").second;
  EXPECT_LT(listed.find("n_2 "), listed.find("n_10 ")) << listed;
  EXPECT_LT(listed.find("a3 "), listed.find("n_2 ")) << listed;
  // -o yaml quotes a string any YAML reader would take for a bool or a number.
  for (const std::string name : {"no", "On", "0x1f", "1e3", ".5"}) {
    ASSERT_EQ(Do("POST", "/v1/jobs", "root-token-0123456789", Job(name, "training")).status, 201);
    auto [rc_y, out_y] = CaptureCommand(cli + "get job " + name + server + " -o yaml");
    EXPECT_NE(out_y.find("name: \"" + name + "\"\n"), std::string::npos) << out_y;
  }
}

TEST_F(ApiTest, CliExitCodesUsageTwoRefusedOneUnreachableThree) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  const std::string server = " --server " + api_->url() + " --token root-token-0123456789";
  struct Case {
    std::string args;
    int code;
  } cases[] = {
      {"--help", 0},
      {"--version", 0},
      {"get jobs" + server, 0},
      {"get jobs --no-such-flag" + server, 2},                // unknown flag (CLI11: 109)
      {"submit" + server, 2},                                 // missing required -f (CLI11: 106)
      {"logs" + server, 2},                                   // missing positional
      {"get jobs --limit abc" + server, 2},                   // not a number (CLI11: 105)
      {"get widgets" + server, 2},                            // not one of the choices
      {"no-such-command", 2},                                 // unknown subcommand
      {"", 2},                                                // a subcommand is required
      {"get jobs -o xml" + server, 2},                        // the command's own usage check
      {"describe job nope" + server, 1},                      // the server refused (404)
      {"get jobs --server http://127.0.0.1:1 --token x", 3},  // nothing listens there
      // A trailing slash is the same server (kubectl takes it); a URL with a path is no server.
      {"get jobs --server " + api_->url() + "/ --token root-token-0123456789", 0},
      {"get jobs --server " + api_->url() + "/v1 --token root-token-0123456789", 2},
      {"apply -f /nonexistent/queue.yaml" + server, 2},  // named, nothing sent
      {"get pool" + server, 0},                          // singular kinds, as kubectl
      {"events --limit 0" + server, 2},                  // out of range, said by the CLI
      {"scale web --replicas -1" + server, 2},
      {"get priorityclass" + server, 0},
  };
  for (const auto& c : cases) {
    std::string cmd = std::string(bin) + " " + c.args + " > /dev/null 2>&1";
    int rc = std::system(cmd.c_str());
    ASSERT_TRUE(WIFEXITED(rc)) << c.args;
    EXPECT_EQ(WEXITSTATUS(rc), c.code) << "tessera " << c.args;
  }
  // A token file that cannot be read is an error naming it, not a request without a token.
  auto [rc, out] = CaptureCommand("env -u TESSERA_TOKEN TESSERA_TOKEN_FILE=/nonexistent/token " +
                                  std::string(bin) + " get jobs --server " + api_->url() + " 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_EQ(out,
            "error: $TESSERA_TOKEN_FILE /nonexistent/token: cannot read: No such file or "
            "directory\n");
}

// `tessera delete job`: an unfinished job is cancelled, a finished one removed, and its name
// can be used again; the refusal of the name says how to free it.
TEST_F(ApiTest, CliDeleteJobCancelsThenRemovesAndFreesTheName) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  const std::string root = "root-token-0123456789";
  auto run = [&](const std::string& args) {
    return CaptureCommand(std::string(bin) + " " + args + " --server " + api_->url() + " --token " +
                          root + " 2>&1");
  };
  ASSERT_EQ(Do("POST", "/v1/jobs", root, Job("again", "training")).status, 201);
  Resp live = Do("POST", "/v1/jobs", root, Job("again", "training"));
  EXPECT_EQ(live.status, 409);
  EXPECT_NE(live.raw.find("already exists (Pending); `tessera delete job again` cancels it"),
            std::string::npos)
      << live.raw;
  auto [rc1, out1] = run("delete job again");
  EXPECT_EQ(rc1, 0) << out1;
  EXPECT_NE(out1.find("job/again cancelled"), std::string::npos) << out1;
  Resp taken = Do("POST", "/v1/jobs", root, Job("again", "training"));
  EXPECT_EQ(taken.status, 409);
  EXPECT_NE(taken.raw.find("already exists (Cancelled); `tessera delete job again` removes it"),
            std::string::npos)
      << taken.raw;
  auto [rc2, out2] = run("delete job job/again");  // kubectl's KIND/NAME, as `-o name` prints
  EXPECT_EQ(rc2, 0) << out2;
  EXPECT_NE(out2.find("job/again deleted"), std::string::npos) << out2;
  EXPECT_EQ(Do("GET", "/v1/jobs/again", root).status, 404);
  EXPECT_EQ(Do("POST", "/v1/jobs", root, Job("again", "training")).status, 201);
  // Another team's job does not exist for you: nothing to delete.
  EXPECT_EQ(Do("DELETE", "/v1/jobs/again", "team-b-token-0123456789").status, 404);
}

// `tessera describe job` prints every part for a plain job and for one with exit-code and
// per-task policies (a dangling JSON reference once aborted it on every job).
TEST_F(ApiTest, CliDescribePrintsEveryPart) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  ASSERT_TRUE(cp_->Submit(kAdmin, Job("plain", "training")).ok());
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: "
                          "coded}\nspec:\n  queue: training\n  policies: [{exitCode: 137, "
                          "action: RestartJob}, {event: TaskCompleted, action: CompleteJob}]\n"
                          "  tasks:\n  - {name: w, replicas: 1, policies: "
                          "[{event: PodFailed, action: RestartTask}], template: {spec: "
                          "{securityContext: {runAsUser: 65534, runAsNonRoot: true}, "
                          "containers: [{name: c, command: [x], resources: {limits: "
                          "{nvidia.com/gpu: 1}}}]}}}\n")
                  .ok());
  ASSERT_TRUE(cp_->Submit(kAdmin,
                          "#!/bin/bash\n#SBATCH -J batch\n#SBATCH -p training\n#SBATCH -t 90\n"
                          "#SBATCH -o out-%j.log\ntrue\n")
                  .ok());
  for (const std::string name : {"plain", "coded", "batch"}) {
    auto [rc, out] = CaptureCommand(std::string(bin) + " describe job " + name + " --server " +
                                    api_->url() + " --token root-token-0123456789 2>&1");
    EXPECT_EQ(rc, 0) << out;
    for (const char* part : {"Name:", "Run as:", "Restart policy:", "Allocations:", "Events:"})
      EXPECT_NE(out.find(part), std::string::npos) << name << ": no " << part << "\n" << out;
    // Who its tasks run as on Tessera's nodes: the securityContext, else the agent decides.
    EXPECT_NE(out.find(name == "coded" ? "Run as:         uid 65534, runAsNonRoot\n"
                                       : "Run as:         the agent's choice (the submitter's "
                                         "account with --run-as-submitter, else the agent's "
                                         "own user)\n"),
              std::string::npos)
        << out;
    if (name == "coded") {
      EXPECT_NE(out.find("exitCode 137=RestartJob TaskCompleted=CompleteJob"), std::string::npos)
          << out;
      EXPECT_NE(out.find("  task w: onFailure=RestartTask"), std::string::npos) << out;
    }
    if (name == "batch") {  // what %j in its file names stands for, and its -t
      EXPECT_NE(out.find("Slurm job id:   3 (%j"), std::string::npos) << out;
      EXPECT_NE(out.find("Time limit:     5400 s, per attempt, from when it first ran"),
                std::string::npos)
          << out;
    }
  }
}

// `tessera logs -f` on a job cancelled before it was ever placed says there is no output
// and fails, instead of ending silently as if the task had printed nothing.
TEST_F(ApiTest, CliLogsFollowOfAJobCancelledBeforePlacementSaysSo) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  ASSERT_TRUE(cp_->Submit(kAdmin, Job("never-placed", "training")).ok());
  ASSERT_EQ(Do("POST", "/v1/jobs/never-placed/cancel", "root-token-0123456789").status, 200);
  auto [rc, out] = CaptureCommand(std::string(bin) + " logs -f never-placed --server " +
                                  api_->url() + " --token root-token-0123456789 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("job never-placed task 0 ended without being placed: no output"),
            std::string::npos)
      << out;
}

// A submission that got no answer (the connection dropped after the request went out) may
// have been stored: `tessera submit` sends it again with the same Idempotency-Key, so the
// server hands back what it stored instead of a second job. Here a raw socket plays a
// server that drops the first request and answers the second.
TEST(CliSubmit, ARequestWithoutAnAnswerIsSentAgainWithTheSameKey) {
  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest)";
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::vector<std::string> keys;
  std::thread server([&] {
    for (int request = 0; request < 2; ++request) {
      int c = ::accept(listener, nullptr, nullptr);
      if (c < 0) return;
      std::string in;
      char buf[4096];
      // Headers, then Content-Length bytes of body.
      while (in.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::read(c, buf, sizeof buf);
        if (n <= 0) break;
        in.append(buf, static_cast<size_t>(n));
      }
      size_t at = in.find("Idempotency-Key: ");
      keys.push_back(at == std::string::npos ? ""
                                             : in.substr(at + 17, in.find("\r\n", at) - at - 17));
      if (request == 1) {
        const std::string body =
            R"({"items":[{"name":"retried","queue":"default","state":"Pending"}]})";
        const std::string answer =
            "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
        ssize_t ignored = ::write(c, answer.data(), answer.size());
        (void)ignored;
      }
      ::close(c);  // the first one: no answer at all
    }
  });
  auto dir =
      std::filesystem::temp_directory_path() / ("tessera_cli_retry_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream(dir / "job.yaml") << "apiVersion: tessera.io/v1\nkind: Job\nmetadata: {name: "
                                       "retried}\nspec: {tasks: [{command: [\"true\"]}]}\n";
  }
  auto [rc, out] = CaptureCommand(
      std::string(bin) + " submit -f " + (dir / "job.yaml").string() +
      " --token t --server http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port)) + " 2>&1");
  server.join();
  ::close(listener);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("job/retried submitted"), std::string::npos) << out;
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_FALSE(keys[0].empty());
  EXPECT_EQ(keys[0], keys[1]) << "the retry carries the first request's key";
}

// POST /v1/jobs/{name}/scale: the job's view, or an error that names what is wrong; a team
// scales its own queue's Deployments only, and every scale is audited. `tessera scale` takes
// NAME or deployment/NAME, as kubectl does, and prints as kubectl does.
TEST_F(ApiTest, ScaleAnswersTheJobOrNamesWhatIsWrong) {
  const std::string root = "root-token-0123456789", a = "team-a-token-0123456789",
                    b = "team-b-token-0123456789";
  const std::string web =
      "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, annotations: "
      "{tessera.io/queue: training}}\nspec:\n  replicas: 2\n  template:\n    spec:\n"
      "      containers:\n      - name: s\n        command: [serve]\n";
  ASSERT_EQ(Do("POST", "/v1/jobs", a, web).status, 201);
  ASSERT_EQ(Do("POST", "/v1/jobs", a, Job("batch", "training")).status, 201);
  Resp ok = Do("POST", "/v1/jobs/web/scale", a, R"({"replicas": 4})");
  ASSERT_EQ(ok.status, 200) << ok.raw;
  EXPECT_EQ(ok.body["name"], "web");
  EXPECT_EQ(ok.body["tasks"], 4);
  EXPECT_EQ(Do("GET", "/v1/jobs/web", a).body["tasks"], 4);
  EXPECT_EQ(Do("POST", "/v1/jobs/web/scale", a, R"({"replicas": 4})").status, 200);
  struct Case {
    const char* name;
    std::string path, token, body;
    int status;
    std::string message;
  } cases[] = {
      {"a batch job", "/v1/jobs/batch/scale", a, R"({"replicas": 3})", 400,
       "job \"batch\" is not a Deployment (submitted as tessera.io/v1 Job): only a Deployment "
       "(apps/v1) scales"},
      {"negative", "/v1/jobs/web/scale", a, R"({"replicas": -1})", 400,
       "replicas: must be 0..100000 (the tasks a job may have), got -1"},
      {"over the bound", "/v1/jobs/web/scale", a, R"({"replicas": 100001})", 400,
       "replicas: must be 0..100000 (the tasks a job may have), got 100001"},
      {"far over", "/v1/jobs/web/scale", a, R"({"replicas": 18446744073709551615})", 400,
       "replicas: too large, got 18446744073709551615"},
      {"a string", "/v1/jobs/web/scale", a, R"({"replicas": "3"})", 400,
       "replicas: expected an integer, got \"3\""},
      {"a fraction", "/v1/jobs/web/scale", a, R"({"replicas": 2.5})", 400,
       "replicas: expected an integer, got 2.5"},
      {"missing", "/v1/jobs/web/scale", a, "{}", 400, "replicas: required ({\"replicas\": N})"},
      {"unknown key", "/v1/jobs/web/scale", a, R"({"replicas": 3, "replica": 3})", 400,
       "replica: unknown field"},
      {"repeated key", "/v1/jobs/web/scale", a, R"({"replicas": 3, "replicas": 5})", 400,
       "body: malformed JSON: key \"replicas\" repeats within an object"},
      {"not an object", "/v1/jobs/web/scale", a, "[3]", 400,
       "body: expected an object {\"replicas\": N}, got [3]"},
      {"unknown job", "/v1/jobs/nope/scale", a, R"({"replicas": 3})", 404,
       "job \"nope\" not found"},
      {"another team's", "/v1/jobs/web/scale", b, R"({"replicas": 3})", 404,
       "job \"web\" not found"},
      {"an agent", "/v1/jobs/web/scale", "agent-token-0123456789", R"({"replicas": 3})", 403,
       "agent tokens may not scale jobs"},
  };
  for (const Case& c : cases) {
    Resp r = Do("POST", c.path, c.token, c.body);
    EXPECT_EQ(r.status, c.status) << c.name << ": " << r.raw;
    EXPECT_EQ(r.body.value("/error/message"_json_pointer, std::string()), c.message)
        << c.name << ": " << r.raw;
  }
  EXPECT_EQ(Do("GET", "/v1/jobs/web", root).body["tasks"], 4) << "no refusal changed it";
  std::vector<std::string> audit;
  const Json records = Do("GET", "/v1/audit", root).body;  // (a temporary's items would dangle)
  for (const auto& x : records["items"])
    audit.push_back(x["principal"].get<std::string>() + " " + x["action"].get<std::string>() + " " +
                    x["object"].get<std::string>() + " " + x["result"].get<std::string>());
  EXPECT_EQ(std::count(audit.begin(), audit.end(), "team-a scale job/web ok"), 1)
      << "scaled once (the same count again writes nothing)";
  EXPECT_EQ(std::count(audit.begin(), audit.end(),
                       "agent POST /v1/jobs/web/scale denied: agent tokens may not scale jobs"),
            1);

  const char* bin = std::getenv("TESSERA_BINARY");
  if (bin == nullptr || !std::filesystem::exists(bin))
    GTEST_SKIP() << "TESSERA_BINARY not set (run through ctest): the CLI part is skipped";
  auto run = [&](const std::string& args) {
    return CaptureCommand(std::string(bin) + " " + args + " --server " + api_->url() + " --token " +
                          a + " 2>&1");
  };
  for (const auto& [args, tasks] :
       std::vector<std::pair<std::string, int>>{{"scale deployment/web --replicas 3", 3},
                                                {"scale web --replicas=1", 1},
                                                {"scale deployment web --replicas 0", 0}}) {
    auto [rc, out] = run(args);
    EXPECT_EQ(rc, 0) << args << ": " << out;
    EXPECT_EQ(out, "deployment.apps/web scaled\n") << args;
    EXPECT_EQ(Do("GET", "/v1/jobs/web", root).body["tasks"], tasks) << args;
  }
  auto [rc_kind, out_kind] = run("scale job/web --replicas 2");
  EXPECT_EQ(rc_kind, 2) << out_kind;
  EXPECT_NE(out_kind.find("only Deployments scale"), std::string::npos) << out_kind;
  auto [rc_batch, out_batch] = run("scale batch --replicas 2");
  EXPECT_EQ(rc_batch, 1) << out_batch;
  EXPECT_EQ(out_batch,
            "Error from server (InvalidArgument): job \"batch\" is not a Deployment (submitted "
            "as tessera.io/v1 Job): only a Deployment (apps/v1) scales\n");
}

}  // namespace
}  // namespace tessera::server
