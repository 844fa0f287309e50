#include "agent/executor.h"
#include "agent/test_support.h"

#include <grp.h>
#include <gtest/gtest.h>

#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

namespace tessera::agent {
namespace {

using testing::Running;
using testing::Slurp;
using testing::WaitFor;

namespace fs = std::filesystem;

Node TestNode() {
  Node n;
  n.name = "n1";
  for (int i = 0; i < 2; ++i) {
    Device d;
    d.index = i;
    d.model = "A100-80GB";
    d.uuid = "GPU-" + std::to_string(i);
    d.memory_bytes = int64_t{80} << 30;
    n.devices.push_back(d);
  }
  n.devices[1].mig = {{"3g.40gb", 0, "MIG-aaa"}, {"3g.40gb", 4, "MIG-bbb"}};
  return n;
}

class ExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-executor-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    // Executors leave tasks running when destroyed; a failed assertion must not leak them.
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      if (e.path().filename() != "task.json") continue;
      std::string t = Slurp(e.path().string());
      auto k = t.find("\"pgid\":");
      if (k != std::string::npos) {
        pid_t g = std::atoi(t.c_str() + k + 7);
        if (g > 0) ::kill(-g, SIGKILL);
      }
    }
    fs::remove_all(dir_);
  }
  ExecutorOptions Options() {
    ExecutorOptions o;
    o.work_dir = dir_.string();
    o.node = TestNode();
    o.wall_clock = [] { return int64_t{1733150000}; };
    return o;
  }
  // Options whose tasks' monitors keep `<dir>/lease` (created here) for `seconds`.
  ExecutorOptions Leased(int64_t seconds) {
    ExecutorOptions o = Options();
    o.lease_file = dir_.string() + "/lease";
    std::ofstream(o.lease_file) << "";
    o.lease_seconds = [seconds] { return seconds; };
    return o;
  }
  // Starts `t`, whose script writes its pid to ./pid, and waits for that pid (0: none came).
  pid_t StartWritingPid(Executor& ex, const TaskSpec& t) {
    const std::string file = dir_.string() + "/tasks/" + t.allocation + "/pid";
    if (!ex.Start(t).ok() || !WaitFor([&] { return fs::exists(file); })) return 0;
    return std::atoi(Slurp(file).c_str());
  }
  // Starts `t` (whose script writes its pid to ./pid) under an agent with options `o`, lets
  // `before_it_goes` act on that agent, then lets the agent go (its task runs on): the pid, or
  // 0 when none came.
  pid_t StartUnderAnAgentThatGoes(const ExecutorOptions& o, const TaskSpec& t,
                                  const std::function<void(Executor&)>& before_it_goes = {}) {
    Executor agent(o);
    const pid_t pid = StartWritingPid(agent, t);
    if (pid > 0 && before_it_goes) before_it_goes(agent);
    return pid;
  }
  // An agent that adopted a stopping task (whose grace period has over 1.5 s left) polls it:
  // it runs on for 1.5 s, then is killed when the period ends.
  void ExpectKilledWhenItsGraceEnds(Executor& next, pid_t task) {
    for (int i = 0; i < 15; ++i) {
      next.Poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(Running(task)) << "killed at once by the adopting agent";
    EXPECT_TRUE(WaitFor([&] {
      next.Poll();
      return !Running(task);
    }));
  }
  static TaskSpec Shell(const std::string& id, const std::string& script) {
    TaskSpec s;
    s.allocation = id;
    s.job = "job-" + id;
    s.command = {"/bin/sh", "-c", script};
    s.grace_period_seconds = 5;
    return s;
  }
  static TaskStatus StatusOf(const Executor& ex, const std::string& id) {
    for (const auto& t : ex.Statuses()) {
      if (t.allocation == id) return t;
    }
    ADD_FAILURE() << "no status for " << id;
    return {};
  }
  fs::path dir_;
};

TEST(DeviceEnvironmentTest, ListsIndicesOrMigUuids) {
  struct Case {
    std::vector<DeviceAssignment> devices;
    std::string cuda, nvidia;
  };
  const Case cases[] = {
      {{}, "", "void"},
      {{{0, 1000, 0, -1}}, "0", "0"},
      {{{1, 1000, 0, -1}, {0, 1000, 0, -1}}, "1,0", "1,0"},  // the plan's order
      {{{1, 428, 0, 1}}, "MIG-bbb", "MIG-bbb"},
      {{{0, 250, 1 << 30, -1}, {0, 250, 1 << 30, -1}}, "0", "0"},  // two fractions of one GPU
  };
  for (const auto& c : cases) {
    auto env = DeviceEnvironment(TestNode(), c.devices);
    ASSERT_TRUE(env.ok()) << env.status().ToString();
    EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), c.cuda);
    EXPECT_EQ(env->at("NVIDIA_VISIBLE_DEVICES"), c.nvidia);
    EXPECT_EQ(env->at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID");
    EXPECT_EQ(env->count("TESSERA_VIRTUAL_GPUS"), 0u);
  }
}

