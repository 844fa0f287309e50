// Test-only helpers for the Slurm backend: canned Slurm output from testdata/ and a
// CommandRunner that answers from a script of expected calls. Not thread-safe.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/slurm/command_runner.h"

namespace tessera::slurm::testing {

// `scontrol -a -o show partition` of a cluster with one partition, debug (Default=YES, UP,
// no time limit), holding every node: what the fakes answer unless a test says otherwise.
inline CommandResult OnePartition() {
  return {0,
          "PartitionName=debug AllowGroups=ALL Default=YES Hidden=NO MaxNodes=UNLIMITED "
          "MaxTime=UNLIMITED Nodes=ALL PriorityTier=1 State=UP\n",
          ""};
}

inline std::string Testdata(const std::string& name) {
  const char* root = std::getenv("TESSERA_SOURCE_DIR");
  std::string path = std::string(root ? root : ".") + "/src/backends/slurm/testdata/" + name;
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Answers calls by program ("sbatch", "squeue", ...; `scontrol show partition` is
// "scontrol partition", other scontrol calls "scontrol"): each has a queue of replies, used
// in order; once it is empty the last one repeats. Records every call.
class FakeCommandRunner : public CommandRunner {
 public:
  struct Call {
    std::vector<std::string> argv;
    std::string input;
  };
  void Reply(const std::string& program, CommandResult r) { replies_[program].push_back(r); }
  void Fail(const std::string& program, Status s) { failures_[program].push_back(s); }
  StatusOr<CommandResult> Run(const std::vector<std::string>& argv,
                              const std::string& input) override {
    calls.push_back({argv, input});
    const std::string p = Key(argv);
    if (auto& f = failures_[p]; !f.empty()) {
      Status s = f.front();
      f.pop_front();
      return s;
    }
    auto& q = replies_[p];
    if (!q.empty()) {
      last_[p] = q.front();
      q.pop_front();
    }
    auto it = last_.find(p);
    if (it == last_.end()) return Internal("FakeCommandRunner: no reply for " + p);
    return it->second;
  }
  int Count(const std::string& program) const {
    int n = 0;
    for (const Call& c : calls) n += Key(c.argv) == program;
    return n;
  }
  static std::string Key(const std::vector<std::string>& argv) {
    const bool partitions =
        argv.at(0) == "scontrol" && std::find(argv.begin(), argv.end(), "partition") != argv.end();
    return partitions ? "scontrol partition" : argv.at(0);
  }
  std::vector<Call> calls;

 private:
  std::map<std::string, std::deque<CommandResult>> replies_;
  std::map<std::string, CommandResult> last_;
  std::map<std::string, std::deque<Status>> failures_;
};

}  // namespace tessera::slurm::testing
