#include "backends/slurm/sbatch.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace tessera::slurm {
namespace {

std::map<std::string, SlurmNode> Inventory() {
  std::map<std::string, SlurmNode> inv;
  for (int i = 1; i <= 4; ++i) {
    SlurmNode n;
    n.name = "node" + std::to_string(i);
    n.state = "idle";
    n.partitions = {"debug", "gpu"};
    n.cpus = 32;
    n.real_memory_mib = 256000;
    n.gres = {{"gpu", "a100", 8}};
    inv[n.name] = n;
  }
  inv["node4"].partitions = {"gpu"};
  inv["node4"].gres = {{"gpu", "a100", 2}, {"gpu", "v100", 2}};
  return inv;
}

// debug (the default) and gpu, both UP with no time limit.
std::map<std::string, SlurmPartition> Partitions() {
  std::map<std::string, SlurmPartition> p;
  p["debug"] = {"debug", "UP", true, false, std::nullopt, std::nullopt, 1};
  p["gpu"] = {"gpu", "UP", false, false, std::nullopt, std::nullopt, 1};
  return p;
}

Binding Bind(int32_t task, std::string node, int64_t cpu_milli, int64_t mem_mib,
             std::vector<int32_t> gpus) {
  Binding b;
  b.job = "train-1";
  b.task = task;
  b.allocation.node = std::move(node);
  b.allocation.cpu_milli = cpu_milli;
  b.allocation.memory_bytes = mem_mib << 20;
  for (int32_t g : gpus) b.allocation.devices.push_back({g, 1000, 0, -1});
  return b;
}

DispatchRequest Request(std::vector<Binding> bindings) {
  DispatchRequest r;
  r.job = "train-1";
  r.allocation = "a-000123";
  r.bindings = std::move(bindings);
  r.command = {"python3", "train.py", "--lr", "0.1 x"};
  return r;
}

std::vector<std::string> Common() {
  return {"sbatch",          "--parsable", "-J",
          "tessera-train-1", "--comment",  "tessera:train-1:a-000123",
          "--no-requeue"};
}

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(BuildSbatch, UniformGangIsOneJob) {
  // 4 tasks, 2 per node on node1/node2, each 1.5 CPU, 1000 MiB, 2 GPUs:
  // per node 3 CPUs -> 2 per task (rounded up), 2000 MiB, 4 GPUs.
  auto cmd = BuildSbatch(
      Request({Bind(0, "node1", 1500, 1000, {0, 1}), Bind(1, "node1", 1500, 1000, {2, 3}),
               Bind(2, "node2", 1500, 1000, {0, 1}), Bind(3, "node2", 1500, 1000, {4, 5})}),
      Inventory(), Partitions());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->argv, Cat(Common(), {"--partition=debug", "--nodes=2", "--nodelist=node1,node2",
                                      "--ntasks=4", "--ntasks-per-node=2", "--cpus-per-task=2",
                                      "--mem=2000", "--gres=gpu:a100:4"}));
  EXPECT_EQ(cmd->components, 1);
  EXPECT_EQ(cmd->usage.at("node1"), (NodeUsage{4, 2000, 4}));
  EXPECT_EQ(cmd->script,
            "#!/bin/sh\n# Tessera job train-1, allocation a-000123\n"
            "exec srun --kill-on-bad-exit=1 python3 train.py --lr '0.1 x'\n");
}

TEST(BuildSbatch, UnevenPlacementIsAHeterogeneousJob) {
  // 3 tasks on node1 (1 GPU each), 1 task on node4 (a v100): two shapes, two components.
  auto cmd =
      BuildSbatch(Request({Bind(0, "node1", 1000, 100, {0}), Bind(1, "node1", 1000, 100, {1}),
                           Bind(2, "node1", 1000, 100, {2}), Bind(3, "node4", 4000, 512, {3})}),
                  Inventory(), Partitions());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->components, 2);
  // node4 is only in "gpu": the common partition.
  EXPECT_EQ(cmd->argv,
            Cat(Common(),
                {"--partition=gpu", "--nodes=1", "--nodelist=node1", "--ntasks=3",
                 "--ntasks-per-node=3", "--cpus-per-task=1", "--mem=300", "--gres=gpu:a100:3", ":",
                 "--partition=gpu", "--nodes=1", "--nodelist=node4", "--ntasks=1",
                 "--ntasks-per-node=1", "--cpus-per-task=4", "--mem=512", "--gres=gpu:v100:1"}));
  EXPECT_NE(cmd->script.find("srun --kill-on-bad-exit=1 --het-group=0-1 python3"),
            std::string::npos);
}