// A share of one GPU says so, and in MPS's variables (honoured where the node runs MPS).
TEST(DeviceEnvironmentTest, AFractionStatesItsShare) {
  auto env = DeviceEnvironment(TestNode(), {{0, 250, int64_t{10} << 30, -1}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_EQ(env->at("TESSERA_GPU_MILLI"), "250");
  EXPECT_EQ(env->at("TESSERA_GPU_MEMORY_BYTES"), std::to_string(int64_t{10} << 30));
  EXPECT_EQ(env->at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "25");
  EXPECT_EQ(env->at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=10240M");
  for (const std::vector<DeviceAssignment>& whole :
       {std::vector<DeviceAssignment>{{0, 1000, 0, -1}}, {{1, 428, 0, 1}}}) {
    auto w = DeviceEnvironment(TestNode(), whole);
    ASSERT_TRUE(w.ok());
    EXPECT_EQ(w->count("TESSERA_GPU_MILLI"), 0u);
    EXPECT_EQ(w->count("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), 0u);
  }
}

TEST(DeviceEnvironmentTest, RejectsDevicesTheNodeLacksAndMarksVirtual) {
  auto bad = DeviceEnvironment(TestNode(), {{0, 1000, 0, -1}, {7, 1000, 0, -1}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("devices[1].device: node n1 has no GPU 7"),
            std::string::npos)
      << bad.status().ToString();
  auto badmig = DeviceEnvironment(TestNode(), {{0, 428, 0, 0}});
  ASSERT_FALSE(badmig.ok());
  EXPECT_NE(badmig.status().message().find("devices[0].migInstance"), std::string::npos);
  Node v = TestNode();
  v.devices[0].is_virtual = true;
  auto env = DeviceEnvironment(v, {{0, 1000, 0, -1}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->at("TESSERA_VIRTUAL_GPUS"), "1");
}

TEST_F(ExecutorTest, CapturesOutputAndReportsExitCode) {
  Executor ex(Options());
  ASSERT_TRUE(ex.Start(Shell("a-1", "echo out; echo err >&2; exit 3")).ok());
  ASSERT_TRUE(ex.Start(Shell("a-2", "exit 0")).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  TaskStatus t1 = StatusOf(ex, "a-1");
  EXPECT_EQ(t1.state, TaskState::kFailed);
  EXPECT_EQ(t1.exit_code, 3);
  EXPECT_EQ(t1.message, "exited with code 3");
  EXPECT_EQ(t1.started_at, 1733150000);
  EXPECT_GT(t1.pid, 0);
  EXPECT_EQ(Slurp(ex.LogPath("a-1", "stdout")), "out\n");
  EXPECT_EQ(Slurp(ex.LogPath("a-1", "stderr")), "err\n");
  EXPECT_EQ(StatusOf(ex, "a-2").state, TaskState::kSucceeded);
  EXPECT_EQ(ex.Start(Shell("a-1", "true")).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(ex.Start(Shell("../x", "true")).code(), StatusCode::kInvalidArgument);
}

// The agent's credentials stay with it: a task could otherwise act as any node. A task's
// own variables of those names are its to set; its output is not for other users.
TEST_F(ExecutorTest, TasksInheritNoCredentialsAndKeepTheirOutputPrivate) {
  for (const char* v :
       {"TESSERA_AGENT_TOKEN", "TESSERA_LOGS_TOKEN", "TESSERA_TOKEN", "TESSERA_TOKEN_FILE"})
    ::setenv(v, "leaked", 1);
  ::setenv("TESSERA_EXECUTOR_KEPT", "kept", 1);
  Executor ex(Options());
  TaskSpec s = Shell("a-cred",
                     "echo \"${TESSERA_AGENT_TOKEN-none}|${TESSERA_LOGS_TOKEN-none}|"
                     "${TESSERA_TOKEN_FILE-none}|$TESSERA_TOKEN|$TESSERA_EXECUTOR_KEPT\"");
  s.env = {{"TESSERA_TOKEN", "the job's own"}};
  ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  for (const char* v : {"TESSERA_AGENT_TOKEN", "TESSERA_LOGS_TOKEN", "TESSERA_TOKEN",
                        "TESSERA_TOKEN_FILE", "TESSERA_EXECUTOR_KEPT"})
    ::unsetenv(v);
  EXPECT_EQ(Slurp(ex.LogPath("a-cred", "stdout")), "none|none|none|the job's own|kept\n");
  const auto mode =
      fs::status(fs::path(ex.LogPath("a-cred", "stdout")).parent_path()).permissions();
  EXPECT_EQ(mode & (fs::perms::group_all | fs::perms::others_all), fs::perms::none);
}

// A batch script runs as a file, so its #! line picks the interpreter (here cat, which
// prints the script: bash -c would have run it).
TEST_F(ExecutorTest, RunsABatchScriptWithTheInterpreterItsFirstLineNames) {
  ExecutorOptions o = Options();
  o.work_dir = fs::relative(dir_).string();  // as `tessera server --local-agent` has it
  Executor ex(o);
  TaskSpec s;
  s.allocation = "a-1";
  s.job = "sbatch";
  s.script = "#!/bin/cat\n#SBATCH -J x\necho not run\n";
  ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(StatusOf(ex, "a-1").state, TaskState::kSucceeded) << StatusOf(ex, "a-1").message;
  EXPECT_EQ(Slurp(ex.LogPath("a-1", "stdout")), s.script);
}

TEST_F(ExecutorTest, SetsDeviceGangAndTaskEnvironmentAndWorkingDir) {
  Executor ex(Options());
  TaskSpec s =
      Shell("a-env",
            "echo \"$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$MASTER_ADDR|$MASTER_PORT|"
            "$RANK|$WORLD_SIZE|$LOCAL_RANK|$TESSERA_ALLOCATION|$TESSERA_TASK\"; pwd");
  s.task = 2;
  s.devices = {{1, 428, 0, 0}, {0, 1000, 0, -1}};
  s.env = {
      {"MASTER_ADDR", "gpu-node-1"}, {"MASTER_PORT", "29500"}, {"RANK", "2"},
      {"WORLD_SIZE", "4"},           {"LOCAL_RANK", "0"},      {"CUDA_VISIBLE_DEVICES", "ignored"}};
  s.working_dir = dir_.string();
  ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(StatusOf(ex, "a-env").state, TaskState::kSucceeded) << StatusOf(ex, "a-env").message;
  EXPECT_EQ(Slurp(ex.LogPath("a-env", "stdout")),
            "MIG-aaa,0|MIG-aaa,0|gpu-node-1|29500|2|4|0|a-env|2\n" + dir_.string() + "\n");
}

// An sbatch script's `srun` (the tessera binary, first on its PATH) starts this node's share
// of the step: node 1 of 2 with 2 tasks per node runs ranks 2 and 3. A task that is not an
// sbatch job's gets no srun.
TEST_F(ExecutorTest, AnSbatchScriptsSrunStartsTheNodesRanks) {
  ExecutorOptions o = Options();
  o.srun_program = TESSERA_BINARY_PATH;
  Executor ex(o);
  TaskSpec s = Shell("a-srun",
                     "srun sh -c 'echo rank $SLURM_PROCID local $SLURM_LOCALID of $SLURM_NTASKS "
                     "world $WORLD_SIZE' | sort; echo rc=$?");
  s.env = {{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "2"},          {"SLURM_NODEID", "1"},
           {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "2"}, {"WORLD_SIZE", "2"}};
  ASSERT_TRUE(ex.Start(s).ok());
  TaskSpec plain = Shell("a-plain", "command -v srun || echo none");
  ASSERT_TRUE(ex.Start(plain).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(StatusOf(ex, "a-srun").state, TaskState::kSucceeded) << StatusOf(ex, "a-srun").message;
  EXPECT_EQ(Slurp(ex.LogPath("a-srun", "stdout")),
            "rank 2 local 0 of 4 world 4\nrank 3 local 1 of 4 world 4\nrc=0\n")
      << Slurp(ex.LogPath("a-srun", "stderr"));
  EXPECT_EQ(Slurp(ex.LogPath("a-plain", "stdout")).find("tasks/a-plain/bin/srun"),
            std::string::npos);
}

// sbatch -o / -e: output goes to the user's files (relative to the working dir, appended
// to), and the logs read the same bytes; a file that cannot be opened fails the task.
TEST_F(ExecutorTest, WritesOutputToTheFilesSbatchNamed) {
  Executor ex(Options());
  TaskSpec s = Shell("a-o", "echo out; echo err >&2");
  s.working_dir = dir_.string();
  s.stdout_file = "both.log";
  s.stderr_file = dir_.string() + "/both.log";
  std::filesystem::create_directories(dir_);
  {
    std::ofstream before(dir_ / "both.log");
    before << "earlier\n";
  }
  TaskSpec bad = Shell("a-bad", "true");
  bad.working_dir = dir_.string();
  bad.stdout_file = "no-such-dir/out";
  // A link planted where the file goes (a shared /tmp) is not followed.
  std::filesystem::create_symlink(dir_ / "victim", dir_ / "planted.log");
  TaskSpec link = Shell("a-link", "echo pwned");
  link.working_dir = dir_.string();
  link.stdout_file = "planted.log";
  ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.Start(bad).ok());
  ASSERT_TRUE(ex.Start(link).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(StatusOf(ex, "a-o").state, TaskState::kSucceeded);
  EXPECT_EQ(Slurp((dir_ / "both.log").string()), "earlier\nout\nerr\n");
  EXPECT_EQ(Slurp(ex.LogPath("a-o", "stdout")), "earlier\nout\nerr\n");
  EXPECT_EQ(StatusOf(ex, "a-bad").state, TaskState::kFailed);
  EXPECT_NE(
      StatusOf(ex, "a-bad")
          .message.find("-o: cannot open " + dir_.string() + "/no-such-dir/out: No such file"),
      std::string::npos)
      << StatusOf(ex, "a-bad").message;
  EXPECT_EQ(StatusOf(ex, "a-link").state, TaskState::kFailed);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "victim"));
}

// With a relative work dir (`--data-dir data`) and no -D, the -o file lands in the task's
// folder, and the logs still read it (the link to it must not be relative).
TEST_F(ExecutorTest, OutputFilesUnderARelativeWorkDirAreReadBack) {
  ExecutorOptions o = Options();
  o.work_dir = fs::relative(dir_).string();
  Executor ex(o);
  TaskSpec s = Shell("a-rel", "echo out; echo err >&2");
  s.stdout_file = "out-%j.log";
  s.stderr_file = "out-%j.log";
  ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(StatusOf(ex, "a-rel").state, TaskState::kSucceeded) << StatusOf(ex, "a-rel").message;
  EXPECT_EQ(Slurp(ex.LogPath("a-rel", "stdout")), "out\nerr\n");
}

TEST_F(ExecutorTest, TasksThatCannotStartFailWithAMessage) {
  Executor ex(Options());
  TaskSpec wd = Shell("a-wd", "true");
  wd.working_dir = "/nonexistent/dir";
  TaskSpec cmd = Shell("a-cmd", "");
  cmd.command = {"no-such-program-tessera"};
  TaskSpec dev = Shell("a-dev", "true");
  dev.devices = {{5, 1000, 0, -1}};
  for (const auto& s : {wd, cmd, dev}) ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.WaitAll(5000));
  EXPECT_EQ(StatusOf(ex, "a-wd").state, TaskState::kFailed);
  EXPECT_EQ(StatusOf(ex, "a-wd").message, "workingDir: /nonexistent/dir is not a directory");
  EXPECT_EQ(StatusOf(ex, "a-cmd").message, "command[0]: no-such-program-tessera not found in PATH");
  EXPECT_NE(StatusOf(ex, "a-dev").message.find("has no GPU 5"), std::string::npos);
  EXPECT_NE(Slurp(ex.LogPath("a-wd", "stderr")).find("workingDir"), std::string::npos);
}

TEST_F(ExecutorTest, StopSendsTermThenKillsTheWholeGroupAfterGrace) {
  Executor ex(Options());
  // Ends on SIGTERM.
  ASSERT_TRUE(ex.Start(Shell("a-term", "echo $$ > pid; exec sleep 60")).ok());
  // Ignores SIGTERM and has a child in its group: needs SIGKILL after the 1 s grace.
  TaskSpec stubborn =
      Shell("a-kill", "trap '' TERM; sleep 60 & echo $! > child; echo $$ > pid; wait");
  stubborn.grace_period_seconds = 1;
  ASSERT_TRUE(ex.Start(stubborn).ok());
  const std::string d = dir_.string() + "/tasks/";
  ASSERT_TRUE(WaitFor([&] {
    return fs::exists(d + "a-term/pid") && fs::exists(d + "a-kill/child") &&
           fs::exists(d + "a-kill/pid");
  }));
  const pid_t child = std::atoi(Slurp(d + "a-kill/child").c_str());
  ASSERT_TRUE(Running(child));
  ex.Stop("a-term", "preempted by infer-1");
  ex.Stop("a-kill", "cancelled");
  ASSERT_TRUE(ex.WaitAll(20000));
  TaskStatus term = StatusOf(ex, "a-term");
  EXPECT_EQ(term.state, TaskState::kKilled);
  EXPECT_EQ(term.exit_code, 128 + SIGTERM);
  EXPECT_EQ(term.message, "preempted by infer-1: killed by signal 15 (Terminated)");
  TaskStatus kill = StatusOf(ex, "a-kill");
  EXPECT_EQ(kill.state, TaskState::kKilled);
  EXPECT_EQ(kill.exit_code, 128 + SIGKILL);
  EXPECT_TRUE(WaitFor([&] { return !Running(child); }))
      << "the task's child survived the group kill";
}

// What a task leaves behind in its group dies with it, at its own end and at a stop whose
// SIGTERM the main process obeyed but a child ignored: GPUs freed for the next job are free.
TEST_F(ExecutorTest, NothingOfATaskOutlivesIt) {
  Executor ex(Options());
  ASSERT_TRUE(ex.Start(Shell("b-bg", "sleep 600 & echo $! > child; exit 0")).ok());
  TaskSpec stop = Shell("b-stop",
                        "sh -c 'trap \"\" TERM; exec sleep 600' & echo $! > child; "
                        "exec sleep 600");
  stop.grace_period_seconds = 600;  // the stop must not need the grace period's SIGKILL
  ASSERT_TRUE(ex.Start(stop).ok());
  const std::string d = dir_.string() + "/tasks/";
  ASSERT_TRUE(
      WaitFor([&] { return fs::exists(d + "b-bg/child") && fs::exists(d + "b-stop/child"); }));
  ASSERT_TRUE(WaitFor([&] {
    ex.Poll();
    return StatusOf(ex, "b-bg").state != TaskState::kRunning;
  }));
  EXPECT_EQ(StatusOf(ex, "b-bg").state, TaskState::kSucceeded);
  const pid_t bg = std::atoi(Slurp(d + "b-bg/child").c_str());
  EXPECT_TRUE(WaitFor([&] { return !Running(bg); })) << "a background process outlived its task";
  const pid_t stubborn = std::atoi(Slurp(d + "b-stop/child").c_str());
  ASSERT_TRUE(Running(stubborn));
  ex.Stop("b-stop", "cancelled");
  ASSERT_TRUE(ex.WaitAll(20000));
  TaskStatus st = StatusOf(ex, "b-stop");
  EXPECT_EQ(st.state, TaskState::kKilled);
  EXPECT_EQ(st.message, "cancelled: killed by signal 15 (Terminated)");
  EXPECT_TRUE(WaitFor([&] { return !Running(stubborn); }))
      << "a child that ignored SIGTERM outlived its stopped task";
}

TEST_F(ExecutorTest, ANewExecutorAdoptsRunningTasksAndLearnsHowOthersEnded) {
  const std::string d = dir_.string() + "/tasks/";
  {
    Executor first(Options());
    ASSERT_TRUE(first.Start(Shell("a-long", "echo $$ > pid; exec sleep 60")).ok());
    ASSERT_TRUE(first.Start(Shell("a-ends", "sleep 0.5; exit 5")).ok());
    ASSERT_TRUE(first.Start(Shell("a-done", "exit 0")).ok());
    ASSERT_TRUE(WaitFor([&] {
      first.Poll();
      return StatusOf(first, "a-done").state == TaskState::kSucceeded &&
             fs::exists(d + "a-long/pid");
    }));
    first.Forget("a-done");  // reported: must not come back
  }                          // the "agent crash": the executor goes, its tasks stay
  const pid_t long_pid = std::atoi(Slurp(d + "a-long/pid").c_str());
  ASSERT_TRUE(Running(long_pid));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(d + "a-ends/exit"); }));

  Executor second(Options());
  ASSERT_TRUE(second.Recover().ok());
  auto st = second.Statuses();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].allocation, "a-ends");
  EXPECT_EQ(st[0].state, TaskState::kFailed);
  EXPECT_EQ(st[0].exit_code, 5);
  EXPECT_EQ(st[1].allocation, "a-long");
  EXPECT_EQ(st[1].state, TaskState::kRunning);
  EXPECT_EQ(st[1].job, "job-a-long");
  // Who it runs as comes back with it (task.json): the agent's own user here.
  EXPECT_EQ(st[1].ran_as.uid, static_cast<int64_t>(::getuid()));
  EXPECT_EQ(st[1].ran_as.gid, static_cast<int64_t>(::getgid()));
  second.Stop("a-long", "fenced");
  ASSERT_TRUE(second.WaitAll(20000));
  EXPECT_EQ(StatusOf(second, "a-long").state, TaskState::kKilled);
  EXPECT_TRUE(WaitFor([&] { return !Running(long_pid); }));
}

// A task its agent was stopping when the agent went (shut down with its tasks, or crashed in
// the grace period) is reported by the next agent as killed, with the reason, not as failed.
TEST_F(ExecutorTest, AStopOutlivesTheAgentThatStartedIt) {
  const std::string d = dir_.string() + "/tasks/";
  {
    Executor first(Options());
    TaskSpec t = Shell("a-stop", "echo $$ > pid; exec sleep 60");
    ASSERT_TRUE(first.Start(t).ok());
    ASSERT_TRUE(WaitFor([&] { return fs::exists(d + "a-stop/pid"); }));
    first.Stop("a-stop", "agent shutting down");
    ASSERT_TRUE(WaitFor([&] { return fs::exists(d + "a-stop/exit"); }));
  }  // gone before it reported the end
  Executor second(Options());
  ASSERT_TRUE(second.Recover().ok());
  TaskStatus st = StatusOf(second, "a-stop");
  EXPECT_EQ(st.state, TaskState::kKilled);
  EXPECT_EQ(st.message, "agent shutting down: killed by signal 15 (Terminated)");
}

// A task does not outlive a dead agent: its monitor stops it once the agent's lease file has
// not been touched for the lease (and the task's grace period), so the server may run it
// elsewhere; the next agent reports it killed, with the reason. Touched, it runs on.
TEST_F(ExecutorTest, ATaskStopsOnItsOwnWhenItsAgentsLeaseLapses) {
  const ExecutorOptions o = Leased(1);
  TaskSpec orphaned = Shell("a-orphan", "echo $$ > pid; exec sleep 60");
  orphaned.grace_period_seconds = 1;
  const pid_t orphan = StartUnderAnAgentThatGoes(o, orphaned);
  ASSERT_GT(orphan, 0);  // the agent is gone; its task runs on, for now
  ASSERT_TRUE(Running(orphan));
  ASSERT_TRUE(WaitFor([&] { return !Running(orphan); }));  // within the lease + 0.5 s + grace
  // Its monitor records the end once it has reaped it (until then a recovering agent sees a
  // zombie, still running).
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_.string() + "/tasks/a-orphan/exit"); }));
  Executor next(o);
  ASSERT_TRUE(next.Recover().ok());
  // (The monitor writes the exit file just before it exits: on a loaded machine the next
  // agent may still find it alive, and sees the end at a later poll.)
  ASSERT_TRUE(WaitFor([&] {
    next.Poll();
    return StatusOf(next, "a-orphan").state != TaskState::kRunning;
  }));
  const TaskStatus st = StatusOf(next, "a-orphan");
  EXPECT_EQ(st.state, TaskState::kKilled);
  EXPECT_EQ(st.message.rfind("stopped: agent gone (its lease lapsed)", 0), 0u) << st.message;
  // While the lease is kept (a live agent, or the next one), tasks run on.
  std::ofstream(o.lease_file) << "";  // the next agent touches it before it starts tasks
  Executor live(o);
  TaskSpec t = Shell("a-live", "echo $$ > pid; exec sleep 60");
  t.grace_period_seconds = 1;
  const pid_t alive = StartWritingPid(live, t);
  ASSERT_GT(alive, 0);
  for (int i = 0; i < 30; ++i) {  // 3 s, three leases
    std::ofstream(o.lease_file) << "";
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(Running(alive));
  live.StopAll("test over");
  EXPECT_TRUE(live.WaitAll(20000));
}

