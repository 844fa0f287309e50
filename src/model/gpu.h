// GPU devices, MIG profiles and the per-device MIG layout.
//
// A device is one physical GPU on a node. Without MIG it is shared by whole-GPU tasks
// (exclusive) or fractional tasks (milli-GPU + memory, several per device). With MIG it is
// cut into a fixed layout of instances; a MIG request takes whole free instances of its
// profile. Profile tables follow NVIDIA's MIG user guide. Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tessera {

struct MigProfile {
  std::string name;        // "1g.10gb"
  int32_t compute_slices;  // g: out of 7
  int32_t memory_slices;   // out of 8
  int64_t memory_bytes;
  int32_t max_instances;  // per device
};

// Profiles for a GPU model ("A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB"), or
// nullptr for a model without MIG. The model name is matched case-insensitively.
const std::vector<MigProfile>* MigProfilesFor(const std::string& model);
const MigProfile* FindMigProfile(const std::string& model, const std::string& profile);
// Milli-GPU that one instance counts as in accounting: compute_slices * 1000 / 7.
int64_t MigProfileMilli(const MigProfile& p);

// One configured MIG instance on a device.
struct MigInstance {
  std::string profile;      // "3g.40gb"
  int32_t start_slice = 0;  // placement on the device, 0..6
  std::string uuid;         // "MIG-..." from NVML; synthesised for virtual devices
};

struct Device {
  int32_t index = 0;  // 0..n-1 on its node; CUDA_VISIBLE_DEVICES order
  std::string uuid;   // "GPU-..."
  std::string model;  // "A100-80GB", "H200-141GB", "T4", ...
  int64_t memory_bytes = 0;
  std::string domain;            // interconnect island (NVLink/NVSwitch group); "" = own
  bool healthy = true;           // false after XID errors, ECC faults, lost device
  bool is_virtual = false;       // declared by an inventory file, not discovered
  bool shareable = true;         // fractional tasks may share it; false: whole only (Slurm's GRES)
  std::vector<MigInstance> mig;  // empty: MIG disabled
  // Latest utilisation sample (informational; filters may use it).
  int32_t util_percent = 0;
  int64_t memory_used_bytes = 0;
  int64_t power_milliwatts = 0;

  bool mig_enabled() const { return !mig.empty(); }
};

}  // namespace tessera