TEST(BuildSbatch, ProcessesPerTaskForSbatchJobs) {
  // An sbatch job "-N 2 --ntasks-per-node=4 -c 2" is 2 Tessera tasks of 8 CPUs each; Slurm
  // must see 8 tasks of 2 CPUs again.
  DispatchRequest r =
      Request({Bind(0, "node1", 8000, 1000, {0}), Bind(1, "node2", 8000, 1000, {0})});
  r.processes_per_task = 4;
  auto cmd = BuildSbatch(r, Inventory(), Partitions());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->argv, Cat(Common(), {"--partition=debug", "--nodes=2", "--nodelist=node1,node2",
                                      "--ntasks=8", "--ntasks-per-node=4", "--cpus-per-task=2",
                                      "--mem=1000", "--gres=gpu:a100:1"}));
  r.processes_per_task = 0;
  EXPECT_EQ(BuildSbatch(r, Inventory(), Partitions()).status().code(),
            StatusCode::kInvalidArgument);
}

// An exclusive job (#SBATCH --exclusive) is passed to Slurm as --exclusive on every
// component, and holds every CPU and GPU of its nodes there (Slurm allocates them all),
// which is what Discovery must not count as foreign use.
TEST(BuildSbatch, ExclusiveIsPassedThrough) {
  DispatchRequest r =
      Request({Bind(0, "node1", 2000, 1000, {0}), Bind(1, "node4", 2000, 1000, {0, 1})});
  r.exclusive = true;
  auto cmd = BuildSbatch(r, Inventory(), Partitions());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->argv,
            Cat(Common(), {"--partition=gpu", "--nodes=1", "--nodelist=node1", "--ntasks=1",
                           "--ntasks-per-node=1", "--cpus-per-task=2", "--exclusive", "--mem=1000",
                           "--gres=gpu:a100:1", ":", "--partition=gpu", "--nodes=1",
                           "--nodelist=node4", "--ntasks=1", "--ntasks-per-node=1",
                           "--cpus-per-task=2", "--exclusive", "--mem=1000", "--gres=gpu:a100:2"}));
  EXPECT_EQ(cmd->usage.at("node1"), (NodeUsage{32, 1000, 8}));
  EXPECT_EQ(cmd->usage.at("node4"), (NodeUsage{32, 1000, 4}));
  r.exclusive = false;
  cmd = BuildSbatch(r, Inventory(), Partitions());
  ASSERT_TRUE(cmd.ok());
  for (const std::string& a : cmd->argv) EXPECT_NE(a, "--exclusive");
  EXPECT_EQ(cmd->usage.at("node1"), (NodeUsage{2, 1000, 1}));
}

TEST(BuildSbatch, SingleCpuTaskWithOptions) {
  DispatchRequest r = Request({Bind(0, "node3", 250, 0, {})});
  r.command = {"/bin/true"};
  r.time_limit_seconds = 90061;  // 1 day 1 h 1 min 1 s
  r.working_dir = "/tmp/w";
  r.stdout_path = "/tmp/w/%j.out";
  r.env = {{"B", "2"}, {"A", "1"}};
  auto cmd = BuildSbatch(r, Inventory(), Partitions());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->argv, Cat(Common(), {"--time=1-01:01:01", "--chdir=/tmp/w",
                                      "--output=/tmp/w/%j.out", "--export=ALL,A=1,B=2",
                                      "--partition=debug", "--nodes=1", "--nodelist=node3",
                                      "--ntasks=1", "--ntasks-per-node=1", "--cpus-per-task=1"}));
  EXPECT_EQ(cmd->script.substr(cmd->script.rfind("exec")), "exec /bin/true\n");
  // Tessera's own files (one pair per attempt, shared by its Slurm jobs): appended to, so that
  // a replica added later does not empty what the first is writing.
  r.stderr_path = "/tmp/w/%j.err";
  r.append_output = true;
  auto both = BuildSbatch(r, Inventory(), Partitions());
  ASSERT_TRUE(both.ok()) << both.status().ToString();
  EXPECT_EQ(std::count(both->argv.begin(), both->argv.end(), "--open-mode=append"), 1);
}

