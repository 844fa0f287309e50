// `tessera demo`: a scripted walkthrough of the embedded default with the seed's jobs
// (docs/agent.md). It starts `tessera server --local-agent` on a temporary data dir and a free
// loopback port (2 nodes x 8 A100-80GB, virtual without a GPU), or talks to a running server
// with --server, and runs the very commands a user would type (`tessera apply`, `submit`,
// `get`, `events`, `logs`, as child processes of this binary) between checks made through the
// API: the 4-task gang trains, a P2 debug job fills every GPU left, and the P0 inference
// service must preempt it. Exit code 0 only when that preemption happened.
#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "model/codec.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct DemoFlags {
  std::string server;  // "" = start our own
  std::string token;
  std::string examples = "examples/seed";
  bool as_is = false;  // submit the seed's commands unchanged
  bool keep = false;   // keep the temporary data dir
  int timeout_seconds = 90;
};

// The seed's job documents, in the order of the walkthrough.
constexpr const char* kGang = "llama-finetune";       // training-gang.yaml, P1, 4 x 2 GPUs
constexpr const char* kDebug = "debug-notebooks";     // debug-fill.yaml, P2, n x 1 GPU
constexpr const char* kInference = "chat-inference";  // inference-deployment.yaml, P0

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string SelfExe() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "tessera" : p.string();
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Every container's command becomes a stand-in that shows what the task was given and then
// idles: this machine has neither the images' programs (torchrun, vLLM) nor GPUs.
void StandInCommands(Json& v) {
  if (v.is_array()) {
    for (auto& x : v) StandInCommands(x);
    return;
  }
  if (!v.is_object()) return;
  if (v.contains("containers") && v["containers"].is_array()) {
    for (auto& c : v["containers"]) {
      if (!c.is_object()) continue;
      std::string orig;
      for (const char* k : {"command", "args"})
        if (c.contains(k) && c[k].is_array())
          for (const auto& a : c[k]) orig += (orig.empty() ? "" : " ") + a.get<std::string>();
      std::string script =
          "echo \"$TESSERA_JOB task $TESSERA_TASK (attempt $TESSERA_ATTEMPT) on $TESSERA_NODE: "
          "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES RANK=${RANK:--} WORLD_SIZE=${WORLD_SIZE:--} "
          "MASTER_ADDR=${MASTER_ADDR:--}\"; echo " +
          ShellQuote("stands in for: " + orig) + "; exec sleep 3600";
      c["command"] = Json::array({"/bin/sh", "-c", script});
      c.erase("args");
    }
  }
  for (auto& [k, x] : v.items()) {
    if (k != "containers") StandInCommands(x);
  }
}

class Demo {
 public:
  explicit Demo(DemoFlags f) : f_(std::move(f)), exe_(SelfExe()) {}
  ~Demo() { StopServer(); }