// A wiped work dir: the lease file the task's monitor knew is gone, and a new agent keeps a
// new one at the same path, fresh, but knows nothing of the task. The task stops: it used
// to run on for ever beside the attempt the server then started on the same devices.
TEST_F(ExecutorTest, ATaskStopsWhenItsAgentsLeaseFileIsReplaced) {
  const ExecutorOptions o = Leased(3600);  // no lapse by age in this test
  Executor agent(o);
  TaskSpec t = Shell("a-wiped", "echo $$ > pid; exec sleep 60");
  t.grace_period_seconds = 1;
  const pid_t task = StartWritingPid(agent, t);
  ASSERT_GT(task, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(Running(task));
  fs::remove(o.lease_file);
  std::ofstream(o.lease_file) << "";                     // the next agent's, at the same path
  EXPECT_TRUE(WaitFor([&] { return !Running(task); }));  // 250 ms checks + the 1 s grace
  agent.StopAll("test over");
  EXPECT_TRUE(agent.WaitAll(20000));
}

// An agent restarted while a task of it is stopping keeps the task's grace period: the task
// (checkpointing on SIGTERM) is killed when the period ends, not as soon as the next agent
// adopts it.
TEST_F(ExecutorTest, AnAdoptedStoppingTaskKeepsItsGracePeriod) {
  TaskSpec t = Shell("a-grace", "trap '' TERM; echo $$ > pid; sleep 60");
  t.grace_period_seconds = 4;
  const pid_t task = StartUnderAnAgentThatGoes(
      Options(), t, [](Executor& agent) { agent.Stop("a-grace", "cancelled"); });
  ASSERT_GT(task, 0);  // the agent is gone while its task is stopping
  Executor next(Options());
  ASSERT_TRUE(next.Recover().ok());
  const auto adopted = std::chrono::steady_clock::now();
  ExpectKilledWhenItsGraceEnds(next, task);  // 1.5 s of the 4 s grace, then gone
  EXPECT_GE(std::chrono::steady_clock::now() - adopted, std::chrono::seconds(2));
}

// The same after a lapsed lease: the monitor's SIGTERM starts the grace period, and an agent
// started within it kills the task when it ends, not at once.
TEST_F(ExecutorTest, ATaskStoppedForALapsedLeaseKeepsItsGracePeriodUnderTheNextAgent) {
  const ExecutorOptions o = Leased(1);
  TaskSpec t = Shell("a-lapse", "trap '' TERM; echo $$ > pid; sleep 60");
  t.grace_period_seconds = 5;
  const pid_t task = StartUnderAnAgentThatGoes(o, t);
  ASSERT_GT(task, 0);  // the agent is gone; its lease lapses in about 1.5 s
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir_.string() + "/tasks/a-lapse/stopped"); }));
  std::ofstream(o.lease_file) << "";  // the next agent, within the grace period
  Executor next(o);
  ASSERT_TRUE(next.Recover().ok());
  ExpectKilledWhenItsGraceEnds(next, task);  // 1.5 s of the 5 s grace, then gone
}