// A job that asks for no memory gets no --mem: Slurm's DefMemPerCPU applies, not a 1 MiB
// cgroup limit; any memory asked is rounded up to whole MiB.
TEST(BuildSbatch, MemOnlyWhenAsked) {
  auto mem_args = [](int64_t bytes) {
    DispatchRequest r = Request({Bind(0, "node3", 1000, 0, {})});
    r.bindings[0].allocation.memory_bytes = bytes;
    r.command = {"/bin/true"};
    auto cmd = BuildSbatch(r, Inventory(), Partitions());
    EXPECT_TRUE(cmd.ok()) << cmd.status().ToString();
    std::vector<std::string> out;
    for (const auto& a : cmd->argv)
      if (a.rfind("--mem", 0) == 0) out.push_back(a);
    return out;
  };
  EXPECT_EQ(mem_args(0), std::vector<std::string>{});
  EXPECT_EQ(mem_args(1), std::vector<std::string>{"--mem=1"});
  EXPECT_EQ(mem_args((int64_t{3} << 20) + 1), std::vector<std::string>{"--mem=4"});
}

TEST(BuildSbatch, Rejections) {
  struct Case {
    std::string name;
    DispatchRequest req;
    StatusCode code;
    std::string words;
  };
  auto frac = Request({Bind(0, "node1", 1000, 100, {0})});
  frac.bindings[0].allocation.devices[0].milli = 500;
  auto mig = Request({Bind(0, "node1", 1000, 100, {0})});
  mig.bindings[0].allocation.devices[0].mig_instance = 0;
  auto bad_id = Request({Bind(0, "node1", 1000, 100, {})});
  bad_id.allocation = "a 1";
  auto other_job = Request({Bind(0, "node1", 1000, 100, {})});
  other_job.bindings[0].job = "x";
  auto nothing = Request({Bind(0, "node1", 1000, 100, {})});
  nothing.command.clear();
  auto comma_env = Request({Bind(0, "node1", 1000, 100, {})});
  comma_env.env = {{"HOSTS", "a,b"}};
  auto wrong_part = Request({Bind(0, "node1", 1000, 100, {})});
  wrong_part.partition = "nope";
  Case cases[] = {
      {"fraction", frac, StatusCode::kInvalidArgument, "fractional and MIG"},
      {"mig", mig, StatusCode::kInvalidArgument, "fractional and MIG"},
      {"unknown node", Request({Bind(0, "node9", 1000, 1, {})}), StatusCode::kFailedPrecondition,
       "\"node9\" is not a known Slurm node"},
      {"no such gpu", Request({Bind(0, "node1", 1000, 1, {8})}), StatusCode::kFailedPrecondition,
       "GPU 8 does not exist"},
      {"common partition found",
       Request({Bind(0, "node4", 1000, 1, {}), Bind(1, "node1", 1000, 1, {})}), StatusCode::kOk,
       ""},
      {"bad id", bad_id, StatusCode::kInvalidArgument, "dispatch.allocation"},
      {"other job", other_job, StatusCode::kInvalidArgument, "bindings[0].job"},
      {"task twice", Request({Bind(0, "node1", 1, 1, {}), Bind(0, "node2", 1, 1, {})}),
       StatusCode::kInvalidArgument, "bound twice"},
      {"nothing to run", nothing, StatusCode::kInvalidArgument, "neither script nor command"},
      {"comma in env", comma_env, StatusCode::kInvalidArgument, "dispatch.env.HOSTS"},
      {"partition", wrong_part, StatusCode::kFailedPrecondition,
       "Slurm partition \"nope\" cannot run the job on node1: does not hold node1"},
      {"empty", Request({}), StatusCode::kInvalidArgument, "bindings: empty"},
  };
  for (const Case& c : cases) {
    auto got = BuildSbatch(c.req, Inventory(), Partitions());
    EXPECT_EQ(got.status().code(), c.code) << c.name << ": " << got.status().ToString();
    EXPECT_NE(got.status().message().find(c.words), std::string::npos)
        << c.name << ": " << got.status().message();
  }
}

