// cgroup v2 limits against a fake cgroup2 root: a temp dir with the interface files a real
// mount has (cgroup.controllers, cgroup.subtree_control). The code only reads and writes
// files, so what it would do to /sys/fs/cgroup is exactly what lands in the fake root.
#include "agent/cgroup.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "agent/executor.h"
#include "agent/test_support.h"

namespace tessera::agent {
namespace {

using testing::Slurp;
using testing::WaitFor;
namespace fs = std::filesystem;

void Put(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class CgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tessera-cgroup-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    root_ = dir_ / "cgroup2";
    fs::create_directories(root_);
    fs::create_directories(dir_ / "work");
  }
  void TearDown() override {
    for (pid_t g : groups_) ::kill(-g, SIGKILL);
    fs::remove_all(dir_);
  }
  // A cgroup2 root as the kernel presents it: the controllers it has, none enabled below.
  void FakeRoot(const std::string& controllers) {
    Put(root_ / "cgroup.controllers", controllers + "\n");
    Put(root_ / "cgroup.subtree_control", "");
  }
  ExecutorOptions Options() {
    ExecutorOptions o;
    o.work_dir = (dir_ / "work").string();
    o.node.name = "n1";
    o.wall_clock = [] { return int64_t{1733150000}; };
    o.cgroup_mount = root_.string();
    o.log = [this](const std::string& m) { log_.push_back(m); };
    return o;
  }
  static TaskSpec Sleeper(const std::string& id, int64_t cpu_milli, int64_t memory_bytes) {
    TaskSpec s;
    s.allocation = id;
    s.job = "job-" + id;
    s.command = {"/bin/sh", "-c", "sleep 30"};
    s.grace_period_seconds = 1;
    s.cpu_milli = cpu_milli;
    s.memory_bytes = memory_bytes;
    return s;
  }