// A stop the agent began before it went keeps its reason and deadline when the lease then
// lapses: the monitor's own stop does not overwrite them.
TEST_F(ExecutorTest, ALeaseLapseKeepsTheStopTheAgentBegan) {
  const ExecutorOptions o = Leased(1);
  TaskSpec t = Shell("a-began", "trap '' TERM; echo $$ > pid; sleep 60");
  t.grace_period_seconds = 5;
  ASSERT_GT(StartUnderAnAgentThatGoes(
                o, t, [](Executor& agent) { agent.Stop("a-began", "cancelled by admin"); }),
            0);  // gone in the grace period; its lease lapses in about 1.5 s
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  const std::string stopped = Slurp(dir_.string() + "/tasks/a-began/stopped");
  EXPECT_EQ(stopped.rfind("cancelled by admin\nkill-at ", 0), 0u) << stopped;
}

// A task the agent cannot record (task.json: a full disk; here a folder in its place) never
// runs: after a restart no agent would find it, and it would run on unseen beside the
// attempt the server starts next.
TEST_F(ExecutorTest, ATaskThatCannotBeRecordedNeverStarts) {
  const std::string d = dir_.string() + "/tasks/a-unrec";
  fs::create_directories(d + "/task.json");
  Executor ex(Options());
  ASSERT_TRUE(ex.Start(Shell("a-unrec", "touch ran; exec sleep 60")).ok());
  const TaskStatus st = StatusOf(ex, "a-unrec");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_EQ(st.message.rfind("not started: cannot record it (", 0), 0u) << st.message;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ex.Poll();
  EXPECT_FALSE(fs::exists(d + "/ran"));
  EXPECT_EQ(StatusOf(ex, "a-unrec").state, TaskState::kFailed);
}

