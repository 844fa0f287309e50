// ReadFile: a whole file as bytes, "" when it cannot be read (the agent reads small files
// it may race with: /proc entries, cgroup files, task records).
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace tessera::agent {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace tessera::agent