  fs::path dir_, root_;
  std::vector<std::string> log_;
  std::vector<pid_t> groups_;
};

TEST(CpuMaxValueTest, QuotaPerHundredMillisecondPeriod) {
  struct Case {
    int64_t milli;
    const char* want;
  } cases[] = {
      {1000, "100000 100000"},    // 1 CPU: 100 ms per 100 ms
      {1500, "150000 100000"},    // 1.5 CPUs
      {250, "25000 100000"},      // a quarter CPU
      {64000, "6400000 100000"},  // 64 CPUs
      {5, "1000 100000"},         // 0.5 ms would be refused: the kernel's minimum is 1 ms
      {0, "max 100000"},          // no request: no limit
      {-3, "max 100000"},
  };
  for (const auto& c : cases) EXPECT_EQ(CpuMaxValue(c.milli), c.want) << c.milli;
}

TEST_F(CgroupTest, OpenEnablesCpuAndMemoryDownToTheParent) {
  FakeRoot("cpuset cpu io memory hugetlb pids");
  TaskCgroups cg = TaskCgroups::Open(root_.string(), "");
  ASSERT_TRUE(cg.available()) << cg.status();
  EXPECT_EQ(cg.status(), "enabled: " + (root_ / "tessera").string());
  EXPECT_EQ(Slurp((root_ / "cgroup.subtree_control").string()), "+cpu +memory");
  EXPECT_EQ(Slurp((root_ / "tessera" / "cgroup.subtree_control").string()), "+cpu +memory");

  // A deeper parent: every level in between hands the controllers down; a level that already
  // has them enabled is left alone.
  Put(root_ / "cgroup.subtree_control", "cpu memory pids\n");
  TaskCgroups deep =
      TaskCgroups::Open(root_.string() + "/", (root_ / "system" / "agents").string());
  ASSERT_TRUE(deep.available()) << deep.status();
  EXPECT_EQ(Slurp((root_ / "cgroup.subtree_control").string()), "cpu memory pids\n");
  EXPECT_EQ(Slurp((root_ / "system" / "cgroup.subtree_control").string()), "+cpu +memory");
  EXPECT_EQ(Slurp((root_ / "system" / "agents" / "cgroup.subtree_control").string()),
            "+cpu +memory");
}

TEST_F(CgroupTest, CreateWritesTheTasksLimits) {
  FakeRoot("cpu memory");
  TaskCgroups cg = TaskCgroups::Open(root_.string(), "");
  ASSERT_TRUE(cg.available()) << cg.status();
  struct Case {
    const char* id;
    int64_t cpu_milli, memory_bytes;
    const char* cpu_max;     // nullptr: no file
    const char* memory_max;  // nullptr: no file
  } cases[] = {
      {"a-1", 8000, int64_t{64} << 30, "800000 100000", "68719476736"},  // 8 CPUs, 64 GiB
      {"a-2", 1500, 0, "150000 100000", nullptr},                        // CPU only
      {"a-3", 0, 512 << 20, nullptr, "536870912"},                       // memory only: 512 MiB
  };
  for (const auto& c : cases) {
    auto path = cg.Create(c.id, c.cpu_milli, c.memory_bytes);
    ASSERT_TRUE(path.ok()) << path.status().ToString();
    EXPECT_EQ(*path, (root_ / "tessera" / c.id).string());
    fs::path p(*path);
    EXPECT_EQ(fs::exists(p / "cpu.max"), c.cpu_max != nullptr) << c.id;
    if (c.cpu_max) {
      EXPECT_EQ(Slurp((p / "cpu.max").string()), c.cpu_max) << c.id;
    }
    EXPECT_EQ(fs::exists(p / "memory.max"), c.memory_max != nullptr) << c.id;
    if (c.memory_max) {
      EXPECT_EQ(Slurp((p / "memory.max").string()), c.memory_max) << c.id;
    }
    ASSERT_TRUE(TaskCgroups::Join(*path, 4242).ok());
    EXPECT_EQ(Slurp((p / "cgroup.procs").string()), "4242");
    TaskCgroups::Kill(*path);
    EXPECT_EQ(Slurp((p / "cgroup.kill").string()), "1");
  }
  // A cgroup that cannot be written is an error naming the file.
  Put(root_ / "tessera" / "a-4" / "cpu.max" / "x", "");  // cpu.max is a directory
  auto bad = cg.Create("a-4", 1000, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("a-4/cpu.max"), std::string::npos)
      << bad.status().message();
}

TEST_F(CgroupTest, MissingControllersOrNoMountDegradeWithAReason) {
  struct Case {
    const char* controllers;  // nullptr: no cgroup.controllers file at all
    const char* want;
  } cases[] = {
      {"hugetlb", "lacks the cpu and memory controllers (has: hugetlb)"},  // this CI machine
      {"cpuset memory pids", "lacks the cpu controller (has: cpuset memory pids)"},  // not "cpu"
      {"cpu io", "lacks the memory controller (has: cpu io)"},
      {"", "lacks the cpu and memory controllers (has: none)"},
      {nullptr, "lacks the cpu and memory controllers (has: none)"},
  };
  for (const auto& c : cases) {
    fs::remove(root_ / "cgroup.controllers");
    if (c.controllers) FakeRoot(c.controllers);
    TaskCgroups cg = TaskCgroups::Open(root_.string(), "");
    EXPECT_FALSE(cg.available()) << c.want;
    EXPECT_EQ(cg.status(), "unavailable: cgroup2 at " + root_.string() + " " + c.want +
                               "; tasks run without CPU and memory limits");
    EXPECT_FALSE(fs::exists(root_ / "tessera")) << c.want;  // nothing was created
    EXPECT_FALSE(cg.Create("a-1", 1000, 1000).ok());
  }
  FakeRoot("cpu memory");
  TaskCgroups outside = TaskCgroups::Open(root_.string(), (dir_ / "elsewhere").string());
  EXPECT_FALSE(outside.available());
  EXPECT_NE(outside.status().find("is not a cgroup below the cgroup2 mount"), std::string::npos)
      << outside.status();
  Put(root_ / "tessera", "a file, not a cgroup");
  TaskCgroups blocked = TaskCgroups::Open(root_.string(), "");
  EXPECT_FALSE(blocked.available());
  EXPECT_NE(blocked.status().find("is not a directory"), std::string::npos) << blocked.status();
  EXPECT_EQ(TaskCgroups::Open(root_.string(), "-").status(), "disabled by configuration");
}

TEST_F(CgroupTest, ExecutorPutsTheTaskInItsCgroupWithItsLimits) {
  FakeRoot("cpuset cpu io memory pids");
  Executor ex(Options());
  ASSERT_EQ(ex.cgroup_status(), "enabled: " + (root_ / "tessera").string());
  ASSERT_TRUE(ex.Start(Sleeper("a-lim", 2500, int64_t{3} << 30)).ok());
  auto st = ex.Statuses();
  ASSERT_EQ(st.size(), 1u);
  ASSERT_EQ(st[0].state, TaskState::kRunning) << st[0].message;
  groups_.push_back(static_cast<pid_t>(st[0].pid));
  const fs::path cg = root_ / "tessera" / "a-lim";
  EXPECT_EQ(Slurp((cg / "cpu.max").string()), "250000 100000");  // 2.5 CPUs
  EXPECT_EQ(Slurp((cg / "memory.max").string()), "3221225472");  // 3 GiB
  // The monitor (the process group leader) joined before the task was forked.
  EXPECT_EQ(Slurp((cg / "cgroup.procs").string()), std::to_string(st[0].pid));
  EXPECT_NE(Slurp((dir_ / "work" / "tasks" / "a-lim" / "task.json").string())
                .find("\"cgroup\":\"" + cg.string() + "\""),
            std::string::npos);
  // A task without a CPU or memory request gets no cgroup.
  ASSERT_TRUE(ex.Start(Sleeper("a-free", 0, 0)).ok());
  groups_.push_back(static_cast<pid_t>(ex.Statuses()[0].pid));
  EXPECT_FALSE(fs::exists(root_ / "tessera" / "a-free"));
  ex.StopAll("test");
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_TRUE(log_.empty()) << log_[0];
}

TEST_F(CgroupTest, SigkillAfterTheGracePeriodAlsoGoesThroughCgroupKill) {
  FakeRoot("cpu memory");
  Executor ex(Options());
  TaskSpec s = Sleeper("a-stubborn", 1000, 0);
  // Ignores SIGTERM (and so does its sleep); says when the trap is set, in its task folder.
  s.command = {"/bin/sh", "-c", "trap '' TERM; : > ready; sleep 30"};
  ASSERT_TRUE(ex.Start(s).ok());
  groups_.push_back(static_cast<pid_t>(ex.Statuses()[0].pid));
  ASSERT_TRUE(
      WaitFor([&] { return fs::exists(dir_ / "work" / "tasks" / "a-stubborn" / "ready"); }));
  ex.Stop("a-stubborn", "test");  // grace 1 s, then SIGKILL to the group and cgroup.kill
  ASSERT_TRUE(ex.WaitAll(20000));
  EXPECT_EQ(ex.Statuses()[0].state, TaskState::kKilled);
  EXPECT_EQ(ex.Statuses()[0].exit_code, 128 + SIGKILL);
  EXPECT_EQ(Slurp((root_ / "tessera" / "a-stubborn" / "cgroup.kill").string()), "1");
}

TEST_F(CgroupTest, ExecutorRunsTasksWithoutLimitsWhenTheCgroupCannotBeMade) {
  FakeRoot("cpu memory");
  Executor ex(Options());
  ASSERT_TRUE(ex.cgroup_status().rfind("enabled: ", 0) == 0) << ex.cgroup_status();
  Put(root_ / "tessera" / "a-x" / "memory.max" / "x", "");  // memory.max cannot be written
  ASSERT_TRUE(ex.Start(Sleeper("a-x", 1000, 1 << 30)).ok());
  auto st = ex.Statuses();
  ASSERT_EQ(st.size(), 1u);
  groups_.push_back(static_cast<pid_t>(st[0].pid));
  EXPECT_EQ(st[0].state, TaskState::kRunning);
  ASSERT_EQ(log_.size(), 1u);
  EXPECT_NE(log_[0].find("allocation a-x runs without cgroup limits: cannot write"),
            std::string::npos)
      << log_[0];
  EXPECT_NE(log_[0].find("a-x/memory.max"), std::string::npos) << log_[0];
  ex.StopAll("test");
  ASSERT_TRUE(ex.WaitAll(20000));
}

}  // namespace
}  // namespace tessera::agent
