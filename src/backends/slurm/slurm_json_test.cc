#include "backends/slurm/slurm_json.h"

#include <gtest/gtest.h>

#include "backends/slurm/test_support.h"

namespace tessera::slurm {
namespace {

using testing::Testdata;

TEST(ParseGres, Table) {
  struct Case {
    std::string text;
    std::vector<GresEntry> want;
  } cases[] = {
      {"", {}},
      {"(null)", {}},
      {"N/A", {}},
      {"gpu:a100:8", {{"gpu", "a100", 8}}},
      {"gpu:8", {{"gpu", "", 8}}},
      {"gpu", {{"gpu", "", 1}}},
      {"gpu:a100:8(S:0-1)", {{"gpu", "a100", 8}}},
      {"gpu:a100:3(IDX:0-2)", {{"gpu", "a100", 3}}},
      {"gpu:a100:0(IDX:N/A)", {{"gpu", "a100", 0}}},
      // A comma inside the index list does not split entries.
      {"gpu:a100:2(IDX:0,3),gpu:v100:1(IDX:5)", {{"gpu", "a100", 2}, {"gpu", "v100", 1}}},
      {"gpu:a100:4,shard:8", {{"gpu", "a100", 4}, {"shard", "", 8}}},
  };
  for (const Case& c : cases) {
    auto got = ParseGres(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.want) << c.text;
  }
  EXPECT_FALSE(ParseGres("gpu:a100:x").ok());
  EXPECT_FALSE(ParseGres("gpu:a:b:c").ok());
}

TEST(ParseSinfoJson, IdleSample) {
  auto nodes = ParseSinfoJson(Testdata("sinfo_idle.json"));
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 1u);
  const SlurmNode& n = (*nodes)[0];
  EXPECT_EQ(n.name, "node1");
  EXPECT_EQ(n.state, "idle");
  EXPECT_EQ(n.cpus, 2);
  EXPECT_EQ(n.real_memory_mib, 20000);
  EXPECT_EQ(n.partitions, std::vector<std::string>{"debug"});
  EXPECT_EQ(n.gres, (std::vector<GresEntry>{{"gpu", "a100", 8}}));
  EXPECT_EQ(n.gres_used, (std::vector<GresEntry>{{"gpu", "a100", 0}}));
}

TEST(ParseSinfoJson, DrainAndForeignUse) {
  // Captured from scripts/slurm/up.sh 4 32 8: node1 runs a foreign 3-GPU job, node4 drained.
  auto nodes = ParseSinfoJson(Testdata("sinfo_drain_foreign.json"));
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 4u);
  EXPECT_EQ((*nodes)[0].alloc_cpus, 1);
  EXPECT_EQ((*nodes)[0].alloc_memory_mib, 100);
  EXPECT_EQ((*nodes)[0].gres_used, (std::vector<GresEntry>{{"gpu", "a100", 3}}));
  EXPECT_EQ((*nodes)[3].state_flags, std::vector<std::string>{"DRAIN"});
  EXPECT_EQ((*nodes)[3].cpus, 32);
}

TEST(ParseSinfoJson, ErrorsNameTheField) {
  auto bad = ParseSinfoJson(R"({"errors":[],"nodes":[{"name":"n1","state":"idle","cpus":"x"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("sinfo.nodes[0].cpus"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ParseSinfoJson("not json").ok());
  EXPECT_FALSE(ParseSinfoJson(R"({"errors":[]})").ok());
  auto slurm_err = ParseSinfoJson(R"({"errors":[{"error":"x"}],"nodes":[]})");
  EXPECT_EQ(slurm_err.status().code(), StatusCode::kUnavailable);
}

TEST(ParseSqueueJson, MixedStatesSample) {
  auto jobs = ParseSqueueJson(Testdata("squeue_mixed_states.json"));
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 11u);
  const SlurmJob& bad = (*jobs)[2];
  EXPECT_EQ(bad.job_id, 3);
  EXPECT_EQ(bad.state, "FAILED");
  EXPECT_EQ(bad.state_reason, "BadConstraints");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_FALSE(bad.time_limit_minutes.has_value());  // null = UNLIMITED
  // Array task: job_id 9 belongs to array 7.
  EXPECT_EQ((*jobs)[6].job_id, 9);
  EXPECT_EQ((*jobs)[6].array_job_id, 7);
}