// Which partition a job goes to, and why the others were passed over (docs/slurm.md,
// "Partition"). Every case's nodes: node1 (in "a", "b", "c", "d") unless it says otherwise.
TEST(ChoosePartition, Table) {
  auto part = [](std::string name, std::string state, bool is_default = false,
                 std::optional<int64_t> max_time = std::nullopt, int64_t tier = 1) {
    return SlurmPartition{name, state, is_default, false, max_time, std::nullopt, tier};
  };
  struct Case {
    std::string name;
    std::vector<SlurmPartition> partitions;
    std::optional<int64_t> time_limit;  // seconds
    std::string want;                   // the partition, or words of the error
    std::string named = "";             // DispatchRequest::partition
    std::vector<std::string> served = {};
  } cases[] = {
      // "a" comes first by name, and is DOWN: the old rule picked it.
      {"not the first by name: the default",
       {part("a", "DOWN"), part("b", "UP"), part("c", "UP", true)},
       std::nullopt,
       "c"},
      {"a down default is passed over",
       {part("a", "UP"), part("b", "DOWN", true)},
       std::nullopt,
       "a"},
      {"DRAIN and INACTIVE are never chosen",
       {part("a", "DRAIN"), part("b", "INACTIVE"), part("c", "UP")},
       std::nullopt,
       "c"},
      // 2 h: the default's 1 h is too short; of b (3 h) and c (1 day), b fits tightest.
      {"a default too short for the job",
       {part("a", "UP", true, 3600), part("b", "UP", false, 10800), part("c", "UP", false, 86400)},
       7200,
       "b"},
      {"no time limit: the longest MaxTime",
       {part("a", "UP", false, 3600), part("b", "UP"), part("c", "UP", false, 86400)},
       std::nullopt,
       "b"},
      {"MaxTime in whole minutes: 59 min 1 s needs an hour",
       {part("a", "UP", false, 3540), part("b", "UP", false, 3600)},
       3541,
       "b"},
      {"PriorityTier before MaxTime",
       {part("a", "UP", false, 86400), part("b", "UP", false, 3600, 5)},
       60,
       "b"},
      {"served partitions only",
       {part("a", "UP", true), part("b", "UP"), part("c", "UP")},
       std::nullopt,
       "c",
       "",
       {"c", "d"}},
      {"the request's partition", {part("a", "UP", true), part("b", "UP")}, std::nullopt, "b", "b"},
      {"the request's partition is down",
       {part("a", "UP", true), part("b", "DOWN")},
       std::nullopt,
       "dispatch.partition: Slurm partition \"b\" cannot run the job on node1: State=DOWN",
       "b"},
      {"none fits: each one's reason",
       {part("a", "DOWN", true), part("b", "UP", false, 600), part("c", "UP")},
       1200,
       "no Slurm partition can run the job on node1 (a: State=DOWN; b: MaxTime=0-00:10:00 is "
       "less than the job's --time=0-00:20:00; c: not served by this pool (--slurm-partition); "
       "d: not listed by scontrol show partition)",
       "",
       {"a", "b", "d"}},
  };
  std::map<std::string, SlurmNode> inv;
  inv["node1"].name = "node1";
  inv["node1"].partitions = {"a", "b", "c", "d"};
  for (const Case& c : cases) {
    std::map<std::string, SlurmPartition> parts;
    for (const SlurmPartition& p : c.partitions) parts[p.name] = p;
    DispatchRequest r = Request({Bind(0, "node1", 1000, 1, {})});
    r.time_limit_seconds = c.time_limit;
    r.partition = c.named;
    auto got = ChoosePartition(r, {"node1"}, inv, parts, c.served);
    if (got.ok()) {
      EXPECT_EQ(*got, c.want) << c.name;
    } else {
      EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition) << c.name;
      EXPECT_NE(got.status().message().find(c.want), std::string::npos)
          << c.name << ": " << got.status().message();
    }
  }
}

// All of a job's nodes must be in the partition; a hidden one is used only when named.
TEST(ChoosePartition, EveryNodeAndHidden) {
  std::map<std::string, SlurmPartition> parts = Partitions();
  parts["gpu"].hidden = true;
  auto got = BuildSbatch(Request({Bind(0, "node4", 1000, 1, {}), Bind(1, "node1", 1000, 1, {})}),
                         Inventory(), parts);
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(got.status().message().find("(debug: does not hold node4; gpu: Hidden=YES (only "
                                        "used when named))"),
            std::string::npos)
      << got.status().message();
  DispatchRequest named = Request({Bind(0, "node4", 1000, 1, {})});
  named.partition = "gpu";
  got = BuildSbatch(named, Inventory(), parts);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_NE(std::find(got->argv.begin(), got->argv.end(), "--partition=gpu"), got->argv.end());
}