// Retention, as the kubelet's collection of dead containers: a forgotten task's folder goes
// once the task ended the retention ago; never one of a running task, nor one the server
// still lists; the user's own -o file stays; an agent restart keeps both the ages and the
// notices of what went.
TEST_F(ExecutorTest, FinishedTaskFoldersGoAfterTheirRetentionNeverWhileRunningOrListed) {
  const std::string d = dir_.string() + "/tasks/";
  auto now = std::make_shared<std::atomic<int64_t>>(1733150000);
  ExecutorOptions o = Options();
  o.wall_clock = [now] { return now->load(); };
  o.task_retention_seconds = 3600;
  o.max_finished_tasks = 0;  // no count limit
  {
    Executor ex(o);
    TaskSpec old = Shell("a-old", "echo old; mkdir -p ro/sub; touch ro/sub/f; chmod 555 ro/sub ro");
    old.stdout_file = dir_.string() + "/user.out";  // sbatch -o: the user's, not Tessera's
    ASSERT_TRUE(ex.Start(old).ok());
    ASSERT_TRUE(ex.Start(Shell("a-listed", "echo listed")).ok());
    ASSERT_TRUE(ex.Start(Shell("a-run", "exec sleep 60")).ok());
    ASSERT_TRUE(WaitFor([&] {
      ex.Poll();
      return StatusOf(ex, "a-old").state == TaskState::kSucceeded &&
             StatusOf(ex, "a-listed").state == TaskState::kSucceeded;
    }));
    // Ended but not yet forgotten (its report not taken): kept whatever its age.
    *now += 7200;
    EXPECT_TRUE(ex.RemoveOldTaskFolders({}).empty());
    *now -= 7200;
    ex.Forget("a-old");
    ex.Forget("a-listed");
    ex.Forget("a-run");  // running: not forgotten
    *now += 3599;
    EXPECT_TRUE(ex.RemoveOldTaskFolders({"a-listed"}).empty());
    EXPECT_TRUE(fs::exists(d + "a-old/stdout"));
    *now += 1;
    EXPECT_EQ(ex.RemoveOldTaskFolders({"a-listed"}), std::vector<std::string>{"a-old"});
    EXPECT_FALSE(fs::exists(d + "a-old"));
    EXPECT_EQ(Slurp(dir_.string() + "/user.out"), "old\n");
    EXPECT_TRUE(fs::exists(d + "a-listed/stdout"));  // the server still lists it
    EXPECT_TRUE(fs::exists(d + "a-run/stdout"));
    EXPECT_EQ(ex.RemovalNotice("a-old"),
              "logs of job job-a-old task 0 (allocation a-old) were removed after 1h (the "
              "agent's --task-retention)");
    EXPECT_EQ(ex.RemovalNotice("a-listed"), "");
    EXPECT_EQ(ex.RemovalNotice("a-nope"), "");
  }  // the agent restarts; a-run goes on
  // A folder an older agent forgot without recording the end: the exit file's time is it.
  fs::create_directories(d + "a-legacy");
  std::ofstream(d + "a-legacy/task.done.json") << R"({"job":"j","task":2})";
  std::ofstream(d + "a-legacy/exit") << "exit 0\n";
  fs::last_write_time(d + "a-legacy/exit",
                      fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::create_directories(d + "a-unknown");  // no record: not Tessera's to judge
  std::ofstream(d + "a-unknown/stdout") << "?";
  ExecutorOptions real = o;
  real.wall_clock = nullptr;  // the system clock, as the files' times
  Executor again(real);
  ASSERT_TRUE(again.Recover().ok());
  EXPECT_EQ(again.RemovalNotice("a-old").substr(0, 24), "logs of job job-a-old ta");
  EXPECT_EQ(again.RemoveOldTaskFolders({"a-listed"}), std::vector<std::string>{"a-legacy"});
  EXPECT_EQ(again.RemovalNotice("a-legacy"),
            "logs of job j task 2 (allocation a-legacy) were removed after 1h (the agent's "
            "--task-retention)");
  EXPECT_TRUE(fs::exists(d + "a-unknown/stdout"));
  EXPECT_TRUE(fs::exists(d + "a-listed/stdout"));  // ended 1733150000 (2024), still listed
  EXPECT_EQ(again.RemoveOldTaskFolders({}), std::vector<std::string>{"a-listed"});
  EXPECT_TRUE(fs::exists(d + "a-run/stdout"));
  again.StopAll("test over");
  ASSERT_TRUE(again.WaitAll(20000));
}

// Beyond the most kept (kubelet's --maximum-dead-containers), the oldest folders go first,
// however young; ties go by allocation id.
TEST_F(ExecutorTest, BeyondTheMostKeptTheOldestFinishedFoldersGo) {
  auto now = std::make_shared<std::atomic<int64_t>>(1733150000);
  ExecutorOptions o = Options();
  o.wall_clock = [now] { return now->load(); };
  o.task_retention_seconds = 0;  // no age limit
  o.max_finished_tasks = 2;
  Executor ex(o);
  for (const char* id : {"a-3", "a-1", "a-2", "a-4"}) {  // end in this order, 10 s apart
    ASSERT_TRUE(ex.Start(Shell(id, "true")).ok());
    ASSERT_TRUE(ex.WaitAll(20000));
    ex.Forget(id);
    *now += 10;
  }
  EXPECT_EQ(ex.RemoveOldTaskFolders({}), (std::vector<std::string>{"a-3", "a-1"}));
  EXPECT_EQ(ex.RemovalNotice("a-3"),
            "logs of job job-a-3 task 0 (allocation a-3) were removed 40s after the task ended: "
            "the node keeps the folders of its 2 latest finished tasks (the agent's "
            "--max-finished-tasks)");
  EXPECT_TRUE(fs::exists(dir_ / "tasks" / "a-2"));
  EXPECT_TRUE(fs::exists(dir_ / "tasks" / "a-4"));
  *now += 1000000;
  EXPECT_TRUE(ex.RemoveOldTaskFolders({}).empty());
}

TEST_F(ExecutorTest, CgroupStatusIsExplained) {
  Executor ex(Options());
  // Whatever this machine allows, the executor says what it did and why.
  EXPECT_FALSE(ex.cgroup_status().empty());
  ExecutorOptions off = Options();
  off.cgroup_parent = "-";
  Executor none(off);
  EXPECT_EQ(none.cgroup_status(), "disabled by configuration");
}

}  // namespace
}  // namespace tessera::agent