TEST(ParseSqueueJson, TaggedHetAndExitCodes) {
  auto jobs = ParseSqueueJson(Testdata("squeue_tagged.json"));
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 7u);
  EXPECT_EQ((*jobs)[0].het_job_id, 1);
  EXPECT_EQ((*jobs)[1].het_job_id, 1);
  EXPECT_EQ((*jobs)[1].het_job_offset, 1);
  EXPECT_EQ((*jobs)[0].comment, "tessera:j2:a-2");
  EXPECT_EQ((*jobs)[3].exit_code, 768);  // exit 3
  EXPECT_EQ((*jobs)[4].state, "CANCELLED");
  EXPECT_EQ((*jobs)[4].exit_code, 15);  // SIGTERM
  EXPECT_EQ((*jobs)[5].state_reason, "ReqNodeNotAvail");
}

TEST(ParseScontrol, OneLinerAndHet) {
  auto kv = ParseScontrolLine(Testdata("scontrol_failed_job.txt"));
  EXPECT_EQ(kv["JobId"], "4");
  EXPECT_EQ(kv["JobState"], "FAILED");
  EXPECT_EQ(kv["Comment"], "tessera:fail:a-10");
  auto job = SlurmJobFromScontrol(kv);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->exit_code, 768);  // ExitCode=3:0 as a wait status
  EXPECT_EQ(job->nodes, "node1");

  std::string het = Testdata("scontrol_het_job.txt");
  auto lead = SlurmJobFromScontrol(ParseScontrolLine(het.substr(0, het.find('\n'))));
  ASSERT_TRUE(lead.ok());
  EXPECT_EQ(lead->het_job_id, 1);
  EXPECT_EQ(lead->het_job_offset, 0);

  // Values with spaces run to the next key.
  auto spaced =
      ParseScontrolLine("JobId=3 JobName=a b c JobState=CANCELLED Comment=x y  ExitCode=0:9\n");
  EXPECT_EQ(spaced["JobName"], "a b c");
  EXPECT_EQ(spaced["Comment"], "x y");
  auto killed = SlurmJobFromScontrol(spaced);
  ASSERT_TRUE(killed.ok());
  EXPECT_EQ(killed->exit_code, 9);  // signal 9
  EXPECT_FALSE(SlurmJobFromScontrol(ParseScontrolLine("JobId=x JobState=RUNNING")).ok());
}

// Captured from the test cluster (scripts/slurm/up.sh) after
//   scontrol create partitionname=short nodes=node1 maxtime=10 state=up prioritytier=2
//   scontrol create partitionname=off nodes=node[1-2] state=down
//   scontrol create partitionname=hid nodes=node2 hidden=yes maxtime=1-02:03:04 state=drain
TEST(ParseScontrolPartitions, Sample) {
  auto parts = ParseScontrolPartitions(Testdata("scontrol_partitions.txt"));
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 4u);
  const SlurmPartition& debug = (*parts)[0];
  EXPECT_EQ(debug.name, "debug");
  EXPECT_EQ(debug.state, "UP");
  EXPECT_TRUE(debug.is_default);
  EXPECT_FALSE(debug.hidden);
  EXPECT_EQ(debug.max_time_seconds, std::nullopt);  // MaxTime=UNLIMITED
  EXPECT_EQ(debug.max_nodes, std::nullopt);
  const SlurmPartition& shrt = (*parts)[1];
  EXPECT_EQ(shrt.name, "short");
  EXPECT_FALSE(shrt.is_default);
  EXPECT_EQ(shrt.max_time_seconds, 600);  // MaxTime=00:10:00
  EXPECT_EQ(shrt.priority_tier, 2);
  EXPECT_EQ((*parts)[2].state, "DOWN");
  const SlurmPartition& hid = (*parts)[3];
  EXPECT_EQ(hid.state, "DRAIN");
  EXPECT_TRUE(hid.hidden);
  EXPECT_EQ(hid.max_time_seconds, ((26 * 60) + 4) * 60);  // 1-02:04:00 (Slurm rounds to minutes)
  auto none = ParseScontrolPartitions("No partitions in the system\n");
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto bad = ParseScontrolPartitions("PartitionName=x State=UP MaxTime=soon\n");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("partition x: MaxTime"), std::string::npos)
      << bad.status().message();
  EXPECT_FALSE(ParseScontrolPartitions("PartitionName=x MaxTime=5\n").ok());  // no State
}