  int Run() {
    for (const char* doc : {"priority-classes.yaml", "queues.yaml", "training-gang.yaml",
                            "debug-fill.yaml", "inference-deployment.yaml"}) {
      if (!fs::is_regular_file(fs::path(f_.examples) / doc)) {
        std::fprintf(stderr,
                     "tessera demo: %s/%s not found: run it from the repository root or give "
                     "--examples DIR (the seed's documents)\n",
                     f_.examples.c_str(), doc);
        return 2;
      }
    }
    char tmpl[] = "/tmp/tessera-demo-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      std::perror("tessera demo: mkdtemp");
      return 1;
    }
    dir_ = tmpl;
    int rc = f_.server.empty() ? StartServer() : 0;
    if (rc == 0) {
      url_ = f_.server.empty() ? url_ : f_.server;
      if (!f_.token.empty()) token_ = f_.token;
      if (token_.empty()) {
        if (const char* t = std::getenv("TESSERA_TOKEN")) token_ = t;
      }
      rc = Walkthrough();
    }
    StopServer();
    if (f_.keep || rc != 0) {
      std::printf("\n(state kept in %s)\n", dir_.c_str());
    } else {
      std::error_code ec;
      fs::remove_all(dir_, ec);
    }
    return rc;
  }

 private:
  // ---- our own server ----

  int StartServer() {
    const std::string data = dir_ + "/data", agents = dir_ + "/agents";
    Step("Start the embedded default: SQLite + 2 local agents (2 nodes x 8 A100-80GB, virtual)");
    Say("$ TESSERA_LOCAL_AGENT_DIR=" + agents + " tessera server --data-dir " + data +
        " --listen 127.0.0.1:0 --local-agent --bootstrap " + f_.examples + " &");
    std::fflush(stdout);
    server_pid_ = ::fork();
    if (server_pid_ == 0) {
      int fd = ::open((dir_ + "/server.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("TESSERA_LOCAL_AGENT_DIR", agents.c_str(), 1);
      std::vector<std::string> args = {exe_,       "server",      "--data-dir",    data,
                                       "--listen", "127.0.0.1:0", "--local-agent", "--bootstrap",
                                       f_.examples};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(exe_.c_str(), argv.data());
      ::_exit(127);
    }
    if (server_pid_ < 0) {
      std::perror("tessera demo: fork");
      return 1;
    }
    bool exited = false;
    WaitUntil(30, [&] {
      url_ = Trim(ReadFile(data + "/server.url"));
      exited = exited || ::waitpid(server_pid_, nullptr, WNOHANG) != 0;
      return !url_.empty() || exited;
    });
    if (exited) server_pid_ = -1;
    if (url_.empty() || exited) {
      std::fprintf(stderr, "tessera demo: the server did not start; its log:\n%s\n",
                   ReadFile(dir_ + "/server.log").c_str());
      return 1;
    }
    token_ = Trim(ReadFile(data + "/admin.token"));
    Say("serving " + url_ + " (log: " + dir_ + "/server.log)");
    return 0;
  }

  void StopServer() {
    if (server_pid_ <= 0) return;
    ::kill(server_pid_, SIGTERM);  // the server stops its local agents and their tasks
    auto deadline = Clock::now() + std::chrono::seconds(40);
    while (::waitpid(server_pid_, nullptr, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        ::kill(server_pid_, SIGKILL);
        ::waitpid(server_pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    server_pid_ = -1;
  }

  // ---- the walkthrough ----

  int Walkthrough() {
    if (!WaitUntil(30, [&] { return ReadyGpus() > 0; })) return Fail("no node with GPUs is Ready");
    Run({"get", "nodes"});

    Step("1. The seed's priority classes and queues");
    Run({"apply", "-f", Seed("priority-classes.yaml"), "-f", Seed("queues.yaml")});
    Run({"get", "priorityclasses"});
    Run({"get", "queues"});

    Step("2. The 4-task gang training job (P1, 4 x 2 GPUs, all or nothing)");
    Json gang;
    if (!Prepare("training-gang.yaml", gang)) return 1;
    if (!Submit("training-gang.yaml", gang)) return 1;
    if (!WaitUntil(f_.timeout_seconds, [&] { return RunningTasks(kGang) == 4; }))
      return Fail(std::string(kGang) + " did not get its 4 tasks running");
    Run({"get", "jobs", "-o", "wide"});

    const int64_t free_gpus = FreeGpus();
    Step("3. A P2 debug job filling the " + std::to_string(free_gpus) + " GPUs left");
    Json debug;
    if (!Prepare("debug-fill.yaml", debug)) return 1;
    if (free_gpus <= 0) return Fail("no GPU is free after the gang: nothing to fill");
    // Sized so that nothing is left: the P0 service cannot start without preempting.
    Json& replicas = debug["spec"]["tasks"][0]["replicas"];
    if (replicas != free_gpus) {
      Say("(debug-fill.yaml asks for " + replicas.dump() + " x 1 GPU; submitting " +
          std::to_string(free_gpus) + " replicas so that every GPU is taken)");
      replicas = free_gpus;
    }
    if (!Submit("debug-fill.yaml", debug)) return 1;
    if (!WaitUntil(f_.timeout_seconds, [&] { return RunningTasks(kDebug) == free_gpus; }))
      return Fail(std::string(kDebug) + " did not get its " + std::to_string(free_gpus) +
                  " tasks running");
    if (FreeGpus() != 0) return Fail("GPUs are still free after the debug job started");
    Run({"get", "jobs", "-o", "wide"});
    Run({"get", "nodes"});

    Step("4. The P0 inference service (2 x 1 GPU) on a full cluster: it must preempt");
    Json inference;
    if (!Prepare("inference-deployment.yaml", inference)) return 1;
    if (!Submit("inference-deployment.yaml", inference)) return 1;
    Json preempted;
    // The debug job's owners see a preemptor of another queue by its queue.
    const Json service = Get("/v1/jobs/" + std::string(kInference));
    const std::string by = "a job of queue " + (service.is_object() ? service.value("queue", "") : "");
    bool ok = WaitUntil(f_.timeout_seconds, [&] {
      preempted = PreemptionOf(kDebug, by);
      return !preempted.is_null() && RunningTasks(kInference) == 2;
    });
    Run({"get", "jobs", "-o", "wide"});
    if (!ok)
      return Fail(preempted.is_null() ? std::string(kInference) + " did not preempt " + kDebug
                                      : std::string(kInference) + " did not get 2 tasks running");

    Step("5. What happened: the events, and what the gang's worker 0 was given");
    Run({"events"});
    Run({"logs", kGang, "--task", "0"});

    // The gang (P1) was not touched: the engine preempted the lowest priority first.
    Json gang_events = Events(kGang);
    for (const auto& e : gang_events)
      if (e.value("reason", "") == "Preempted" || e.value("reason", "") == "Reclaimed")
        return Fail(std::string(kGang) + " was preempted too: " + e.value("message", ""));
    if (RunningTasks(kGang) != 4) return Fail(std::string(kGang) + " is no longer running 4 tasks");
    std::printf("\nOK: %s (P0) preempted %s (P2): \"%s\"; %s (P1) kept its 4 tasks running.\n",
                kInference, kDebug, preempted.value("message", "").c_str(), kGang);
    if (!f_.server.empty())
      std::printf("The jobs stay on %s: tessera cancel %s %s %s\n", url_.c_str(), kGang, kDebug,
                  kInference);
    return 0;
  }

  // ---- helpers ----

  std::string Seed(const std::string& doc) const { return (fs::path(f_.examples) / doc).string(); }

  bool Prepare(const std::string& doc, Json& out) {
    auto j = LoadYamlFile(Seed(doc));
    if (!j.ok()) {
      std::fprintf(stderr, "tessera demo: %s: %s\n", doc.c_str(), j.status().ToString().c_str());
      return false;
    }
    out = std::move(*j);
    return true;
  }

  // Writes the document (commands replaced unless --as-is) and submits it with the CLI.
  bool Submit(const std::string& doc, Json j) {
    std::string path = Seed(doc);
    if (!f_.as_is) {
      StandInCommands(j);
      path = dir_ + "/" + doc + ".json";  // JSON is YAML: the server reads it the same way
      std::ofstream(path) << j.dump(2) << "\n";
      Say("(" + doc +
          " with each container's command replaced by a stand-in that prints its "
          "environment and sleeps; --as-is submits the seed's commands)");
    }
    if (Run({"submit", "-f", path}) == 0) return true;
    Fail("submit " + doc + " failed");
    return false;
  }

  // Runs `tessera ARGS...` against the server, its output inline, and echoes the command.
  int Run(const std::vector<std::string>& args) {
    std::string shown = "$ tessera";
    for (const auto& a : args) shown += " " + a;
    std::printf("\n%s\n", shown.c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setenv("TESSERA_SERVER", url_.c_str(), 1);
      ::setenv("TESSERA_TOKEN", token_.c_str(), 1);
      ::dup2(1, 2);  // one stream, in order
      std::vector<std::string> all = {exe_};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(exe_.c_str(), argv.data());
      ::_exit(127);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) < 0) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }

  Json Get(const std::string& path) {
    httplib::Client c(url_);
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(30, 0);
    httplib::Headers h;
    if (!token_.empty()) h.emplace("Authorization", "Bearer " + token_);
    auto r = c.Get(path.c_str(), h);
    if (!r || r->status != 200) return Json();
    return Json::parse(r->body, nullptr, false);
  }

  int64_t RunningTasks(const std::string& job) {
    Json j = Get("/v1/jobs/" + job);
    return j.is_object() ? j.value("runningTasks", int64_t{0}) : 0;
  }

  Json Events(const std::string& job) {
    Json e = Get("/v1/events?job=" + job + "&limit=10000");
    return e.is_object() && e.contains("items") ? e["items"] : Json::array();
  }

  // The event that says `victim` was preempted by `by` (a job's name, or "a job of queue
  // Q" for one of another queue); null when there is none.
  Json PreemptionOf(const std::string& victim, const std::string& by) {
    for (const auto& e : Events(victim)) {
      // Across queues the engine calls it Reclaimed (Volcano's word): the P0 service's queue
      // is below its guarantee and takes GPUs back from the debug queue.
      const std::string reason = e.value("reason", "");
      if ((reason == "Preempted" || reason == "Reclaimed") &&
          e.value("message", "").find("by " + by + ":") != std::string::npos)
        return e;
    }
    return Json();
  }

  // GPUs of Ready nodes, and how many of them no allocation holds.
  int64_t ReadyGpus() { return Gpus(false); }
  int64_t FreeGpus() { return Gpus(true); }
  int64_t Gpus(bool free_only) {
    Json n = Get("/v1/nodes");
    int64_t total = 0;
    if (!n.is_object() || !n.contains("items")) return 0;
    for (const auto& node : n["items"]) {
      if (!node.value("ready", false)) continue;
      int64_t gpus = node.value("gpus", int64_t{0});
      int64_t used = (node.value("gpuMilliInUse", int64_t{0}) + 999) / 1000;
      total += free_only ? std::max<int64_t>(0, gpus - used) : gpus;
    }
    return total;
  }

  static bool WaitUntil(int seconds, const std::function<bool()>& cond) {
    auto deadline = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < deadline) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    return cond();
  }

  void Step(const std::string& title) {
    std::printf("\n== %s\n", title.c_str());
    std::fflush(stdout);
  }
  void Say(const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
  // Says why the demo failed; returns its exit code.
  int Fail(const std::string& why) {
    std::printf("\nFAILED: %s\n", why.c_str());
    std::fflush(stdout);
    return 1;
  }

  DemoFlags f_;
  std::string exe_, dir_, url_, token_;
  pid_t server_pid_ = -1;
};

}  // namespace

void AddDemoCommands(CLI::App& app) {
  auto f = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "walk through the seed's jobs on the embedded default: a gang trains, a P2 debug job fills "
      "the GPUs, a P0 service preempts it (exit 0 only if it did)");
  cmd->add_option("--server", f->server,
                  "talk to this running server instead of starting one (the seed's job names must "
                  "be free there)");
  cmd->add_option("--token", f->token, "admin token for --server (default $TESSERA_TOKEN)");
  cmd->add_option("--examples", f->examples, "folder of the seed's documents")
      ->capture_default_str();
  cmd->add_flag("--as-is", f->as_is,
                "submit the seed's commands unchanged (torchrun, vLLM: only where they exist)");
  cmd->add_flag("--keep", f->keep, "keep the temporary data dir, logs and rewritten documents");
  cmd->add_option("--timeout", f->timeout_seconds, "seconds to wait for each step")
      ->capture_default_str();
  cmd->callback([f] {
    ::signal(SIGPIPE, SIG_IGN);
    Demo demo(*f);
    SetExitCode(demo.Run());
  });
}

}  // namespace tessera::cli