// ---- Task identity (docs/agent.md, "Task identity") ----

namespace tessera::agent {
namespace {

// Switching users needs root: this machine's tests and CI run as root; elsewhere the tests
// that switch say why they skip.
#define SKIP_UNLESS_ROOT()                                                                 \
  if (::geteuid() != 0)                                                                    \
  GTEST_SKIP() << "needs root: only an agent run as root switches a task to another user " \
                  "(run the agent tests as root to check it)"

uid_t OwnerOf(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_uid : static_cast<uid_t>(-1);
}

// The primary group of uid 65534 (nobody) here: 65534 where it has no account.
gid_t NobodyGroup() {
  const passwd* pw = ::getpwuid(65534);
  return pw != nullptr ? pw->pw_gid : 65534;
}

// A task with runAsUser runs as that uid (it writes `id -u` to its log), and its log files
// and working directory are its own, so that it can write them.
TEST_F(ExecutorTest, ATaskRunsAsItsRunAsUserAndOwnsItsLogs) {
  SKIP_UNLESS_ROOT();
  Executor ex(Options());
  TaskSpec s = Shell("a-uid",
                     "id -u; id -g; echo made > made-here && echo wrote >> "
                     "\"$(dirname \"$PWD\")/stdout\"; id -u >&2");
  s.run_as.user = 65534;
  ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  const TaskStatus st = StatusOf(ex, "a-uid");
  EXPECT_EQ(st.state, TaskState::kSucceeded) << st.message << Slurp(ex.LogPath("a-uid", "stderr"));
  EXPECT_EQ(Slurp(ex.LogPath("a-uid", "stdout")),
            "65534\n" + std::to_string(NobodyGroup()) + "\nwrote\n");
  EXPECT_EQ(Slurp(ex.LogPath("a-uid", "stderr")), "65534\n");
  // Reported as run (the server shows it in describe), the name from the user database.
  EXPECT_EQ(st.ran_as.uid, 65534);
  EXPECT_EQ(st.ran_as.gid, static_cast<int64_t>(NobodyGroup()));
  const passwd* pw = ::getpwuid(65534);
  EXPECT_EQ(st.ran_as.user, pw ? pw->pw_name : "");
  EXPECT_EQ(OwnerOf(ex.LogPath("a-uid", "stdout")), 65534u);
  EXPECT_EQ(OwnerOf(ex.LogPath("a-uid", "stderr")), 65534u);
  const std::string work = dir_.string() + "/tasks/a-uid/work";
  EXPECT_EQ(OwnerOf(work), 65534u);
  EXPECT_EQ(OwnerOf(work + "/made-here"), 65534u);
  // The agent's records stay its own: a task could otherwise rewrite the process group the
  // agent signals.
  EXPECT_EQ(OwnerOf(dir_.string() + "/tasks/a-uid/task.json"), 0u);
  EXPECT_EQ(OwnerOf(dir_.string() + "/tasks/a-uid"), 0u);
}

// runAsGroup and supplementalGroups: the task's gid and groups (setgroups before setgid
// before setuid).
TEST_F(ExecutorTest, RunAsGroupAndSupplementalGroupsAreApplied) {
  SKIP_UNLESS_ROOT();
  Executor ex(Options());
  TaskSpec s = Shell("a-groups", "id -g; id -G");
  s.run_as.user = 65534;
  s.run_as.group = 4141;
  s.run_as.supplemental_groups = {4242, 4343};
  ASSERT_TRUE(ex.Start(s).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(StatusOf(ex, "a-groups").state, TaskState::kSucceeded);
  std::istringstream out(Slurp(ex.LogPath("a-groups", "stdout")));
  std::string gid, groups;
  std::getline(out, gid);
  std::getline(out, groups);
  EXPECT_EQ(gid, "4141");
  std::set<std::string> got;
  std::istringstream words(groups);
  for (std::string g; words >> g;) got.insert(g);
  EXPECT_TRUE(got.count("4141") && got.count("4242") && got.count("4343")) << groups;
  EXPECT_FALSE(got.count("0")) << "kept root's group: " << groups;
}

// With --run-as-submitter a task runs as its submitter's account, with its home; a name the
// node does not know fails the task with a message naming the user and the node, and the
// task never runs (not as root, not at all).
TEST_F(ExecutorTest, RunAsSubmitterUsesTheAccountAndFailsForAnUnknownName) {
  ExecutorOptions o = Options();
  o.identity.run_as_submitter = true;
  Executor ex(o);
  TaskSpec unknown = Shell("a-unknown", "touch ran");
  unknown.submitter = "tessera-no-such-user";
  ASSERT_TRUE(ex.Start(unknown).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  const TaskStatus st = StatusOf(ex, "a-unknown");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_EQ(st.exit_code, 127);
  EXPECT_NE(st.message.find("user \"tessera-no-such-user\" (the job's submitter) does not exist "
                            "on node n1"),
            std::string::npos)
      << st.message;
  EXPECT_NE(Slurp(ex.LogPath("a-unknown", "stderr")).find("tessera-no-such-user"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "tasks/a-unknown/ran"));
  EXPECT_FALSE(fs::exists(dir_ / "tasks/a-unknown/work/ran"));

  if (::geteuid() != 0) return;  // (switching to nobody needs root)
  TaskSpec nobody = Shell("a-nobody", "id -u; echo \"$USER $HOME\"");
  nobody.submitter = "nobody";
  ASSERT_TRUE(ex.Start(nobody).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  const passwd* pw = ::getpwnam("nobody");
  ASSERT_NE(pw, nullptr);
  EXPECT_EQ(Slurp(ex.LogPath("a-nobody", "stdout")),
            std::to_string(pw->pw_uid) + "\nnobody " + pw->pw_dir + "\n");
  // A runAsUser the operator listed (--allow-run-as-uids) wins over the submitter.
  ExecutorOptions listed = Options();
  listed.identity.run_as_submitter = true;
  listed.identity.allowed_uids = {{4000, 4999}};
  Executor allowing(listed);
  TaskSpec given = Shell("a-given", "id -u");
  given.submitter = "tessera-no-such-user";
  given.run_as.user = 4444;  // a uid without an account: Kubernetes allows it
  ASSERT_TRUE(allowing.Start(given).ok());
  ASSERT_TRUE(allowing.WaitAll(20000));
  EXPECT_EQ(Slurp(allowing.LogPath("a-given", "stdout")), "4444\n")
      << StatusOf(allowing, "a-given").message;
}

// The audit's escalation: a member of a shared node asked for uid 4242 with root's group and
// the disk and shadow groups, and read /etc/shadow. With --run-as-submitter it fails and
// never runs.
TEST_F(ExecutorTest, RunAsSubmitterRefusesAnotherIdentityAndRootsGroup) {
  ExecutorOptions o = Options();
  o.identity.run_as_submitter = true;
  o.identity.allow_root_tasks = false;  // (the CLI's default with --run-as-submitter)
  Executor ex(o);
  TaskSpec escalate = Shell("a-escalate", "touch ran; cat /etc/shadow");
  escalate.submitter = "nobody";
  escalate.run_as.user = 4242;
  escalate.run_as.group = 0;
  escalate.run_as.supplemental_groups = {0, 6, 42};
  ASSERT_TRUE(ex.Start(escalate).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  const TaskStatus st = StatusOf(ex, "a-escalate");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_EQ(st.exit_code, 127);
  EXPECT_NE(st.message.find("the task would run with root's group (gid 0): "
                            "securityContext.runAsGroup 0; the agent on node n1 runs no task "
                            "with group 0 unless started with --allow-root-tasks"),
            std::string::npos)
      << st.message;
  EXPECT_FALSE(fs::exists(dir_ / "tasks/a-escalate/ran"));
  EXPECT_FALSE(fs::exists(dir_ / "tasks/a-escalate/work/ran"));
  EXPECT_EQ(Slurp(ex.LogPath("a-escalate", "stdout")), "");
}

// Which ids a securityContext may name (docs/agent.md, "Task identity").
TEST(TaskIdentityTest, GroupZeroIsRefusedAsUidZeroIs) {
  IdentityPolicy strict;
  strict.allow_root_tasks = false;
  RunAs group0;
  group0.user = 4242;
  group0.group = 0;
  auto id = ResolveTaskIdentity(group0, "", strict, "n1");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().message(),
            "the task would run with root's group (gid 0): securityContext.runAsGroup 0; the "
            "agent on node n1 runs no task with group 0 unless started with --allow-root-tasks");
  RunAs supplemental;
  supplemental.user = 4242;
  supplemental.supplemental_groups = {6, 0, 42};
  id = ResolveTaskIdentity(supplemental, "", strict, "n1");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("securityContext.supplementalGroups 0;"), std::string::npos)
      << id.status().message();
  if (::geteuid() != 0) return;  // (the rest resolves an identity only root may switch to)
  // Allowed with --allow-root-tasks (the default without --run-as-submitter), as before.
  id = ResolveTaskIdentity(supplemental, "", {}, "n1");
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(id->uid, 4242u);
  // Other groups stay allowed without --run-as-submitter.
  supplemental.supplemental_groups = {6, 42};
  EXPECT_TRUE(ResolveTaskIdentity(supplemental, "", strict, "n1").ok());
}

TEST(TaskIdentityTest, RunAsSubmitterAllowsOnlyTheSubmittersIdsAndListedOnes) {
  const passwd* pw = ::getpwnam("nobody");
  if (pw == nullptr) GTEST_SKIP() << "no account \"nobody\" here";
  const uid_t nobody_uid = pw->pw_uid;
  const gid_t nobody_gid = pw->pw_gid;
  IdentityPolicy p;
  p.run_as_submitter = true;
  p.allow_root_tasks = false;
  RunAs other;
  other.user = 4242;
  auto id = ResolveTaskIdentity(other, "nobody", p, "n1");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().message(),
            "securityContext.runAsUser 4242 is not the submitter \"nobody\"'s own uid (" +
                std::to_string(nobody_uid) +
                "): the agent on node n1 runs each task as its submitter's account "
                "(--run-as-submitter) and other ids only where --allow-run-as-uids lists them");
  // An unknown submitter does not open every uid.
  id = ResolveTaskIdentity(other, "tessera-no-such-user", p, "n1");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("is not the submitter's own (\"tessera-no-such-user\" "
                                       "has no account on node n1) uid"),
            std::string::npos)
      << id.status().message();
  RunAs disk;
  disk.supplemental_groups = {6};
  id = ResolveTaskIdentity(disk, "nobody", p, "n1");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("securityContext.supplementalGroups 6 is not one of the "
                                       "submitter \"nobody\"'s own groups ("),
            std::string::npos)
      << id.status().message();
  EXPECT_NE(id.status().message().find("--allow-run-as-gids lists them"), std::string::npos);
  RunAs shadow;
  shadow.group = 42;
  EXPECT_FALSE(ResolveTaskIdentity(shadow, "nobody", p, "n1").ok());