// Captured from the test cluster (Slurm 22.05) after
//   scontrol create PartitionName=acct Nodes=node[1-2] AllowAccounts=ml,vision State=UP
//   scontrol create PartitionName=deny Nodes=node[3-4] DenyAccounts=bad DenyQos=low State=UP
//   scontrol create PartitionName=grp Nodes=node[3-4] AllowGroups=nogroup AllowQos=high State=UP
// scontrol prints DenyX in place of AllowX when set, and AllowX=ALL when unrestricted.
TEST(ParseScontrolPartitions, AccessLists) {
  auto parts = ParseScontrolPartitions(Testdata("scontrol_partitions_access.txt"));
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 4u);
  const SlurmPartition& debug = (*parts)[0];
  EXPECT_EQ(debug.allow_accounts, std::nullopt);  // ALL
  EXPECT_EQ(debug.allow_groups, std::nullopt);
  EXPECT_EQ(debug.allow_qos, std::nullopt);
  EXPECT_TRUE(debug.deny_accounts.empty());
  EXPECT_TRUE(debug.deny_qos.empty());
  using List = std::vector<std::string>;
  EXPECT_EQ((*parts)[1].allow_accounts, List({"ml", "vision"}));
  EXPECT_EQ((*parts)[1].allow_qos, std::nullopt);
  const SlurmPartition& deny = (*parts)[2];
  EXPECT_EQ(deny.allow_accounts, std::nullopt);  // no AllowAccounts key at all
  EXPECT_EQ(deny.deny_accounts, List({"bad"}));
  EXPECT_EQ(deny.deny_qos, List({"low"}));
  EXPECT_EQ((*parts)[3].allow_groups, List({"nogroup"}));
  EXPECT_EQ((*parts)[3].allow_qos, List({"high"}));
  EXPECT_EQ((*parts)[3].allow_accounts, std::nullopt);
  // An empty or (null) list is no restriction either.
  auto empty = ParseScontrolPartitions(
      "PartitionName=x AllowGroups= AllowAccounts=(null) State=UP MaxTime=5\n");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ((*empty)[0].allow_groups, std::nullopt);
  EXPECT_EQ((*empty)[0].allow_accounts, std::nullopt);
}

TEST(ParseSlurmTime, Forms) {
  struct Case {
    std::string text;
    std::optional<int64_t> want;
  } cases[] = {
      {"UNLIMITED", std::nullopt},
      {"INFINITE", std::nullopt},
      {"10", 600},
      {"10:30", 630},
      {"01:02:03", 3723},
      {"2-0", 172800},
      {"1-01:01", 90060},
      {"1-01:01:01", 90061},
  };
  for (const Case& c : cases) {
    auto got = ParseSlurmTime(c.text);
    ASSERT_TRUE(got.ok()) << c.text << ": " << got.status().ToString();
    EXPECT_EQ(*got, c.want) << c.text;
  }
  for (const char* bad : {"", "x", "1:2:3:4", "-5", "1-"})
    EXPECT_FALSE(ParseSlurmTime(bad).ok()) << bad;
}

}  // namespace
}  // namespace tessera::slurm