TEST(NeutralizePlacementDirectives, Table) {
  struct Case {
    std::string in, out;
  } cases[] = {
      {"#!/bin/bash\n#SBATCH --gpus=4\necho hi\n",
       "#!/bin/bash\n# [tessera] #SBATCH --gpus=4\necho hi\n"},
      {"#SBATCH -n 2\n#SBATCH -N2\n#SBATCH --ntasks-per-node=2\n",
       "# [tessera] #SBATCH -n 2\n# [tessera] #SBATCH -N2\n# [tessera] #SBATCH "
       "--ntasks-per-node=2\n"},
      // Kept: output, mail, error files.
      {"#SBATCH -o out.txt\n#SBATCH --mail-type=END\n#SBATCH --error=e\n",
       "#SBATCH -o out.txt\n#SBATCH --mail-type=END\n#SBATCH --error=e\n"},
      // Identity and placement: name, partition, time, nodelist, array, hetjob separator.
      {"#SBATCH -J x\n#SBATCH -p big\n#SBATCH -t 10\n#SBATCH -w n1\n#SBATCH --array=1-3\n#SBATCH "
       "hetjob\n",
       "# [tessera] #SBATCH -J x\n# [tessera] #SBATCH -p big\n# [tessera] #SBATCH -t 10\n"
       "# [tessera] #SBATCH -w n1\n# [tessera] #SBATCH --array=1-3\n# [tessera] #SBATCH hetjob\n"},
      // The user's -w/-x in every spelling: Tessera placed the job within them already, and
      // sbatch gets --nodelist of the nodes it chose.
      {"#SBATCH -w gpu-[1-2]\n#SBATCH --nodelist=a,b\n#SBATCH -wa\n#SBATCH -x c\n"
       "#SBATCH --exclude=n[1-3]\n#SBATCH --exclude n4\n",
       "# [tessera] #SBATCH -w gpu-[1-2]\n# [tessera] #SBATCH --nodelist=a,b\n"
       "# [tessera] #SBATCH -wa\n# [tessera] #SBATCH -x c\n# [tessera] #SBATCH "
       "--exclude=n[1-3]\n# [tessera] #SBATCH --exclude n4\n"},
      // Slurm stops reading directives at the first command: so do we.
      {"#!/bin/sh\n\n# comment\n#SBATCH --mem=1G\nhostname\n#SBATCH --mem=2G\n",
       "#!/bin/sh\n\n# comment\n# [tessera] #SBATCH --mem=1G\nhostname\n#SBATCH --mem=2G\n"},
      // No trailing newline, CRLF.
      {"#SBATCH --gres=gpu:2", "# [tessera] #SBATCH --gres=gpu:2"},
      {"#SBATCH --cpus-per-task=4\r\n", "# [tessera] #SBATCH --cpus-per-task=4\r\n"},
      // Not a directive (no option) and prefix-alike option names are kept.
      {"#SBATCH\n#SBATCH --gpu-bind=closest\n", "#SBATCH\n#SBATCH --gpu-bind=closest\n"},
      // Several options on one line: the ones Tessera does not decide stay, on their own
      // line (an account or an output file must not go with the line's -N), quoted again.
      {"#SBATCH -N 2 -A ml --output=\"my out.txt\"\r\nhostname\n",
       "# [tessera] #SBATCH -N 2 -A ml --output=\"my out.txt\"\r\n#SBATCH -A ml "
       "'--output=my out.txt'\r\nhostname\n"},
      {"#SBATCH -A ml -N 2", "# [tessera] #SBATCH -A ml -N 2\n#SBATCH -A ml"},
      {"#SBATCH -N 2 --gpus=4 # two nodes\n", "# [tessera] #SBATCH -N 2 --gpus=4 # two nodes\n"},
      {"#SBATCH -A ml -o x\n", "#SBATCH -A ml -o x\n"},
  };
  for (const Case& c : cases) EXPECT_EQ(NeutralizePlacementDirectives(c.in), c.out) << c.in;
}

TEST(JobOutputFiles, TesseraNamesWhatTheScriptDoesNot) {
  struct Case {
    std::string script, out, err;
  } cases[] = {
      {"", "/l/j.2.out", "/l/j.2.err"},  // a command: both
      {"#!/bin/bash\n#SBATCH -N 2\necho\n", "/l/j.2.out", "/l/j.2.err"},
      // The script's own -o takes stdout, and stderr too without -e (Slurm's rule).
      {"#!/bin/bash\n#SBATCH -o my.out\n", "", ""},
      {"#SBATCH --output=my.out\n", "", ""},
      {"#SBATCH -omy.out\n", "", ""},
      {"#SBATCH -J x -o my.out\n", "", ""},
      {"#SBATCH -e my.err\n", "/l/j.2.out", ""},
      {"#SBATCH --error my.err\n", "/l/j.2.out", ""},
      // Not directives: after the first command, commented out, look-alike names.
      {"#!/bin/sh\necho\n#SBATCH -o late.out\n", "/l/j.2.out", "/l/j.2.err"},
      {"## SBATCH -o x\n#SBATCH --open-mode=append # -o x\n", "/l/j.2.out", "/l/j.2.err"},
  };
  for (const Case& c : cases) {
    OutputFiles f = JobOutputFiles("/l", "j", 2, c.script);
    EXPECT_EQ(f.stdout_path, c.out) << c.script;
    EXPECT_EQ(f.stderr_path, c.err) << c.script;
  }
  OutputFiles none = JobOutputFiles("", "j", 2, "");  // no directory: Slurm's default
  EXPECT_EQ(none.stdout_path, "");
  EXPECT_EQ(none.stderr_path, "");
}