  // Listed by the operator: allowed, and still never root's group.
  p.allowed_uids = {{4000, 4999}};
  p.allowed_gids = {{6, 6}, {42, 42}, {0, 0}};
  RunAs listed = other;
  listed.group = 42;
  listed.supplemental_groups = {6};
  RunAs root_group = listed;
  root_group.group = 0;
  EXPECT_NE(ResolveTaskIdentity(root_group, "nobody", p, "n1")
                .status()
                .message()
                .find("root's group (gid 0)"),
            std::string::npos);
  other.user = 5000;
  EXPECT_FALSE(ResolveTaskIdentity(other, "nobody", p, "n1").ok());
  if (::geteuid() != 0) return;
  id = ResolveTaskIdentity(listed, "nobody", p, "n1");
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(id->uid, 4242u);
  EXPECT_EQ(id->gid, 42u);
  // The submitter's own ids need no list.
  RunAs own;
  own.user = nobody_uid;
  own.group = nobody_gid;
  EXPECT_TRUE(ResolveTaskIdentity(own, "nobody", IdentityPolicy{true, {}, {}, false}, "n1").ok());
}

TEST(TaskIdentityTest, ParsesIdRanges) {
  auto r = ParseIdRanges("1000-1999,65534", "--allow-run-as-uids");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, (std::vector<IdRange>{{1000, 1999}, {65534, 65534}}));
  EXPECT_TRUE(InIdRanges(*r, 1500));
  EXPECT_FALSE(InIdRanges(*r, 2000));
  for (const char* bad : {"", "x", "5-1", "1,,2", "-1", "1-", "2147483648", "1000 "}) {
    auto b = ParseIdRanges(bad, "--allow-run-as-uids");
    EXPECT_FALSE(b.ok()) << bad;
  }
  EXPECT_EQ(ParseIdRanges("x", "--allow-run-as-gids").status().message(),
            "--allow-run-as-gids: \"x\" is not an id or a range of ids (e.g. 1000-1999,65534; "
            "ids 0..2147483647)");
}

