#include "model/gpu.h"

#include <algorithm>
#include <cctype>
#include <map>

namespace tessera {
namespace {

constexpr int64_t kGiB = 1LL << 30;

// NVIDIA MIG user guide, "Supported MIG Profiles". Memory is the nominal profile size.
const std::map<std::string, std::vector<MigProfile>>& Tables() {
  static const auto* tables = new std::map<std::string, std::vector<MigProfile>>{
      {"a100-40gb",
       {{"1g.5gb", 1, 1, 5 * kGiB, 7},
        {"1g.10gb", 1, 2, 10 * kGiB, 4},
        {"2g.10gb", 2, 2, 10 * kGiB, 3},
        {"3g.20gb", 3, 4, 20 * kGiB, 2},
        {"4g.20gb", 4, 4, 20 * kGiB, 1},
        {"7g.40gb", 7, 8, 40 * kGiB, 1}}},
      {"a100-80gb",
       {{"1g.10gb", 1, 1, 10 * kGiB, 7},
        {"1g.20gb", 1, 2, 20 * kGiB, 4},
        {"2g.20gb", 2, 2, 20 * kGiB, 3},
        {"3g.40gb", 3, 4, 40 * kGiB, 2},
        {"4g.40gb", 4, 4, 40 * kGiB, 1},
        {"7g.80gb", 7, 8, 80 * kGiB, 1}}},
      {"h100-80gb",
       {{"1g.10gb", 1, 1, 10 * kGiB, 7},
        {"1g.20gb", 1, 2, 20 * kGiB, 4},
        {"2g.20gb", 2, 2, 20 * kGiB, 3},
        {"3g.40gb", 3, 4, 40 * kGiB, 2},
        {"4g.40gb", 4, 4, 40 * kGiB, 1},
        {"7g.80gb", 7, 8, 80 * kGiB, 1}}},
      {"h200-141gb",
       {{"1g.18gb", 1, 1, 18 * kGiB, 7},
        {"1g.35gb", 1, 2, 35 * kGiB, 4},
        {"2g.35gb", 2, 2, 35 * kGiB, 3},
        {"3g.71gb", 3, 4, 71 * kGiB, 2},
        {"4g.71gb", 4, 4, 71 * kGiB, 1},
        {"7g.141gb", 7, 8, 141 * kGiB, 1}}},
  };
  return *tables;
}

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

const std::vector<MigProfile>* MigProfilesFor(const std::string& model) {
  auto it = Tables().find(Lower(model));
  return it == Tables().end() ? nullptr : &it->second;
}

const MigProfile* FindMigProfile(const std::string& model, const std::string& profile) {
  const auto* profiles = MigProfilesFor(model);
  if (profiles == nullptr) return nullptr;
  for (const MigProfile& p : *profiles)
    if (p.name == profile) return &p;
  return nullptr;
}

int64_t MigProfileMilli(const MigProfile& p) { return p.compute_slices * 1000LL / 7; }

}  // namespace tessera