TEST(BuildSbatch, UserScriptKeepsItsBody) {
  DispatchRequest r = Request({Bind(0, "node1", 2000, 100, {0, 1})});
  r.command.clear();
  r.script = "#!/bin/bash\n#SBATCH --gpus=4\n#SBATCH -o %x.out\nsrun hostname\n";
  auto cmd = BuildSbatch(r, Inventory(), Partitions());
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_EQ(cmd->script,
            "#!/bin/bash\n# [tessera] #SBATCH --gpus=4\n#SBATCH -o %x.out\nsrun hostname\n");
  EXPECT_EQ(cmd->argv.back(), "--gres=gpu:a100:2");
}

TEST(Tag, RoundTrip) {
  EXPECT_EQ(SlurmComment("j1", "a-1"), "tessera:j1:a-1");
  EXPECT_EQ(ParseTag("tessera:j1:a-1"), (Tag{"j1", "a-1"}));
  EXPECT_EQ(ParseTag("tessera:ns:j1:a-1"), (Tag{"ns:j1", "a-1"}));
  EXPECT_FALSE(ParseTag("").has_value());
  EXPECT_FALSE(ParseTag("user comment").has_value());
  EXPECT_FALSE(ParseTag("tessera:j1").has_value());
  EXPECT_FALSE(ParseTag("tessera:j1:").has_value());
  EXPECT_EQ(SlurmDuration(59), "0-00:00:59");
  EXPECT_EQ(SlurmDuration(3600), "0-01:00:00");
}

// The account and QOS a job runs under: the script's leading #SBATCH lines, then
// --slurm-sbatch-arg (sbatch's command line), which wins; later options win.
TEST(JobIdentity, ScriptThenExtraArgs) {
  SbatchOptions o;
  o.submitter = Submitter{"svc", {"svc"}, false};
  SlurmIdentity who = JobIdentity(
      "#!/bin/sh\n#SBATCH -A ml --qos=high\n#SBATCH -q low # a comment -A no\necho\n#SBATCH -A "
      "late\n",
      o);
  EXPECT_EQ(who.account, "ml");
  EXPECT_EQ(who.qos, "low");
  EXPECT_EQ(who.submitter.user, "svc");
  o.extra_args = {"--account", "cv", "-qhigh"};
  who = JobIdentity("#!/bin/sh\n#SBATCH --account=ml\n", o);
  EXPECT_EQ(who.account, "cv");
  EXPECT_EQ(who.qos, "high");
  EXPECT_EQ(JobIdentity("", SbatchOptions{{"-Avision"}, {}, o.submitter}).account, "vision");
  EXPECT_EQ(JobIdentity("", SbatchOptions{{}, {}, o.submitter}).account, "");  // Slurm's default
}

// As sbatch reads them: quotes removed, and (as Slurm stores them) lower case.
TEST(JobIdentity, QuotedAndUpperCase) {
  SbatchOptions o;
  o.submitter = Submitter{"svc", {"svc"}, false};
  SlurmIdentity who = JobIdentity("#!/bin/sh\n#SBATCH --account=\"ML\" -q 'High'\necho\n", o);
  EXPECT_EQ(who.account, "ml");
  EXPECT_EQ(who.qos, "high");
  EXPECT_EQ(JobIdentity("#!/bin/sh\n#SBATCH -A \"Vision\"\n", o).account, "vision");
  // A partition that lists ml admits it, whatever case slurm.conf wrote.
  SlurmPartition acct;
  acct.name = "acct";
  acct.allow_accounts = std::vector<std::string>{"ML"};
  acct.allow_qos = std::vector<std::string>{"high"};
  EXPECT_EQ(PartitionRefuses(acct, who), "");
}