// uid 0 is refused unless the agent allows root tasks: asked for, or by running as the
// agent's own root; runAsNonRoot refuses it whatever the agent allows.
TEST_F(ExecutorTest, RootIsRefusedUnlessAllowed) {
  ExecutorOptions o = Options();
  o.identity.allow_root_tasks = false;
  Executor ex(o);
  TaskSpec root = Shell("a-root", "touch ran");
  root.run_as.user = 0;
  ASSERT_TRUE(ex.Start(root).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  TaskStatus st = StatusOf(ex, "a-root");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_NE(st.message.find("the task would run as root (uid 0): securityContext.runAsUser 0; "
                            "the agent on node n1 runs no task as root unless started with "
                            "--allow-root-tasks"),
            std::string::npos)
      << st.message;
  EXPECT_FALSE(fs::exists(dir_ / "tasks/a-root/ran"));

  if (::geteuid() != 0) return;
  // The agent's own user is root: a task that asks for nothing is refused too.
  ASSERT_TRUE(ex.Start(Shell("a-as-agent", "touch ran")).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  st = StatusOf(ex, "a-as-agent");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_NE(st.message.find("the agent's own user (uid 0)"), std::string::npos) << st.message;

  // Allowed (the default): as before, a task runs as the agent's root...
  Executor allowed(Options());
  TaskSpec plain = Shell("a-plain", "id -u");
  ASSERT_TRUE(allowed.Start(plain).ok());
  // ...unless it says runAsNonRoot.
  TaskSpec non_root = Shell("a-non-root", "touch ran");
  non_root.run_as.non_root = true;
  ASSERT_TRUE(allowed.Start(non_root).ok());
  ASSERT_TRUE(allowed.WaitAll(20000));
  EXPECT_EQ(Slurp(allowed.LogPath("a-plain", "stdout")), "0\n");
  st = StatusOf(allowed, "a-non-root");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_NE(st.message.find("securityContext.runAsNonRoot: the task would run as the agent's "
                            "own user (uid 0), which is root on node n1"),
            std::string::npos)
      << st.message;
}

// An agent that is not root cannot switch users: a task asking for another user fails and
// says so (checked in a child that gives up root, when the tests run as root).
TEST(TaskIdentityTest, AnAgentThatIsNotRootCannotSwitchUsers) {
  RunAs other;
  other.user = 4444;
  std::string message;
  if (::geteuid() != 0) {
    auto id = ResolveTaskIdentity(other, "", {}, "n1");
    ASSERT_FALSE(id.ok());
    message = id.status().message();
  } else {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      std::string m = "still root";
      if (::setgroups(0, nullptr) == 0 && ::setgid(65534) == 0 && ::setuid(65534) == 0) {
        auto id = ResolveTaskIdentity(other, "", {}, "n1");
        m = id.ok() ? "resolved" : id.status().message();
      }
      (void)!::write(fds[1], m.data(), m.size());
      ::_exit(0);
    }
    ::close(fds[1]);
    char buf[512];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) message.append(buf, n);
    ::close(fds[0]);
    ::waitpid(pid, nullptr, 0);
  }
  EXPECT_NE(message.find("cannot run the task as uid 4444"), std::string::npos) << message;
  EXPECT_NE(message.find("the agent on node n1 runs as uid"), std::string::npos) << message;
  EXPECT_NE(message.find("not root, and cannot switch users"), std::string::npos) << message;
}

// A work dir below a folder the task's user may not search (as /root, or a server's 0700
// data dir under `--local-agent`) fails the task saying so, as does a workingDir it may not
// enter, instead of a bare exit code from the task's process.
TEST_F(ExecutorTest, AFolderTheTasksUserCannotReachFailsItClearly) {
  SKIP_UNLESS_ROOT();
  const fs::path closed = dir_ / "root-only";
  fs::create_directories(closed);
  fs::permissions(closed, fs::perms::owner_all);
  ExecutorOptions o = Options();
  o.work_dir = (closed / "agent").string();
  Executor hidden(o);
  TaskSpec s = Shell("a-hidden", "id -u");
  s.run_as.user = 65534;
  ASSERT_TRUE(hidden.Start(s).ok());
  TaskStatus st = StatusOf(hidden, "a-hidden");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_EQ(st.message, "the task's folder " + o.work_dir +
                            "/tasks/a-hidden/work cannot be reached as uid 65534 (nobody), gid " +
                            std::to_string(NobodyGroup()) + ", groups " +
                            std::to_string(NobodyGroup()) +
                            ": Permission denied (every folder above the agent's --work-dir must "
                            "be searchable by the task's user: docs/agent.md, \"Task identity\")");

  Executor ex(Options());
  TaskSpec wd = Shell("a-wd", "id -u");
  wd.run_as.user = 65534;
  wd.working_dir = closed.string();
  ASSERT_TRUE(ex.Start(wd).ok());
  st = StatusOf(ex, "a-wd");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_NE(st.message.find("workingDir: " + closed.string() +
                            " cannot be entered as uid 65534 (nobody)"),
            std::string::npos)
      << st.message;
}

// sbatch -o / -e are opened with the task's rights: a user cannot have the agent's root
// write where the user may not.
TEST_F(ExecutorTest, OutputFilesAreOpenedAsTheTasksUser) {
  SKIP_UNLESS_ROOT();
  const fs::path closed = dir_ / "root-only", open = dir_ / "anyone";
  fs::create_directories(closed);
  fs::create_directories(open);
  fs::permissions(closed, fs::perms::owner_all);
  fs::permissions(open, fs::perms::all);
  Executor ex(Options());
  TaskSpec denied = Shell("a-denied", "echo hi");
  denied.run_as.user = 65534;
  denied.stdout_file = (closed / "out.log").string();
  ASSERT_TRUE(ex.Start(denied).ok());
  TaskSpec allowed = Shell("a-allowed", "echo hi");
  allowed.run_as.user = 65534;
  allowed.stdout_file = (open / "out.log").string();
  ASSERT_TRUE(ex.Start(allowed).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  const TaskStatus st = StatusOf(ex, "a-denied");
  EXPECT_EQ(st.state, TaskState::kFailed);
  EXPECT_EQ(st.message, "-o: cannot open " + (closed / "out.log").string() + ": Permission denied");
  EXPECT_FALSE(fs::exists(closed / "out.log"));
  EXPECT_EQ(StatusOf(ex, "a-allowed").state, TaskState::kSucceeded);
  EXPECT_EQ(Slurp((open / "out.log").string()), "hi\n");
  EXPECT_EQ(OwnerOf((open / "out.log").string()), 65534u);
}

// A task run as a user owns the folder its -o file is in: it may swap the file for a link to
// one only root may read, or for a FIFO. The agent (root) reads its log only while the path
// still leads to the file the task was given, and never blocks on a FIFO.
TEST_F(ExecutorTest, ALogFileSwappedAfterTheStartIsNotRead) {
  SKIP_UNLESS_ROOT();
  const fs::path open = dir_ / "anyone", secret = dir_ / "secret";
  fs::create_directories(open);
  fs::permissions(open, fs::perms::all);
  { std::ofstream(secret) << "root only\n"; }
  fs::permissions(secret, fs::perms::owner_read | fs::perms::owner_write);
  Executor ex(Options());
  TaskSpec t = Shell("a-swap", "echo hi");
  t.run_as.user = 65534;
  t.stdout_file = (open / "out.log").string();
  ASSERT_TRUE(ex.Start(t).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  auto before = ex.ReadLog("a-swap", "stdout", 0, 100);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->data, "hi\n");
  fs::remove(open / "out.log");
  fs::create_symlink(secret, open / "out.log");
  auto swapped = ex.ReadLog("a-swap", "stdout", 0, 100);
  ASSERT_FALSE(swapped.ok());
  EXPECT_EQ(swapped.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(swapped.status().message().find("is no longer the file the task was given"),
            std::string::npos)
      << swapped.status().message();
  fs::remove(open / "out.log");
  ASSERT_EQ(::mkfifo((open / "out.log").c_str(), 0666), 0);
  auto fifo = ex.ReadLog("a-swap", "stdout", 0, 100);  // returns: does not wait for a writer
  EXPECT_FALSE(fifo.ok());
  // Nor does a FIFO given as -o hold the agent's start (no reader: the task fails to open it).
  TaskSpec to_fifo = Shell("a-fifo", "echo hi");
  to_fifo.run_as.user = 65534;
  to_fifo.stdout_file = (open / "out.log").string();
  ASSERT_TRUE(ex.Start(to_fifo).ok());
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(StatusOf(ex, "a-fifo").state, TaskState::kFailed);
}

}  // namespace
}  // namespace tessera::agent
