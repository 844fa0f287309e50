// Test-only: the REAL Slurm cluster the integration tests share (scripts/slurm/up.sh: 4
// emulated nodes x 32 CPUs x 8 fake a100 GPUs on loopback). Under ctest the cluster is the
// slurm_cluster fixture (TESSERA_SLURM_EXTERNAL=1); a test binary run directly starts and
// stops it itself through LiveClusterEnvironment. Where up.sh fails it leaves a `skip` file
// with the reason, and the tests skip saying so.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace tessera::slurm::testing {

// The environment overrides what the build compiled in (TESSERA_*_DIR_DEFAULT).
inline std::string SourceDir() {
  const char* s = std::getenv("TESSERA_SOURCE_DIR");
  return s ? s : TESSERA_SOURCE_DIR_DEFAULT;
}
inline std::string ClusterDir() {
  const char* d = std::getenv("TESSERA_SLURM_DIR");
  return d ? d : TESSERA_SLURM_DIR_DEFAULT;
}
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
// Runs a shell command with TESSERA_SLURM_DIR pointing at the cluster.
inline int Shell(const std::string& cmd) {
  std::string full = "TESSERA_SLURM_DIR='" + ClusterDir() + "' " + cmd;
  return std::system(full.c_str());
}

// Starts the cluster unless ctest's fixture did.
class LiveClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::getenv("TESSERA_SLURM_EXTERNAL")) return;
    owned_ = true;
    if (Shell(SourceDir() + "/scripts/slurm/up.sh 4 32 8") != 0)
      std::ofstream(ClusterDir() + "/skip") << "scripts/slurm/up.sh failed (see its output)";
  }
  void TearDown() override {
    if (owned_) (void)Shell(SourceDir() + "/scripts/slurm/down.sh");
  }

 private:
  bool owned_ = false;
};

}  // namespace tessera::slurm::testing
