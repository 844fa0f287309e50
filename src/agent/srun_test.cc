#include "agent/srun.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

namespace tessera::agent {
namespace {

// The batch environment of node `node` of a job of `nodes` nodes x `per_node` Slurm tasks.
std::map<std::string, std::string> Batch(int nodes, int node, int per_node) {
  return {{"SLURM_NNODES", std::to_string(nodes)},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_NTASKS", std::to_string(nodes * per_node)},
          {"SLURM_NTASKS_PER_NODE", std::to_string(per_node)}};
}

struct Share {
  int32_t first, count;
};

// Each node's share of `srun ARGS` in a job of nodes x per_node tasks.
std::vector<Share> Shares(std::vector<std::string> args, int nodes, int per_node) {
  args.push_back("true");
  std::vector<Share> out;
  for (int node = 0; node < nodes; ++node) {
    auto step = PlanSrunStep(args, Batch(nodes, node, per_node));
    EXPECT_TRUE(step.ok()) << step.status().ToString();
    if (!step.ok()) return {};
    out.push_back({step->local_tasks ? step->first_rank : -1, step->local_tasks});
  }
  return out;
}

std::string Text(const std::vector<Share>& shares) {
  std::string s;
  for (const Share& x : shares)
    s += (s.empty() ? "" : " ") + std::to_string(x.first) + "+" + std::to_string(x.count);
  return s;
}

TEST(Srun, StartsEachNodesBlockOfTheStepsRanks) {
  // The job's tasks by default: ranks 0-1 on node 0, 2-3 on node 1.
  EXPECT_EQ(Text(Shares({}, 2, 2)), "0+2 2+2");
  // Fewer tasks than nodes: only as many nodes; uneven: the first nodes take one more.
  EXPECT_EQ(Text(Shares({"-n", "1"}, 2, 2)), "0+1 -1+0");
  EXPECT_EQ(Text(Shares({"-n3"}, 2, 2)), "0+2 2+1");
  EXPECT_EQ(Text(Shares({"--ntasks=5"}, 3, 2)), "0+2 2+2 4+1");
  // -N and --ntasks-per-node choose the step's nodes and tasks per node.
  EXPECT_EQ(Text(Shares({"-N", "1"}, 2, 2)), "0+2 -1+0");
  EXPECT_EQ(Text(Shares({"--ntasks-per-node=1"}, 2, 4)), "0+1 1+1");
  // Options that change nothing here are taken.
  EXPECT_EQ(Text(Shares({"-K", "-u", "--cpus-per-task=4", "-J", "x", "--export=ALL", "--mpi=none",
                         "--kill-on-bad-exit=1"},
                        2, 1)),
            "0+1 1+1");
}

TEST(Srun, ReadsTheCommandAfterItsOptions) {
  auto step = PlanSrunStep({"-n", "2", "python3", "-u", "train.py", "--lr", "0.1"}, Batch(1, 0, 2));
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->command, (std::vector<std::string>{"python3", "-u", "train.py", "--lr", "0.1"}));
  EXPECT_FALSE(step->kill_on_bad_exit);
  step = PlanSrunStep({"-K", "--", "-weird"}, Batch(1, 0, 1));
  ASSERT_TRUE(step.ok());
  EXPECT_TRUE(step->kill_on_bad_exit);
  EXPECT_EQ(step->command, std::vector<std::string>{"-weird"});
}

TEST(Srun, RefusesWhatItCannotDoNamingIt) {
  struct Case {
    std::vector<std::string> args;
    std::string want;
  } cases[] = {
      {{}, "no command given to execute"},
      {{"-N", "3", "true"}, "-N 3: only 2 node(s) in the job's allocation"},
      {{"-n", "0", "true"}, "-n: a whole number of at least 1, got \"0\""},
      {{"-n"}, "-n: needs a value"},
      {{"--pty", "bash"}, "--pty: not supported (srun on Tessera's own nodes takes"},
      {{"--mpi=pmix", "a.out"}, "--mpi=pmix: not supported (no PMI"},
      {{"--export=NONE", "true"}, "--export=NONE: not supported"},
  };
  for (const Case& c : cases) {
    auto step = PlanSrunStep(c.args, Batch(2, 0, 1));
    ASSERT_FALSE(step.ok()) << c.want;
    EXPECT_NE(step.status().message().find(c.want), std::string::npos) << step.status().message();
  }
  auto outside = PlanSrunStep({"true"}, {});
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("not inside an sbatch job"), std::string::npos);
}

// -l: each line of a task's output, stdout and stderr alike, begins with its rank.
TEST(Srun, LabelPutsTheRankBeforeEachLine) {
  SrunStep step;
  step.ntasks = 4;
  step.nodes = 2;
  step.first_rank = 2;
  step.local_tasks = 2;
  step.label = true;
  step.command = {"/bin/sh", "-c", "echo a$SLURM_PROCID; echo b$SLURM_PROCID; printf c"};
  const std::string file = ::testing::TempDir() + "srun-label-" + std::to_string(::getpid());
  const int saved = ::dup(1);
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  ::dup2(fd, 1);
  const int rc = RunSrunStep(step);
  ::dup2(saved, 1);
  ::close(saved);
  ::close(fd);
  EXPECT_EQ(rc, 0);
  std::ifstream in(file);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::sort(lines.begin(), lines.end());  // the two tasks' lines interleave as they come
  EXPECT_EQ(lines, (std::vector<std::string>{"2: a2", "2: b2", "2: c", "3: a3", "3: b3", "3: c"}));
  ::unlink(file.c_str());
  EXPECT_TRUE(PlanSrunStep({"-l", "hostname"}, Batch(1, 0, 1))->label);
}

// With labels, once the tasks have closed their output srun waits on them: it does not
// poll nothing in a loop (a busy core for a whole training run). The task sleeps 1.5 s;
// srun's own CPU time over it stays far below that (a spin used it all).
TEST(Srun, LabelledTasksThatCloseTheirOutputAreWaitedForNotPolled) {
  SrunStep step;
  step.ntasks = 1;
  step.nodes = 1;
  step.local_tasks = 1;
  step.label = true;
  step.command = {"/bin/sh", "-c", "exec >/dev/null 2>&1; sleep 1.5"};
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  EXPECT_EQ(RunSrunStep(step), 0);
  ::getrusage(RUSAGE_SELF, &after);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  const double cpu = seconds(after.ru_utime) - seconds(before.ru_utime) + seconds(after.ru_stime) -
                     seconds(before.ru_stime);
  EXPECT_LT(cpu, 0.5) << "srun busy-looped while its task ran";
}

TEST(Srun, ExitsWithTheHighestStatusAndKillsTheRestOnBadExit) {
  SrunStep step;
  step.ntasks = 3;
  step.nodes = 1;
  step.local_tasks = 3;
  step.command = {"/bin/sh", "-c", "exit $SLURM_PROCID"};
  EXPECT_EQ(RunSrunStep(step), 2);
  // Rank 0 fails at once; with -K the others, which would wait for ever on a FIFO nobody
  // opens (in the shell itself: no child left behind), are killed, and their kill is not
  // what srun reports.
  const std::string fifo = ::testing::TempDir() + "srun-fifo-" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  step.kill_on_bad_exit = true;
  step.command = {"/bin/sh", "-c",
                  "[ $SLURM_PROCID = 0 ] && exit 3; read x < " + fifo + "; exit 5"};
  EXPECT_EQ(RunSrunStep(step), 3);
  ::unlink(fifo.c_str());
  step.command = {"/no/such/program"};
  EXPECT_EQ(RunSrunStep(step), 127);
}

}  // namespace
}  // namespace tessera::agent
