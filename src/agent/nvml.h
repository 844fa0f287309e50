// GPU discovery through NVML, loaded at run time.
//
// No build-time dependency on the NVIDIA driver: the few NVML entry points used here are
// declared in nvml.cc and resolved with dlopen("libnvidia-ml.so.1") (or the path in
// $TESSERA_NVML_LIBRARY, which the tests point at a fake library). Discovery reports each
// GPU's model (mapped to the model keys of model/gpu.h), UUID, memory, MIG instances with
// their UUIDs, and health (retired pages pending, lost device, critical XID events).
// Sampling reports utilisation, memory used and power. One NvmlGpus per process; its
// methods are serialised by an internal mutex, so it may be shared by threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/gpu.h"

namespace tessera::agent {

// "NVIDIA A100-SXM4-80GB" -> "A100-80GB", "NVIDIA H200" -> "H200-141GB", "Tesla T4" -> "T4".
// memory_bytes settles names that do not say the size (A100 40 vs 80 GB). Unknown names
// lose their vendor prefix and have spaces turned into dashes.
std::string ModelKeyFromNvmlName(const std::string& name, int64_t memory_bytes);

// The MIG profile in a MIG device name ("NVIDIA A100-SXM4-80GB MIG 3g.40gb" -> "3g.40gb"),
// or "" when the name has none.
std::string MigProfileFromNvmlName(const std::string& name);

// One utilisation sample of one device.
struct GpuSample {
  int32_t index = 0;
  int32_t util_percent = 0;
  int64_t memory_used_bytes = 0;
  int64_t power_milliwatts = 0;
  bool healthy = true;
  std::string health_message;  // "XID 79", "GPU is lost", "retired pages pending"
};

class NvmlGpus {
 public:
  // Loads and initialises NVML. `library` empty means $TESSERA_NVML_LIBRARY, else
  // "libnvidia-ml.so.1". Unavailable when the library or the driver is missing.
  static StatusOr<std::unique_ptr<NvmlGpus>> Open(const std::string& library = "");
  ~NvmlGpus();
  NvmlGpus(const NvmlGpus&) = delete;
  NvmlGpus& operator=(const NvmlGpus&) = delete;

  // Every GPU with its MIG instances (index order = NVML order = CUDA_VISIBLE_DEVICES
  // order with CUDA_DEVICE_ORDER=PCI_BUS_ID). Devices are never virtual.
  StatusOr<std::vector<Device>> Discover();
  // A sample of every GPU; also drains pending XID events into health.
  std::vector<GpuSample> Sample();
  std::string driver_version() const { return driver_version_; }
  std::string library_path() const { return library_path_; }

  struct Api;  // resolved entry points (nvml.cc)

 private:
  NvmlGpus() = default;
  std::mutex mu_;
  std::unique_ptr<Api> api_;
  void* handle_ = nullptr;
  void* event_set_ = nullptr;
  std::string driver_version_;
  std::string library_path_;
  std::vector<std::string> xid_unhealthy_;  // per index: "" healthy, else why
};

}  // namespace tessera::agent