TEST(PartitionRefuses, AllowDenyAndAll) {
  using List = std::vector<std::string>;
  SlurmPartition all;  // every list ALL: admits anyone
  all.name = "all";
  SlurmPartition acct = all;
  acct.allow_accounts = List{"ml", "vision"};
  acct.deny_accounts = {"ml"};  // ignored: AllowAccounts is set (Slurm takes one or the other)
  SlurmPartition deny = all;
  deny.deny_accounts = {"bad"};
  deny.deny_qos = {"low"};
  SlurmPartition qos = all;
  qos.allow_qos = List{"high"};
  SlurmPartition grp = all;
  grp.allow_groups = List{"hpc", "admins"};
  const Submitter svc{"svc", {"svc", "users"}, false};
  const Submitter member{"ana", {"ana", "hpc"}, false};
  const Submitter root{"root", {"root"}, true};
  struct Case {
    const SlurmPartition* p;
    SlurmIdentity who;
    std::string want;
  };
  const Case cases[] = {
      {&all, {"any", "any", svc}, ""},
      {&acct, {"ml", "", svc}, ""},
      {&acct, {"cv", "", svc}, "refuses account cv (AllowAccounts=ml,vision)"},
      {&acct, {"", "", svc}, ""},  // Slurm's default account: unknown here, not judged
      {&deny, {"bad", "", svc}, "refuses account bad (DenyAccounts=bad)"},
      {&deny, {"ml", "low", svc}, "refuses QOS low (DenyQos=low)"},
      {&deny, {"ml", "high", svc}, ""},
      {&qos, {"", "low", svc}, "refuses QOS low (AllowQos=high)"},
      {&qos, {"", "high", svc}, ""},
      {&qos, {"", "", svc}, ""},
      {&grp, {"", "", svc}, "refuses user svc (AllowGroups=hpc,admins: none of its groups)"},
      {&grp, {"", "", member}, ""},
      {&grp, {"", "", root}, ""},  // root may use any partition whatever AllowGroups
      {&acct, {"cv", "", root}, "refuses account cv (AllowAccounts=ml,vision)"},  // not accounts
      {&acct, {"Vision", "", svc}, ""},  // Slurm's names are case-insensitive
      {&deny, {"BAD", "Low", svc}, "refuses account BAD (DenyAccounts=bad)"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(PartitionRefuses(*c.p, c.who), c.want)
        << c.p->name << " " << c.who.account << "/" << c.who.qos << "/" << c.who.submitter.user;
}

// A partition that refuses the job is passed over for one that takes it, even one the admin
// prefers less; none left: the error says why, and reads as an access refusal.
TEST(ChoosePartition, SkipsPartitionsThatRefuse) {
  std::map<std::string, SlurmPartition> parts = Partitions();  // debug (default), gpu
  parts["debug"].allow_accounts = std::vector<std::string>{"ml"};
  SlurmIdentity cv{"cv", "", Submitter{"svc", {"svc"}, false}};
  DispatchRequest r = Request({Bind(0, "node1", 1000, 1, {})});
  auto got = ChoosePartition(r, {"node1"}, Inventory(), parts, {}, cv);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "gpu");
  EXPECT_EQ(
      *ChoosePartition(r, {"node1"}, Inventory(), parts, {}, SlurmIdentity{"ml", "", cv.submitter}),
      "debug");
  parts["gpu"].allow_groups = std::vector<std::string>{"hpc"};
  got = ChoosePartition(r, {"node1"}, Inventory(), parts, {}, cv);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find(
                "(debug: refuses account cv (AllowAccounts=ml); gpu: refuses user svc "
                "(AllowGroups=hpc: none of its groups))"),
            std::string::npos)
      << got.status().message();
  EXPECT_TRUE(IsAccessRefusal(got.status()));
  EXPECT_EQ(got.status().code(), StatusCode::kPermissionDenied);
  // The script's own -A reaches the choice through BuildSbatch.
  SbatchOptions o;
  o.submitter = Submitter{"ana", {"hpc"}, false};
  r.script = "#!/bin/sh\n#SBATCH -A cv\nsrun true\n";
  auto cmd = BuildSbatch(r, Inventory(), parts, o);
  ASSERT_TRUE(cmd.ok()) << cmd.status().ToString();
  EXPECT_NE(std::find(cmd->argv.begin(), cmd->argv.end(), "--partition=gpu"), cmd->argv.end());
}

// Only one partition refuses on access, the other fails on its limits: placing the job on
// other nodes (RefusingNodes lists none) would not help, so it is no access refusal.
TEST(ChoosePartition, AccessRefusalOnlyWhenEveryPartitionRefusesAccess) {
  std::map<std::string, SlurmPartition> parts = Partitions();  // debug (default), gpu
  parts["debug"].allow_accounts = std::vector<std::string>{"ml"};
  parts["gpu"].max_time_seconds = 3600;
  SlurmIdentity cv{"cv", "", Submitter{"svc", {"svc"}, false}};
  DispatchRequest r = Request({Bind(0, "node1", 1000, 1, {})});
  r.time_limit_seconds = 7200;
  auto got = ChoosePartition(r, {"node1"}, Inventory(), parts, {}, cv);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("debug: refuses account cv"), std::string::npos)
      << got.status().message();
  EXPECT_EQ(got.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_FALSE(IsAccessRefusal(got.status()));
  // A DOWN partition is not there to take it: the refusal alone decides.
  parts["gpu"].state = "DOWN";
  got = ChoosePartition(r, {"node1"}, Inventory(), parts, {}, cv);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(IsAccessRefusal(got.status())) << got.status().ToString();
  // A named partition that refuses on access; one that refuses on limits.
  parts["gpu"].state = "UP";
  r.partition = "debug";
  EXPECT_TRUE(IsAccessRefusal(ChoosePartition(r, {"node1"}, Inventory(), parts, {}, cv).status()));
  r.partition = "gpu";
  EXPECT_FALSE(IsAccessRefusal(ChoosePartition(r, {"node1"}, Inventory(), parts, {}, cv).status()));
}

TEST(IsAccessRefusal, SlurmWords) {
  EXPECT_TRUE(IsAccessRefusal(FailedPrecondition(
      "sbatch (exit 1): sbatch: error: Batch job submission failed: Invalid account or "
      "account/partition combination specified")));
  EXPECT_TRUE(IsAccessRefusal(FailedPrecondition(
      "sbatch (exit 1): Batch job submission failed: User's group not permitted to use this "
      "partition")));
  EXPECT_TRUE(IsAccessRefusal(
      FailedPrecondition("Batch job submission failed: Job's QOS not permitted to use this "
                         "partition (gpu allows high not low)")));
  EXPECT_FALSE(IsAccessRefusal(FailedPrecondition(
      "sbatch (exit 1): Batch job submission failed: Requested node configuration is not "
      "available")));
  EXPECT_FALSE(IsAccessRefusal(Unavailable("Unable to contact slurm controller: refuses ")));
  // Partition limits (MaxTime, MaxNodes), not access.
  EXPECT_FALSE(IsAccessRefusal(FailedPrecondition(
      "sbatch (exit 1): Batch job submission failed: Requested partition configuration not "
      "available now")));
  // A ChoosePartition message where one partition refuses on access, another on limits.
  EXPECT_FALSE(IsAccessRefusal(FailedPrecondition(
      "dispatch.bindings: no Slurm partition can run the job on node1 (debug: refuses account "
      "cv (AllowAccounts=ml); gpu: MaxTime=0-01:00:00 is less than the job's --time=0-02:00:00)")));
}

// Nodes where every served, open partition refuses the job; why, per partition.
TEST(RefusingNodes, EveryOpenPartitionRefuses) {
  std::map<std::string, SlurmNode> inv;
  for (const char* n : {"node1", "node2", "node3", "node4"}) inv[n].name = n;
  inv["node1"].partitions = {"acct"};
  inv["node2"].partitions = {"acct", "open"};
  inv["node3"].partitions = {"acct", "grp", "off"};
  inv["node4"].partitions = {"off"};  // no open partition: discovery's business, not listed
  std::map<std::string, SlurmPartition> parts;
  for (const char* n : {"acct", "open", "grp", "off"}) {
    parts[n].name = n;
    parts[n].state = "UP";
  }
  parts["acct"].allow_accounts = std::vector<std::string>{"ml"};
  parts["grp"].allow_groups = std::vector<std::string>{"hpc"};
  parts["off"].state = "DOWN";
  const Submitter svc{"svc", {"svc"}, false};
  using Want = std::map<std::string, std::string>;
  EXPECT_EQ(RefusingNodes({"cv", "", svc}, inv, parts, {}),
            Want({{"node1", "Slurm partition acct refuses account cv (AllowAccounts=ml)"},
                  {"node3",
                   "Slurm partition acct refuses account cv (AllowAccounts=ml); partition grp "
                   "refuses user svc (AllowGroups=hpc: none of its groups)"}}));
  EXPECT_TRUE(RefusingNodes({"ml", "", svc}, inv, parts, {}).empty());  // acct takes ml
  // A member of hpc: grp admits it on node3, acct still refuses cv on node1.
  EXPECT_EQ(RefusingNodes({"cv", "", Submitter{"ana", {"hpc"}, false}}, inv, parts, {}),
            Want({{"node1", "Slurm partition acct refuses account cv (AllowAccounts=ml)"}}));
  // Served partitions only: node2's "open" is not served, so acct alone decides there.
  EXPECT_EQ(RefusingNodes({"cv", "", svc}, inv, parts, {"acct"}).count("node2"), 1u);
}

}  // namespace
}  // namespace tessera::slurm
